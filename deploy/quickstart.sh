#!/usr/bin/env bash
# The main job: install, build, start a local two-node cluster with syncrun (two syncd daemons,
# each standing in for a node) and train a convolutional network on scikit-learn's digits with
# four ranks through syncd.torch. Prints per-epoch loss, held-out accuracy and samples/s, then
# `syncctl status` of both daemons. Fails if held-out accuracy ends below 95 %.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
echo "== Installing dependencies and building (first run takes a few minutes)"
deploy/build.sh
build=$root/${SYNCD_BUILD_DIR:-build}

echo "== syncrun -N 2 -n 4: two syncd daemons, four ranks training on digits"
PYTHONPATH=$build/python SYNCD_BIN_DIR=$build/bin \
  "$build/bin/syncrun" -N 2 -n 4 --syncd-arg=--log-level=warn "$@" -- \
  /usr/bin/python3 "$root/deploy/local/train_digits.py"
echo "== Done. Next: bench/torch_synthetic.py compares syncd with DistributedDataParallel (gloo)."
