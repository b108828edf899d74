#!/usr/bin/env bash
# Installs syncd@.service (one persistent syncd per node and account) and syncd.service (one for
# every job on the node: --node-service on), each with a drop-in that reflects this node: CPUAffinity= on the daemon's dedicated cores (SYNCD_CORES from
# the configuration file; auto = the last core) and PrivateDevices=yes where neither GPUs nor RDMA
# devices are needed. Installed by a package (<prefix>/share/syncd/systemd/install.sh), where the
# unit came with the package (<prefix>/lib/systemd/system), it writes the drop-in only.
#   systemd/install.sh [--prefix /usr/local] [--root /] [--conf /etc/syncd/syncd.conf] [--no-reload]
# Then: systemctl enable --now syncd@<account>, or syncd (the node service)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=/usr/local root=/ conf=/etc/syncd/syncd.conf reload=1 packaged=
case "$here" in  # installed as <prefix>/share/syncd/systemd/install.sh, beside a packaged unit
  */share/syncd/systemd)
    if [ -f "$here/../../../lib/systemd/system/syncd@.service" ]; then
      prefix=$(cd "$here/../../.." && pwd)
      packaged=$prefix/lib/systemd/system/syncd@.service
    fi ;;
esac
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --root) root=$2; shift 2 ;;
    --conf) conf=$2; shift 2 ;;
    --no-reload) reload=0; shift ;;
    *) echo "install.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
# The configuration file is NAME=value lines (what EnvironmentFile= reads); only two matter here.
setting() {  # $1 = name, $2 = default
  local v=""
  [ -r "$root/$conf" ] && v=$(sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\"\{0,1\}\([^\"]*\)\"\{0,1\}[[:space:]]*$/\1/p" "$root/$conf" | tail -n 1)
  echo "${v:-$2}"
}
cores=$(setting SYNCD_CORES auto)
gpus=$(setting SYNCD_GPUS auto)
if [ "$cores" = auto ]; then
  online=$(cat /sys/devices/system/cpu/online)
  cores=${online##*[,-]}
fi
unit_dir="$root/etc/systemd/system"
for unit in syncd@.service syncd.service; do
  mkdir -p "$unit_dir/$unit.d"
  if [ -z "$packaged" ]; then
    sed "s|^ExecStart=/usr/local/bin/syncd|ExecStart=$prefix/bin/syncd|" "$here/$unit" > "$unit_dir/$unit"
  fi
  {
    echo "# Written by syncd's systemd/install.sh for this node; run it again after changing $conf."
    echo "[Service]"
    if [ "$cores" != none ]; then
      echo "CPUAffinity=${cores//,/ }"
      echo "Environment=SYNCD_CORES=$cores"
    fi
    if [ "$gpus" = none ] || ! ls /dev/nvidiactl /dev/nvidia[0-9]* >/dev/null 2>&1; then
      [ -e /dev/infiniband ] || echo "PrivateDevices=yes"
    fi
  } > "$unit_dir/$unit.d/10-node.conf"
done
# syncd.service (one daemon for every job on the node) runs as the `syncd` system user; members
# of `syncd-admin` (and root) may register jobs with it.
if [ "$root" = / ] && [ "$(id -u)" = 0 ]; then
  getent group syncd-admin >/dev/null || groupadd --system syncd-admin
  getent passwd syncd >/dev/null ||
    useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin syncd
fi
if [ -n "$packaged" ]; then
  echo "installed the drop-ins $unit_dir/syncd@.service.d/10-node.conf and syncd.service.d/10-node.conf for $packaged (daemon cores: $cores)"
else
  echo "installed $unit_dir/syncd@.service, syncd.service and their drop-ins 10-node.conf (daemon cores: $cores)"
fi
if [ "$reload" = 1 ] && [ "$root" = / ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
