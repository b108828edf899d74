// Inter-node collectives on host memory, written on the Transport's point-to-point API. One
// participant per node (the daemon); each call returns a CommTask the engine polls.
//
// - Allreduce: recursive doubling below `ring_threshold` bytes, ring reduce-scatter + allgather
//   above it, split into `slices` concurrently running rings so reduction of one slice overlaps
//   the transfer of the others. Correct for any node count (non-powers of two fold the extra
//   nodes into partners first). Every node ends with bit-identical results.
// - Broadcast: binomial tree from the root node.
// - Barrier: a one-byte allreduce.
// `tag` must be unique among collectives in flight; the low 8 bits are used for slices.
// `owner` keeps `data` alive (see BufferOwner): a collective cut off by a failure may leave a
// transfer on the wire, and the transport holds the owner until that transfer lets go.
#ifndef SYNCD_DAEMON_TRANSPORT_HOST_COLLECTIVES_H_
#define SYNCD_DAEMON_TRANSPORT_HOST_COLLECTIVES_H_

#include <memory>
#include <string>
#include <vector>

#include "daemon/transport/comm_task.h"
#include "syncd/client.h"

namespace syncd {

struct AllreduceOptions {
  size_t ring_threshold = 64 * 1024;  // bytes; smaller messages use recursive doubling
  size_t slices = 4;                   // concurrent rings for large messages
};

// Reduces `count` elements of `data` in place with `op` (AVERAGE reduces as SUM: the caller
// divides once at the end).
CommTask Allreduce(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t count, syncd_dtype dtype,
                   syncd_reduce_op op, const AllreduceOptions& options = {});
CommTask Broadcast(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t bytes, uint32_t root);
CommTask Barrier(Transport* t, uint64_t tag);

// Element-wise combination of equally sized byte buffers: acc = f(acc, other). Must be
// commutative and associative (bitwise AND/OR of flags, for example).
using Combiner = void (*)(char* acc, const char* other, size_t bytes);
CommTask RecursiveDoublingCombine(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t bytes,
                                  Combiner combine);

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

}  // namespace syncd

#endif  // SYNCD_DAEMON_TRANSPORT_HOST_COLLECTIVES_H_
