#!/usr/bin/env bash
# What a collective costs the daemons (issue 64): per layout (daemons x ranks per daemon), kind
# and size, `syncd-bench cost` times back-to-back float32 collectives and reads every
# daemon's status around them: per collective each daemon completed, its engine thread's CPU
# (mean over daemons and the costliest), its wake-ups (sleeps of the engine that ended: the
# doorbell, the network or a timer), its loop's turns that did work, its messages to other
# daemons, its futex wakes of clients, and every rank's CPU summed. For allreduce, OpenMPI's
# MPI_Allreduce runs the same ranks and count in the same go (shared memory, the same cores, oversubscribed): its
# time and its ranks' CPU (getrusage, summed) per call. The total CPU per collective is the
# ranks' plus every engine's (syncd) against the ranks' (MPI). Every daemon and rank shares this
# machine's cores. The last line is one JSON object.
#   bench/engine_cost.sh [--layouts 1x4,2x2,8x1] [--sizes 8,64K] [--iters 2000] [--build build]
#                        [--ops allreduce,allgather,alltoall,reducescatter,broadcast,reduce,gather,scatter]
#                        [--syncd-arg=--flag=value ...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
layouts=1x4,2x2,8x1 sizes=8,64K iters=2000 ops=allreduce build="$here/../build" daemon_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --layouts) layouts=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --syncd-arg=*) daemon_args+=("$1"); shift ;;
    *) echo "engine_cost.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for layout in ${layouts//,/ }; do
  nodes=${layout%x*} per=${layout#*x}
  ranks=$((nodes * per))
  "$build/bin/syncrun" -N "$nodes" -n "$ranks" --syncd-arg=--log-level=warn "${daemon_args[@]}" \
    -- "$build/bin/syncd-bench" cost --ops "$ops" --sizes "$sizes" --iters "$iters" --label "$layout" --json \
    >>"$out/syncd.jsonl" 2>"$out/err" || { cat "$out/err" >&2; exit 1; }
  if [[ ",$ops," == *,allreduce,* ]] && [ -x "$build/bin/syncd-mpi-allreduce" ] && command -v mpirun >/dev/null; then
    mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader -np "$ranks" \
      "$build/bin/syncd-mpi-allreduce" --sizes "$sizes" --iters "$iters" --seconds 1000 | sed "s/^{/{\"label\":\"$layout\",/" \
      >>"$out/mpi.jsonl" 2>"$out/err" || { cat "$out/err" >&2; exit 1; }
  fi
done
touch "$out/mpi.jsonl"
/usr/bin/python3 - "$out/syncd.jsonl" "$out/mpi.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
mpi = {(r["label"], r["bytes"]): r for r in (json.loads(l) for l in open(sys.argv[2]) if l.startswith("{"))}
print("# %-6s %-13s %8s %9s %9s %9s %9s %9s %8s %8s %8s %8s %9s %10s %9s %10s %10s" % (
    "layout", "kind", "size(B)", "time us", "MPI us", "vs MPI", "engine us", "max eng", "busy us", "wakeups", "max wk", "turns",
    "messages", "cl.wakes", "ranks cpu", "total cpu", "MPI cpu"))
for r in rows:
    m = mpi.get((r["label"], r["bytes"])) if r["kind"] == "allreduce" else None
    r["total_cpu_us"] = r["ranks_cpu_us"] + r["engine_cpu_us"] * r["daemons"]
    r["mpi_time_us"] = m["time_us"] if m else None
    r["mpi_ranks_cpu_us"] = m["ranks_cpu_us"] if m else None
    print("  %-6s %-13s %8d %9.2f %9s %9s %9.2f %9.2f %8.2f %8.3f %8.3f %8.3f %9.3f %10.3f %9.2f %10.2f %10s" % (
        r["label"], r["kind"], r["bytes"], r["time_us"], "%.2f" % m["time_us"] if m else "-",
        "%.2fx" % (r["time_us"] / m["time_us"]) if m else "-", r["engine_cpu_us"], r["engine_cpu_us_max"],
        r["engine_busy_us"],
        r["wakeups"], r["wakeups_max"], r["work_turns"], r["messages"], r["client_wakes"], r["ranks_cpu_us"],
        r["total_cpu_us"], "%.2f" % m["ranks_cpu_us"] if m else "-"))
print("# per daemon and collective it completed (mean over daemons; max: the costliest): engine CPU us, busy us (its turns")
print("# that did work: wall time, with time descheduled in them), wake-ups, turns with work, messages to other daemons,")
print("# futex wakes of clients; ranks cpu: every rank's CPU summed per collective;")
print("# total cpu: the ranks' plus every engine's; MPI cpu: MPI's ranks' summed; time: mean of back-to-back calls")
print(json.dumps({"bench": "engine_cost", "rows": rows}))
PY
