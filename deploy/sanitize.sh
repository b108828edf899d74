#!/usr/bin/env bash
# The sanitizer suite (deploy/test.sh --sanitize; CI runs it on every submission):
#  1. clang with AddressSanitizer + UndefinedBehaviorSanitizer: the ctest suite (build-asan);
#     every report of any process (daemons, clients, Python) fails the run, with the report shown.
#     Python's suites run once each, on 2 x 2 (not again on 1 x 4); the whole training jobs
#     (python.torch_jobs_*, test_jobs.py: torch started on every rank of each of 65 jobs) and the
#     Python benchmark scripts run in the plain suite only: the daemon paths they take (ranks and
#     nodes lost, replacements, restarts, growth) run instrumented in the C++ integration tests
#     (Elastic*, LostNode*, Policies/*, VacantRanks*). Under ASan they took 1,600 s of CI's 5,400;
#     the 1 x 4 repeats about 200 s more. The Python end-to-end checks that run once per
#     coordination mode (report, timeline, straggler, metrics, unresponsive ranks) run under topo
#     only: negotiate's daemon paths run instrumented in the C++ suites (CI took 5,358 s of 5,400).
#     The Slurm prolog/epilog on a real Slurm runs in the plain suite only (alone: 89 s of the ASan
#     suite's 843 in a clean-clone run); the admission it drives runs instrumented in NodeService*.
#     A clean clone's CI here (2026-12-07, 5,372 s of CI's 5,400): plain build 804 s, its suite
#     1,473, ASan build 1,065, its suite 843, fuzzers 190, TSan build 742, its suite 254. The
#     tests' own code now builds at -O0 but under TSan (tests/CMakeLists.txt), the fuzzers run
#     15 s each.
#  2. every libFuzzer harness for FUZZ_SECONDS (default 15; `deploy/fuzz.sh 600` for a longer
#     look) each (deploy/fuzz.sh); every harness's corpus replays in both ctest suites too.
#  3. clang with ThreadSanitizer: the tests of the threaded parts (build-tsan): the engine inbox and
#     attach server, the completion events folded off the engine thread, the control service, the
#     transport, drains, lost ranks and daemons, how work ends (Ending.*) and the node service (its
#     control threads, the jobs' own links, a restarted daemon taking its jobs back).
# Suppressions only for third-party code, each with its reason: tests/sanitizers/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
deploy/install-deps.sh --sanitize
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
jobs=$(nproc)

configure() {  # configure <dir> <sanitizers> <targets: all, or a list> [more cmake args]
  local dir=$1 san=$2 targets=$3
  shift 3
  cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DSYNCD_SANITIZE="$san" -DSYNCD_WITH_CUDA=OFF -DSYNCD_BUILD_TESTS=ON "$@" >/dev/null
  # A build that fails fails the suite (its output filtered of progress lines only): testing
  # what an earlier build left would pass on code that does not compile.
  # shellcheck disable=SC2086  # a list of targets
  if ! cmake --build "$dir" -j"$jobs" --target $targets | { grep -vE '^\[[0-9]+/[0-9]+\] ' || true; }; then
    echo "sanitize: the build in $dir failed" >&2
    exit 1
  fi
}

# Every process writes its reports under $reports; after the tests, any report is a failure.
reports=$(mktemp -d /tmp/syncd-sanitizers.XXXXXX)
chmod 1777 "$reports"  # the Slurm test runs a job as nobody
check_reports() {  # check_reports <what>
  local bad
  bad=$(grep -lE 'ERROR: (Address|Leak|Thread|UndefinedBehavior)Sanitizer|runtime error:|WARNING: ThreadSanitizer|Sanitizer has encountered a fatal error|Sanitizer: CHECK failed' \
        "$reports"/* 2>/dev/null || true)
  if [ -n "$bad" ]; then
    for f in $bad; do echo "---- $f"; cat "$f"; done
    echo "sanitize: $1: $(echo "$bad" | wc -l) process(es) reported errors" >&2
    return 1
  fi
  echo "sanitize: $1: no sanitizer reports"
}

echo "== AddressSanitizer + UndefinedBehaviorSanitizer (build-asan)"
configure build-asan address,undefined all -DSYNCD_FUZZ=ON -DSYNCD_BUILD_BENCH=ON
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:log_path=$reports/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan"
status=0
plain_only='^python\.torch_jobs_|^python\.torch_[a-z0-9_]+_on_1x4$|^bench\.(partial_training|elastic)_script'
plain_only+='|^python\.(report_rendered_in_headless_chromium|timeline_of_2x2|straggler_named_on_2x2|metrics_scraped_by_prometheus|unresponsive_rank_and_daemon_named_on_2x2)_negotiate$'
plain_only+='|^deploy\.slurm_prolog_epilog_on_a_real_slurm$'
(cd build-asan && ctest --output-on-failure -j"$jobs" --timeout 600 -E "$plain_only") || status=1
check_reports "ASan/UBSan suite" || status=1

echo "== libFuzzer harnesses (${FUZZ_SECONDS:-15} s each)"
rm -f "$reports"/*  # the suite's were checked: what is left now is a fuzzer's finding
SYNCD_BUILD_DIR=build-asan deploy/fuzz.sh "${FUZZ_SECONDS:-15}" || status=1
check_reports "libFuzzer harnesses" || status=1  # a UBSan/ASan finding's report (the fuzz log has only the input)
unset LSAN_OPTIONS ASAN_OPTIONS UBSAN_OPTIONS

echo "== ThreadSanitizer (build-tsan)"
# Only what the threaded tests run: the two GoogleTest programs and the programs they start.
configure build-tsan thread "syncd_unit_tests syncd_integration_tests" -DSYNCD_BUILD_BENCH=ON
rm -f "$reports"/*
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/sanitizers/tsan.supp:log_path=$reports/tsan"
threaded='TransportConformance|SpscQueue|CommandQueue|CompletionLogTest|TimelineWriterTest|Timeline\.|Attach\.|Drain|Errors\.|Faults|Stalls\.|Ending\.|Collectives\.StatusReports|Collectives\.MetricsEndpoint|ManyNodes|NodeService|EngineCost|CoreContention'
(cd build-tsan && ctest --output-on-failure -j"$jobs" --timeout 600 -R "$threaded") || status=1
check_reports "TSan suite" || status=1
rm -rf "$reports"
exit $status
