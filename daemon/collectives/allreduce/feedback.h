// The inter-node hop of an allreduce compressed with error feedback (top-k, 1-bit; PowerSGD below),
// in segments, two in flight (one crosses the nodes while the next is compressed): each node's exact
// local sum plus the residual it kept for each member tensor (AcrossNodes::residuals, by name) is
// compressed (daemon/core/sparsify.h), what stays is kept as the new residual, and the nodes'
// compressed segments are summed in node order, so that every node ends with the same values:
//   top-k    each node's k largest of each member tensor's part (indices and values) to every
//            node (AllgatherBlocks);
//   1-bit    each node's sign bits and two values per 32 elements to every node (AllgatherBlocks).
// k is the elements (top-k: of each member's part) times Request::compression_ppm (SparseCount). A
// member whose residual the store refused goes without feedback that time. Each node's block says
// whether its inputs were finite: a sum that is not finite where every node's were fails the
// collective naming the tensor, the method and its step (it overflowed); a part whose input was not
// finite is summed as it is and leaves no residual behind.
// Random-k (SYNCD_COMPRESSION_RANDOMK) is withdrawn: Parse refuses it (abi::CompressionWithdrawn).
#ifndef SYNCD_DAEMON_COLLECTIVES_ALLREDUCE_FEEDBACK_H_
#define SYNCD_DAEMON_COLLECTIVES_ALLREDUCE_FEEDBACK_H_

#include <absl/types/span.h>

#include "daemon/collectives/collective.h"

namespace syncd {

// Whether `compression` (syncd_compression) is one of the error-feedback methods.
bool IsFeedbackCompression(uint32_t compression);

// The group's inter-node hop as above; the local reduction and the scatter as the uncompressed
// hop does them (ReduceRange, ScatterRange).
CommTask RunAcrossWithFeedback(CollectiveGroup group, AcrossNodes run);

// PowerSGD (powersgd.cc): each member of two or more dimensions crosses as two factors of the
// request's rank (Request::compression_ppm) columns, with error feedback; the rest as it is.
CommTask RunAcrossWithPowerSgd(CollectiveGroup group, AcrossNodes run);
// The bytes one node sends for a member of `shape` and `bytes` under PowerSGD at `rank`.
uint64_t PowerSgdWireBytes(uint32_t rank, const Shape& shape, uint64_t bytes, size_t element_bytes);

// The bytes one node sends for a group whose members have `member_bytes` (for the counters of
// what crossed; top-k and 1-bit).
uint64_t FeedbackWireBytes(uint32_t compression, uint32_t ratio_ppm, absl::Span<const uint64_t> member_bytes,
                           size_t element_bytes);

}  // namespace syncd

#endif  // SYNCD_DAEMON_COLLECTIVES_ALLREDUCE_FEEDBACK_H_
