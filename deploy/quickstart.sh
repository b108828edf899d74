#!/usr/bin/env bash
# The main job: install, build, run 4 ranks through one local syncd with syncrun, show the
# daemon live with `syncctl status` while they work, then the allreduce figures they measured.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
echo "== Installing dependencies and building (first run takes a few minutes)"
deploy/build.sh
bin=$root/build/bin
run_dir=$(mktemp -d "${TMPDIR:-/tmp}/syncd-quickstart-XXXXXX")
trap 'rm -rf "$run_dir"' EXIT

echo "== syncrun -n 4: one syncd, four ranks allreducing 8 B .. 64 MiB"
"$bin/syncrun" -n 4 --run-dir "$run_dir" --syncd-arg=--log-level=warn -- \
  "$bin/syncd-bench" allreduce --sizes 8,1K,64K,1M,16M,64M --seconds 0.5 &
job=$!
# Show the daemon while the ranks are attached and working.
for _ in $(seq 100); do
  if "$bin/syncctl" --run-dir "$run_dir" status --json 2>/dev/null | grep -q '"ops":{"allreduce":"[1-9]'; then
    echo "== syncctl status (live, mid-run)"
    "$bin/syncctl" --run-dir "$run_dir" status
    echo
    break
  fi
  sleep 0.1
done
wait "$job"
echo "== Done. Next: bench/compare.sh runs the same sizes against torch.distributed (gloo)."
