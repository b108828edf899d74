#!/usr/bin/env bash
# Runs COMMAND in the network namespace of the simulated node its rank belongs to, for peers that
# launch their own ranks under `syncrun --netns --network-only` (which sets SYNCRUN_NETNS, the
# nodes' namespaces in node order). Rank r of R ranks over N nodes is on node r / (R / N), as
# syncrun places syncd's ranks. The rank comes from OpenMPI (OMPI_COMM_WORLD_RANK/SIZE) or from
# torch's variables (RANK, WORLD_SIZE).
#   in_node.sh COMMAND [ARGS...]
set -euo pipefail
read -r -a namespaces <<<"${SYNCRUN_NETNS:?in_node.sh runs under syncrun --netns --network-only}"
rank=${OMPI_COMM_WORLD_RANK:-${RANK:?no rank in the environment}}
size=${OMPI_COMM_WORLD_SIZE:-${WORLD_SIZE:?no world size in the environment}}
node=$((rank / (size / ${#namespaces[@]})))
exec ip netns exec "${namespaces[$node]}" "$@"
