#!/usr/bin/env bash
# Tensor fusion on a real gradient set: torchvision ResNet-101's 314 parameter gradients
# allreduced once per step through syncd, fusion threshold 64 MiB vs 0, in the same run.
#   bench/fusion.sh [--nodes 2] [--ranks 4] [--steps 10] [--depth 101] [--build build] [--syncd-arg=...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=2 ranks=4 steps=10 depth=101 build="$here/../build" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --syncd-arg=*) extra+=("$1"); shift ;;
    *) echo "fusion.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
run() {  # $1 = fusion threshold
  "$build/bin/syncrun" -N "$nodes" -n "$ranks" --syncd-arg=--log-level=warn --syncd-arg=--fusion-threshold="$1" \
    --syncd-arg=--arena-size=1G "${extra[@]}" -- \
    "$build/bin/syncd-bench" resnet --depth "$depth" --steps "$steps" --json --label "fusion-threshold=$1" 2>/dev/null |
    grep '^{'
}
fused=$(run 64M)
unfused=$(run 0)
/usr/bin/python3 - "$fused" "$unfused" <<'PY'
import json, sys
f, u = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"# {f['model']} gradients: {f['tensors']} tensors, {f['bytes'] / 2**20:.1f} MiB, {f['ranks']} ranks on {f['nodes']} nodes")
print(f"  fusion threshold 64 MiB: {f['step_ms']:9.2f} ms per step")
print(f"  fusion threshold 0     : {u['step_ms']:9.2f} ms per step")
print(f"  fused step is {u['step_ms'] / f['step_ms']:.2f}x faster")
print(json.dumps({"bench": "fusion", "fused": f, "unfused": u, "speedup": round(u["step_ms"] / f["step_ms"], 3)}))
PY
