#!/usr/bin/env bash
# `cmake --install` puts the syncd package where /usr/bin/python3 looks for locally installed
# packages (<prefix>/lib/python3.X/dist-packages), and it imports from there with nothing else
# on PYTHONPATH. Installs into a temporary prefix, never into the system.
set -euo pipefail
build=$1
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
site=$(/usr/bin/python3 -c 'import sys; print("lib/python%d.%d/dist-packages" % sys.version_info[:2])')
test -f "$prefix/$site/syncd/torch/__init__.py" || { echo "syncd.torch not installed under $prefix/$site"; exit 1; }
ls "$prefix/$site/syncd/"_client*.so >/dev/null
# The default prefix's directory is on /usr/bin/python3's path, so a plain install needs no PYTHONPATH.
/usr/bin/python3 -c 'import sys; assert "/usr/local/'"$site"'" in sys.path, sys.path'
cd "$prefix"
out=$(env -u PYTHONPATH PYTHONPATH="$prefix/$site" /usr/bin/python3 -c '
import syncd, syncd.torch as hvd
print(syncd.__file__)
print(hvd.is_initialized())')
echo "$out"
case "$out" in "$prefix/$site/syncd/__init__.py"*False) ;; *) echo "imported the wrong package"; exit 1 ;; esac
