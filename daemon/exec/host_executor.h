// Executes ready collectives on host memory for the ranks of this node: reads every rank's tensor
// in its arena and writes the result back into each, in place. Stateless apart from statistics;
// called by the engine thread only.
#ifndef SYNCD_DAEMON_EXEC_HOST_EXECUTOR_H_
#define SYNCD_DAEMON_EXEC_HOST_EXECUTOR_H_

#include <absl/types/span.h>

#include <vector>

#include "daemon/core/tensor_table.h"

namespace syncd {

class HostExecutor {
 public:
  // `world_size` is the divisor of AVERAGE.
  explicit HostExecutor(uint32_t world_size) : world_size_(world_size) {}

  // One fused allreduce over the member tensors (all share dtype, op and scale factors).
  void Allreduce(const TensorGroup& group);
  // The same, over elements [begin, end) of the group's concatenation only (one slice of it: the
  // engine serves other jobs between slices).
  void AllreduceRange(const TensorGroup& group, size_t begin, size_t end);
  // Copies the root's tensor into every other rank's. The root is a global rank on this node.
  void Broadcast(const ReadyTensor& t);

  // Hierarchical allreduce, around the inter-node step, one pipeline segment at a time: elements
  // [begin, end) of the group's concatenation, held in `segment` (element `begin` at segment[0]).
  // ReduceRange writes op(prescale * rank tensors) (AVERAGE reduces as SUM; stand-ins left out, the
  // identity where every rank here stands in); ScatterRange scales
  // the segment in place by postscale / divisor and copies it into every local rank's tensor.
  // `absent`: per member tensor, how many of the set's ranks stood in for a lost rank
  // (Request::absent) on every node; AVERAGE divides by the others. Empty: none did.
  // With `accumulate` the segment is added to as one more input (its own values, not prescaled:
  // for a group whose prescale is 1).
  void ReduceRange(const TensorGroup& group, size_t begin, size_t end, char* segment, bool accumulate = false);
  void ScatterRange(const TensorGroup& group, size_t begin, size_t end, char* segment,
                    absl::Span<const int64_t> absent = {});
  // Copies `buffer` into every local rank's tensor except the root's.
  void ScatterBroadcast(const ReadyTensor& t, const char* buffer);

  // Results placed in result blocks (Request::result; a rank without a block is skipped: its
  // block could not be allocated, and its request fails). Allgather: every local rank's tensor in
  // rank order. Alltoall: for each rank d, the rows each rank s sends it (splits rank-major,
  // splits[s * n + d]), in rank order. CopyToResults: `bytes` of `from` into every block.
  void Allgather(const ReadyTensor& t);
  void Alltoall(const ReadyTensor& t, absl::Span<const int64_t> splits, uint64_t row_bytes);
  void CopyToResults(const ReadyTensor& t, const char* from, uint64_t bytes);
  // Reducescatter on one node: local rank d gets elements [bounds[d], bounds[d+1]) of the
  // reduction, finished, at the start of its own tensor.
  void Reducescatter(const ReadyTensor& t, absl::Span<const uint64_t> bounds);
  // The last step of a reduction done elsewhere, in place: postscale and the average's divisor
  // (the world size less `absent` stand-ins of lost ranks).
  void Finish(const Request& head, char* data, size_t count, uint32_t absent = 0);
  // This node's stand-ins for lost ranks in `t` (Request::absent).
  static uint32_t AbsentIn(const ReadyTensor& t);
  // The data at byte `offset` of each of `t`'s contributions into `in` (room for every request):
  // stand-ins (Request::stands_in) are left out, they add the identity. Returns how many; with
  // none, ReduceChunk writes the identity.
  static size_t Contributions(const ReadyTensor& t, uint64_t offset, const void** in);

 private:
  // Calls fn(tensor, first element in it, element count, position in the concatenation) for each
  // piece of [begin, end).
  template <typename F>
  static void ForEachPiece(const TensorGroup& group, size_t begin, size_t end, F fn);

  // Allreduce of elements [first, first + count) of one tensor, in place.
  void AllreducePiece(const ReadyTensor& t, size_t first, size_t count);
  // AVERAGE's divisor: the tensors summed (never 0: a sum of nothing stays 0).
  uint32_t Divisor(uint32_t absent) const { return absent < world_size_ ? world_size_ - absent : 1u; }

  uint32_t world_size_;
  // The ranks' pointers of one chunk: kept between calls (no allocation per collective).
  std::vector<const void*> inputs_;
  std::vector<void*> outputs_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_EXEC_HOST_EXECUTOR_H_
