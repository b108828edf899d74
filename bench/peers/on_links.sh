#!/usr/bin/env bash
# Launches a peer's ranks onto the simulated nodes of `syncrun --netns --network-only` (which
# sets SYNCRUN_NETNS, SYNCRUN_NODE_ADDRS and SYNCRUN_DEVICE), each rank in its node's network
# namespace, placed as syncrun places syncd's ranks (in_node.sh), talking over the links only:
#   on_links.sh mpi RANKS COMMAND...    mpirun from node 0's namespace, MPI's TCP BTL on the links
#                                       (no shared memory: the nodes would share it), PMIx's
#                                       server reachable over the links (start-up only)
#   on_links.sh gloo RANKS COMMAND...   one process per rank with torch's env:// variables
#                                       (MASTER_ADDR: node 0), gloo's sockets on the links
# E.g. syncrun --netns --link-gbit 10 -N 2 --network-only -- bench/peers/on_links.sh mpi 4 \
#        build/bin/syncd-mpi-allreduce --sizes 8,1M
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kind=${1:?mpi or gloo} ranks=${2:?ranks}
shift 2
read -r -a namespaces <<<"${SYNCRUN_NETNS:?on_links.sh runs under syncrun --netns --network-only}"
read -r -a addrs <<<"$SYNCRUN_NODE_ADDRS"
dev=${SYNCRUN_DEVICE:-link0}
case "$kind" in
  mpi)
    exec ip netns exec "${namespaces[0]}" env PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include="$dev" \
      mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" --mca pml ob1 --mca btl tcp,self \
      --mca btl_tcp_if_include "$dev" --mca oob_tcp_if_include "$dev" "$here/in_node.sh" "$@" ;;
  gloo)
    port=$((20000 + RANDOM % 20000))
    pids=()
    for ((r = 0; r < ranks; r++)); do
      RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=${addrs[0]} MASTER_PORT=$port GLOO_SOCKET_IFNAME=$dev \
        "$here/in_node.sh" "$@" &
      pids+=($!)
    done
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    exit "$rc" ;;
  *) echo "on_links.sh: mpi or gloo, not $kind" >&2; exit 2 ;;
esac
