// Inter-node collectives on host memory, written on the Transport's point-to-point API. One
// participant per node (the daemon); each call returns a CommTask the engine polls.
//
// - Allreduce: one of four algorithms (`AllreduceOptions::algorithm`, or by size and node count,
//   ChooseAllreduce): recursive doubling (log2 N rounds of the whole buffer), recursive halving
//   and doubling (Rabenseifner: 2 log2 N rounds, each node sends 2 (N-1)/N of the buffer), ring
//   reduce-scatter + allgather (2 (N-1) rounds, the same bytes; split into `slices` concurrently
//   running rings so reduction of one slice overlaps the transfer of the others) or a binomial
//   tree (reduce to node 0, broadcast back: 2 log2 N rounds, 2 (N-1)/N messages per node).
//   Correct for any node count (non-powers of two fold the extra nodes into partners first).
//   Every node ends with bit-identical results.
// - Broadcast: binomial tree from the root node.
// - Barrier: a one-byte allreduce.
// - AllgatherBlocks, ReduceScatterBlocks: rings over one block per node, of any sizes (allgather,
//   reducescatter); Exchange: any point-to-point transfers at once (alltoall).
// `tag` must be unique among collectives in flight; the low 8 bits are used for slices.
// `owner` keeps `data` alive (see BufferOwner): a collective cut off by a failure may leave a
// transfer on the wire, and the transport holds the owner until that transfer lets go.
#ifndef SYNCD_DAEMON_TRANSPORT_HOST_COLLECTIVES_H_
#define SYNCD_DAEMON_TRANSPORT_HOST_COLLECTIVES_H_

#include <memory>
#include <string>
#include <vector>

#include "daemon/base/config.h"
#include "daemon/transport/comm_task.h"
#include "syncd/client.h"

namespace syncd {

struct AllreduceOptions {
  size_t small_bytes = 64 * 1024;  // kAuto: up to this many bytes the latency algorithms
  size_t slices = 4;               // concurrent rings for large messages
  HostAllreduce algorithm = HostAllreduce::kAuto;  // kAuto: ChooseAllreduce
};
// The algorithm an allreduce of `bytes` on `nodes` nodes runs (never kAuto): options.algorithm
// when set; else, up to options.small_bytes, recursive doubling below kTreeCombineFrom nodes and
// the tree from there (as a cycle's agreement: messages per node flat as nodes grow); above it,
// recursive halving and doubling on a power of two nodes and the ring otherwise (halving folds
// the extra nodes in with whole buffers). bench/algorithms.sh measures each against the others.
HostAllreduce ChooseAllreduce(uint32_t nodes, size_t bytes, const AllreduceOptions& options);
const char* HostAllreduceName(HostAllreduce algorithm);  // as --host-allreduce spells it

// Reduces `count` elements of `data` in place with `op` (AVERAGE reduces as SUM: the caller
// divides once at the end).
CommTask Allreduce(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t count, syncd_dtype dtype,
                   syncd_reduce_op op, const AllreduceOptions& options = {});
CommTask Broadcast(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t bytes, uint32_t root);
CommTask Barrier(Transport* t, uint64_t tag);

// Block boundaries: n + 1 of them, held inline up to 16 nodes (no heap allocation per collective).
using BlockBounds = absl::InlinedVector<uint64_t, 17>;
// Node i's block of `data` is [bounds[i], bounds[i+1]) (n + 1 bounds; bytes for AllgatherBlocks,
// elements for ReduceScatterBlocks). AllgatherBlocks: every node ends with every node's block.
// ReduceScatterBlocks: node i ends with its block reduced over every node with `op` (AVERAGE
// reduces as SUM), in place; the other blocks are left holding partial results.
CommTask AllgatherBlocks(Transport* t, uint64_t tag, void* data, BufferOwner owner, BlockBounds bounds);
CommTask ReduceScatterBlocks(Transport* t, uint64_t tag, void* data, BufferOwner owner, BlockBounds bounds,
                             syncd_dtype dtype, syncd_reduce_op op);
// Point-to-point transfers all at once (alltoall): each is one message to or from a peer. The
// n-th send to a peer matches the peer's n-th receive from this node: both sides list them in
// the same order, with the same sizes. Empty transfers are skipped.
struct Transfer {
  uint32_t peer = 0;
  char* data = nullptr;
  uint64_t bytes = 0;
  BufferOwner owner;
};
// A few held inline: no heap allocation for the transfer lists of a collective on a few nodes.
using Transfers = absl::InlinedVector<Transfer, 8>;
CommTask Exchange(Transport* t, uint64_t tag, Transfers sends, Transfers recvs);

// A receive buffer of at least `bytes` for a collective's step, shared with its transfers (the
// transport may hold it past a cancelled task). Up to 4 KiB it comes from a few blocks kept per
// thread and reused once nobody else holds them: no heap allocation per small collective.
std::shared_ptr<char[]> ScratchFor(size_t bytes);

// Element-wise combination of equally sized byte buffers: acc = f(acc, other). Must be
// commutative and associative (bitwise AND/OR of flags, for example).
using Combiner = void (*)(char* acc, const char* other, size_t bytes);
CommTask RecursiveDoublingCombine(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t bytes,
                                  Combiner combine);
// The same result through a binomial tree: combined up to node 0, then sent back down. Each node
// sends 2 (N-1)/N messages on average instead of log2 N, in 2 log2 N rounds instead of log2 N.
CommTask TreeCombine(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t bytes, Combiner combine);
// A small combine (a coordination cycle's agreement): recursive doubling up to kTreeCombineFrom
// nodes - 1 (fewer rounds), the tree from there (messages per node flat as nodes grow).
inline constexpr uint32_t kTreeCombineFrom = 16;
CommTask SmallCombine(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t bytes, Combiner combine);

// Variable-sized byte strings: every node's `mine` lands in (*all)[node] on `root`. These two
// move the strings through buffers of their own: the caller's need live only until co_await.
CommTask GatherBytes(Transport* t, uint64_t tag, uint32_t root, const std::string* mine, std::vector<std::string>* all);
// `*data` on `root` replaces `*data` everywhere else.
CommTask BroadcastBytes(Transport* t, uint64_t tag, uint32_t root, std::string* data);

// Individual algorithms, exposed for tests and benchmarks.
CommTask RecursiveDoublingAllreduce(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t count,
                                    syncd_dtype dtype, syncd_reduce_op op);
CommTask RingAllreduce(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t count, syncd_dtype dtype,
                       syncd_reduce_op op);
CommTask RecursiveHalvingAllreduce(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t count,
                                   syncd_dtype dtype, syncd_reduce_op op);
CommTask TreeAllreduce(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t count, syncd_dtype dtype,
                       syncd_reduce_op op);

}  // namespace syncd

#endif  // SYNCD_DAEMON_TRANSPORT_HOST_COLLECTIVES_H_
