// The inter-node hop of an allreduce compressed with error feedback (top-k, random-k, 1-bit; PowerSGD
// below),
// in segments, two in flight (one crosses the nodes while the next is compressed): each node's exact local sum plus the residual it kept for each member
// tensor (AcrossNodes::residuals, by name) is compressed (daemon/core/sparsify.h), what stays is
// kept as the new residual, and the nodes' compressed segments are summed in node order, so that
// every node ends with the same values:
//   top-k    each node's k largest of each member tensor's part (indices and values) to every
//            node (AllgatherBlocks);
//   random-k the same k indices on every node (drawn from the group's tag and the segment), their
//            values summed by a plain allreduce;
//   1-bit    each node's scale (one per member's part) and sign bits to every node (AllgatherBlocks).
// k is the elements (top-k: of each member's part) times Request::compression_ppm (SparseCount). A member whose
// residual the store refused goes without feedback that time.
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
// what crossed; top-k, random-k and 1-bit).
uint64_t FeedbackWireBytes(uint32_t compression, uint32_t ratio_ppm, absl::Span<const uint64_t> member_bytes,
                           size_t element_bytes);

}  // namespace syncd

#endif  // SYNCD_DAEMON_COLLECTIVES_ALLREDUCE_FEEDBACK_H_
