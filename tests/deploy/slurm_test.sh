#!/usr/bin/env bash
# The Slurm prolog/epilog on a real Slurm: munged, slurmctld and two slurmd (n1, n2) on this
# machine, all private to this test (own config, ports, munge socket and key under a temporary
# directory), with deploy/slurm's prolog, epilog and task prolog configured. `srun -N2 -n4` runs a
# syncd.torch check; `syncctl status` runs inside the job; afterwards no syncd process, run
# directory or shared-memory segment of the job is left, and the Slurm daemons are stopped.
#   tests/deploy/slurm_test.sh <build dir>      (root; installs slurmd slurmctld munge if missing)
#   tests/deploy/slurm_test.sh --installed <prefix>   the same with the scripts, programs and Python
#       package a package installed under <prefix> (tests/install/deb_test.sh): nothing of the
#       source or build tree but this test's own check scripts
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$1" = --installed ]; then
  prefix=$2 build=
  scripts=$prefix/share/syncd/slurm task=$prefix/bin/syncd-task bin=$prefix/bin
else
  build=$(cd "$1" && pwd)
  scripts=$src/deploy/slurm task=$src/deploy/slurm/syncd-task bin=$build/bin
fi
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (slurmd, munged)"; exit 77; }
if ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurmd slurmctld slurm-client munge >/dev/null
fi
t=$(mktemp -d /tmp/syncd-slurm-XXXXXX)
chmod 755 "$t"
shm_before=$(ls /dev/shm | sort)
pids=()
stop_all() {
  set +e
  for f in "$t"/slurmd-n1.pid "$t"/slurmd-n2.pid "$t"/slurmctld.pid "$t"/munged.pid; do
    [ -r "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
  sleep 1
  for f in "$t"/slurmd-n1.pid "$t"/slurmd-n2.pid "$t"/slurmctld.pid "$t"/munged.pid; do
    [ -r "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
  done
  pkill -KILL -f -- "--run-dir=$t/" 2>/dev/null
  rm -rf "$t"
}
trap stop_all EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$t"/slurmctld.log "$t"/slurmd-n1.log "$t"/slurmd-n2.log; do
    [ -r "$f" ] && { echo "---- $f" >&2; tail -n 30 "$f" >&2; }
  done
  exit 1
}
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ctld_port=$(port) n1_port=$(port) n2_port=$(port)

# munge, private: its own key and socket.
dd if=/dev/urandom of="$t/munge.key" bs=1024 count=1 status=none
chmod 400 "$t/munge.key"
munged --force --key-file="$t/munge.key" --socket="$t/munge.socket" --pid-file="$t/munged.pid" \
  --log-file="$t/munged.log" --seed-file="$t/munge.seed"

# The site's syncd configuration, and the scripts as slurm.conf names them (with that config).
# Installed, the scripts find the programs under their own prefix (no SYNCD_PREFIX).
cat > "$t/syncd.conf" <<CONF
${build:+SYNCD_PREFIX=$build}
SYNCD_SLURM_RUN_DIR=$t/run/%j.%n
SYNCD_SLURM_SECRET=$t/munge.key
SYNCD_CORES=$(($(nproc) - 1))
SYNCD_LOG_LEVEL=info
SYNCD_DRAIN_TIMEOUT=5
CONF
for s in prolog epilog task-prolog; do
  printf '#!/bin/sh\nSYNCD_CONF=%s SLURM_CONF=%s exec %s "$@"\n' "$t/syncd.conf" "$t/slurm.conf" \
    "$scripts/$s.sh" > "$t/$s"
  chmod 755 "$t/$s"
done
host=$(hostname -s)
cat > "$t/slurm.conf" <<CONF
ClusterName=syncdtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
AuthType=auth/munge
AuthInfo=socket=$t/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$t/state
SlurmdSpoolDir=$t/spool-%n
SlurmctldPidFile=$t/slurmctld.pid
SlurmdPidFile=$t/slurmd-%n.pid
SlurmctldLogFile=$t/slurmctld.log
SlurmdLogFile=$t/slurmd-%n.log
SlurmdDebug=verbose
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
PrologFlags=Alloc
Prolog=$t/prolog
Epilog=$t/epilog
TaskProlog=$t/task-prolog
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$n1_port CPUs=$(nproc) State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$n2_port CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=n1,n2 Default=YES MaxTime=10 State=UP OverSubscribe=FORCE
CONF
mkdir -p "$t/state" "$t/spool-n1" "$t/spool-n2" "$t/run"
export SLURM_CONF=$t/slurm.conf
slurmctld -f "$t/slurm.conf"
slurmd -f "$t/slurm.conf" -N n1
slurmd -f "$t/slurm.conf" -N n2
for i in $(seq 100); do
  [ "$(sinfo -h -o '%t' -n n1,n2 2>/dev/null | sort -u | tr '\n' ' ')" = "idle " ] && break
  sleep 0.3
done
[ "$(sinfo -h -o '%t' -n n1,n2 | sort -u | tr '\n' ' ')" = "idle " ] || fail "nodes not idle: $(sinfo -N 2>&1)"

# The job: the check on 4 tasks over both nodes, then syncctl status on each node.
if [ -n "$build" ]; then export PYTHONPATH=$build/python; else unset PYTHONPATH; fi
# A sanitizer build: the jobs' Python processes load an instrumented extension, so they (and only
# they: not every tool runs under a sanitizer's runtime) preload it. LeakSanitizer's tracer can die
# in a process that has torch loaded (see tests/CMakeLists.txt), so they do not look for leaks.
export SYNCD_PY=/usr/bin/python3
[ -z "${SYNCD_TEST_PYTHON_PRELOAD:-}" ] ||
  SYNCD_PY="env LD_PRELOAD=$SYNCD_TEST_PYTHON_PRELOAD ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 /usr/bin/python3"
out=$(timeout 120 srun -N2 -n4 --overcommit -t 2 bash -c \
  "$task $SYNCD_PY $src/tests/deploy/slurm_check.py" 2>&1) || fail "srun check: $out"
[ "$(grep -c ': exact$' <<< "$out")" -eq 4 ] || fail "not every rank was exact: $out"
echo "$out"
# The same through torch.distributed (where syncd was built with libtorch-dev): Slurm's variables
# alone make dist.init_process_group("syncd") work.
if env ${PYTHONPATH:+PYTHONPATH=$PYTHONPATH} /usr/bin/python3 -c 'import importlib.util as u, sys; sys.exit(u.find_spec("syncd._c10d") is None)'; then
  out=$(timeout 120 srun -N2 -n4 --overcommit -t 2 bash -c \
    "$task $SYNCD_PY $src/tests/deploy/slurm_c10d_check.py" 2>&1) || fail "srun c10d check: $out"
  [ "$(grep -c ': c10d exact$' <<< "$out")" -eq 4 ] || fail "not every rank was exact through torch.distributed: $out"
  echo "$out"
fi
status=$(timeout 60 salloc -N2 -t 2 srun -N2 -n2 bash -c '"'"$bin"'"/syncctl status' 2>&1) || fail "syncctl in a job: $status"
grep -q "node 0 of 2" <<< "$status" && grep -q "node 1 of 2" <<< "$status" || fail "syncctl status in the job: $status"
# Both daemons run on the dedicated core syncd.conf names.
[ "$(grep -c "^cores *daemon $(($(nproc) - 1)) " <<< "$status")" -eq 2 ] || fail "daemon cores (SYNCD_CORES): $status"
# Not `echo | head`: head exits after 3 lines, and with pipefail an echo still writing then dies of
# SIGPIPE and ends the test without a word (seen once under ASan, where everything is slower).
head -n 3 <<< "$status"

# A job of an ordinary user: its daemon runs as that user, in a 0700 run directory the user owns.
user_job=$(cd / && timeout 120 runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" ${PYTHONPATH:+PYTHONPATH="$PYTHONPATH"} SYNCD_PY="$SYNCD_PY" \
  srun -N2 -n2 -t 2 bash -c 'echo "dir $(stat -c "%U %a" "$SYNCD_RUN_DIR")";
    echo "daemon $(ps -o user= -p "$(cat "$SYNCD_RUN_DIR/syncd.pid")")";
    $SYNCD_PY -c "import torch, syncd.torch as hvd; hvd.init();
print(\"sum\", int(hvd.allreduce(torch.ones(1), op=hvd.Sum).item())); hvd.shutdown()"' 2>&1) ||
  fail "a job as nobody: $user_job"
for want in "dir nobody 700" "daemon nobody" "sum 2"; do
  [ "$(grep -cx "$want" <<< "$user_job")" -eq 2 ] || fail "a job as nobody: expected '$want' on both nodes: $user_job"
done
echo "a job as nobody: daemon and run directory belong to nobody; exact"

# A daemon that cannot drain (the job stops it) is killed by the epilog at its deadline
# (SYNCD_DRAIN_TIMEOUT 5 s + 5 s), and its run directory is removed all the same.
t0=$SECONDS
timeout 60 srun -N1 -n1 -t 1 bash -c 'kill -STOP "$(cat "$SYNCD_RUN_DIR/syncd.pid")"' || fail "the job stopping its daemon"
for i in $(seq 150); do
  [ -z "$(ls -A "$t/run")" ] && ! pgrep -f -- "--run-dir=$t/run" >/dev/null && break
  sleep 0.2
done
pgrep -af -- "--run-dir=$t/run" && fail "the epilog did not kill a daemon that could not drain"
[ $((SECONDS - t0)) -ge 9 ] || fail "the stopped daemon was gone after $((SECONDS - t0)) s, before the epilog's deadline"
echo "a daemon that cannot drain: killed by the epilog after $((SECONDS - t0)) s"

# After the jobs: nothing of them is left.
for i in $(seq 50); do
  [ -z "$(ls -A "$t/run")" ] && ! pgrep -f -- "--run-dir=$t/run" >/dev/null && break
  sleep 0.2
done
pgrep -af -- "--run-dir=$t/run" && fail "a syncd outlived its job"
[ -z "$(ls -A "$t/run")" ] || fail "run directories left: $(ls -A "$t/run")"
[ "$(ls /dev/shm | sort)" = "$shm_before" ] || fail "shared memory left: $(comm -13 <(echo "$shm_before") <(ls /dev/shm | sort))"

# One node daemon per node serving every job (a node service, as systemd's syncd.service runs
# it): the prolog registers each job with it instead of starting a daemon. Two jobs of two users
# on the same two nodes train at once; one is cancelled (scancel) mid-run and the other trains on,
# every sum exact; the epilog drains each job from the daemons, which serve on.
for n in n1 n2; do
  "$bin/syncd" --run-dir="$t/service-$n" --node-service on --cores none --log-level info \
    </dev/null >"$t/service-$n.log" 2>&1 &
done
echo "SYNCD_NODE_SERVICE=$t/service-%n" >> "$t/syncd.conf"
for n in n1 n2; do
  for i in $(seq 100); do "$bin/syncctl" --run-dir "$t/service-$n" job list >/dev/null 2>&1 && break; sleep 0.1; done
done
train="$task $SYNCD_PY $src/tests/deploy/slurm_train_check.py"
timeout 120 srun -N2 -n4 --overcommit -t 2 bash -c "$train 250" >"$t/train-root.out" 2>&1 &
root_job=$!
(cd / && timeout 120 runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" ${PYTHONPATH:+PYTHONPATH="$PYTHONPATH"} \
  srun -N2 -n4 --overcommit -t 2 -J cancelled bash -c "$train 100000") >"$t/train-nobody.out" 2>&1 &
for i in $(seq 150); do
  [ "$("$bin/syncctl" --run-dir "$t/service-n1" job list --json | grep -o '"ranks_attached":2' | wc -l)" -eq 2 ] && break
  sleep 0.2
done
both=$("$bin/syncctl" --run-dir "$t/service-n1" status)
grep -q "^  [0-9]* *root (0) .* running *2 *0/2" <<< "$both" && grep -q "^  [0-9]* *nobody (65534) .* running *2 *0/2" <<< "$both" ||
  fail "the node daemon does not serve both jobs: $both"
echo "syncctl status of node n1's daemon, serving both jobs:"
echo "$both"
scancel -n cancelled
wait "$root_job" || fail "the other job did not train on: $(cat "$t/train-root.out")"
[ "$(grep -c ': trained exact$' "$t/train-root.out")" -eq 4 ] || fail "not every rank trained exact: $(cat "$t/train-root.out")"
echo "two jobs of two users on the node daemons: one cancelled mid-run, the other trained on, exact"
registered() { "$bin/syncctl" --run-dir "$t/service-$1" job list --json | grep -o '"job":"[0-9]*"' || true; }
for i in $(seq 100); do
  [ -z "$(registered n1)$(registered n2)" ] && break
  sleep 0.2
done
for n in n1 n2; do
  [ -z "$(registered $n)" ] || fail "jobs left registered on $n after their epilogs: $(registered $n)"
done
pkill -TERM -f -- "--run-dir=$t/service-" 2>/dev/null
sed -i "/^SYNCD_NODE_SERVICE=/d" "$t/syncd.conf"

# A daemon that cannot start fails the prolog, and the reason is in slurmd's log.
sed -i "/^SYNCD_PREFIX=/d" "$t/syncd.conf"
echo "SYNCD_PREFIX=$t/not-installed" >> "$t/syncd.conf"
if timeout 60 srun -N1 -n1 -t 1 true >/dev/null 2>&1; then fail "a job ran although its prolog could not start syncd"; fi
for i in $(seq 50); do grep -q "syncd-slurm\[" "$t"/slurmd-n*.log && break; sleep 0.2; done
grep -h "prolog failed" "$t"/slurmd-n*.log | grep -q "syncd-slurm\[.*exited before it was ready" ||
  fail "no reason in slurmd's log: $(grep -h 'prolog failed' "$t"/slurmd-n*.log)"
echo "slurm: prolog, job and epilog verified"
