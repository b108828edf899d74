#!/usr/bin/env bash
# Slurm Epilog (slurm.conf: Epilog=<this file>). Runs as root on every node when a job ends:
# drains this node's syncd (SIGTERM; in-flight collectives get SYNCD_DRAIN_TIMEOUT), kills it
# after a deadline, and removes the run directory: nothing of the job remains. A job registered
# with the node's daemon (a node service) is drained from it instead (syncctl job drain: it is
# removed once nothing of it is in flight, or at the timeout); the daemon serves on.
set -uo pipefail
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
. "$here/common.sh"
job=${SLURM_JOB_ID:?not run by slurmd: SLURM_JOB_ID is unset}
uid=${SLURM_JOB_UID:-}
node=${SLURMD_NODENAME:-$(hostname -s)}
dir=$(syncd_run_dir "$job" "$node")
deadline=$(( ${SYNCD_DRAIN_TIMEOUT:-30} + 5 ))

if [ -r "$dir/service" ]; then
  service=$(cat "$dir/service")
  timeout "$deadline" "$SYNCD_PREFIX/bin/syncctl" --run-dir "$service" job drain "$job" \
      --timeout "${SYNCD_DRAIN_TIMEOUT:-30}" >/dev/null 2>&1 ||
    "$SYNCD_PREFIX/bin/syncctl" --run-dir "$service" job remove "$job" >/dev/null 2>&1 ||
    syncd_say "job $job: the node's daemon at $service could not drain it"
  rm -rf "$dir"
  exit 0
fi

pids=$(cat "$dir/syncd.pid" 2>/dev/null)
# Whatever runs with this run directory is the job's daemon, whether or not the pid file is there.
pids="$pids $(pgrep -f -- "--run-dir=$dir( |$)" 2>/dev/null | tr '\n' ' ')"
alive=()
for p in $pids; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
if [ ${#alive[@]} -gt 0 ]; then
  kill -TERM "${alive[@]}" 2>/dev/null
  for ((i = 0; i < deadline * 10; i++)); do
    still=()
    for p in "${alive[@]}"; do kill -0 "$p" 2>/dev/null && still+=("$p"); done
    [ ${#still[@]} -eq 0 ] && break
    sleep 0.1
  done
  if [ ${#still[@]} -gt 0 ]; then
    syncd_say "syncd (pid ${still[*]}) did not drain within $deadline s; killed"
    kill -KILL "${still[@]}" 2>/dev/null
  fi
fi
rm -rf "$dir"
# UCX's shared-memory segments of a daemon that had to be killed, once the user runs nothing else here.
if [ -n "$uid" ] && ! pgrep -u "$uid" >/dev/null 2>&1; then
  find /dev/shm -maxdepth 1 -user "$uid" -name 'ucx_*' -delete 2>/dev/null
fi
exit 0
