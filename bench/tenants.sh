#!/usr/bin/env bash
# Two jobs on one node, in one run: served side by side by one node daemon (syncd --node-service
# on, both jobs registered), against each job alone on that daemon and against today's layout of
# one daemon per job (two syncrun, each starting its own syncd on the same dedicated cores).
#   - latency: job B's 8-byte allreduce p50 while job A streams 64 MiB allreduces;
#   - bandwidth: both jobs streaming 64 MiB allreduces at once, each one's busbw against one job
#     alone, and the two together; then again with A registered at weight 2 (its share of the two);
#   - failure: job B's step (a 1 MiB allreduce) while job A loses a rank (SIGKILL), against B alone;
#   - one job alone: its 8-byte p50 on the node daemon against its own daemon (today's layout).
# Ranks run on the cores the daemon leaves to workers, in every layout. The last line is one JSON
# object with every figure. Needs root (the node service's control socket is root's).
#   bench/tenants.sh [--ranks 2] [--seconds 2] [--build build]
# One node: a node service of several nodes still runs one job at a time (docs/pages/deploy.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ranks=2 seconds=2 build="$here/../build"
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "tenants.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "tenants.sh: needs root (the node service's control socket)" >&2; exit 2; }
bin=$build/bin
out=$(mktemp -d)
run=$out/run
daemon=""
cleanup() {
  [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT

# The node daemon, serving jobs 1 (A) and 2 (B).
"$bin/syncd" --run-dir "$run" --node-service on --local-size "$ranks" --log-level warn &
daemon=$!
for _ in $(seq 100); do [ -S "$run/control.sock" ] && "$bin/syncctl" --run-dir "$run" status >/dev/null 2>&1 && break; sleep 0.1; done
"$bin/syncctl" --run-dir "$run" job add --job 1 --uid 0 >/dev/null
"$bin/syncctl" --run-dir "$run" job add --job 2 --uid 0 >/dev/null
workers=$("$bin/syncctl" --run-dir "$run" status --json |
  /usr/bin/python3 -c "import json,sys; print(','.join(map(str, json.load(sys.stdin)['worker_cores'])))")

# job ID, then syncd-bench's arguments: its ranks on the node daemon, started; their pids in $out/pids.ID.
start_ranks() {
  local job=$1; shift
  local r
  : >"$out/pids.$job"
  for r in $(seq 0 $((ranks - 1))); do
    SYNCD_RUN_DIR=$run SYNCD_JOB_ID=$job SYNCD_RANK=$r SYNCD_SIZE=$ranks SYNCD_LOCAL_RANK=$r SYNCD_LOCAL_SIZE=$ranks \
      taskset -c "$workers" "$bin/syncd-bench" allreduce --json "$@" >"$out/job$job.rank$r" 2>&1 &
    echo $! >>"$out/pids.$job"
  done
}
# job ID: waits for its ranks; rank 0's JSON lines to stdout, or says which rank failed.
wait_ranks() {
  local job=$1 failed=0 p
  for p in $(cat "$out/pids.$job"); do wait "$p" || failed=1; done
  if [ "$failed" -ne 0 ] || ! grep -q '^{' "$out/job$job.rank0"; then
    echo "tenants.sh: a rank of job $job failed:" >&2
    tail -n 5 "$out"/job"$job".rank* >&2
    return 1
  fi
  grep '^{' "$out/job$job.rank0"
}
# job ID, then syncd-bench's arguments: its ranks on the node daemon, to their end.
on_node_daemon() {
  local job=$1; shift
  start_ranks "$job" "$@"
  wait_ranks "$job"
}
# syncd-bench's arguments: a job of its own with its own daemon (syncrun), as each job runs today.
own_daemon() { "$bin/syncrun" -n "$ranks" --syncd-arg=--log-level=warn -- "$bin/syncd-bench" allreduce --json "$@" | grep '^{'; }
field() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['$1'])"; }

long=$(/usr/bin/python3 -c "print($seconds * 3 + 2)")
small=(--sizes 8 --seconds "$seconds")
big=(--sizes 64M --seconds "$seconds")

b_alone=$(on_node_daemon 2 "${small[@]}" | field lat_p50_us)
a_alone=$(on_node_daemon 1 "${big[@]}" | field busbw_GBps)
# B measures while A streams (A runs longer than B's whole measurement).
on_node_daemon 1 --sizes 64M --seconds "$long" >/dev/null &
stream=$!
sleep 1
b_side=$(on_node_daemon 2 "${small[@]}" | field lat_p50_us)
wait "$stream"
# Both stream at once.
on_node_daemon 1 "${big[@]}" >"$out/a_both" &
a_pid=$!
b_both_side=$(on_node_daemon 2 "${big[@]}" | field busbw_GBps)
wait "$a_pid"
a_both_side=$(field busbw_GBps <"$out/a_both")
# Weights 2:1 (registering again updates the weight; the ranks attach afresh). The shares are the
# daemon's own count of each job's bytes over `seconds` while both stream (syncctl job list).
"$bin/syncctl" --run-dir "$run" job add --job 1 --uid 0 --weight 2 >/dev/null
job_bytes() {
  "$bin/syncctl" --run-dir "$run" job list --json |
    /usr/bin/python3 -c "import json,sys; j={int(x['job']): int(x.get('bytes', 0)) for x in json.load(sys.stdin)['jobs']}; print(j.get(1, 0), j.get(2, 0))"
}
on_node_daemon 1 --sizes 64M --seconds "$long" >/dev/null &
a_pid=$!
on_node_daemon 2 --sizes 64M --seconds "$long" >/dev/null &
b_pid=$!
sleep 1
read -r a0 b0 < <(job_bytes)
sleep "$seconds"
read -r a1 b1 < <(job_bytes)
wait "$a_pid" "$b_pid"
a_weighted=$(( a1 - a0 ))
b_weighted=$(( b1 - b0 ))

# B's step (a 1 MiB allreduce, its mean time over `seconds`) alone, while A runs (8-byte
# allreduces back to back), and while A loses a rank: A's rank 1 is killed (SIGKILL) a quarter
# into B's timed loop. B must finish with no error; A's rank 0 fails naming its lost rank.
step=(--sizes 1M --seconds "$seconds" --iters 100000000)
a_load=(--sizes 8 --seconds 3600 --iters 100000000)  # until stopped (its length from one sample would vary)
b_step_alone=$(on_node_daemon 2 "${step[@]}" | field time_us)
start_ranks 1 "${a_load[@]}"
sleep 1
b_step_busy=$(on_node_daemon 2 "${step[@]}" | field time_us)
kill -9 $(cat "$out/pids.1") 2>/dev/null || true
wait_ranks 1 >/dev/null 2>&1 || true
start_ranks 1 "${a_load[@]}"
sleep 1
start_ranks 2 "${step[@]}"
sleep "$(/usr/bin/python3 -c "print(0.5 + $seconds / 8)")"
kill -9 "$(sed -n 2p "$out/pids.1")" ||
  { echo "tenants.sh: job 1's rank 1 ended before it could be killed:" >&2; tail -n 5 "$out"/job1.rank* >&2; exit 1; }
wait_ranks 2 >"$out/b_step_fail"  # here, not in a subshell: the ranks are this shell's children
b_step_fail=$(field time_us <"$out/b_step_fail")
wait_ranks 1 >/dev/null 2>&1 || true  # its rank 0 fails naming the lost rank: expected (and ends)
grep -q "rank 1 (pid .*) exited without detaching" "$out/job1.rank0" ||
  { echo "tenants.sh: job 1's rank 0 did not fail naming its lost rank:" >&2; cat "$out/job1.rank0" >&2; exit 1; }

# Today's layout: a daemon per job.
b_alone_two=$(own_daemon "${small[@]}" | field lat_p50_us)
own_daemon --sizes 64M --seconds "$long" >/dev/null &
stream=$!
sleep 1
b_two=$(own_daemon "${small[@]}" | field lat_p50_us)
wait "$stream"
own_daemon "${big[@]}" >"$out/a_two" &
a_pid=$!
b_both_two=$(own_daemon "${big[@]}" | field busbw_GBps)
wait "$a_pid"
a_both_two=$(field busbw_GBps <"$out/a_two")

/usr/bin/python3 - "$ranks" "$b_alone" "$b_side" "$b_two" "$a_alone" "$a_both_side" "$b_both_side" "$a_both_two" "$b_both_two" \
  "$a_weighted" "$b_weighted" "$b_alone_two" "$b_step_alone" "$b_step_busy" "$b_step_fail" <<'EOF'
import json, sys
ranks = int(sys.argv[1])
(b_alone, b_side, b_two, a_alone, a_side, b_side_bw, a_two, b_two_bw, a_w, b_w, b_alone_two, step_alone, step_busy,
 step_fail) = map(float, sys.argv[2:])
print(f"two jobs of {ranks} ranks on one node")
print(f"{'':46s} {'one daemon, side by side':>26s} {'a daemon per job':>18s}")
print(f"{'B 8-byte allreduce p50, B alone (us)':46s} {b_alone:26.1f} {b_alone_two:18.1f}")
print(f"{'  one job, node daemon over its own daemon':46s} {b_alone / b_alone_two:26.2f}")
print(f"{'B 8-byte p50 while A streams 64 MiB (us)':46s} {b_side:26.1f} {b_two:18.1f}")
print(f"{'  ... over B alone (goal <= 3)':46s} {b_side / b_alone:26.2f} {b_two / b_alone_two:18.2f}")
print(f"{'A 64 MiB busbw alone (GB/s)':46s} {a_alone:26.3f}")
print(f"{'A / B busbw, both streaming (GB/s)':46s} {a_side:12.3f} / {b_side_bw:11.3f} {a_two:8.3f} / {b_two_bw:7.3f}")
print(f"{'  A, B share of one job alone (goal 0.5 +-10%)':46s} {a_side / a_alone:12.2f} / {b_side_bw / a_alone:11.2f} {a_two / a_alone:8.2f} / {b_two_bw / a_alone:7.2f}")
print(f"{'  both together over one job alone (>= 0.9)':46s} {(a_side + b_side_bw) / a_alone:26.2f} {(a_two + b_two_bw) / a_alone:18.2f}")
print(f"{'A at weight 2: A / B bytes done (GiB)':46s} {a_w / 2**30:12.2f} / {b_w / 2**30:11.2f}")
print(f"{'  A, B share of the two (goal 0.67 / 0.33)':46s} {a_w / (a_w + b_w):12.2f} / {b_w / (a_w + b_w):11.2f}")
print(f"{'B 1 MiB step alone (us)':46s} {step_alone:26.1f}")
print(f"{'  while A runs 8-byte allreduces / loses a rank':46s} {step_busy:12.1f} / {step_fail:11.1f}")
print(f"{'  ... over alone (goal within 10%)':46s} {step_busy / step_alone:12.2f} / {step_fail / step_alone:11.2f}")
print(json.dumps({"bench": "tenants", "nodes": 1, "ranks_per_job": ranks,
                  "equal_share_a": a_side / a_alone, "equal_share_b": b_side_bw / a_alone,
                  "together_vs_alone": (a_side + b_side_bw) / a_alone,
                  "weighted_share_a": a_w / (a_w + b_w),
                  "small_p50_vs_alone": b_side / b_alone,
                  "two_daemons_small_p50_vs_alone": b_two / b_alone_two,
                  "step_vs_alone_while_other_fails": step_fail / step_alone,
                  "single_job_vs_before": b_alone / b_alone_two,
                  "b_small_p50_us": {"alone": b_alone, "side_by_side": b_side, "alone_own_daemon": b_alone_two,
                                     "daemon_per_job": b_two},
                  "a_big_busbw_alone_GBps": a_alone,
                  "both_streaming_busbw_GBps": {"side_by_side": [a_side, b_side_bw], "daemon_per_job": [a_two, b_two_bw]},
                  "daemon_per_job_together_vs_alone": (a_two + b_two_bw) / a_alone,
                  "weights_2_1_bytes": [a_w, b_w],
                  "step_vs_while_other_runs": step_fail / step_busy,
                  "b_step_us": {"alone": step_alone, "while_a_runs": step_busy, "while_a_loses_a_rank": step_fail}}))
EOF
