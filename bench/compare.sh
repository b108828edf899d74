#!/usr/bin/env bash
# Runs syncd-bench and torch.distributed/gloo with the same ranks and sizes, back to back in one
# go, and prints the ratio per size (p50 latency: gloo/syncd; busbw: syncd/gloo; > 1 means
# syncd is better), one table per collective. For allreduce, OpenMPI's MPI_Allreduce runs too
# (syncd-mpi-allreduce, timed as syncd-bench times syncd; its ranks unbound, on every core) with
# its own ratios. The last line is one JSON object with every result.
#   bench/compare.sh [--nodes 1] [--ranks 4] [--sizes 8,1K,64K,1M,16M,64M] [--seconds 1] [--build build]
#                    [--ops allreduce,allgather,alltoall,reducescatter] [--syncd-arg=--flag=value ...]
# With --nodes N, syncrun starts N daemons (one per simulated node) and the ranks spread over
# them; gloo runs the same number of ranks.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=1 ranks=4 sizes="" seconds=1 build="$here/../build" extra=() daemon_args=() ops=allreduce
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --syncd-arg=*) daemon_args+=("$1"); shift ;;
    --sizes) sizes=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --staged) extra+=(--staged); shift ;;
    *) echo "compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
size_args=()
[ -n "$sizes" ] && size_args=(--sizes "$sizes")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for op in ${ops//,/ }; do
  "$build/bin/syncrun" -N "$nodes" -n "$ranks" --syncd-arg=--log-level=warn "${daemon_args[@]}" -- "$build/bin/syncd-bench" "$op" --json --seconds "$seconds" \
    "${size_args[@]}" "${extra[@]}" >>"$out/syncd.jsonl" 2>"$out/syncd.log" ||
    { cat "$out/syncd.log" >&2; exit 1; }
  /usr/bin/python3 "$here/peers/torch_gloo.py" --op "$op" --ranks "$ranks" --json --seconds "$seconds" \
    "${size_args[@]}" >>"$out/gloo.jsonl" 2>"$out/gloo.log" || { cat "$out/gloo.log" >&2; exit 1; }
  if [ "$op" = allreduce ] && [ -x "$build/bin/syncd-mpi-allreduce" ] && command -v mpirun >/dev/null; then
    mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader -np "$ranks" \
      "$build/bin/syncd-mpi-allreduce" --seconds "$seconds" ${sizes:+--sizes "$sizes"} >>"$out/mpi.jsonl" 2>"$out/mpi.log" ||
      { cat "$out/mpi.log" >&2; exit 1; }
  fi
done
touch "$out/mpi.jsonl"

/usr/bin/python3 - "$out/syncd.jsonl" "$out/gloo.jsonl" "$nodes" "$ops" "$out/mpi.jsonl" <<'PY'
import json, sys
rows = {name: [json.loads(l) for l in open(path) if l.startswith("{")] for name, path in
        (("syncd", sys.argv[1]), ("gloo", sys.argv[2]), ("mpi", sys.argv[5]))}
nodes, ops = int(sys.argv[3]), sys.argv[4].split(",")
submit = [r for r in rows["syncd"] if r.get("op") == "submit"]
notes = {"allreduce": "busbw = algbw * 2(n-1)/n", "allgather": "size: the output; busbw = algbw * (n-1)/n",
         "alltoall": "size: each rank's buffer; busbw = algbw * (n-1)/n",
         "reducescatter": "size: the input; busbw = algbw * (n-1)/n; gloo has none: all_reduce + copy"}
result = {"bench": "compare", "nodes": nodes, "ops": {}}


def table(syncd, peer, label):
    """Prints syncd beside `peer` size by size (ratios > 1: syncd better); returns the ratios."""
    by = {r["bytes"]: r for r in peer}
    print(f"# {'bytes':>10} | {'syncd p50 us':>12} {label + ' p50 us':>12} {'p50 x':>7} | "
          f"{'syncd busbw':>11} {label + ' busbw':>10} {'busbw x':>8}")
    ratios = []
    for r in syncd:
        g = by.get(r["bytes"])
        if not g:
            continue
        lat_x = g["lat_p50_us"] / r["lat_p50_us"] if r["lat_p50_us"] else 0
        bw_x = r["busbw_GBps"] / g["busbw_GBps"] if g["busbw_GBps"] else 0
        ratios.append({"bytes": r["bytes"], "p50_ratio": round(lat_x, 2), "busbw_ratio": round(bw_x, 2)})
        print(f"  {r['bytes']:>10} | {r['lat_p50_us']:>12.1f} {g['lat_p50_us']:>12.1f} {lat_x:>7.2f} | "
              f"{r['busbw_GBps']:>11.3f} {g['busbw_GBps']:>10.3f} {bw_x:>8.2f}")
    return ratios


for op in ops:
    syncd = [r for r in rows["syncd"] if r.get("op") == op]
    gloo = [r for r in rows["gloo"] if r.get("op") == op]
    ranks = syncd[0]["ranks"] if syncd else 0
    print(f"# {op}, {ranks} ranks on {nodes} syncd node(s), float32: syncd (zero-copy arena) vs torch.distributed "
          f"gloo ({ranks} ranks), same run; {notes.get(op, '')}")
    result["ops"][op] = {"ranks": ranks, "syncd": syncd, "gloo": gloo, "ratios": table(syncd, gloo, "gloo")}
    mpi = [r for r in rows["mpi"] if r.get("op") == op]
    if mpi:
        print(f"# {op}: syncd vs OpenMPI MPI_Allreduce ({ranks} ranks, unbound), same run")
        result["ops"][op].update({"mpi": mpi, "mpi_ratios": table(syncd, mpi, "MPI")})
if submit:
    print(f"# client submit cost: {submit[0]['ns_per_request']:.0f} ns per request")
result["submit"] = submit
print(json.dumps(result))
PY
