#!/usr/bin/env bash
# deploy/jsrun/syncd-jsrun: the jsrun command lines it generates for a few host layouts (there is
# no LSF here), its refusals, and the environment contract of its per-host entry points.
set -euo pipefail
w=$(cd "$(dirname "$0")/../../deploy/jsrun" && pwd)/syncd-jsrun
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_line() {  # $1 = output, $2 = label, $3 = expected command after the label
  local got
  got=$(sed -n "s/^$2 *//p" <<< "$1")
  [ "$got" = "$3" ] || fail "$2
  expected: $3
  got:      $got"
}

# Summit: 42 cores and 6 GPUs per host, 2 cores for syncd, one rank per GPU, 4 hosts from LSF.
out=$(LSB_JOBID=4242 LSB_MCPU_HOSTS="batch1 1 h1 42 h2 42 h3 42 h4 42" SYNCD_RUN_DIR= "$w" --dry-run -- python train.py --lr 0.1)
expect_line "$out" daemons: "jsrun -n 4 -r 1 -a 1 -c 2 -g 0 -b packed:2 $w daemon --run-dir=/tmp/syncd-4242 --nodes=4 --local-size=6 --rendezvous=h1:29742 --cores=none"
expect_line "$out" ready: "jsrun -n 4 -r 1 -a 1 -c 1 -g 0 $w ready /tmp/syncd-4242 90"
expect_line "$out" app: "jsrun -n 24 -r 6 -a 1 -c 6 -g 1 -b packed:6 -E SYNCD_RUN_DIR=/tmp/syncd-4242 $w task -- python train.py --lr 0.1"
grep -q "^stop: *jsrun -n 4 -r 1 -a 1 -c 1 -g 0 .*/syncctl --run-dir /tmp/syncd-4242 drain$" <<< "$out" || fail "stop: $out"

# Two ranks per GPU pair, 4 daemon cores, explicit node count and run directory.
out=$(LSB_JOBID=7 SYNCD_RUN_DIR=/scratch/s7 "$w" --nodes 2 --tasks-per-node 3 --daemon-cores 4 --dry-run -- ./a.out)
expect_line "$out" app: "jsrun -n 6 -r 3 -a 1 -c 12 -g 2 -b packed:12 -E SYNCD_RUN_DIR=/scratch/s7 $w task -- ./a.out"
expect_line "$out" daemons: "jsrun -n 2 -r 1 -a 1 -c 4 -g 0 -b packed:4 $w daemon --run-dir=/scratch/s7 --nodes=2 --local-size=3 --rendezvous=$(hostname):29507 --cores=none"

# CPU-only hosts: 32 cores, 4 ranks; arguments with spaces survive.
out=$(LSB_JOBID=1 "$w" --nodes 8 --gpus-per-node 0 --cores-per-node 32 --tasks-per-node 4 --dry-run -- python -c 'print(1)')
expect_line "$out" app: "jsrun -n 32 -r 4 -a 1 -c 7 -g 0 -b packed:7 -E SYNCD_RUN_DIR=/tmp/syncd-1 $w task -- python -c print\\(1\\)"

# Refusals name the problem.
for bad in "--daemon-cores 42" "--tasks-per-node 4" "--tasks-per-node 41 --gpus-per-node 0" "--bogus 1"; do
  if msg=$("$w" --nodes 1 $bad --dry-run -- true 2>&1); then fail "accepted '$bad': $msg"; fi
  [ -n "$msg" ] || fail "'$bad' refused without a message"
done
msg=$("$w" --nodes 1 --tasks-per-node 4 --dry-run -- true 2>&1) || true
[[ $msg == *"cannot share 6 GPUs"* ]] || fail "uneven GPU split: $msg"
msg=$("$w" --nodes 1 --dry-run 2>&1) || true
[[ $msg == *"no program"* ]] || fail "no program: $msg"
msg=$(env -u LSB_MCPU_HOSTS "$w" --dry-run -- true 2>&1) || true
[[ $msg == *"pass --nodes"* ]] || fail "no hosts: $msg"

# Entry points: a task gets the SYNCD_* contract from jsrun's variables; the daemon its node rank
# and every GPU of the host.
out=$(JSM_NAMESPACE_RANK=9 JSM_NAMESPACE_SIZE=24 JSM_NAMESPACE_LOCAL_RANK=3 JSM_NAMESPACE_LOCAL_SIZE=6 \
      "$w" task -- sh -c 'echo $SYNCD_RANK $SYNCD_SIZE $SYNCD_LOCAL_RANK $SYNCD_LOCAL_SIZE')
[ "$out" = "9 24 3 6" ] || fail "task environment: $out"
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
printf '#!/bin/sh\necho "gpus=${CUDA_VISIBLE_DEVICES-all} $*"\n' > "$stub/syncd"
chmod +x "$stub/syncd"
out=$(SYNCD_BIN_DIR=$stub JSM_NAMESPACE_RANK=2 CUDA_VISIBLE_DEVICES= "$w" daemon --nodes=4)
[ "$out" = "gpus=all --node-rank=2 --nodes=4" ] || fail "daemon: $out"
if "$w" task -- true 2>/dev/null; then fail "a task outside jsrun must be refused"; fi
echo "jsrun wrapper: verified"
