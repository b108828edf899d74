#!/usr/bin/env bash
# systemd/syncd@.service and syncd.service as systemd/install.sh installs them: systemd-analyze verify finds nothing
# to say about the unit or its drop-in, and the drop-in follows the node's configuration.
#   tests/deploy/systemd_test.sh <build dir>
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze is not installed"; exit 77; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
units="$root/etc/systemd/system"

# A node with dedicated cores 6-7 (as a site writes it, quoted) and no GPU.
mkdir -p "$root/etc/syncd"
printf '# site settings\nSYNCD_CORES="6-7"\nSYNCD_GPUS=none\n' > "$root/etc/syncd/syncd.conf"
"$src/systemd/install.sh" --root "$root" --prefix "$build" --no-reload >/dev/null
dropin="$units/syncd@.service.d/10-node.conf"
grep -qx 'CPUAffinity=6-7' "$dropin" || fail "CPUAffinity from SYNCD_CORES: $(cat "$dropin")"
grep -qx 'PrivateDevices=yes' "$dropin" || [ -e /dev/infiniband ] || fail "no GPU, no RDMA: PrivateDevices=yes expected"
grep -qx "ExecStart=$build/bin/syncd --run-dir=/run/syncd/%i" "$units/syncd@.service" || fail "ExecStart not under --prefix"
for line in Type=notify NotifyAccess=main WatchdogSec=30 'RuntimeDirectory=syncd/%i' RuntimeDirectoryMode=0700 \
            NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes 'User=%i'; do
  grep -qx "$line" "$units/syncd@.service" || fail "the unit lacks $line"
done
# systemd checks an instance (the template itself cannot run); warnings count as failures.
cp "$units/syncd@.service" "$units/syncd@root.service"
out=$(systemd-analyze verify "$units/syncd@root.service" 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify has warnings:
$out"

# The node service's unit: every job's daemon, as the syncd user with no capabilities.
node="$units/syncd.service"
grep -qx "ExecStart=$build/bin/syncd --node-service=on --admin-group=syncd-admin --run-dir=/run/syncd/service" "$node" ||
  fail "syncd.service: ExecStart"
for line in Type=notify User=syncd 'SupplementaryGroups=syncd-admin' 'CapabilityBoundingSet=' 'AmbientCapabilities=' \
            'RuntimeDirectory=syncd/service' RuntimeDirectoryMode=0755 NoNewPrivileges=yes ProtectSystem=strict; do
  grep -qx "$line" "$node" || fail "syncd.service lacks $line"
done
grep -qx 'CPUAffinity=6-7' "$units/syncd.service.d/10-node.conf" || fail "syncd.service's drop-in"
out=$(systemd-analyze verify "$node" 2>&1) || fail "systemd-analyze verify syncd.service: $out"
[ -z "$out" ] || fail "systemd-analyze verify syncd.service has warnings:
$out"

# No dedicated cores: no CPUAffinity; the daemon's auto choice (the last core) when unset.
printf 'SYNCD_CORES=none\n' > "$root/etc/syncd/syncd.conf"
"$src/systemd/install.sh" --root "$root" --prefix "$build" --no-reload >/dev/null
! grep -q CPUAffinity "$dropin" || fail "SYNCD_CORES=none must not pin: $(cat "$dropin")"
rm "$root/etc/syncd/syncd.conf"
"$src/systemd/install.sh" --root "$root" --prefix "$build" --no-reload >/dev/null
last=$(cat /sys/devices/system/cpu/online); last=${last##*[,-]}
grep -qx "CPUAffinity=$last" "$dropin" || fail "auto: the last core ($last) expected: $(cat "$dropin")"
echo "systemd unit: verified"
