#include "daemon/collectives/allreduce/feedback.h"

#include <absl/container/inlined_vector.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "daemon/core/residual_store.h"
#include "daemon/core/sparsify.h"
#include "daemon/exec/host_executor.h"
#include "daemon/transport/host_collectives.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

constexpr size_t kSegmentBytes = 1 << 20;

constexpr size_t Align8(size_t n) { return (n + 7) & ~size_t{7}; }

// Each node's block of a segment begins with a word saying whether its inputs held a value that is
// not finite (1) or not (0).
constexpr size_t kFlagBytes = 8;

// 1-bit's part for `n` elements of one tensor: each kOneBitBlock-element block's two values, then the bits.
size_t OneBitBytes(size_t n, size_t esize) { return 2 * OneBitBlocks(n) * esize + Align8((n + 7) / 8); }

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

// What one node sends of segment [begin, end): its bytes (the flag word included), and *k the
// elements (top-k). A fused group's tensors differ in magnitude, so top-k takes each member's
// part's own k largest and 1-bit's blocks never span two parts: one selection or one scale across
// them would starve or drown the small ones (and make a tensor's result depend on what it was
// fused with).
size_t SegmentBlockBytes(uint32_t method, uint32_t ppm, const Members& m, size_t begin, size_t end, size_t esize,
                         size_t* k) {
  *k = 0;
  size_t bytes = kFlagBytes;
  if (method == SYNCD_COMPRESSION_TOPK) {
    ForEachPart(m, begin, end, [&](size_t lo, size_t hi, size_t) { *k += SparseCount(hi - lo, ppm); });
    return bytes + Align8(*k * 4) + Align8(*k * esize);
  }
  ForEachPart(m, begin, end, [&](size_t lo, size_t hi, size_t) { bytes += OneBitBytes(hi - lo, esize); });
  return bytes;
}

// Two segments in flight: while one crosses the nodes the next is reduced and compressed.
constexpr size_t kDepth = 2;

// One segment of [begin, end): its node sum (then the nodes'), every node's block (this node's
// at node_rank).
template <typename T>
struct Segment {
  CommTask task;
  size_t begin = 0, end = 0, k = 0, block = 0;
  T* slot = nullptr;
  char* gather = nullptr;
};

// What a group's segments share: its members and residuals, the method, the selection's scratch.
struct Shared {
  Members members;
  uint32_t method = 0, ppm = 0, nodes = 0;
  syncd_dtype dtype = SYNCD_FLOAT32;
  char* scratch = nullptr;
};

// Reduces segment [s->begin, s->end) locally with the members' residuals, compresses this node's
// block part by part, keeps what stayed as the residuals and posts the exchange. A part whose sum
// held a value that is not finite (a NaN or infinity in a rank's gradient: AMP's overflow steps)
// crosses as it is compressed and leaves no residual: the tensor's next step starts afresh, where
// the residual would carry the NaN into every later step.
template <typename T>
void Post(const CollectiveGroup& group, const AcrossNodes& run, Shared& sh, const HostBuffer::Block& buffer,
          uint64_t segment, Segment<T>* s) {
  s->block = SegmentBlockBytes(sh.method, sh.ppm, sh.members, s->begin, s->end, sizeof(T), &s->k);
  char* const mine = s->gather + run.node_rank * s->block;
  uint32_t* const idx = reinterpret_cast<uint32_t*>(mine + kFlagBytes);  // top-k
  T* const val = reinterpret_cast<T*>(mine + kFlagBytes + Align8(s->k * 4));
  uint64_t not_finite = 0;
  size_t taken = 0;  // top-k: the block's elements so far
  char* part = mine + kFlagBytes;  // 1-bit: this part's values and bits
  ForEachPart(sh.members, s->begin, s->end, [&](size_t lo, size_t hi, size_t i) {
    const size_t at = lo - s->begin, n = hi - lo;
    T* const v = NodeSumAt(group, run, sh.members, lo, hi, i, s->slot + at);
    bool finite = true;
    if (sh.method == SYNCD_COMPRESSION_TOPK) {
      const size_t k = SparseCount(n, sh.ppm);
      TakeTopK(v, n, k, idx + taken, val + taken, reinterpret_cast<uint32_t*>(sh.scratch));
      for (size_t j = taken; j < taken + k; ++j) {
        idx[j] += uint32_t(at);  // segment-relative
        finite = finite && std::isfinite(val[j]);  // (a NaN or infinity is taken first)
      }
      taken += k;
    } else {
      const size_t scales = 2 * OneBitBlocks(n) * sizeof(T);
      finite = TakeOneBit(v, n, reinterpret_cast<uint8_t*>(part + scales), reinterpret_cast<T*>(part));
      part += OneBitBytes(n, sizeof(T));
    }
    not_finite |= !finite;
    if (!sh.members.residual[i]) return;
    T* const residual = ResidualAt<T>(sh.members, i, lo);
    if (!finite) std::fill(residual, residual + n, T(0));
    else if (v != residual) memcpy(residual, v, n * sizeof(T));
  });
  memcpy(mine, &not_finite, kFlagBytes);
  BlockBounds bounds(sh.nodes + 1, 0);
  for (uint32_t n = 0; n < sh.nodes; ++n) bounds[n + 1] = bounds[n] + s->block;
  s->task = AllgatherBlocks(run.transport, run.tag | (segment % 4096), s->gather, buffer, bounds);
}

// The nodes' blocks of an exchanged segment summed into its slot, in node order (the same sum on
// every node). Returns the segment-relative index of a value of the sum that is not finite although
// every node's inputs were (the sum overflowed T), or SIZE_MAX; the same on every node.
template <typename T>
size_t SumNodes(const Shared& sh, Segment<T>* s) {
  const size_t m = s->end - s->begin;
  std::fill(s->slot, s->slot + m, T(0));
  bool inputs_finite = true;
  double bound = 0;  // 1-bit: the nodes' largest values summed
  for (uint32_t n = 0; n < sh.nodes; ++n) {
    const char* theirs = s->gather + n * s->block;
    uint64_t not_finite;
    memcpy(&not_finite, theirs, kFlagBytes);
    inputs_finite = inputs_finite && not_finite == 0;
    theirs += kFlagBytes;
    if (sh.method == SYNCD_COMPRESSION_TOPK) {
      AddAt(reinterpret_cast<const uint32_t*>(theirs), reinterpret_cast<const T*>(theirs + Align8(s->k * 4)), s->k,
            s->slot);
      continue;
    }
    double most = 0;  // this node's largest value
    ForEachPart(sh.members, s->begin, s->end, [&](size_t lo, size_t hi, size_t) {
      const size_t values = 2 * OneBitBlocks(hi - lo);
      const T* const scales = reinterpret_cast<const T*>(theirs);
      for (size_t j = 0; j < values; ++j) most = std::max(most, std::fabs(double(scales[j])));
      AddOneBit(reinterpret_cast<const uint8_t*>(theirs + values * sizeof(T)), scales, hi - lo,
                s->slot + (lo - s->begin));
      theirs += OneBitBytes(hi - lo, sizeof(T));
    });
    bound += most;
  }
  if (!inputs_finite) return SIZE_MAX;  // a NaN in, a NaN out: as an uncompressed sum would carry it
  // Only the elements some node sent can have overflowed (top-k); 1-bit's every element.
  if (sh.method == SYNCD_COMPRESSION_TOPK) {
    for (uint32_t n = 0; n < sh.nodes; ++n) {
      const uint32_t* idx = reinterpret_cast<const uint32_t*>(s->gather + n * s->block + kFlagBytes);
      for (size_t j = 0; j < s->k; ++j)
        if (!std::isfinite(s->slot[idx[j]])) return idx[j];
    }
    return SIZE_MAX;
  }
  // 1-bit: no element's sum can exceed the nodes' largest values summed; only then is it looked at.
  if (bound <= double(std::numeric_limits<T>::max())) return SIZE_MAX;
  for (size_t j = 0; j < m; ++j)
    if (!std::isfinite(s->slot[j])) return j;
  return SIZE_MAX;
}

// The error of a segment whose compressed sum is not finite at element `at` of the concatenation
// though every node's inputs were: the member it falls in, the method, the member's step.
template <typename T>
Status NotFinite(const CollectiveGroup& group, const Shared& sh, size_t at) {
  size_t i = 0;
  while (i + 2 < sh.members.begin.size() && sh.members.begin[i + 1] <= at) ++i;
  const Request& r = group[i]->first();
  const uint64_t step = sh.members.residual[i].uses();
  return InvalidArgument(
      "tensor '" + r.name + "': its " + abi::CompressionName(sh.method) + "-compressed exchange" +
      (step != 0 ? " (step " + std::to_string(step) + " of the tensor)" : std::string()) +
      " gave a value that is not finite (element " + std::to_string(at - sh.members.begin[i]) +
      ") though every node's input was finite: the nodes' sum overflows " +
      (sizeof(T) == 4 ? "float32" : "float64") + "; send the tensor uncompressed (Compression.none) or scale it down");
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
  }
  // Per segment in flight: its slot, every node's block; shared: top-k's scratch (an index per
  // element).
  const size_t slot_bytes = Align8(seg * sizeof(T)), gather_bytes = sh.nodes * block_max;
  const size_t stage_bytes = slot_bytes + gather_bytes;
  const size_t scratch_bytes = sh.method == SYNCD_COMPRESSION_TOPK ? seg * 4 : 0;
  const HostBuffer::Block buffer = run.buffer->Reserve(stage_bytes * kDepth + scratch_bytes);
  sh.scratch = buffer->data() + stage_bytes * kDepth;
  const std::vector<int64_t>* absent = f.op == SYNCD_AVERAGE ? run.absent.get() : nullptr;
  absl::InlinedVector<Segment<T>, kDepth> inflight;  // oldest first
  size_t next = 0;
  uint64_t segment = 0;
  Status refused;  // a sum that overflowed: no more segments, those in flight finish first
  while ((refused.ok() && next < count) || !inflight.empty()) {
    while (refused.ok() && next < count && inflight.size() < kDepth) {
      Segment<T>& s = inflight.emplace_back();
      char* const at = buffer->data() + (segment % kDepth) * stage_bytes;
      s.slot = reinterpret_cast<T*>(at);
      s.gather = at + slot_bytes;
      s.begin = next;
      s.end = next = std::min(count, next + seg);
      Post(group, run, sh, buffer, segment++, &s);
    }
    CommTasks stages;  // the younger segment keeps moving while the oldest is awaited
    for (Segment<T>& s : inflight) stages.push_back(&s.task);
    Status st = co_await AwaitFirst(stages);
    if (!st.ok()) co_return st;
    Segment<T>& oldest = inflight.front();
    if (!refused.ok()) {
    } else if (const size_t at = SumNodes(sh, &oldest); at != SIZE_MAX) {
      refused = NotFinite<T>(group, sh, oldest.begin + at);
    } else {
      run.host->ScatterRange(group, oldest.begin, oldest.end, reinterpret_cast<char*>(oldest.slot),
                             absent != nullptr ? absl::Span<const int64_t>(*absent) : absl::Span<const int64_t>());
    }
    inflight.erase(inflight.begin());
  }
  if (!refused.ok()) {
    if (run.refused == nullptr) co_return refused;
    *run.refused = std::move(refused);
  }
  co_return Status::Ok();
}

}  // namespace

bool IsFeedbackCompression(uint32_t compression) {
  return compression == SYNCD_COMPRESSION_TOPK || compression == SYNCD_COMPRESSION_ONEBIT ||
         compression == SYNCD_COMPRESSION_POWERSGD;
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
