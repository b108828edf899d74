#!/usr/bin/env bash
# What a job costs as its daemons grow, one rank per daemon, every coordination mode (issue 36):
# job start (the earliest rank's init to the last rank's first allreduce), the 8-byte allreduce
# step, and per daemon and step its coordination messages and bytes (the mean over daemons and
# the busiest one) and its engine's CPU (syncd-bench scaling, which reads each daemon's status
# around two windows of steps), then the health reports each daemon sends per second while the
# ranks sleep (2 s). OpenMPI's MPI_Allreduce of 8 bytes at the same rank count on the
# same cores runs in the same go (shared memory, oversubscribed; the median of three runs), and
# the step's ratio to it is reported. All daemons and ranks share this machine's cores. The last line is one JSON object.
#   bench/scaling.sh [--nodes 2,4,8,16,32] [--modes negotiate,gs,nbcs,topo] [--steps 100] [--build build]
#                    [--syncd-arg=--flag=value ...] [--partial-names K]
# With --partial-names K a step is K partial allreduces (one per name, every rank in each round):
# the partial rounds' coordination (reports to each name's coordinator, run messages down its tree).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=2,4,8,16,32 modes=negotiate,gs,nbcs,topo steps=100 build="$here/../build" daemon_args=() bench_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --syncd-arg=*) daemon_args+=("$1"); shift ;;
    --partial-names) bench_args+=(--partial-names "$2"); shift 2 ;;
    *) echo "scaling.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for n in ${nodes//,/ }; do
  for mode in ${modes//,/ }; do
    "$build/bin/syncrun" -N "$n" -n "$n" --syncd-arg=--log-level=warn --syncd-arg=--coord="$mode" "${daemon_args[@]}" \
      -- "$build/bin/syncd-bench" scaling --steps "$steps" --label "$mode" "${bench_args[@]}" --json >>"$out/syncd.jsonl" 2>"$out/err" ||
      { cat "$out/err" >&2; exit 1; }
  done
  if [ -x "$build/bin/syncd-mpi-allreduce" ] && command -v mpirun >/dev/null; then
    for run in 1 2 3; do  # three runs, the median kept: one descheduled rank moves a mean of 2 far
      mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader -np "$n" \
        "$build/bin/syncd-mpi-allreduce" --seconds 0.5 --sizes 8 >>"$out/mpi.jsonl" 2>"$out/err" || { cat "$out/err" >&2; exit 1; }
    done
  fi
done
touch "$out/mpi.jsonl"
/usr/bin/python3 - "$out/syncd.jsonl" "$out/mpi.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
runs = {}
for r in (json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")):
    runs.setdefault(r["ranks"], []).append(r)
mpi = {n: sorted(rs, key=lambda r: r["time_us"])[len(rs) // 2] for n, rs in runs.items()}
print("# %-10s %7s %9s %10s %9s %9s %9s %11s %11s %9s %8s %9s %9s %9s" % ("mode", "daemons", "start ms", "step us",
      "MPI us", "vs MPI", "msgs", "max msgs", "bytes", "cpu us", "cycles", "health/s", "max h/s", "health B/s"))
for r in rows:
    m = mpi.get(r["ranks"])
    r["mpi_us"] = m["time_us"] if m else None
    r["vs_mpi"] = r["step_us"] / m["time_us"] if m else None
    print("  %-10s %7d %9.1f %10.1f %9s %9s %9.2f %9.2f %11.0f %9.1f %8.2f %9.1f %9.1f %9.0f" % (
        r["label"], r["daemons"], r["start_ms"], r["step_us"], "%.1f" % r["mpi_us"] if m else "-",
        "%.1fx" % r["vs_mpi"] if m else "-", r["msgs_per_daemon_step"], r["msgs_max_daemon_step"],
        r["bytes_per_daemon_step"], r["engine_cpu_us_per_daemon_step"], r["cycles_per_step"],
        r["health_msgs_per_daemon_s"], r["health_msgs_max_daemon_s"], r["health_bytes_per_daemon_s"]))
print("# msgs, bytes, cpu us: per daemon and step (mean over daemons; max msgs: the busiest daemon); step and MPI: mean us;")
print("# health/s, max h/s, health B/s: health-report messages per daemon per second while the ranks sleep (mean, busiest), bytes (mean)")
print(json.dumps({"bench": "scaling", "rows": rows}))
PY
