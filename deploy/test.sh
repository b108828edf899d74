#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (ctest drives GoogleTest and the script
# tests). Works from a fresh clone on a fresh Debian 12 machine; CI runs exactly this.
#   deploy/test.sh              the suite (gcc, RelWithDebInfo) in build/
#   deploy/test.sh --sanitize   the sanitizer suite (deploy/sanitize.sh): ASan+UBSan over every
#                               test, each fuzzer for 15 s, TSan over the threaded parts
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ "${1:-}" = "--sanitize" ] && exec "$root/deploy/sanitize.sh"
"$root/deploy/build.sh"
cd "$root/${SYNCD_BUILD_DIR:-build}"
ctest --output-on-failure -j"$(nproc)" --timeout 300
