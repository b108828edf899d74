#!/usr/bin/env bash
# The inter-node algorithms of a host allreduce side by side (issue 36): recursive doubling,
# recursive halving and doubling, the ring and the binomial tree (`--host-allreduce`), each run
# through syncrun and syncd-bench allreduce at every node count, in alternating rounds in one go
# (the machine's speed drifts; the median of the rounds is reported). Per node count and size:
# each algorithm's p50 µs and busbw, the fastest, and the one `auto` picks. With --netns every
# node is a network namespace behind a link (limited to G Gbit/s with --link-gbit), and UCX's
# own tag bandwidth between two nodes on the same link (ucx_perftest over TCP, the transport the
# daemons use there) runs in the same go; "node busbw" is then the bytes that cross each node's
# link per second (algbw x 2(N-1)/N for N nodes: the rank-based busbw also counts the ranks'
# traffic inside a node, which never touches the link). The last line is one JSON object.
#   bench/algorithms.sh [--nodes 2,4] [--ranks-per-node 1] [--algorithms rd,halving,ring,tree]
#                       [--sizes 8,1K,64K,1M,16M,64M] [--seconds 0.5] [--rounds 2] [--build build]
#                       [--netns [--link-gbit G]] [--syncd-arg=--flag=value ...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=2,4 per_node=1 algorithms=rd,halving,ring,tree sizes=8,1K,64K,1M,16M,64M seconds=0.5 rounds=2
build="$here/../build" net=() daemon_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --ranks-per-node) per_node=$2; shift 2 ;;
    --algorithms) algorithms=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --netns) net+=(--netns); shift ;;
    --link-gbit) net+=(--link-gbit "$2"); shift 2 ;;
    --syncd-arg=*) daemon_args+=("$1"); shift ;;
    *) echo "algorithms.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for n in ${nodes//,/ }; do
  for ((round = 0; round < rounds; round++)); do
    for algo in auto ${algorithms//,/ }; do
      "$build/bin/syncrun" "${net[@]}" -N "$n" -n $((n * per_node)) --syncd-arg=--log-level=warn \
        --syncd-arg=--host-allreduce="$algo" "${daemon_args[@]}" -- "$build/bin/syncd-bench" allreduce --json \
        --seconds "$seconds" --sizes "$sizes" 2>"$out/err" |
        sed -n "s/^{\"op\":\"allreduce\",/{\"algorithm\":\"$algo\",\"nodes\":$n,\"round\":$round,/p" >>"$out/runs.jsonl" ||
        { cat "$out/err" >&2; exit 1; }
    done
  done
done
# UCX's point-to-point tag bandwidth on the same link, per size (node 0 -> node 1).
if [ ${#net[@]} -gt 0 ]; then
  "$build/bin/syncrun" "${net[@]}" -N 2 --network-only -- "$here/peers/ucx_on_links.sh" "$sizes" >"$out/ucx.jsonl" ||
    echo "algorithms.sh: ucx_perftest on the link failed" >&2
fi
touch "$out/ucx.jsonl"
/usr/bin/python3 - "$out/runs.jsonl" "$out/ucx.jsonl" "${net[*]}" "$algorithms" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
ucx = {r["bytes"]: r["GBps"] for r in map(json.loads, open(sys.argv[2]))}
net, algorithms = sys.argv[3], sys.argv[4].split(",")
bad = [r for r in runs if r.get("wrong")]
if bad:
    sys.exit(f"algorithms.sh: wrong results: {bad[0]}")
result = {"bench": "algorithms", "network": net or "loopback", "ucx_tag_bw_GBps": ucx, "nodes": {}}
for n in sorted({r["nodes"] for r in runs}):
    mine = [r for r in runs if r["nodes"] == n]
    ranks = mine[0]["ranks"]
    print(f"# allreduce across {n} nodes, {ranks} ranks ({net or 'loopback'}), float32, median of "
          f"{1 + max(r['round'] for r in mine)} alternating rounds: p50 us (node busbw GB/s) per --host-allreduce")
    cols = algorithms + ["auto"]
    print(f"# {'bytes':>10} | " + " | ".join(f"{c:>19}" for c in cols) + " | fastest  | auto/fastest"
          + (" | ucx GB/s | best/ucx" if ucx else ""))
    rows = []
    for size in sorted({r["bytes"] for r in mine}):
        cell = {}
        for a in cols:
            rs = [r for r in mine if r["bytes"] == size and r["algorithm"] == a]
            if not rs:
                continue
            algbw = statistics.median(r["algbw_GBps"] for r in rs)
            cell[a] = {"p50_us": round(statistics.median(r["lat_p50_us"] for r in rs), 1),
                       "node_busbw_GBps": round(algbw * 2 * (n - 1) / n, 4),
                       "busbw_GBps": round(statistics.median(r["busbw_GBps"] for r in rs), 4)}
        named = {a: c for a, c in cell.items() if a != "auto"}
        fastest = min(named, key=lambda a: named[a]["p50_us"]) if named else ""
        # How far auto's pick (by size and node count) is from the fastest of this run.
        auto_x = cell["auto"]["p50_us"] / named[fastest]["p50_us"] if "auto" in cell and fastest else 0
        line = f"  {size:>10} | " + " | ".join(
            f"{cell[a]['p50_us']:>10.1f} ({cell[a]['node_busbw_GBps']:>6.3f})" if a in cell else f"{'':>19}" for a in cols)
        line += f" | {fastest:<8} | {auto_x:>12.2f}"
        row = {"bytes": size, "algorithms": cell, "fastest": fastest, "auto_over_fastest": round(auto_x, 3)}
        if ucx.get(size) and size >= 65536:
            best = max(c["node_busbw_GBps"] for c in named.values())
            line += f" | {ucx[size]:>8.3f} | {100 * best / ucx[size]:>7.0f}%"
            row.update({"ucx_tag_bw_GBps": ucx[size], "best_share_of_ucx": round(best / ucx[size], 3)})
        print(line)
        rows.append(row)
    result["nodes"][n] = {"ranks": ranks, "sizes": rows}
print(json.dumps(result))
PY
