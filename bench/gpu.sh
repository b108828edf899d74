#!/usr/bin/env bash
# GPU benchmarks on one node: fused allreduce through syncd against the same copies + NCCL done
# directly in one process, and the daemon's CUDA IPC pointer cache against opening every handle
# per request (the CUDA-aware MPI paper saw 4.1x on small messages from its pointer cache).
#   bench/gpu.sh [--ranks 2] [--build build]
# Prints both tables, then one JSON line with every row and the cache ratio per size.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ranks=2 build="$here/../build"
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
bin=${SYNCD_BIN_DIR:-$build/bin}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() {  # run NAME syncd-args... -- bench-args...
  local name=$1; shift
  local dargs=()
  while [ "$1" != "--" ]; do dargs+=("$1"); shift; done
  shift
  "$bin/syncrun" -n "$ranks" --cores none --syncd-arg=--log-level=warn "${dargs[@]}" -- "$bin/syncd-gpu-bench" "$@" --json \
    >"$out/$name.txt" 2>"$out/$name.log" || { cat "$out/$name.log" "$out/$name.txt" >&2; exit 1; }
}
run fused -- allreduce
run cached --syncd-arg=--gpu-ipc-cache=on -- latency
run uncached --syncd-arg=--gpu-ipc-cache=off -- latency
run queued -- latency --queued  # the daemon's stream waits for each client's stream through its flag
export SYNCD_GPU_WAIT=event  # ... through an interprocess event
run queued_event -- latency --queued
unset SYNCD_GPU_WAIT
echo "== fused allreduce: syncd vs the same device work done directly ($ranks ranks, one daemon)"
grep -v '^{' "$out/fused.txt"
/usr/bin/env python3 - "$out" <<'PY'
import json, sys, os
d = sys.argv[1]
def rows(name):
    return [json.loads(l) for l in open(os.path.join(d, name + ".txt")) if l.startswith("{")]
fused, on, off = rows("fused"), rows("cached"), rows("uncached")
queued, queued_event = rows("queued"), rows("queued_event")
print("== CUDA IPC pointer cache: serial allreduce latency, cache on vs off; queued work on the caller's stream")
print("%10s %12s %13s %8s %13s %14s %10s" % ("bytes", "cache_on_us", "cache_off_us", "speedup", "with_flag_us",
                                             "with_event_us", "flag/idle"))
cache = []
for a, b, q, e in zip(on, off, queued, queued_event):
    cache.append({"bytes": a["bytes"], "cache_on_us": a["serial_us"], "cache_off_us": b["serial_us"],
                  "speedup": b["serial_us"] / a["serial_us"], "with_flag_us": q["serial_us"],
                  "with_ipc_event_us": e["serial_us"], "flag_over_idle": q["serial_us"] / a["serial_us"]})
    print("%10d %12.2f %13.2f %8.2f %13.2f %14.2f %10.2f" % (a["bytes"], a["serial_us"], b["serial_us"],
          cache[-1]["speedup"], q["serial_us"], e["serial_us"], cache[-1]["flag_over_idle"]))
print("# with_flag_us / with_event_us: cache on, work still queued on the client's stream at each submission;")
print("# the daemon's stream waits for it through a flag the stream writes (cuStreamWriteValue64 /")
print("# cuStreamWaitValue64) or through an interprocess event (SYNCD_GPU_WAIT=event)")
print(json.dumps({"bench": "gpu", "fused": fused, "ipc_cache": cache}))
PY
for run in fused cached uncached queued queued_event; do
  echo "== daemon status after the $run run"
  grep '^#' "$out/$run.log" || true
done
