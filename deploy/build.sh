#!/usr/bin/env bash
# Installs dependencies and builds syncd (bin/, lib/, tests, benchmarks) into ${SYNCD_BUILD_DIR:-build}.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
deploy/install-deps.sh
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
build=${SYNCD_BUILD_DIR:-build}
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSYNCD_BUILD_TESTS=ON -DSYNCD_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j"$(nproc)" | grep -vE '^\[[0-9]+/[0-9]+\] ' || true
test -x "$build/bin/syncd"
