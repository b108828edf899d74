#include "daemon/exec/host_executor.h"

#include <absl/container/inlined_vector.h>

#include <cstring>

#include "daemon/core/reduce_kernels.h"
#include "proto/status_names.h"

namespace syncd {

void HostExecutor::Allreduce(const TensorGroup& group) {
  if (group.empty()) return;
  const size_t esize = abi::DtypeSize(group.front()->first().dtype);
  for (const ReadyTensor* t : group) AllreducePiece(*t, 0, t->first().bytes / esize);
}

void HostExecutor::AllreduceRange(const TensorGroup& group, size_t begin, size_t end) {
  ForEachPiece(group, begin, end, [&](const ReadyTensor& t, size_t first, size_t count, size_t) {
    AllreducePiece(t, first, count);
  });
}

void HostExecutor::AllreducePiece(const ReadyTensor& t, size_t first, size_t count) {
  const Request& head = t.first();
  ReduceSpec spec{head.dtype, head.op, head.prescale, head.postscale, 1};
  if (head.op == SYNCD_AVERAGE) spec.divisor = Divisor(AbsentIn(t));
  const size_t esize = abi::DtypeSize(head.dtype);
  const size_t n = t.requests.size();
  std::vector<const void*>& in = inputs_;
  std::vector<void*>& out = outputs_;
  in.resize(n);
  out.resize(n);
  for (size_t off = first; off < first + count; off += kReduceChunkElements) {
    const size_t m = std::min(kReduceChunkElements, first + count - off);
    size_t k = 0;  // the contributions (a stand-in adds the identity: left out)
    for (size_t r = 0; r < n; ++r) {
      char* p = t.requests[r].data + off * esize;
      if (!t.requests[r].stands_in()) in[k++] = p;
      out[r] = p;
    }
    ReduceChunk(spec, in.data(), k, out.data(), n, m);
  }
}

void HostExecutor::Broadcast(const ReadyTensor& t) {
  const Request* root = nullptr;
  for (const Request& r : t.requests)
    if (int32_t(r.rank) == r.root) root = &r;
  if (root == nullptr || root->bytes == 0) return;
  for (const Request& r : t.requests)
    if (&r != root) memcpy(r.data, root->data, root->bytes);
}

}  // namespace syncd

namespace syncd {

template <typename F>
void HostExecutor::ForEachPiece(const TensorGroup& group, size_t begin, size_t end, F fn) {
  const size_t esize = abi::DtypeSize(group.front()->first().dtype);
  size_t at = 0;
  for (const ReadyTensor* t : group) {
    const size_t count = t->first().bytes / esize;
    const size_t lo = std::max(begin, at), hi = std::min(end, at + count);
    if (lo < hi) fn(*t, lo - at, hi - lo, lo);
    at += count;
    if (at >= end) break;
  }
}

void HostExecutor::ReduceRange(const TensorGroup& group, size_t begin, size_t end, char* segment, bool accumulate) {
  const Request& head = group.front()->first();
  const ReduceSpec spec{head.dtype, head.op == SYNCD_AVERAGE ? SYNCD_SUM : head.op, head.prescale, 1.0, 1};
  const size_t esize = abi::DtypeSize(head.dtype);
  const size_t n = group.front()->requests.size(), first_rank = accumulate ? 1 : 0;
  std::vector<const void*>& in = inputs_;
  in.resize(n + first_rank);
  ForEachPiece(group, begin, end, [&](const ReadyTensor& t, size_t first, size_t count, size_t pos) {
    for (size_t off = 0; off < count; off += kReduceChunkElements) {
      const size_t m = std::min(kReduceChunkElements, count - off);
      void* out[1] = {segment + (pos - begin + off) * esize};
      if (accumulate) in[0] = out[0];  // the output may be the first input (ReduceChunk)
      const size_t k = first_rank + Contributions(t, (first + off) * esize, in.data() + first_rank);
      ReduceChunk(spec, in.data(), k, out, 1, m);
    }
  });
}

void HostExecutor::ScatterRange(const TensorGroup& group, size_t begin, size_t end, char* segment,
                                absl::Span<const int64_t> absent) {
  const Request& head = group.front()->first();
  const size_t esize = abi::DtypeSize(head.dtype);
  // Finish the values once, in the segment (still in cache), then copy them out to each rank.
  if (absent.empty()) Finish(head, segment, end - begin);
  size_t member = 0;  // group[member] is `t`
  ForEachPiece(group, begin, end, [&](const ReadyTensor& t, size_t first, size_t count, size_t pos) {
    const char* from = segment + (pos - begin) * esize;
    if (!absent.empty()) {
      while (group[member] != &t) ++member;
      Finish(head, segment + (pos - begin) * esize, count, uint32_t(absent[member]));
    }
    for (const Request& r : t.requests) CopyStreaming(r.data + first * esize, from, count * esize);
  });
}

void HostExecutor::ScatterBroadcast(const ReadyTensor& t, const char* buffer) {
  for (const Request& r : t.requests)
    if (int32_t(r.rank) != r.root && r.bytes > 0) memcpy(r.data, buffer, r.bytes);
}

void HostExecutor::Allgather(const ReadyTensor& t) {
  for (const Request& d : t.requests) {
    if (d.result == nullptr) continue;
    uint64_t at = 0;
    for (const Request& s : t.requests) {
      if (s.bytes > 0) CopyStreaming(d.result + at, s.data, s.bytes);
      at += s.bytes;
    }
  }
}

void HostExecutor::Alltoall(const ReadyTensor& t, absl::Span<const int64_t> splits, uint64_t row_bytes) {
  const size_t n = t.requests.size();
  for (size_t d = 0; d < n; ++d) {
    const Request& dest = t.requests[d];
    if (dest.result == nullptr) continue;
    uint64_t at = 0;
    for (size_t s = 0; s < n; ++s) {
      uint64_t from = 0;
      for (size_t j = 0; j < d; ++j) from += uint64_t(splits[s * n + j]) * row_bytes;
      const uint64_t bytes = uint64_t(splits[s * n + d]) * row_bytes;
      if (bytes > 0) CopyStreaming(dest.result + at, t.requests[s].data + from, bytes);
      at += bytes;
    }
  }
}

void HostExecutor::CopyToResults(const ReadyTensor& t, const char* from, uint64_t bytes) {
  for (const Request& r : t.requests)
    if (r.result != nullptr && bytes > 0) CopyStreaming(r.result, from, bytes);
}

void HostExecutor::Reducescatter(const ReadyTensor& t, absl::Span<const uint64_t> bounds) {
  const Request& head = t.first();
  const ReduceSpec spec{head.dtype, head.op, head.prescale, head.postscale,
                        head.op == SYNCD_AVERAGE ? Divisor(AbsentIn(t)) : 1u};
  const size_t esize = abi::DtypeSize(head.dtype);
  const size_t n = t.requests.size();
  absl::InlinedVector<const void*, 16> in(n);
  // In rank order, each rank's part lands at the start of its own tensor: rank d's part begins at
  // or after where every earlier rank's part ended, and no later rank reads what is overwritten.
  for (size_t d = 0; d < n; ++d) {
    const size_t count = bounds[d + 1] - bounds[d];
    for (size_t off = 0; off < count; off += kReduceChunkElements) {
      const size_t m = std::min(kReduceChunkElements, count - off);
      const size_t k = Contributions(t, (bounds[d] + off) * esize, in.data());
      void* out[1] = {t.requests[d].data + off * esize};
      ReduceChunk(spec, in.data(), k, out, 1, m);
    }
  }
}

size_t HostExecutor::Contributions(const ReadyTensor& t, uint64_t offset, const void** in) {
  size_t k = 0;
  for (const Request& r : t.requests)
    if (!r.stands_in()) in[k++] = r.data + offset;
  return k;
}

uint32_t HostExecutor::AbsentIn(const ReadyTensor& t) {
  uint32_t n = 0;
  for (const Request& r : t.requests) n += r.absent;
  return n;
}

void HostExecutor::Finish(const Request& head, char* data, size_t count, uint32_t absent) {
  const ReduceSpec spec{head.dtype, SYNCD_SUM, 1.0, head.postscale, head.op == SYNCD_AVERAGE ? Divisor(absent) : 1u};
  if (spec.postscale == 1.0 && spec.divisor == 1) return;
  const size_t esize = abi::DtypeSize(head.dtype);
  for (size_t off = 0; off < count; off += kReduceChunkElements) {
    const size_t m = std::min(kReduceChunkElements, count - off);
    const void* in[1] = {data + off * esize};
    void* out[1] = {data + off * esize};
    ReduceChunk(spec, in, 1, out, 1, m);
  }
}

}  // namespace syncd
