#!/usr/bin/env bash
# Tensor fusion on a real gradient set: torchvision ResNet-101's 314 parameter gradients
# allreduced once per step through syncd, fusion threshold 64 MiB vs 0, and the limit for fusion:
# the same bytes as one allreduce per step (syncd-bench resnet --one-buffer), in the same run.
# The three alternate --repeats times (machine noise hits all alike); the report gives the
# median of the per-run median step times, their spread, and fused and unfused against the limit
# (goal: fused within 1.15x).
#   bench/fusion.sh [--nodes 2] [--ranks 4] [--steps 10] [--repeats 3] [--depth 101] [--build build]
#                   [--syncd-arg=...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=2 ranks=4 steps=10 repeats=3 depth=101 build="$here/../build" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --syncd-arg=*) extra+=("$1"); shift ;;
    *) echo "fusion.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
run() {  # $1 = fusion threshold, $2 = label, then bench arguments
  local threshold=$1 label=$2; shift 2
  "$build/bin/syncrun" -N "$nodes" -n "$ranks" --syncd-arg=--log-level=warn --syncd-arg=--fusion-threshold="$threshold" \
    --syncd-arg=--arena-size=1G "${extra[@]}" -- \
    "$build/bin/syncd-bench" resnet --depth "$depth" --steps "$steps" --json --label "$label" "$@" 2>/dev/null |
    grep '^{'
}
results=()
for _ in $(seq "$repeats"); do
  results+=("$(run 64M fused)" "$(run 0 unfused)" "$(run 64M one-buffer --one-buffer)")
done
/usr/bin/python3 - "${results[@]}" <<'PY'
import json, statistics, sys
runs = [json.loads(a) for a in sys.argv[1:]]
fused = [r["step_ms"] for r in runs if r["label"] == "fused"]
unfused = [r["step_ms"] for r in runs if r["label"] == "unfused"]
one = [r["step_ms"] for r in runs if r["label"] == "one-buffer"]
head = runs[0]
f, u, o = statistics.median(fused), statistics.median(unfused), statistics.median(one)
print(f"# {head['model']} gradients: {head['tensors']} tensors, {head['bytes'] / 2**20:.1f} MiB, "
      f"{head['ranks']} ranks on {head['nodes']} nodes, {len(fused)} runs each, alternating")
print(f"  fusion threshold 64 MiB: {f:9.2f} ms per step (runs: {min(fused):.1f} .. {max(fused):.1f})  {f / o:.2f}x the limit")
print(f"  fusion threshold 0     : {u:9.2f} ms per step (runs: {min(unfused):.1f} .. {max(unfused):.1f})  {u / o:.2f}x the limit")
print(f"  limit, one allreduce   : {o:9.2f} ms per step (runs: {min(one):.1f} .. {max(one):.1f})")
print(f"  fused step is {u / f:.2f}x faster than unfused; fused within 1.15x of the limit: "
      f"{'met' if f / o <= 1.15 else 'NOT met'}")
print(json.dumps({"bench": "fusion", "model": head["model"], "fused_ms": fused, "unfused_ms": unfused,
                  "one_buffer_ms": one, "fused_median_ms": f, "unfused_median_ms": u, "one_buffer_median_ms": o,
                  "speedup": round(u / f, 3), "fused_vs_limit": round(f / o, 3), "unfused_vs_limit": round(u / o, 3)}))
PY
