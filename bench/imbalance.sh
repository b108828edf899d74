#!/usr/bin/env bash
# The paper's load-imbalance scenario on this machine: every coordination mode runs the same
# workload (syncd-bench imbalance: backward-pass CPU work with ResNet-50 gradients submitted as
# they become ready, per-rank jitter, an input-pipeline thread per rank), plus a run without any
# communication as the ideal. Prints a table and one JSON line.
#   bench/imbalance.sh [--nodes 2] [--ranks 4] [--steps 20] [--fusion-threshold 64M] [--build build]
#                      [-- extra bench args, e.g. --size-divisor 16]
# Negotiate, gs and nbcs run on Horovod's timer (--cycle-start=timer), the baseline of the paper.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=2 ranks=4 steps=20 fusion=64M build="$here/../build" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --fusion-threshold) fusion=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "imbalance.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
run() {  # $1 = label, then syncrun arguments, then optionally -- and bench arguments
  local label=$1 daemon=() bench=(); shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do daemon+=("$1"); shift; done
  [ $# -gt 0 ] && { shift; bench=("$@"); }
  "$build/bin/syncrun" -N "$nodes" -n "$ranks" --syncd-arg=--log-level=warn --syncd-arg=--arena-size=256M \
    --syncd-arg=--fusion-threshold="$fusion" "${daemon[@]}" -- \
    "$build/bin/syncd-bench" imbalance --steps "$steps" --json --label "$label" "${bench[@]}" "${extra[@]}" 2>/dev/null |
    grep '^{'
}
timer=(--syncd-arg=--cycle-start=timer)
results=()
# Ideal: no communication (cycles so rare the daemons stay idle).
results+=("$(run ideal --syncd-arg=--cycle-time-us=1000000 -- --ideal)")
results+=("$(run negotiate-unpinned "${timer[@]}" --cores none --no-bind)")
results+=("$(run negotiate "${timer[@]}")")
results+=("$(run gs "${timer[@]}" --syncd-arg=--coord=gs)")
results+=("$(run nbcs "${timer[@]}" --syncd-arg=--coord=nbcs)")
results+=("$(run negotiate-work --syncd-arg=--cycle-start=work)")
results+=("$(run topo --syncd-arg=--coord=topo -- --register-graph)")
/usr/bin/python3 - "${results[@]}" <<'PY'
import json, sys
rows = [json.loads(a) for a in sys.argv[1:] if a.strip()]
ideal = next(r["step_ms"] for r in rows if r["mode"] == "ideal")
base = next((r["step_ms"] for r in rows if r["mode"] == "negotiate-unpinned"), None)
print(f"# imbalance: {rows[0]['ranks']} ranks on {rows[0]['nodes']} nodes, {rows[0]['tensors']} ResNet-50 gradients per step")
print(f"# {'mode':<20} {'step ms':>8} {'overhead %':>10} {'vs unpinned':>11} | engine per step ms: "
      f"{'sleep':>6} {'coord':>6} {'exec':>6} {'blocked':>7} {'cpu':>6} | cpu us/collective | coord msgs")
for r in rows:
    r["overhead_pct"] = round(100.0 * (r["step_ms"] - ideal) / ideal, 2)
    # Node 0's engine CPU per gradient allreduce (the step's own barrier and statistic included).
    r["engine_cpu_us_per_collective"] = round(1000.0 * r["engine_cpu_ms"] / r["tensors"], 1)
    speedup = base / r["step_ms"] if base else 0
    print(f"  {r['mode']:<20} {r['step_ms']:>8.1f} {r['overhead_pct']:>10.1f} {speedup:>10.2f}x | "
          f"{'':>19}{r['engine_sleep_ms']:>6.1f} {r['engine_coord_ms']:>6.1f} {r['engine_exec_ms']:>6.1f} "
          f"{r['engine_blocked_ms']:>7.1f} {r['engine_cpu_ms']:>6.1f} | {r['engine_cpu_us_per_collective']:>17.1f} | "
          f"{r['coord_messages_per_step']:>10.1f}")
by = {r["mode"]: r for r in rows}
goals = {}
if all(m in by for m in ("topo", "negotiate-unpinned", "negotiate")):
    speedup = by["negotiate-unpinned"]["step_ms"] / by["topo"]["step_ms"]
    ratio = by["topo"]["overhead_pct"] / by["negotiate"]["overhead_pct"] if by["negotiate"]["overhead_pct"] > 0 else 0
    goals = {"topo_speedup_vs_unpinned_negotiate": round(speedup, 3), "topo_speedup_met": speedup >= 1.2,
             "topo_overhead_vs_negotiate": round(ratio, 3), "topo_overhead_met": ratio <= 0.5}
    print(f"# goals: topo {speedup:.2f}x faster per step than unpinned negotiate (goal >= 1.2x: "
          f"{'met' if speedup >= 1.2 else 'NOT met'}); topo overhead {100 * ratio:.0f} % of negotiate's "
          f"(goal <= 50 %: {'met' if ratio <= 0.5 else 'NOT met'})")
print(json.dumps({"bench": "imbalance", "ideal_ms": ideal, "runs": rows, **goals}))
PY
