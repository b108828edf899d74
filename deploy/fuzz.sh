#!/usr/bin/env bash
# Runs every libFuzzer harness (tests/fuzz) for SECONDS (default 30) each, from its seed corpus.
# Needs a build with -DSYNCD_FUZZ=ON (deploy/sanitize.sh makes one in build-asan); a longer run is
# `deploy/fuzz.sh 3600`. A crash stops with the input saved in the work directory: add it to
# tests/fuzz/corpus/<harness>/ (it then replays in every build) and fix the bug.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-30}
build=$root/${SYNCD_BUILD_DIR:-build-asan}
grep -q '^SYNCD_FUZZ:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null ||
  { echo "fuzz: $build is not a -DSYNCD_FUZZ=ON build (run deploy/sanitize.sh, or configure one)" >&2; exit 2; }
work=$(mktemp -d /tmp/syncd-fuzz.XXXXXX)
status=0
for bin in "$build"/bin/fuzz_*; do
  name=${bin##*/fuzz_}
  mkdir -p "$work/$name/corpus" "$work/$name/crashes"
  # New inputs go to the work corpus; the committed seeds are read only.
  if "$bin" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$work/$name/crashes/" \
       "$work/$name/corpus" "$root/tests/fuzz/corpus/$name" >"$work/$name/log" 2>&1; then
    echo "fuzz $name: $(grep -E '^stat::number_of_executed_units' "$work/$name/log" | awk '{print $2}') runs, no crash"
  else
    status=1
    echo "fuzz $name: FAILED, inputs in $work/$name/crashes:" >&2
    tail -n 40 "$work/$name/log" >&2
  fi
done
[ $status -ne 0 ] || rm -rf "$work"
exit $status
