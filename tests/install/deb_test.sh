#!/usr/bin/env bash
# Installs syncd like a user and removes it again: builds the Debian package (cpack -G DEB), installs
# it with dpkg, then, with nothing of the source or build tree on any path (a clean environment, a
# temporary working directory):
#   - syncd, syncctl, syncrun, the C library and the Python package report one version and ABI;
#   - syncrun -N 2 -n 4 trains the quickstart's digits network from the installed example and package;
#   - a C program builds with `pkg-config --cflags --libs syncd`, another with find_package(syncd),
#     and both run exact under syncrun;
#   - `man syncd` shows the page; the systemd unit names the installed daemon and verifies;
#   - the Slurm test runs with the installed prolog, epilog, task prolog and syncd-task;
# then purges the package and checks that nothing of it remains.
#   tests/install/deb_test.sh <build dir>      (root: it installs a package on this machine)
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (dpkg -i)"; exit 77; }
t=$(mktemp -d /tmp/syncd-install-XXXXXX)
chmod 755 "$t"
purge() { dpkg -s syncd >/dev/null 2>&1 && dpkg -P syncd >/dev/null; true; }
trap 'purge; rm -rf "$t"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
purge

# The package, built from this build directory.
(cd "$build" && cpack -G DEB -B "$t/pkg" >"$t/cpack.log" 2>&1) || { cat "$t/cpack.log"; fail "cpack"; }
deb=$(ls "$t"/pkg/syncd_*.deb)
dpkg-deb --field "$deb" Package Version Depends Recommends
dpkg -i "$deb" >/dev/null
files=$(dpkg -L syncd)

# A user's environment: the system's paths only.
user() { (cd "$t/work" && env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$t/work" LANG=C.UTF-8 "$@"); }
mkdir -p "$t/work"
for p in syncd syncctl syncrun syncd-bench syncd-task syncd-jsrun; do
  [ "$(user sh -c "command -v $p")" = "/usr/bin/$p" ] || fail "$p is not the installed /usr/bin/$p: $(user sh -c "command -v $p")"
done

# One version everywhere.
version=$(user syncd --version)
echo "$version"
for p in syncctl syncrun; do
  [ "$(user $p --version)" = "$p ${version#syncd }" ] || fail "$p --version: $(user $p --version) against $version"
done
py=$(user /usr/bin/python3 -c 'import syncd, syncd._client as c; print(syncd.__file__, syncd.__version__, c.version, c.shm_abi_version)')
read -r py_file py_version lib_version lib_abi <<< "$py"
case "$py_file" in /usr/lib/python3*/dist-packages/syncd/__init__.py) ;; *) fail "syncd imported from $py_file" ;; esac
[ "$version" = "syncd $py_version (shared-memory ABI $lib_abi, daemon protocol ${version##*protocol }" ] &&
  [ "$lib_version" = "$py_version" ] || fail "versions differ: '$version', Python '$py'"

# The quickstart, from the installed example and package (four ranks, two daemons).
out=$(user timeout 300 syncrun -N 2 -n 4 --syncd-arg=--log-level=warn -- \
      /usr/bin/python3 /usr/share/syncd/examples/train_digits.py --no-status 2>&1) ||
  fail "the installed quickstart: $out"
grep "held-out accuracy" <<< "$out"

# A C program, built like a user builds against a library in /usr.
cp "$src/tests/install/allreduce_check.c" "$t/work/"
user sh -c 'cc -Wall -Werror -o check_pc allreduce_check.c $(pkg-config --cflags --libs syncd)' || fail "pkg-config build"
mkdir -p "$t/work/cmake"
cat > "$t/work/cmake/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(check C)
find_package(syncd 0.1 CONFIG REQUIRED)
add_executable(check_cmake ../allreduce_check.c)
target_link_libraries(check_cmake PRIVATE syncd::client)
EOF
user sh -c 'cmake -S cmake -B cmake/build >cmake.log && cmake --build cmake/build >>cmake.log' ||
  { cat "$t/work/cmake.log"; fail "find_package(syncd) build"; }
for prog in ./check_pc ./cmake/build/check_cmake; do
  out=$(user timeout 120 syncrun -N 2 -n 4 --syncd-arg=--log-level=warn -- $prog 2>&1) || fail "$prog: $out"
  [ "$(grep -c ': exact$' <<< "$out")" -eq 4 ] || fail "$prog: $out"
done
echo "$out" | head -n 1

# The manual page, and the systemd unit as packaged.
user sh -c 'MANPAGER=cat man syncd 2>/dev/null' | grep -q "per-node communication daemon" || fail "man syncd"
grep -q '^ExecStart=/usr/bin/syncd ' /usr/lib/systemd/system/syncd@.service || fail "the unit's ExecStart"
grep -q '^ExecStart=/usr/bin/syncd --node-service=on ' /usr/lib/systemd/system/syncd.service || fail "syncd.service's ExecStart"
getent passwd syncd >/dev/null && getent group syncd-admin >/dev/null || fail "the package made no syncd user or syncd-admin group"
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify /usr/lib/systemd/system/syncd@.service 2>&1 | grep -v "^$" | grep -iE "error|fail" &&
    fail "systemd-analyze verify"
fi

# The Slurm scripts as installed, on a real Slurm (tests/deploy/slurm_test.sh).
"$src/tests/deploy/slurm_test.sh" --installed /usr >"$t/slurm.log" 2>&1 || { cat "$t/slurm.log"; fail "Slurm with the installed scripts"; }
echo "slurm: $(grep -c ': exact$' "$t/slurm.log") ranks exact with the installed scripts"

# Removed, nothing of it remains (the byte-compiled Python files included).
dpkg -P syncd >/dev/null
left=$(while read -r f; do
  case "$f" in /. | /usr | /usr/bin | /usr/lib | /usr/include | /usr/share | /usr/share/man | /usr/share/man/man1 | \
               /usr/share/doc | /usr/lib/cmake | /usr/lib/pkgconfig | /usr/lib/systemd | /usr/lib/systemd/system | \
               /usr/lib/python3* ) [[ $f == */dist-packages/* ]] || continue ;; esac
  [ ! -e "$f" ] || echo "$f"
done <<< "$files")
[ -z "$left" ] || fail "left after dpkg -P: $left"
echo "installed, used and removed: $(wc -l <<< "$files") paths, none left"
