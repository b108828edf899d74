#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (ctest drives GoogleTest and the script
# tests). Works from a fresh clone on a fresh Debian 12 machine; CI runs exactly this.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/deploy/build.sh"
cd "$root/${SYNCD_BUILD_DIR:-build}"
ctest --output-on-failure -j"$(nproc)" --timeout 300
