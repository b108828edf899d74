# Shared by the Slurm prolog, epilog and task prolog: the site's configuration and where a job's
# daemon lives. Sourced, not run.
#
# /etc/syncd/syncd.conf (or $SYNCD_CONF) holds NAME=value lines: any syncd setting (SYNCD_CORES,
# SYNCD_COORD, ...; see docs/pages/configuration.md) plus these Slurm ones:
#   SYNCD_PREFIX=/usr                   where syncd and syncctl are installed (bin/); default: the
#                                       prefix these scripts were installed under (share/syncd/slurm)
#   SYNCD_SLURM_RUN_DIR=/run/syncd/%j   the job's run directory (%j job id, %n node name)
#   SYNCD_SLURM_PORT_BASE=29500         rendezvous port = base + job id % range, at the first node
#   SYNCD_SLURM_PORT_RANGE=1000
#   SYNCD_SLURM_SECRET=/etc/syncd/job.secret   site secret the job tokens derive from (root only;
#                                              the munge key when this file does not exist)
#   SYNCD_SLURM_READY_TIMEOUT=90        seconds the prolog waits for the daemon to be ready
#   SYNCD_NODE_SERVICE=/run/syncd/service   the node daemon's run directory (systemd's
#                                       syncd.service; %n node name): where one answers as a node
#                                       service, the prolog registers the job with it instead of
#                                       starting a daemon of its own; "none": never
conf=${SYNCD_CONF:-/etc/syncd/syncd.conf}
if [ -r "$conf" ]; then
  set -a
  # shellcheck disable=SC1090
  . "$conf"
  set +a
fi
if [ -z "${SYNCD_PREFIX:-}" ]; then
  SYNCD_PREFIX=/usr/local
  _scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  case "$_scripts" in  # installed as <prefix>/share/syncd/slurm
    */share/syncd/slurm) [ -x "$_scripts/../../../bin/syncd" ] && SYNCD_PREFIX=$(cd "$_scripts/../../.." && pwd) ;;
  esac
fi
SYNCD_SLURM_RUN_DIR=${SYNCD_SLURM_RUN_DIR:-/run/syncd/%j}
SYNCD_SLURM_PORT_BASE=${SYNCD_SLURM_PORT_BASE:-29500}
SYNCD_SLURM_PORT_RANGE=${SYNCD_SLURM_PORT_RANGE:-1000}
SYNCD_SLURM_SECRET=${SYNCD_SLURM_SECRET:-/etc/syncd/job.secret}
SYNCD_SLURM_READY_TIMEOUT=${SYNCD_SLURM_READY_TIMEOUT:-90}
SYNCD_NODE_SERVICE=${SYNCD_NODE_SERVICE:-/run/syncd/service}

# The run directory of job $1 on node $2.
syncd_run_dir() {
  local d=${SYNCD_SLURM_RUN_DIR//%j/$1}
  echo "${d//%n/$2}"
}

# The node daemon's run directory on node $1 when one serves there as a node service (it answers
# `syncctl job list`), else nothing.
syncd_node_service() {
  [ "$SYNCD_NODE_SERVICE" != none ] || return 0
  local d=${SYNCD_NODE_SERVICE//%n/$1}
  [ -S "$d/control.sock" ] && "$SYNCD_PREFIX/bin/syncctl" --run-dir "$d" job list >/dev/null 2>&1 && echo "$d"
  return 0
}

# A message in the Slurm log (slurmd logs what a failing prolog prints) and in syslog.
syncd_say() {
  # slurmd logs a failing prolog's standard output ("prolog failed: rc:1 output: ...").
  echo "syncd-slurm[${SLURM_JOB_ID:-?}@${SLURMD_NODENAME:-$(hostname)}]: $*"
  command -v logger >/dev/null && logger -t syncd-slurm "job ${SLURM_JOB_ID:-?}: $*" 2>/dev/null || true
}
