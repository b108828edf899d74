#!/usr/bin/env bash
# Two jobs on the same nodes, in one run: served side by side by one node daemon per node (syncd
# --node-service on, both jobs registered on every node, each job on links of its own between
# them), against each job alone on those daemons and against today's layout of one daemon per job
# per node (each job's own daemons on the same dedicated cores).
#   - latency: job B's 8-byte allreduce p50 while job A streams 64 MiB allreduces;
#   - bandwidth: both jobs streaming 64 MiB allreduces at once, each one's busbw against one job
#     alone, and the two together; then again with A registered at weight 2 (its share of the two);
#   - failure: job B's step (a 1 MiB allreduce) while job A loses a rank (SIGKILL), against B alone;
#   - one job alone: its 8-byte p50 on the node daemon against its own daemon (today's layout).
# Ranks run on the cores the daemons leave to workers, in every layout. The last line is one JSON
# object with every figure. Needs root (the node service's control socket; the namespaces).
#   bench/tenants.sh [--nodes 1|2] [--link-gbit 2.5] [--ranks 2] [--seconds 2] [--build build]
#                    [--service-arg=--flag=value ...]   (the node daemons' own flags)
# --nodes 2: each node in a network namespace of its own, joined by links of --link-gbit (syncrun
# --netns --network-only stands the network up; this script starts every daemon in it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ranks=2 seconds=2 build="$here/../build" nodes=1 gbit=2.5 inside=0 service_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --link-gbit) gbit=$2; shift 2 ;;
    --inside-network) inside=1; shift ;;
    --service-arg=*) service_args+=("${1#--service-arg=}"); shift ;;
    *) echo "tenants.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "tenants.sh: needs root (the node service's control socket)" >&2; exit 2; }
case "$nodes" in 1|2) ;; *) echo "tenants.sh: --nodes 1 or 2" >&2; exit 2 ;; esac
build=$(cd "$build" && pwd)
if [ "$nodes" -gt 1 ] && [ "$inside" -eq 0 ]; then
  exec "$build/bin/syncrun" --netns --link-gbit "$gbit" -N "$nodes" --network-only -- \
    "$0" --inside-network --nodes "$nodes" --link-gbit "$gbit" --ranks "$ranks" --seconds "$seconds" --build "$build" \
    "${service_args[@]/#/--service-arg=}"
fi
bin=$build/bin
out=$(mktemp -d)
daemons=()
cleanup() {
  local p
  for p in "${daemons[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$out"
}
trap cleanup EXIT
size=$((nodes * ranks))

# in_node N COMMAND...: becomes COMMAND on node N (in its namespace, UCX on its link, when it has
# one); run in the background (&), so that $! is COMMAND's pid.
if [ "$nodes" -gt 1 ]; then
  read -r -a namespaces <<<"${SYNCRUN_NETNS:?}"
  read -r -a addrs <<<"$SYNCRUN_NODE_ADDRS"
  in_node() { local n=$1; shift; exec ip netns exec "${namespaces[$n]}" env UCX_TLS=tcp UCX_NET_DEVICES="${SYNCRUN_DEVICE:-link0}" "$@"; }
else
  addrs=(127.0.0.1)
  in_node() { shift; exec "$@"; }
fi
# Each node's cores, as syncrun gives simulated nodes: contiguous groups, the daemon on a group's
# last core, the ranks on the others (on the daemon's own where the group has one core).
ncores=$(nproc)
node_cores() {  # node N: "DAEMON_CORES WORKER_CORES"
  /usr/bin/python3 -c "
c, n, i = $ncores, $nodes, $1
if c >= n:
    g = list(range(i * c // n, (i + 1) * c // n))
    d, w = [g[-1]], (g[:-1] or g)
else:
    d = w = [i % c]
print(','.join(map(str, d)), ','.join(map(str, w)))"
}
# start_daemon DIR N ARGS...: a syncd of node N in DIR on its node's cores (its pid in $daemons),
# ready on return.
start_daemon() {
  local dir=$1 n=$2 cores
  shift 2
  read -r cores _ < <(node_cores "$n")
  if [ "$nodes" -gt 1 ]; then set -- --cores "$cores" "$@"; fi
  in_node "$n" "$bin/syncd" --run-dir "$dir" --local-size "$ranks" --log-level warn "$@" &
  daemons+=($!)
  local _i
  for _i in $(seq 300); do [ -S "$dir/control.sock" ] && "$bin/syncctl" --run-dir "$dir" status >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "tenants.sh: syncd of node $n in $dir did not come up" >&2
  return 1
}
stop_daemons() {
  local p
  for p in "$@"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null || true; done
}

# The node daemons, serving jobs 1 (A) and 2 (B) on every node.
for n in $(seq 0 $((nodes - 1))); do start_daemon "$out/run$n" "$n" --node-service on "${service_args[@]}"; done
service_daemons=("${daemons[@]}")
# register JOB [--weight W]: on every node at once (the first serves the job's rendezvous).
port_of() { echo $((31000 + $1 * 7 + RANDOM % 900)); }
declare -A job_port
register() {
  local job=$1 n pids=()
  shift
  if [ "$nodes" -gt 1 ]; then
    [ -n "${job_port[$job]:-}" ] || job_port[$job]=$(port_of "$job")
    set -- "$@" --nodes "$nodes" --rendezvous "${addrs[0]}:${job_port[$job]}"
  fi
  for n in $(seq 0 $((nodes - 1))); do
    local extra=()
    [ "$nodes" -gt 1 ] && extra=(--node-rank "$n")
    SYNCD_JOB_TOKEN="tenants-$job" "$bin/syncctl" --run-dir "$out/run$n" job add --job "$job" --uid 0 "$@" "${extra[@]}" >/dev/null &
    pids+=($!)
  done
  for n in "${pids[@]}"; do wait "$n"; done
}
register 1
register 2

# job ID, then syncd-bench's arguments: its ranks on the node daemons (run directory prefix
# $RUN, default the node services'), started; their pids in $out/pids.ID.
start_ranks() {
  local job=$1 n r rank workers
  shift
  : >"$out/pids.$job"
  for n in $(seq 0 $((nodes - 1))); do
    read -r _ workers < <(node_cores "$n")
    [ "$nodes" -eq 1 ] && workers=$one_node_workers
    for r in $(seq 0 $((ranks - 1))); do
      rank=$((n * ranks + r))
      SYNCD_RUN_DIR=${RUN:-$out/run}$n SYNCD_JOB_ID=$job SYNCD_RANK=$rank SYNCD_SIZE=$size SYNCD_LOCAL_RANK=$r \
        SYNCD_LOCAL_SIZE=$ranks taskset -c "$workers" "$bin/syncd-bench" allreduce --json "$@" >"$out/job$job.rank$rank" 2>&1 &
      echo $! >>"$out/pids.$job"
    done
  done
}
one_node_workers=$("$bin/syncctl" --run-dir "$out/run0" status --json |
  /usr/bin/python3 -c "import json,sys; print(','.join(map(str, json.load(sys.stdin)['worker_cores'])))")
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
# job ID, then syncd-bench's arguments: its ranks on the node daemons, to their end.
on_node_daemon() {
  local job=$1; shift
  start_ranks "$job" "$@"
  wait_ranks "$job"
}
# job ID, then syncd-bench's arguments: a job of its own with its own daemons (today's layout):
# syncrun on one node; on several, a daemon per node in the namespaces, joined at a rendezvous of
# its own (ID: its run directories and its port; each call its own, some run at once).
own_daemon() {
  local job=$1
  shift
  if [ "$nodes" -eq 1 ]; then
    "$bin/syncrun" -n "$ranks" --syncd-arg=--log-level=warn -- "$bin/syncd-bench" allreduce --json "$@" | grep '^{'
    return
  fi
  local n before=${#daemons[@]} port
  port=$(port_of "$job")
  for n in $(seq 0 $((nodes - 1))); do
    SYNCD_JOB_TOKEN="own-$job" start_daemon_bg "$out/own$job.$n" "$n" --nodes "$nodes" --node-rank "$n" \
      --rendezvous "${addrs[0]}:$port"
  done
  for n in $(seq 0 $((nodes - 1))); do wait_daemon "$out/own$job.$n" "$n"; done
  RUN=$out/own$job. start_ranks "$job" "$@"
  wait_ranks "$job"
  stop_daemons "${daemons[@]:$before}"
  daemons=("${daemons[@]:0:$before}")
}
# The same as start_daemon, not waiting (the nodes of one job wait for each other at the rendezvous).
start_daemon_bg() {
  local dir=$1 n=$2 cores
  shift 2
  read -r cores _ < <(node_cores "$n")
  in_node "$n" "$bin/syncd" --run-dir "$dir" --local-size "$ranks" --log-level warn --cores "$cores" "$@" &
  daemons+=($!)
}
wait_daemon() {
  local _i
  for _i in $(seq 300); do [ -S "$1/control.sock" ] && "$bin/syncctl" --run-dir "$1" status >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "tenants.sh: syncd of node $2 in $1 did not come up" >&2
  return 1
}
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
# daemon's own count of each job's bytes over `seconds` (1 s at least: a 64 MiB allreduce must
# complete in it, sanitizers included) while both stream (syncctl job list): on several nodes the
# bytes each job sent on its links (counted as they go, not by whole allreduces: 64 MiB takes
# 0.3 s at 2.5 Gbit/s), on one node its allreduces' bytes. The streams run until stopped.
register 1 --weight 2
counted=bytes
[ "$nodes" -gt 1 ] && counted=link_bytes
job_bytes() {
  "$bin/syncctl" --run-dir "$out/run0" job list --json |
    /usr/bin/python3 -c "import json,sys; j={int(x['job']): int(x.get('$counted', 0)) for x in json.load(sys.stdin)['jobs']}; print(j.get(1, 0), j.get(2, 0))"
}
streams=(--sizes 64M --seconds 3600 --iters 100000000)
start_ranks 1 "${streams[@]}"
start_ranks 2 "${streams[@]}"
sleep 1
read -r a0 b0 < <(job_bytes)
sleep "$(/usr/bin/python3 -c "print(max($seconds, 1))")"
read -r a1 b1 < <(job_bytes)
kill -9 $(cat "$out/pids.1" "$out/pids.2") 2>/dev/null || true
wait_ranks 1 >/dev/null 2>&1 || true
wait_ranks 2 >/dev/null 2>&1 || true
a_weighted=$(( a1 - a0 ))
b_weighted=$(( b1 - b0 ))
if [ "$a_weighted" -le 0 ] || [ "$b_weighted" -le 0 ]; then
  echo "tenants.sh: at weights 2:1 job 1 moved $a_weighted bytes and job 2 $b_weighted in the window" >&2
  exit 1
fi

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
b_alone_two=$(own_daemon 11 "${small[@]}" | field lat_p50_us)
own_daemon 12 --sizes 64M --seconds "$long" >/dev/null &
stream=$!
sleep 1
b_two=$(own_daemon 13 "${small[@]}" | field lat_p50_us)
wait "$stream"
own_daemon 14 "${big[@]}" >"$out/a_two" &
a_pid=$!
b_both_two=$(own_daemon 15 "${big[@]}" | field busbw_GBps)
wait "$a_pid"
a_both_two=$(field busbw_GBps <"$out/a_two")

/usr/bin/python3 - "$nodes" "$gbit" "$ranks" "$b_alone" "$b_side" "$b_two" "$a_alone" "$a_both_side" "$b_both_side" "$a_both_two" "$b_both_two" \
  "$a_weighted" "$b_weighted" "$b_alone_two" "$b_step_alone" "$b_step_busy" "$b_step_fail" <<'EOF'
import json, sys
nodes, gbit, ranks = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
(b_alone, b_side, b_two, a_alone, a_side, b_side_bw, a_two, b_two_bw, a_w, b_w, b_alone_two, step_alone, step_busy,
 step_fail) = map(float, sys.argv[4:])
print(f"two jobs of {ranks} ranks per node on {nodes} node{'s' if nodes > 1 else ''}" + (f", links of {gbit} Gbit/s" if nodes > 1 else ""))
print(f"{'':46s} {'one daemon, side by side':>26s} {'a daemon per job':>18s}")
print(f"{'B 8-byte allreduce p50, B alone (us)':46s} {b_alone:26.1f} {b_alone_two:18.1f}")
print(f"{'  one job, node daemon over its own daemon':46s} {b_alone / b_alone_two:26.2f}")
print(f"{'B 8-byte p50 while A streams 64 MiB (us)':46s} {b_side:26.1f} {b_two:18.1f}")
print(f"{'  ... over B alone (goal <= 3)':46s} {b_side / b_alone:26.2f} {b_two / b_alone_two:18.2f}")
print(f"{'A 64 MiB busbw alone (GB/s)':46s} {a_alone:26.3f}")
print(f"{'A / B busbw, both streaming (GB/s)':46s} {a_side:12.3f} / {b_side_bw:11.3f} {a_two:8.3f} / {b_two_bw:7.3f}")
print(f"{'  A, B share of one job alone (goal 0.5 +-10%)':46s} {a_side / a_alone:12.2f} / {b_side_bw / a_alone:11.2f} {a_two / a_alone:8.2f} / {b_two_bw / a_alone:7.2f}")
print(f"{'  both together over one job alone (>= 0.9)':46s} {(a_side + b_side_bw) / a_alone:26.2f} {(a_two + b_two_bw) / a_alone:18.2f}")
print(f"{'A at weight 2: A / B bytes in the window (GiB)':46s} {a_w / 2**30:12.2f} / {b_w / 2**30:11.2f}")
print(f"{'  A, B share of the two (goal 0.67 / 0.33)':46s} {a_w / (a_w + b_w):12.2f} / {b_w / (a_w + b_w):11.2f}")
print(f"{'B 1 MiB step alone (us)':46s} {step_alone:26.1f}")
print(f"{'  while A runs 8-byte allreduces / loses a rank':46s} {step_busy:12.1f} / {step_fail:11.1f}")
print(f"{'  ... over alone (goal within 10%)':46s} {step_busy / step_alone:12.2f} / {step_fail / step_alone:11.2f}")
print(json.dumps({"bench": "tenants", "nodes": nodes, "link_gbit": gbit if nodes > 1 else None, "ranks_per_node": ranks, "ranks_per_job": nodes * ranks,
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
