#!/usr/bin/env bash
# Slurm Prolog (slurm.conf: PrologFlags=Alloc, Prolog=<this file>). Runs as root on every node
# of a job when it is allocated. Where the node's daemon serves every job (a node service,
# SYNCD_NODE_SERVICE), registers the job with it for the job's user, linked to the job's other
# nodes; otherwise starts this node's syncd for the job, as the job's user, on the dedicated
# cores. Returns only once the job is ready here (every node joined the rendezvous at the first
# node). A failure fails the prolog with a message in the Slurm log (the node drains).
set -Eeuo pipefail
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
. "$here/common.sh"
exec 2>&1  # slurmd logs only the standard output of a failing prolog
trap 'syncd_say "prolog failed at line $LINENO: $BASH_COMMAND"' ERR

job=${SLURM_JOB_ID:?not run by slurmd: SLURM_JOB_ID is unset}
uid=${SLURM_JOB_UID:?SLURM_JOB_UID is unset}
gid=${SLURM_JOB_GID:-$(id -g "$uid")}
node=${SLURMD_NODENAME:-$(hostname -s)}
nodelist=${SLURM_JOB_NODELIST:-${SLURM_NODELIST:?SLURM_JOB_NODELIST is unset (PrologFlags=Alloc?)}}

mapfile -t hosts < <(scontrol show hostnames "$nodelist")
rank=-1
for i in "${!hosts[@]}"; do [ "${hosts[$i]}" = "$node" ] && rank=$i; done
[ "$rank" -ge 0 ] || { syncd_say "node $node is not in the job's node list $nodelist"; exit 1; }
nodes=${#hosts[@]}
# Every node runs the same number of ranks (as Horovod expects): the job's tasks over its nodes.
ntasks=${SLURM_JOB_NTASKS:-$nodes}
if [ $((ntasks % nodes)) -ne 0 ]; then
  syncd_say "job $job has $ntasks tasks on $nodes nodes; syncd needs the same number on every node (--ntasks-per-node)"
  exit 1
fi
# The first node serves the rendezvous, at the address Slurm itself uses for it.
first=${hosts[0]}
addr=$(scontrol show node -o "$first" 2>/dev/null | tr ' ' '\n' | sed -n 's/^NodeAddr=//p')
[ -n "$addr" ] || addr=$first
port=$((SYNCD_SLURM_PORT_BASE + job % SYNCD_SLURM_PORT_RANGE))
# Every node derives the same token from the site secret; another job cannot guess it.
secret=$SYNCD_SLURM_SECRET
[ -r "$secret" ] || secret=/etc/munge/munge.key
[ -r "$secret" ] || { syncd_say "no site secret: create $SYNCD_SLURM_SECRET (root only, the same on every node)"; exit 1; }
token=$( { cat "$secret"; echo "syncd job $job uid $uid"; } | sha256sum | cut -c1-32)

dir=$(syncd_run_dir "$job" "$node")
mkdir -p "$(dirname "$dir")"
rm -rf "$dir"

# A node service: the job is registered with it (its ranks attach there, as the job's user and
# nobody else); the job's run directory only says where it is.
service=$(syncd_node_service "$node")
if [ -n "$service" ]; then
  args=(--job "$job" --uid "$uid" --gid "$gid" --local-size $((ntasks / nodes)))
  [ "$nodes" -gt 1 ] && args+=(--nodes "$nodes" --node-rank "$rank" --rendezvous "$addr:$port")
  if ! out=$(SYNCD_JOB_TOKEN=$token timeout $((SYNCD_SLURM_READY_TIMEOUT + 5)) \
      "$SYNCD_PREFIX/bin/syncctl" --run-dir "$service" job add "${args[@]}" 2>&1); then
    syncd_say "job $job: the node's daemon at $service did not take it: $out"
    exit 1
  fi
  install -d -m 0755 "$dir"
  echo "$service" > "$dir/service"
  "$SYNCD_PREFIX/bin/syncctl" --run-dir "$service" status --json |
    sed -n 's/.*"worker_cores":\[\([0-9,]*\)\].*/\1/p' > "$dir/worker_cores"
  exit 0
fi
install -d -m 0700 -o "$uid" -g "$gid" "$dir"
cleanup_failed() {
  [ -z "${pid:-}" ] || kill -KILL "$pid" 2>/dev/null || true
  syncd_say "$1 (log: $(tail -n 5 "$dir/syncd.log" 2>/dev/null | tr '\n' ' '))"
  rm -rf "$dir"
  exit 1
}
# The daemon runs as the job's user, detached from slurmd; the token travels in its environment.
SYNCD_JOB_TOKEN=$token setsid setpriv --reuid="$uid" --regid="$gid" --init-groups --inh-caps=-all \
  "$SYNCD_PREFIX/bin/syncd" --run-dir="$dir" --nodes="$nodes" --node-rank="$rank" --local-size=$((ntasks / nodes)) \
  --rendezvous="$addr:$port" --join-timeout="$SYNCD_SLURM_READY_TIMEOUT" \
  </dev/null >>"$dir/syncd.log" 2>&1 &
pid=$!
echo "$pid" > "$dir/syncd.pid"
deadline=$((SECONDS + SYNCD_SLURM_READY_TIMEOUT + 5))
until status=$("$SYNCD_PREFIX/bin/syncctl" --run-dir "$dir" status --json 2>/dev/null); do
  kill -0 "$pid" 2>/dev/null || cleanup_failed "syncd for job $job exited before it was ready"
  [ $SECONDS -lt $deadline ] || cleanup_failed "syncd for job $job was not ready after ${SYNCD_SLURM_READY_TIMEOUT} s"
  sleep 0.2
done
# Tasks bind to the cores the daemon leaves (task-prolog.sh, syncd-task).
workers=$(echo "$status" | sed -n 's/.*"worker_cores":\[\([0-9,]*\)\].*/\1/p')
echo "$workers" > "$dir/worker_cores"
chown "$uid:$gid" "$dir/worker_cores" "$dir/syncd.pid"
exit 0
