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

// fn(lo, hi, i) for each member i's part [lo, hi) of [begin, end) of the concatenation, in order
// (the same parts on every node: the group is).
template <typename Fn>
void ForEachPart(const Members& m, size_t begin, size_t end, Fn fn) {
  for (size_t i = 0; i + 1 < m.begin.size(); ++i) {
    const size_t lo = std::max(begin, m.begin[i]), hi = std::min(end, m.begin[i + 1]);
    if (lo < hi) fn(lo, hi, i);
  }
}

// Member i's residual from element `lo` of the concatenation on.
template <typename T>
T* ResidualAt(const Members& m, size_t i, size_t lo) {
  return reinterpret_cast<T*>(m.residual[i].data()) + (lo - m.begin[i]);
}

// Member i's part [lo, hi): its node sum plus its residual, made where it is then compressed.
// With a residual and no prescale, in the residual itself: the ranks' tensors are reduced into it
// in one pass, and what compression leaves there is the new residual. Otherwise in `slot` (the
// residual added; the caller copies what stays back).
template <typename T>
T* NodeSumAt(const CollectiveGroup& group, const AcrossNodes& run, const Members& m, size_t lo, size_t hi, size_t i,
             T* slot) {
  if (!m.residual[i]) {
    run.host->ReduceRange(group, lo, hi, reinterpret_cast<char*>(slot));
    return slot;
  }
  T* const r = ResidualAt<T>(m, i, lo);
  if (group.front()->first().prescale == 1.0) {
    run.host->ReduceRange(group, lo, hi, reinterpret_cast<char*>(r), /*accumulate=*/true);
    return r;
  }
  run.host->ReduceRange(group, lo, hi, reinterpret_cast<char*>(slot));
  for (size_t j = 0; j < hi - lo; ++j) slot[j] += r[j];
  return slot;
}

// What one node sends of segment [begin, end): its bytes, and *k the elements (top-k, random-k).
// A fused group's tensors differ in magnitude, so top-k takes each member's part's own k largest
// and 1-bit gives each part its own scale: one selection or one scale across them would starve or
// drown the small ones (and make a tensor's result depend on what it was fused with).
size_t SegmentBlockBytes(uint32_t method, uint32_t ppm, const Members& m, size_t begin, size_t end, size_t esize,
                         size_t* k) {
  *k = 0;
  size_t bytes = 0;
  switch (method) {
    case SYNCD_COMPRESSION_TOPK:
      ForEachPart(m, begin, end, [&](size_t lo, size_t hi, size_t) { *k += SparseCount(hi - lo, ppm); });
      return Align8(*k * 4) + Align8(*k * esize);
    case SYNCD_COMPRESSION_RANDOMK:
      *k = SparseCount(end - begin, ppm);
      return Align8(*k * esize);
    default:
      ForEachPart(m, begin, end, [&](size_t lo, size_t hi, size_t) { bytes += OneBitBytes(hi - lo); });
      return bytes;
  }
}

// A seed every node draws the same random-k indices from: the group's tag (the same on every
// node, unique in the job) and the segment.
uint64_t Seed(uint64_t tag, uint64_t segment) { return tag * 0x9E3779B97F4A7C15ull + segment; }

// Two segments in flight: while one crosses the nodes the next is reduced and compressed.
constexpr size_t kDepth = 2;

// One segment of [begin, end): its node sum (then the nodes'), every node's block (this node's
// at node_rank) and random-k's indices (top-k's travel in the block).
template <typename T>
struct Segment {
  CommTask task;
  size_t begin = 0, end = 0, k = 0, block = 0;
  T* slot = nullptr;
  char* gather = nullptr;
  uint32_t* idx = nullptr;
};

// What a group's segments share: its members and residuals, the method, the selection's scratch.
struct Shared {
  Members members;
  uint32_t method = 0, ppm = 0, nodes = 0;
  syncd_dtype dtype = SYNCD_FLOAT32;
  char* scratch = nullptr;
  size_t kmax = 0;
};

// Reduces segment [s->begin, s->end) locally with the members' residuals, compresses this node's
// block part by part, keeps what stayed as the residuals and posts the exchange.
template <typename T>
void Post(const CollectiveGroup& group, const AcrossNodes& run, Shared& sh, const HostBuffer::Block& buffer,
          uint64_t segment, Segment<T>* s) {
  s->block = SegmentBlockBytes(sh.method, sh.ppm, sh.members, s->begin, s->end, sizeof(T), &s->k);
  char* const mine = s->gather + run.node_rank * s->block;
  T* const val = reinterpret_cast<T*>(sh.method == SYNCD_COMPRESSION_TOPK ? mine + Align8(s->k * 4) : s->gather);
  uint32_t* const idx = sh.method == SYNCD_COMPRESSION_TOPK ? reinterpret_cast<uint32_t*>(mine) : s->idx;
  if (sh.method == SYNCD_COMPRESSION_RANDOMK)
    RandomIndices(Seed(run.tag, segment), s->end - s->begin, s->k, idx, reinterpret_cast<uint64_t*>(sh.scratch));
  size_t taken = 0;  // top-k, random-k: the block's elements so far
  char* part = mine;  // 1-bit: this part's scale and bits
  ForEachPart(sh.members, s->begin, s->end, [&](size_t lo, size_t hi, size_t i) {
    const size_t at = lo - s->begin, n = hi - lo;
    T* const v = NodeSumAt(group, run, sh.members, lo, hi, i, s->slot + at);
    if (sh.method == SYNCD_COMPRESSION_TOPK) {
      const size_t k = SparseCount(n, sh.ppm);
      TakeTopK(v, n, k, idx + taken, val + taken, reinterpret_cast<uint32_t*>(sh.scratch));
      for (size_t j = taken; j < taken + k; ++j) idx[j] += uint32_t(at);  // segment-relative
      taken += k;
    } else if (sh.method == SYNCD_COMPRESSION_RANDOMK) {
      for (; taken < s->k && idx[taken] < at + n; ++taken) {  // this part's share of the indices
        val[taken] = v[idx[taken] - at];
        v[idx[taken] - at] = T(0);
      }
    } else {
      const double scale = double(TakeScaledSign(v, n, reinterpret_cast<uint8_t*>(part + 8)));
      memcpy(part, &scale, 8);
      part += OneBitBytes(n);
    }
    if (v == s->slot + at && sh.members.residual[i]) memcpy(ResidualAt<T>(sh.members, i, lo), v, n * sizeof(T));
  });
  const uint64_t tag = run.tag | (segment % 4096);
  if (sh.method == SYNCD_COMPRESSION_RANDOMK) {
    s->task = Allreduce(run.transport, tag, val, buffer, s->k, sh.dtype, SYNCD_SUM);
  } else {
    BlockBounds bounds(sh.nodes + 1, 0);
    for (uint32_t n = 0; n < sh.nodes; ++n) bounds[n + 1] = bounds[n] + s->block;
    s->task = AllgatherBlocks(run.transport, tag, s->gather, buffer, bounds);
  }
}

// The nodes' blocks of an exchanged segment summed into its slot, in node order (the same sum on
// every node).
template <typename T>
void SumNodes(const Shared& sh, Segment<T>* s) {
  const size_t m = s->end - s->begin;
  std::fill(s->slot, s->slot + m, T(0));
  if (sh.method == SYNCD_COMPRESSION_RANDOMK) {
    AddAt(s->idx, reinterpret_cast<const T*>(s->gather), s->k, s->slot);
    return;
  }
  for (uint32_t n = 0; n < sh.nodes; ++n) {
    const char* theirs = s->gather + n * s->block;
    if (sh.method == SYNCD_COMPRESSION_TOPK) {
      AddAt(reinterpret_cast<const uint32_t*>(theirs), reinterpret_cast<const T*>(theirs + Align8(s->k * 4)), s->k,
            s->slot);
      continue;
    }
    ForEachPart(sh.members, s->begin, s->end, [&](size_t lo, size_t hi, size_t) {
      double scale;
      memcpy(&scale, theirs, 8);
      AddScaledSign(reinterpret_cast<const uint8_t*>(theirs + 8), T(scale), hi - lo, s->slot + (lo - s->begin));
      theirs += OneBitBytes(hi - lo);
    });
  }
}

template <typename T>
CommTask Run(CollectiveGroup group, AcrossNodes run) {
  const Request& f = group.front()->first();
  Shared sh{PinResiduals(group, run, sizeof(T)), f.compression, f.compression_ppm, run.transport->size(), f.dtype};
  const size_t count = sh.members.begin.back(), seg = kSegmentBytes / sizeof(T);
  size_t block_max = 0;
  for (size_t begin = 0; begin < count; begin += seg) {
    size_t k;
    block_max = std::max(block_max, SegmentBlockBytes(sh.method, sh.ppm, sh.members, begin,
                                                      std::min(count, begin + seg), sizeof(T), &k));
    sh.kmax = std::max(sh.kmax, k);
  }
  // Per segment in flight: its slot, every node's block, random-k's indices; shared: the
  // selection's scratch (top-k: an index per element; random-k: the bitmap).
  const size_t slot_bytes = Align8(seg * sizeof(T)), gather_bytes = sh.nodes * block_max;
  const size_t idx_bytes = Align8(sh.kmax * 4), stage_bytes = slot_bytes + gather_bytes + idx_bytes;
  const size_t scratch_bytes = std::max(seg * 4, Align8((seg + 63) / 64 * 8));
  const HostBuffer::Block buffer = run.buffer->Reserve(stage_bytes * kDepth + scratch_bytes);
  sh.scratch = buffer->data() + stage_bytes * kDepth;
  const std::vector<int64_t>* absent = f.op == SYNCD_AVERAGE ? run.absent.get() : nullptr;
  absl::InlinedVector<Segment<T>, kDepth> inflight;  // oldest first
  size_t next = 0;
  uint64_t segment = 0;
  while (next < count || !inflight.empty()) {
    while (next < count && inflight.size() < kDepth) {
      Segment<T>& s = inflight.emplace_back();
      char* const at = buffer->data() + (segment % kDepth) * stage_bytes;
      s.slot = reinterpret_cast<T*>(at);
      s.gather = at + slot_bytes;
      s.idx = reinterpret_cast<uint32_t*>(at + slot_bytes + gather_bytes);
      s.begin = next;
      s.end = next = std::min(count, next + seg);
      Post(group, run, sh, buffer, segment++, &s);
    }
    CommTasks stages;  // the younger segment keeps moving while the oldest is awaited
    for (Segment<T>& s : inflight) stages.push_back(&s.task);
    Status st = co_await AwaitFirst(stages);
    if (!st.ok()) co_return st;
    Segment<T>& oldest = inflight.front();
    SumNodes(sh, &oldest);
    run.host->ScatterRange(group, oldest.begin, oldest.end, reinterpret_cast<char*>(oldest.slot),
                           absent != nullptr ? absl::Span<const int64_t>(*absent) : absl::Span<const int64_t>());
    inflight.erase(inflight.begin());
  }
  co_return Status::Ok();
}

}  // namespace

bool IsFeedbackCompression(uint32_t compression) {
  return compression == SYNCD_COMPRESSION_TOPK || compression == SYNCD_COMPRESSION_RANDOMK ||
         compression == SYNCD_COMPRESSION_ONEBIT || compression == SYNCD_COMPRESSION_POWERSGD;
}

CommTask RunAcrossWithFeedback(CollectiveGroup group, AcrossNodes run) {
  if (group.front()->first().compression == SYNCD_COMPRESSION_POWERSGD)
    return RunAcrossWithPowerSgd(std::move(group), std::move(run));
  if (group.front()->first().dtype == SYNCD_FLOAT64) return Run<double>(std::move(group), std::move(run));
  return Run<float>(std::move(group), std::move(run));
}

uint64_t FeedbackWireBytes(uint32_t compression, uint32_t ratio_ppm, absl::Span<const uint64_t> member_bytes,
                           size_t element_bytes) {
  Members m;
  m.begin.push_back(0);
  for (uint64_t b : member_bytes) m.begin.push_back(m.begin.back() + b / element_bytes);
  uint64_t bytes = 0;
  const size_t count = m.begin.back(), seg = kSegmentBytes / element_bytes;
  for (size_t begin = 0; begin < count; begin += seg) {
    size_t k;
    bytes += SegmentBlockBytes(compression, ratio_ppm, m, begin, std::min(count, begin + seg), element_bytes, &k);
  }
  return bytes;
}

}  // namespace syncd
