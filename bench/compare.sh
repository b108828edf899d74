#!/usr/bin/env bash
# Runs syncd-bench and torch.distributed/gloo with the same ranks and sizes, back to back in one
# go, and prints the ratio per size (p50 latency: gloo/syncd; busbw: syncd/gloo; > 1 means
# syncd is better), one table per collective. For allreduce, OpenMPI's MPI_Allreduce runs too
# (syncd-mpi-allreduce, timed as syncd-bench times syncd) on the cores syncrun gives syncd's
# ranks, and once more on every core, with its own ratios; and the limit, measured in the same
# run: the machine's memory-copy bandwidth (syncd-bench memcpy, a thread per core) for one node,
# UCX's point-to-point tag bandwidth between two processes on this machine (ucx_perftest, the
# transport the daemons use to each other) for several; syncd's busbw is reported as a share of
# it. On links (--netns) the limit is the link's rate and UCX's tag bandwidth between two nodes
# over it (bench/peers/ucx_on_links.sh), against the bytes that cross a node's link per second. The last line is one JSON object with every result.
#   bench/compare.sh [--nodes 1] [--ranks 4] [--sizes 8,1K,64K,1M,16M,64M] [--seconds 1] [--build build]
#                    [--ops allreduce,allgather,alltoall,reducescatter,broadcast,reduce,gather,scatter]
#                    [--syncd-arg=--flag=value ...] [--netns [--link-gbit G]]
# With --nodes N, syncrun starts N daemons (one per simulated node) and the ranks spread over
# them; gloo runs the same number of ranks. With --netns (root) every node is a network namespace
# behind a link (syncrun --netns, limited to G Gbit/s each way with --link-gbit) and all three
# run on the links: syncd's daemons over UCX's TCP transport, MPI's and gloo's ranks placed in
# the nodes' namespaces as syncd's are (bench/peers/on_links.sh; MPI over its TCP BTL, so its
# ranks of one node talk over TCP too, where syncd's use shared memory); the limit is then the
# link's rate and ucx_perftest on it, and MPI runs once, on syncd's ranks' cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=1 ranks=4 sizes="" seconds=1 build="$here/../build" extra=() daemon_args=() ops=allreduce net=() link_gbit=""
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
    --netns) net+=(--netns); shift ;;
    --link-gbit) link_gbit=$2; net+=(--link-gbit "$2"); shift 2 ;;
    *) echo "compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
size_args=()
[ -n "$sizes" ] && size_args=(--sizes "$sizes")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
all_sizes=${sizes:-8,16,32,64,128,256,512,1K,2K,4K,8K,16K,32K,64K,128K,256K,512K,1M,2M,4M,8M,16M,32M,64M}

# The cores syncrun runs syncd's ranks on (the daemons keep theirs): MPI's ranks get the same.
rank_cores=$("$build/bin/syncrun" "${net[@]}" -N "$nodes" -n "$ranks" --syncd-arg=--log-level=warn "${daemon_args[@]}" -- \
  /bin/grep -h Cpus_allowed_list /proc/self/status 2>/dev/null | cut -f2 | tr ',' '\n' | sort -un | paste -sd,)

# The limit, per size, in bytes per second: one node, memory copies; several, UCX point to point.
limit() {
  if [ ${#net[@]} -gt 0 ]; then  # the link itself, when it has a rate
    [ -z "$link_gbit" ] && return
    local size
    for size in ${all_sizes//,/ }; do
      /usr/bin/python3 -c "import sys; s=sys.argv[1]; m={'K':1<<10,'M':1<<20,'G':1<<30}; b=int(s[:-1])*m[s[-1]] if s[-1] in m else int(s); print('{\"op\":\"link\",\"bytes\":%d,\"GBps\":%.4f}' % (b, float(sys.argv[2]) / 8))" "$size" "$link_gbit"
    done >>"$out/limit.jsonl"
    # And what UCX itself moves between two nodes on that link (the daemons' transport there).
    [ "$nodes" -ge 2 ] && "$build/bin/syncrun" "${net[@]}" -N 2 --network-only -- "$here/peers/ucx_on_links.sh" \
      "$all_sizes" >>"$out/ucx_link.jsonl" 2>/dev/null || true
  elif [ "$nodes" -eq 1 ]; then
    "$build/bin/syncd-bench" memcpy --json --seconds 0.3 --sizes "$all_sizes" >>"$out/limit.jsonl"
  elif command -v ucx_perftest >/dev/null; then
    local port=$((20000 + RANDOM % 20000)) size bytes
    for size in ${all_sizes//,/ }; do
      bytes=$(/usr/bin/python3 -c "import sys; s=sys.argv[1]; m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$size")
      ucx_perftest -p "$port" >/dev/null 2>&1 &
      local server=$!
      sleep 0.3
      # Iterations for about 0.3 s at 5 GB/s; MB/s in UCX's output are 2^20 bytes per second.
      local iters=$(( 1500000000 / bytes )); [ "$iters" -lt 20 ] && iters=20; [ "$iters" -gt 2000 ] && iters=2000
      ucx_perftest 127.0.0.1 -p "$port" -t tag_bw -s "$bytes" -n "$iters" -w $((iters / 10 + 1)) -f 2>/dev/null |
        awk -v b="$bytes" '$1 ~ /^[0-9]+$/ && NF >= 8 {bw = $6} END {if (bw != "") printf "{\"op\":\"ucx_tag_bw\",\"bytes\":%d,\"GBps\":%.4f}\n", b, bw * 1048576 / 1e9}' >>"$out/limit.jsonl"
      wait "$server" 2>/dev/null || true
      port=$((port + 1))
    done
  fi
}

# A peer's ranks on the links (--netns): the network stands while on_links.sh places them.
on_links() {
  "$build/bin/syncrun" "${net[@]}" -N "$nodes" --network-only -- "$here/peers/on_links.sh" "$@"
}

for op in ${ops//,/ }; do
  "$build/bin/syncrun" "${net[@]}" -N "$nodes" -n "$ranks" --syncd-arg=--log-level=warn "${daemon_args[@]}" -- "$build/bin/syncd-bench" "$op" --json --seconds "$seconds" \
    "${size_args[@]}" "${extra[@]}" >>"$out/syncd.jsonl" 2>"$out/syncd.log" ||
    { cat "$out/syncd.log" >&2; exit 1; }
  gloo=(/usr/bin/python3 "$here/peers/torch_gloo.py" --op "$op" --json --seconds "$seconds" "${size_args[@]}")
  if [ ${#net[@]} -gt 0 ]; then
    on_links gloo "$ranks" "${gloo[@]}" --from-env >>"$out/gloo.jsonl" 2>"$out/gloo.log" || { cat "$out/gloo.log" >&2; exit 1; }
  else
    "${gloo[@]}" --ranks "$ranks" >>"$out/gloo.jsonl" 2>"$out/gloo.log" || { cat "$out/gloo.log" >&2; exit 1; }
  fi
  if [ "$op" = allreduce ] && [ -x "$build/bin/syncd-mpi-allreduce" ] && command -v mpirun >/dev/null; then
    mpi=("$build/bin/syncd-mpi-allreduce" --seconds "$seconds" ${sizes:+--sizes "$sizes"})
    # On syncd's ranks' cores (as the issue compares), then on every core (as a user might run it).
    for where in ranks every; do
      pin=()
      [ "$where" = ranks ] && [ -n "$rank_cores" ] && pin=(taskset -c "$rank_cores")
      if [ ${#net[@]} -gt 0 ]; then
        [ "$where" = every ] && continue
        "${pin[@]}" "$build/bin/syncrun" "${net[@]}" -N "$nodes" --network-only -- "$here/peers/on_links.sh" mpi "$ranks" \
          "${mpi[@]}" >>"$out/mpi_$where.jsonl" 2>"$out/mpi.log" || { cat "$out/mpi.log" >&2; exit 1; }
      else
        "${pin[@]}" mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader -np "$ranks" \
          "${mpi[@]}" >>"$out/mpi_$where.jsonl" 2>"$out/mpi.log" || { cat "$out/mpi.log" >&2; exit 1; }
      fi
    done
  fi
  [ "$op" = allreduce ] && limit
done
touch "$out/mpi_ranks.jsonl" "$out/mpi_every.jsonl" "$out/limit.jsonl" "$out/ucx_link.jsonl"

/usr/bin/python3 - "$out/syncd.jsonl" "$out/gloo.jsonl" "$nodes" "$ops" "$out/mpi_ranks.jsonl" "$out/mpi_every.jsonl" \
  "$out/limit.jsonl" "$rank_cores" "${net[*]}" "$out/ucx_link.jsonl" <<'PY'
import json, sys
rows = {name: [json.loads(l) for l in open(path) if l.startswith("{")] for name, path in
        (("syncd", sys.argv[1]), ("gloo", sys.argv[2]), ("mpi", sys.argv[5]), ("mpi_every", sys.argv[6]),
         ("limit", sys.argv[7]))}
nodes, ops, rank_cores, net = int(sys.argv[3]), sys.argv[4].split(","), sys.argv[8], sys.argv[9]
ucx_link = {r["bytes"]: r["GBps"] for r in map(json.loads, open(sys.argv[10]))}
submit = [r for r in rows["syncd"] if r.get("op") == "submit"]
notes = {"allreduce": "busbw = algbw * 2(n-1)/n", "allgather": "size: the output; busbw = algbw * (n-1)/n",
         "alltoall": "size: each rank's buffer; busbw = algbw * (n-1)/n",
         "reducescatter": "size: the input; busbw = algbw * (n-1)/n; gloo has none: all_reduce + copy",
         "broadcast": "from rank 0; size: the buffer; busbw = algbw",
         "reduce": "to rank 0; size: the buffer; busbw = algbw",
         "gather": "at rank 0; size: the output; busbw = algbw * (n-1)/n",
         "scatter": "from rank 0; size: the root's input; busbw = algbw * (n-1)/n"}
result = {"bench": "compare", "nodes": nodes, "network": net or "loopback", "ops": {}}


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
    print(f"# {op}, {ranks} ranks on {nodes} syncd node(s){' (syncrun ' + net + ')' if net else ''}, float32: syncd "
          f"(zero-copy arena) vs torch.distributed gloo ({ranks} ranks), same run; {notes.get(op, '')}")
    result["ops"][op] = {"ranks": ranks, "syncd": syncd, "gloo": gloo, "ratios": table(syncd, gloo, "gloo")}
    mpi = [r for r in rows["mpi"] if r.get("op") == op]
    if mpi:
        every = {r["bytes"]: r for r in rows["mpi_every"] if r.get("op") == op}
        print(f"# {op}: syncd vs OpenMPI MPI_Allreduce ({ranks} ranks on syncd's ranks' cores {rank_cores}), same run")
        result["ops"][op].update({"mpi": mpi, "mpi_ratios": table(syncd, mpi, "MPI"),
                                  "mpi_every_core": list(every.values()), "rank_cores": rank_cores})
        if every:
            print(f"# MPI_Allreduce on every core: p50 us " +
                  ", ".join(f"{b}: {r['lat_p50_us']:.1f}" for b, r in sorted(every.items())))
    limit = {r["bytes"]: r for r in rows["limit"]}
    if op == "allreduce" and limit:
        kind = ("the link's rate, each way" if net else "memory copy, a thread per core" if nodes == 1
                else "UCX tag_bw point to point (ucx_perftest)")
        print(f"# {op}: syncd's busbw as a share of the limit ({kind}), same run")
        if net:
            # What crosses a node's link: algbw x 2(N-1)/N for N nodes (nccl-tests' busbw over
            # nodes; the ranks' busbw also counts traffic inside a node, which the link never sees).
            print(f"# node busbw = algbw x 2(N-1)/N over the {nodes} nodes; ucx: ucx_perftest tag_bw between two "
                  f"nodes on the same link, same run")
            print(f"# {'bytes':>10} | {'syncd busbw':>11} {'node busbw':>10} {'link GB/s':>10} {'share':>6} "
                  f"{'ucx GB/s':>9} {'share':>6}")
        else:
            print(f"# {'bytes':>10} | {'syncd busbw':>11} {'limit GB/s':>10} {'share':>6}")
        shares = []
        for r in syncd:
            lim = limit.get(r["bytes"])
            if not lim or not lim["GBps"]:
                continue
            if net:
                node_bw = r["algbw_GBps"] * 2 * (nodes - 1) / nodes
                share = node_bw / lim["GBps"]
                ucx = ucx_link.get(r["bytes"], 0)
                shares.append({"bytes": r["bytes"], "limit_GBps": lim["GBps"], "node_busbw_GBps": round(node_bw, 4),
                               "share": round(share, 3), "ucx_GBps": ucx,
                               "share_of_ucx": round(node_bw / ucx, 3) if ucx else None})
                print(f"  {r['bytes']:>10} | {r['busbw_GBps']:>11.3f} {node_bw:>10.3f} {lim['GBps']:>10.3f} "
                      f"{100 * share:>5.0f}% {ucx:>9.3f} " + (f"{100 * node_bw / ucx:>5.0f}%" if ucx else ""))
                continue
            share = r["busbw_GBps"] / lim["GBps"]
            shares.append({"bytes": r["bytes"], "limit_GBps": lim["GBps"], "share": round(share, 3)})
            print(f"  {r['bytes']:>10} | {r['busbw_GBps']:>11.3f} {lim['GBps']:>10.3f} {100 * share:>5.0f}%")
        result["ops"][op].update({"limit": kind, "limit_shares": shares})
if submit:
    print(f"# client submit cost: {submit[0]['ns_per_request']:.0f} ns per request")
result["submit"] = submit
print(json.dumps(result))
PY
