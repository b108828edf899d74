#!/usr/bin/env bash
# UCX's point-to-point tag bandwidth from node 1 to node 0 of `syncrun --netns --network-only`
# (which sets SYNCRUN_NETNS, SYNCRUN_NODE_ADDRS and SYNCRUN_DEVICE), over UCX's TCP transport
# on the link with the TCP segment size the daemon uses there: what the daemons could move
# between two nodes at best. One JSON line per size: {"op":"ucx_tag_bw","bytes":B,"GBps":X}.
#   syncrun --netns --link-gbit 10 -N 2 --network-only -- bench/peers/ucx_on_links.sh 1M,64M
set -euo pipefail
sizes=${1:?sizes, e.g. 1M,64M}
read -r -a namespaces <<<"${SYNCRUN_NETNS:?ucx_on_links.sh runs under syncrun --netns --network-only}"
read -r -a addrs <<<"$SYNCRUN_NODE_ADDRS"
ucx=(env UCX_TLS=tcp UCX_NET_DEVICES="${SYNCRUN_DEVICE:-link0}" UCX_TCP_TX_SEG_SIZE=256k UCX_TCP_RX_SEG_SIZE=256k)
port=$((20000 + RANDOM % 20000))
for size in ${sizes//,/ }; do
  bytes=$(/usr/bin/python3 -c "import sys; s=sys.argv[1]; m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$size")
  ip netns exec "${namespaces[0]}" "${ucx[@]}" ucx_perftest -p "$port" >/dev/null 2>&1 &
  server=$!
  sleep 0.3
  # About 0.5 s at 1 GB/s; MB/s in UCX's output are 2^20 bytes per second.
  iters=$((500000000 / bytes)); [ "$iters" -lt 10 ] && iters=10; [ "$iters" -gt 2000 ] && iters=2000
  ip netns exec "${namespaces[1]}" "${ucx[@]}" ucx_perftest "${addrs[0]}" -p "$port" -t tag_bw -s "$bytes" -n "$iters" \
    -w $((iters / 10 + 1)) -f 2>/dev/null |
    awk -v b="$bytes" '$1 ~ /^[0-9]+$/ && NF >= 8 {bw = $6} END {if (bw != "") printf "{\"op\":\"ucx_tag_bw\",\"bytes\":%d,\"GBps\":%.4f}\n", b, bw * 1048576 / 1e9}'
  wait "$server" 2>/dev/null || true
  port=$((port + 1))
done
