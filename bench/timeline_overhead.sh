#!/usr/bin/env bash
# What the job-wide timeline costs: the imbalance benchmark (syncd-bench imbalance, bench/imbalance.sh)
# with --timeline on and off, run alternately --repeat times per mode so that the machine's drift
# hits both alike. Prints a table (mean step time, its spread, the slowdown) and one JSON line,
# with the timeline files' size and events, and first syncd-timeline-bench's costs in isolation
# (engine time per recorded event and per tensor, writer time per tensor). Goal: at most 3 % slower
# with the timeline on.
#   bench/timeline_overhead.sh [--nodes 2] [--ranks 4] [--steps 20] [--repeat 5] [--modes "negotiate topo"]
#                              [--fusion-threshold 1M] [--build build] [-- extra bench args]
# The default is the scaled workload of the imbalance table of docs/pages/benchmarks.md (161 tensors of 1/16 of
# ResNet-50's size per step, 1 MiB groups): many small tensors, the timeline's worst case.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=2 ranks=4 steps=20 repeat=5 modes="negotiate topo" fusion=1M build="$here/../build" extra=(--size-divisor 16)
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --fusion-threshold) fusion=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "timeline_overhead.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {  # $1 = mode, $2 = on|off, $3 = run number
  local mode=$1 state=$2 n=$3 daemon=() bench=()
  [ "$mode" = topo ] && { daemon+=(--syncd-arg=--coord=topo); bench+=(--register-graph); }
  [ "$state" = on ] && daemon+=(--syncd-arg=--timeline="$work/$mode-$n.json")
  local line
  line=$("$build/bin/syncrun" -N "$nodes" -n "$ranks" --syncd-arg=--log-level=warn --syncd-arg=--arena-size=256M \
    --syncd-arg=--fusion-threshold="$fusion" "${daemon[@]}" -- \
    "$build/bin/syncd-bench" imbalance --steps "$steps" --json --label "$mode-$state" "${bench[@]}" "${extra[@]}" \
    2>/dev/null | grep '^{')
  if [ "$state" = on ]; then
    for _ in $(seq 50); do  # node 0 finishes the file once the job's ranks are gone
      /usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$work/$mode-$n.json" 2>/dev/null && break
      sleep 0.1
    done
    line=$(/usr/bin/python3 - "$line" "$work/$mode-$n.json" <<'PY'
import json, os, sys
r = json.loads(sys.argv[1])
events = json.load(open(sys.argv[2]))
r["timeline_bytes"] = os.path.getsize(sys.argv[2])
r["timeline_events"] = len(events)
print(json.dumps(r))
PY
)
  fi
  echo "$line"
}
results=()
for mode in $modes; do
  for n in $(seq "$repeat"); do
    # Alternate which goes first, so neither always runs on a warmer machine.
    if [ $((n % 2)) = 1 ]; then order="off on"; else order="on off"; fi
    for state in $order; do results+=("$(run "$mode" "$state" "$n")"); done
  done
done
costs=$("$build/bin/syncd-timeline-bench" --file "$work/costs.json" | tee /dev/stderr | grep '^{')
/usr/bin/python3 - "$steps" "$costs" "${results[@]}" <<'PY'
import json, statistics, sys
steps = int(sys.argv[1])
costs = json.loads(sys.argv[2])
rows = [json.loads(a) for a in sys.argv[3:] if a.strip()]
modes = []
for r in rows:
    m = r["mode"].rsplit("-", 1)[0]
    if m not in modes:
        modes.append(m)
print(f"# timeline overhead: imbalance workload, {rows[0]['ranks']} ranks on {rows[0]['nodes']} nodes, "
      f"{rows[0]['tensors']} tensors per step, {steps} steps, {len(rows) // (2 * len(modes))} runs each, on/off alternating")
print(f"# {'mode':<10} {'off ms':>8} {'range':>13} {'on ms':>8} {'range':>13} {'slowdown':>9} {'events/step':>11} {'MB/step':>8}")
out = []
for m in modes:
    off = [r["step_ms"] for r in rows if r["mode"] == m + "-off"]
    on = [r for r in rows if r["mode"] == m + "-on"]
    on_ms = [r["step_ms"] for r in on]
    slow = 100.0 * (statistics.mean(on_ms) - statistics.mean(off)) / statistics.mean(off)
    events = statistics.mean(r["timeline_events"] for r in on) / steps
    mb = statistics.mean(r["timeline_bytes"] for r in on) / steps / 1e6
    print(f"  {m:<10} {statistics.mean(off):>8.1f} {min(off):>6.1f}-{max(off):<6.1f} {statistics.mean(on_ms):>8.1f} "
          f"{min(on_ms):>6.1f}-{max(on_ms):<6.1f} {slow:>8.1f}% {events:>11.0f} {mb:>8.2f}")
    out.append({"mode": m, "off_ms": statistics.mean(off), "on_ms": statistics.mean(on_ms), "off": off, "on": on_ms,
                "slowdown_pct": round(slow, 2), "events_per_step": round(events, 1), "mb_per_step": round(mb, 3),
                "goal_met": slow <= 3.0})
print("# goal: at most 3 % slower with the timeline on: " +
      ", ".join(f"{o['mode']} {o['slowdown_pct']:+.1f} % ({'met' if o['goal_met'] else 'NOT met'})" for o in out))
print(json.dumps({"bench": "timeline_overhead", "runs": out, "costs": costs}))
PY
