#!/usr/bin/env bash
# Slurm TaskProlog (slurm.conf: TaskProlog=<this file>). Runs as the job's user before each task;
# what it prints as "export NAME=value" lands in the task's environment: where this node's syncd
# is, and the cores it leaves to tasks (syncd-task binds to them).
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
. "$here/common.sh"
dir=$(syncd_run_dir "${SLURM_JOB_ID:?}" "${SLURMD_NODENAME:-$(hostname -s)}")
# A job registered with the node's daemon (prolog.sh) attaches there.
if [ -r "$dir/service" ]; then echo "export SYNCD_RUN_DIR=$(cat "$dir/service")"; else echo "export SYNCD_RUN_DIR=$dir"; fi
[ -r "$dir/worker_cores" ] && echo "export SYNCD_WORKER_CORES=$(cat "$dir/worker_cores")"
exit 0
