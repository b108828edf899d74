#!/usr/bin/env bash
# Heap allocations per iteration in the daemon: syncd-bench (one timed collective, a barrier and
# one more per iteration) runs twice under an LD_PRELOAD malloc/calloc/realloc counter that
# counts only in processes named syncd, with 2000 and 22000 iterations; the difference over
# 20000 is the steady state (start-up and shutdown cancel out). Prints one JSON line.
#   bench/alloc_count.sh [--nodes 1] [--ranks 4] [--op allreduce] [--size 8] [--build build]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=1 ranks=4 op=allreduce size=8 build="$here/../build"
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --op) op=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "alloc_count.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/count.c" <<'C'
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
static atomic_ulong count;
void* malloc(size_t n) { atomic_fetch_add_explicit(&count, 1, memory_order_relaxed); return __libc_malloc(n); }
void* calloc(size_t a, size_t b) { atomic_fetch_add_explicit(&count, 1, memory_order_relaxed); return __libc_calloc(a, b); }
void* realloc(void* p, size_t n) { atomic_fetch_add_explicit(&count, 1, memory_order_relaxed); return __libc_realloc(p, n); }
__attribute__((destructor)) static void dump(void) {
  const char* dir = getenv("SYNCD_ALLOC_COUNT_DIR");
  if (dir == NULL || strcmp(program_invocation_short_name, "syncd") != 0) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/%d", dir, (int)getpid());
  FILE* f = fopen(path, "w");
  if (f != NULL) { fprintf(f, "%lu\n", (unsigned long)atomic_load(&count)); fclose(f); }
}
C
gcc -O2 -shared -fPIC -o "$work/count.so" "$work/count.c"
count() {  # total over the job's daemons
  local dir="$work/run$1"
  mkdir -p "$dir"
  SYNCD_ALLOC_COUNT_DIR=$dir LD_PRELOAD="$work/count.so" "$build/bin/syncrun" -N "$nodes" -n "$ranks" \
    --syncd-arg=--log-level=warn -- "$build/bin/syncd-bench" "$op" --sizes "$size" --iters "$1" --warmup 0 \
    --seconds 1000 >/dev/null
  cat "$dir"/* | awk '{s += $1} END {print s}'
}
short=$(count 2000)
long=$(count 22000)
/usr/bin/python3 - "$short" "$long" "$nodes" "$ranks" "$op" "$size" <<'PY'
import json, sys
short, long_, nodes, ranks, op, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
per = (long_ - short) / 20000
print(f"# daemon heap allocations per iteration of syncd-bench {op} --sizes {size}, {nodes} node(s) x {ranks} ranks "
      f"(all daemons): {per:.1f}")
print(json.dumps({"bench": "alloc_count", "op": op, "size": size, "nodes": nodes, "ranks": ranks,
                  "allocations_per_iteration": round(per, 2)}))
PY
