#!/usr/bin/env bash
# Soak: a long job on 2 nodes x 2 ranks (syncrun): 10^6 small allreduces per rank, a larger one
# (1 KiB .. 4 MiB) every 1000, every rank detaching and attaching again every 100000. Each
# daemon's resident memory and open descriptors are sampled after the warm-up (15 % of the
# operations), at the middle and at the end. Goal: RSS growth under 1 % after warm-up, descriptor
# count flat. Prints a table and one JSON line.
#   bench/soak.sh [--ops 1000000] [--nodes 2] [--ranks 4] [--build build] [--syncd-arg=...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ops=1000000 nodes=2 ranks=4 build="$here/../build" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ops) ops=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --syncd-arg=*) extra+=("$1"); shift ;;
    *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /tmp/syncd-soak.XXXXXX)
trap 'rm -rf "$work"' EXIT
progress=$work/progress
echo 0 > "$progress"
start_ns=$(date +%s%N)
"$build/bin/syncrun" -N "$nodes" -n "$ranks" --syncd-arg=--log-level=warn "${extra[@]}" -- \
  "$build/bin/syncd-soak" --ops "$ops" --progress "$progress" > "$work/job.log" 2>&1 &
job=$!

daemons() { pgrep -P "$job" -x syncd | sort -n; }
sample() {  # sample <label>: one line per daemon: label pid rss_kb fds
  local pid rss fds
  for pid in $(daemons); do
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null) || continue
    fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
    [ -n "$rss" ] && echo "$1 $pid $rss $fds"
  done >> "$work/samples"
}
done_ops() { cat "$progress" 2>/dev/null || echo 0; }
# "end" is taken while every rank still runs (at 99 %): a daemon whose ranks have detached has
# unmapped their segments and would look smaller than it is.
for point in warm-up:$((ops * 15 / 100)) middle:$((ops / 2)) end:$((ops - ops / 100)); do
  label=${point%%:*} at=${point##*:}
  while kill -0 "$job" 2>/dev/null && [ "$(done_ops)" -lt "$at" ]; do sleep 0.2; done
  kill -0 "$job" 2>/dev/null || break
  sample "$label"
done
status=0
wait "$job" || status=$?
seconds=$(( ($(date +%s%N) - start_ns) / 1000000 ))  # ms
if [ $status -ne 0 ] || [ "$(grep -c . "$work/samples" 2>/dev/null || echo 0)" -lt $((3 * nodes)) ]; then
  echo "soak.sh: the job failed (status $status) or ended before the last sample:" >&2
  tail -n 20 "$work/job.log" >&2
  exit 1
fi
/usr/bin/python3 - "$work/samples" "$ops" "$nodes" "$ranks" "$seconds" <<'PY'
import json, sys
path, ops, nodes, ranks, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]) / 1e3
by_pid = {}
for line in open(path):
    label, pid, rss, fds = line.split()
    by_pid.setdefault(int(pid), {})[label] = (int(rss), int(fds))
print(f"# soak: {ops} allreduces per rank on {nodes} nodes x {ranks // nodes} ranks in {seconds:.0f} s "
      f"({ops / seconds:.0f} per s per rank), a larger one every 1000, re-attach every 100000")
print("%-6s %-8s %14s %14s %14s %10s %12s" % ("node", "pid", "rss warm-up", "rss middle", "rss end", "growth", "fds w/m/e"))
daemons, worst_growth, worst_fds = [], 0.0, 0
for node, pid in enumerate(sorted(by_pid)):
    s = by_pid[pid]
    rss = [s[k][0] for k in ("warm-up", "middle", "end")]
    fds = [s[k][1] for k in ("warm-up", "middle", "end")]
    growth = 100.0 * (rss[2] - rss[0]) / rss[0]
    worst_growth = max(worst_growth, growth)
    worst_fds = max(worst_fds, max(fds) - min(fds))
    daemons.append({"node": node, "rss_kb": rss, "fds": fds, "rss_growth_pct": round(growth, 3)})
    print("%-6d %-8d %11d kB %11d kB %11d kB %9.2f%% %12s" % (node, pid, *rss, growth, "/".join(map(str, fds))))
met = worst_growth < 1.0 and worst_fds == 0
print(f"# goal: RSS growth under 1 % after warm-up and a flat descriptor count: {'met' if met else 'NOT met'} "
      f"(worst growth {worst_growth:.2f} %, worst descriptor change {worst_fds})")
print(json.dumps({"bench": "soak", "ops_per_rank": ops, "nodes": nodes, "ranks": ranks, "seconds": round(seconds, 1),
                  "ops_per_s_per_rank": round(ops / seconds), "daemons": daemons,
                  "worst_rss_growth_pct": round(worst_growth, 3), "worst_fd_change": worst_fds,
                  "goal_rss_growth_pct": 1.0, "met": met}))
PY
