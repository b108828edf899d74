#!/usr/bin/env bash
# An idle job's cost: the daemons' CPU while every rank sleeps, per coordination mode, measured
# from /proc (utime + stime of each daemon) over --seconds, with --cores none (the daemons share
# every core with the ranks, as on a machine without dedicated cores). Two windows: the first
# --settle seconds after the job's last work (its cycles slow to 10 ms after 1 s of quiet and to
# 50 ms after 5 s: coord/cycle_clock.h), then --seconds of a settled idle job, whose goal is
# under 1 % of a core per daemon. Prints a table and one JSON line.
#   bench/idle_cpu.sh [--nodes 2] [--seconds 10] [--settle 5] [--modes negotiate,gs,nbcs,topo] [--build build]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=2 seconds=10 settle=5 modes=negotiate,gs,nbcs,topo build="$here/../build"
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --settle) settle=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "idle_cpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
hz=$(getconf CLK_TCK)
ticks() {  # summed utime + stime of the given pids
  local t=0 p
  for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$t"
}
results=()
for mode in ${modes//,/ }; do
  ready=$(mktemp -u)
  # Each rank allreduces once (the job is up and joined), says so, then sleeps past the window.
  "$build/bin/syncrun" -N "$nodes" -n "$nodes" --cores none --no-bind --syncd-arg=--log-level=warn \
    --syncd-arg=--coord="$mode" -- /bin/sh -c "'$build/bin/syncd-bench' allreduce --sizes 8 --iters 10 --seconds 0.1 \
      >/dev/null && touch '$ready'.\$SYNCD_RANK && sleep $((seconds + settle + 3))" &
  job=$!
  for _ in $(seq 100); do
    [ "$(ls "$ready".* 2>/dev/null | wc -l)" -ge "$nodes" ] && break
    sleep 0.1
  done
  sleep 1  # past the benchmark's exit, the daemons' last work and spin
  pids=$(pgrep -P "$job" -f 'bin/syncd ' || true)
  [ -z "$pids" ] && pids=$(pgrep -f "bin/syncd .*" | head -n "$nodes")
  t0=$(ticks $pids)
  sleep "$settle"
  t1=$(ticks $pids)
  sleep "$seconds"
  t2=$(ticks $pids)
  n=$(echo $pids | wc -w)
  pct() { awk -v d="$1" -v n="$n" -v s="$2" -v hz="$hz" 'BEGIN {printf "%.2f", 100 * d / hz / s / n}'; }
  results+=("{\"mode\":\"$mode\",\"daemons\":$n,\"cpu_pct_per_daemon\":$(pct $((t2 - t1)) "$seconds"),\"first_cpu_pct_per_daemon\":$(pct $((t1 - t0)) "$settle")}")
  wait "$job" || true
  rm -f "$ready".*
done
/usr/bin/python3 - "$nodes" "$seconds" "$settle" "${results[@]}" <<'PY'
import json, sys
nodes, seconds, settle = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
rows = [json.loads(a) for a in sys.argv[4:]]
print(f"# idle job: {nodes} daemons (--cores none), ranks asleep, CPU from /proc per daemon: its first {settle:.0f} s of")
print(f"# quiet, then {seconds:.0f} s settled (goal < 1 % of a core)")
for r in rows:
    r["met"] = r["cpu_pct_per_daemon"] < 1.0
    print(f"  {r['mode']:<10} first {r['first_cpu_pct_per_daemon']:6.2f} %   settled {r['cpu_pct_per_daemon']:6.2f} % of a core"
          f"  ({'met' if r['met'] else 'NOT met'})")
print(json.dumps({"bench": "idle_cpu", "nodes": nodes, "seconds": seconds, "settle": settle, "runs": rows}))
PY
