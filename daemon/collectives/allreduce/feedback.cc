#include "daemon/collectives/allreduce/feedback.h"

#include <absl/container/inlined_vector.h>

#include <algorithm>
#include <cstring>

#include "daemon/core/residual_store.h"
#include "daemon/core/sparsify.h"
#include "daemon/exec/host_executor.h"
#include "daemon/transport/host_collectives.h"

namespace syncd {
namespace {

constexpr size_t kSegmentBytes = 1 << 20;

constexpr size_t Align8(size_t n) { return (n + 7) & ~size_t{7}; }

// 1-bit's block for `n` elements of one tensor: their scale (8 bytes), their bits.
size_t OneBitBytes(size_t n) { return 8 + Align8((n + 7) / 8); }

// One node's compressed segment of `m` elements of one tensor, `k` of them sent (top-k,
// random-k): its bytes.
size_t BlockBytes(uint32_t compression, size_t m, size_t k, size_t esize) {
  switch (compression) {
    case SYNCD_COMPRESSION_TOPK: return Align8(k * 4) + Align8(k * esize);
    case SYNCD_COMPRESSION_RANDOMK: return Align8(k * esize);
    default: return OneBitBytes(m);
  }
}

// The group's members laid end to end, and each one's residual (empty: none this time).
struct Members {
  absl::InlinedVector<size_t, 4> begin;  // element offset in the concatenation, then the end
  absl::InlinedVector<ResidualStore::Pin, 4> residual;
};

Members PinResiduals(const CollectiveGroup& group, const AcrossNodes& run, size_t esize) {
  Members m;
  m.begin.push_back(0);
  for (const ReadyTensor* t : group) {
    const Request& r = t->first();
    m.begin.push_back(m.begin.back() + r.bytes / esize);
    m.residual.push_back(run.residuals != nullptr ? run.residuals->Acquire(run.set, r.name, r.bytes)
                                                  : ResidualStore::Pin());
  }
  return m;
}

// segment[i] += residual (add) or residual = segment[i] (!add), over [begin, end) of the concatenation.
template <typename T>
void WithResiduals(Members& m, size_t begin, size_t end, T* segment, bool add) {
  for (size_t i = 0; i + 1 < m.begin.size(); ++i) {
    const size_t lo = std::max(begin, m.begin[i]), hi = std::min(end, m.begin[i + 1]);
    if (lo >= hi || !m.residual[i]) continue;
    T* r = reinterpret_cast<T*>(m.residual[i].data()) + (lo - m.begin[i]);
    T* s = segment + (lo - begin);
    if (add) {
      for (size_t j = 0; j < hi - lo; ++j) s[j] += r[j];
    } else {
      memcpy(r, s, (hi - lo) * sizeof(T));
    }
  }
}

// fn(lo, hi) for each member's part of [begin, end) of the concatenation, in order (the same parts
// on every node: the group is).
template <typename Fn>
void ForEachPart(const Members& m, size_t begin, size_t end, Fn fn) {
  for (size_t i = 0; i + 1 < m.begin.size(); ++i) {
    const size_t lo = std::max(begin, m.begin[i]), hi = std::min(end, m.begin[i + 1]);
    if (lo < hi) fn(lo, hi);
  }
}

// 1-bit's block of [begin, end): a scale for each member's part (a fused group's tensors differ in
// magnitude; one scale across them would drown the small ones).
size_t OneBitSegmentBytes(const Members& m, size_t begin, size_t end) {
  size_t bytes = 0;
  ForEachPart(m, begin, end, [&](size_t lo, size_t hi) { bytes += OneBitBytes(hi - lo); });
  return bytes;
}

// A seed every node draws the same random-k indices from: the group's tag (the same on every
// node, unique in the job) and the segment.
uint64_t Seed(uint64_t tag, uint64_t segment) { return tag * 0x9E3779B97F4A7C15ull + segment; }

template <typename T>
CommTask Run(CollectiveGroup group, AcrossNodes run) {
  const Request& f = group.front()->first();
  const uint32_t nodes = run.transport->size(), method = f.compression;
  Members members = PinResiduals(group, run, sizeof(T));
  const size_t count = members.begin.back(), seg = kSegmentBytes / sizeof(T);
  const size_t kmax = SparseCount(seg, f.compression_ppm);
  const size_t block_max = method == SYNCD_COMPRESSION_ONEBIT ? Align8((seg + 7) / 8) + 16 * group.size()
                                                               : BlockBytes(method, seg, kmax, sizeof(T));
  // The segment, every node's block, the selection's scratch (top-k: an index per element;
  // random-k: the indices and their bitmap).
  const size_t slot_bytes = Align8(seg * sizeof(T)), gather_bytes = nodes * block_max;
  const size_t scratch_bytes = std::max(seg * 4, Align8(kmax * 4) + Align8((seg + 63) / 64 * 8));
  const HostBuffer::Block buffer = run.buffer->Reserve(slot_bytes + gather_bytes + scratch_bytes);
  T* const slot = reinterpret_cast<T*>(buffer->data());
  char* const gather = buffer->data() + slot_bytes;
  char* const scratch = gather + gather_bytes;
  const std::vector<int64_t>* absent = f.op == SYNCD_AVERAGE ? run.absent.get() : nullptr;
  uint64_t segment = 0;
  for (size_t begin = 0; begin < count; ++segment) {
    const size_t end = std::min(count, begin + seg), m = end - begin, k = SparseCount(m, f.compression_ppm);
    const size_t block = method == SYNCD_COMPRESSION_ONEBIT ? OneBitSegmentBytes(members, begin, end)
                                                            : BlockBytes(method, m, k, sizeof(T));
    run.host->ReduceRange(group, begin, end, reinterpret_cast<char*>(slot));
    WithResiduals(members, begin, end, slot, /*add=*/true);
    char* const mine = gather + run.node_rank * block;
    uint32_t* const idx = reinterpret_cast<uint32_t*>(method == SYNCD_COMPRESSION_TOPK ? mine : scratch);
    T* const val = reinterpret_cast<T*>(method == SYNCD_COMPRESSION_TOPK ? mine + Align8(k * 4) : gather);
    if (method == SYNCD_COMPRESSION_TOPK) {
      TakeTopK(slot, m, k, idx, val, reinterpret_cast<uint32_t*>(scratch));
    } else if (method == SYNCD_COMPRESSION_RANDOMK) {
      RandomIndices(Seed(run.tag, segment), m, k, idx,
                    reinterpret_cast<uint64_t*>(scratch + Align8(kmax * 4)));
      TakeAt(slot, idx, k, val);
    } else {
      char* part = mine;
      ForEachPart(members, begin, end, [&](size_t lo, size_t hi) {
        const double scale = double(TakeScaledSign(slot + (lo - begin), hi - lo, reinterpret_cast<uint8_t*>(part + 8)));
        memcpy(part, &scale, 8);
        part += OneBitBytes(hi - lo);
      });
    }
    WithResiduals(members, begin, end, slot, /*add=*/false);  // what stayed
    CommTask step;
    const uint64_t tag = run.tag | (segment % 4096);
    if (method == SYNCD_COMPRESSION_RANDOMK) {
      step = Allreduce(run.transport, tag, val, buffer, k, f.dtype, SYNCD_SUM);
    } else {
      BlockBounds bounds(nodes + 1, 0);
      for (uint32_t n = 0; n < nodes; ++n) bounds[n + 1] = bounds[n] + block;
      step = AllgatherBlocks(run.transport, tag, gather, buffer, bounds);
    }
    Status st = co_await Await(&step);
    if (!st.ok()) co_return st;
    std::fill(slot, slot + m, T(0));
    if (method == SYNCD_COMPRESSION_RANDOMK) {
      AddAt(idx, val, k, slot);
    } else {
      for (uint32_t n = 0; n < nodes; ++n) {  // in node order: the same sum on every node
        const char* theirs = gather + n * block;
        if (method == SYNCD_COMPRESSION_TOPK) {
          AddAt(reinterpret_cast<const uint32_t*>(theirs), reinterpret_cast<const T*>(theirs + Align8(k * 4)), k,
                slot);
        } else {
          ForEachPart(members, begin, end, [&](size_t lo, size_t hi) {
            double scale;
            memcpy(&scale, theirs, 8);
            AddScaledSign(reinterpret_cast<const uint8_t*>(theirs + 8), T(scale), hi - lo, slot + (lo - begin));
            theirs += OneBitBytes(hi - lo);
          });
        }
      }
    }
    run.host->ScatterRange(group, begin, end, reinterpret_cast<char*>(slot),
                           absent != nullptr ? absl::Span<const int64_t>(*absent) : absl::Span<const int64_t>());
    begin = end;
  }
  co_return Status::Ok();
}

}  // namespace

bool IsFeedbackCompression(uint32_t compression) {
  return compression == SYNCD_COMPRESSION_TOPK || compression == SYNCD_COMPRESSION_RANDOMK ||
         compression == SYNCD_COMPRESSION_ONEBIT;
}

CommTask RunAcrossWithFeedback(CollectiveGroup group, AcrossNodes run) {
  if (group.front()->first().dtype == SYNCD_FLOAT64) return Run<double>(std::move(group), std::move(run));
  return Run<float>(std::move(group), std::move(run));
}

uint64_t FeedbackWireBytes(uint32_t compression, uint32_t ratio_ppm, size_t elements, size_t element_bytes) {
  uint64_t bytes = 0;
  const size_t seg = kSegmentBytes / element_bytes;
  for (size_t begin = 0; begin < elements; begin += seg) {
    const size_t m = std::min(seg, elements - begin);
    bytes += BlockBytes(compression, m, SparseCount(m, ratio_ppm), element_bytes);
  }
  return bytes;
}

}  // namespace syncd
