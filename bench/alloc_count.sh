#!/usr/bin/env bash
# Heap allocations per iteration in the daemon: syncd-bench (one timed collective, a barrier and
# one more per iteration) runs twice under an LD_PRELOAD malloc/calloc/realloc counter that
# counts only in processes named syncd, with 2000 and 2000 + N iterations (--extra N, default
# 20000); the difference over N is the steady state (start-up and shutdown cancel out). allocations_per_iteration counts
# the engine threads (collectives run there); all_threads_per_iteration adds the observer's
# status and health reports, which come a few times a second however many collectives run, so
# on a loaded machine, where the N iterations take longer, they count for more per iteration.
# Prints one JSON line.
#   bench/alloc_count.sh [--nodes 1] [--ranks 4] [--op allreduce] [--size 8] [--extra 20000] [--build build]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=1 ranks=4 op=allreduce size=8 extra=20000 build="$here/../build"
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --op) op=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --extra) extra=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "alloc_count.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/count.c" <<'C'
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
// Every thread's count, and the engine thread's (the one that runs collectives): a thread adds
// its own to it when it exits, named as it is then (the daemon joins its engine thread).
static atomic_ulong count, engine;
static __thread __attribute__((tls_model("initial-exec"))) unsigned long mine;
static __thread __attribute__((tls_model("initial-exec"))) int registered;
static pthread_key_t key;
static int key_ready;
static void thread_exit(void* unused) {
  (void)unused;
  char name[17] = {0};
  prctl(PR_GET_NAME, name);
  if (strcmp(name, "syncd-engine") == 0) atomic_fetch_add(&engine, mine);
}
__attribute__((constructor)) static void init(void) { key_ready = pthread_key_create(&key, thread_exit) == 0; }
static void one(void) {
  atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
  ++mine;
  if (!registered && key_ready) {
    registered = 1;
    pthread_setspecific(key, &registered);
  }
}
void* malloc(size_t n) { one(); return __libc_malloc(n); }
void* calloc(size_t a, size_t b) { one(); return __libc_calloc(a, b); }
void* realloc(void* p, size_t n) { one(); return __libc_realloc(p, n); }
__attribute__((destructor)) static void dump(void) {
  const char* dir = getenv("SYNCD_ALLOC_COUNT_DIR");
  if (dir == NULL || strcmp(program_invocation_short_name, "syncd") != 0) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/%d", dir, (int)getpid());
  FILE* f = fopen(path, "w");
  if (f != NULL) { fprintf(f, "%lu %lu\n", (unsigned long)atomic_load(&engine), (unsigned long)atomic_load(&count)); fclose(f); }
}
C
gcc -O2 -shared -fPIC -o "$work/count.so" "$work/count.c"
count() {  # the engine threads' and every thread's, over the job's daemons, and the seconds taken
  local dir="$work/run$1" t0 t1
  mkdir -p "$dir"
  t0=$(date +%s.%N)
  SYNCD_ALLOC_COUNT_DIR=$dir LD_PRELOAD="$work/count.so" "$build/bin/syncrun" -N "$nodes" -n "$ranks" \
    --syncd-arg=--log-level=warn -- "$build/bin/syncd-bench" "$op" --sizes "$size" --iters "$1" --warmup 0 \
    --seconds 1000 >/dev/null
  t1=$(date +%s.%N)
  cat "$dir"/* | awk -v t0="$t0" -v t1="$t1" '{e += $1; a += $2} END {print e, a, t1 - t0}'
}
short=$(count 2000)
long=$(count $((2000 + extra)))
/usr/bin/python3 - "$short" "$long" "$nodes" "$ranks" "$op" "$size" "$extra" <<'PY'
import json, sys
short, long_ = [float(x) for x in sys.argv[1].split()], [float(x) for x in sys.argv[2].split()]
nodes, ranks, op, size, extra = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6], int(sys.argv[7])
engine = (long_[0] - short[0]) / extra
every = (long_[1] - short[1]) / extra
seconds = long_[2] - short[2]
print(f"# daemon heap allocations per iteration of syncd-bench {op} --sizes {size}, {nodes} node(s) x {ranks} ranks "
      f"(all daemons): {engine:.2f} in the engine threads, {every:.2f} in every thread "
      f"(the {extra} more iterations took {seconds:.1f} s more, with their periodic status and health reports)")
print(json.dumps({"bench": "alloc_count", "op": op, "size": size, "nodes": nodes, "ranks": ranks,
                  "allocations_per_iteration": round(engine, 2), "all_threads_per_iteration": round(every, 2),
                  "extra_seconds": round(seconds, 1)}))
PY
