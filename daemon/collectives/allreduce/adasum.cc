#include "daemon/collectives/allreduce/adasum.h"

#include <absl/container/inlined_vector.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "daemon/core/float_casts.h"
#include "daemon/transport/host_collectives.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

// Element offsets of a group's members in their concatenation, then its end.
using Bounds = absl::InlinedVector<size_t, 8>;

Bounds MemberBounds(const CollectiveGroup& group) {
  Bounds b{0};
  const size_t esize = abi::DtypeSize(group.front()->first().dtype);
  for (const ReadyTensor* t : group) b.push_back(b.back() + t->first().bytes / esize);
  return b;
}

size_t Members(const Bounds& m) { return m.size() - 1; }

bool PowerOfTwo(size_t n) { return n != 0 && (n & (n - 1)) == 0; }

// The rule's coefficient of a vector of squared norm `normsq`: 1 for a zero vector only. Horovod
// keeps 1 below 1e-8, which breaks the rule's scale invariance: its own stability tests (parallel
// vectors of float32's smallest normal magnitude, or spread from it to the square root of the
// largest) expect their average, which only a zero-only guard gives.
double Coefficient(double dot, double normsq) { return normsq > 0 ? 1.0 - dot / normsq * 0.5 : 1.0; }

// sums[3i .. 3i+2] += a.b, |a|^2, |b|^2 over member i's part of elements [lo, hi); a[k] and b[k]
// hold element lo + k.
template <typename A>
void AddPartials(const A* a, const A* b, const Bounds& m, size_t lo, size_t hi, double* sums) {
  for (size_t i = 0; i < Members(m); ++i) {
    const size_t s = std::max(lo, m[i]), e = std::min(hi, m[i + 1]);
    double dot = 0, aa = 0, bb = 0;
    for (size_t k = s; k < e; ++k) {
      const double x = double(a[k - lo]), y = double(b[k - lo]);
      dot += x * y;
      aa += x * x;
      bb += y * y;
    }
    sums[3 * i] += dot;
    sums[3 * i + 1] += aa;
    sums[3 * i + 2] += bb;
  }
}

// out = ca a + cb b over [lo, hi), member by member, with each member's coefficients from `sums`
// (whole vectors' dot products). `out` may be `a` or `b`.
template <typename A>
void Combine(A* out, const A* a, const A* b, const Bounds& m, size_t lo, size_t hi, const double* sums) {
  for (size_t i = 0; i < Members(m); ++i) {
    const size_t s = std::max(lo, m[i]), e = std::min(hi, m[i + 1]);
    const double ca = Coefficient(sums[3 * i], sums[3 * i + 1]), cb = Coefficient(sums[3 * i], sums[3 * i + 2]);
    for (size_t k = s; k < e; ++k) out[k - lo] = A(ca * double(a[k - lo]) + cb * double(b[k - lo]));
  }
}

// The tree over `n` whole vectors (a power of two, lower ranks first): v[0] ends holding the result.
template <typename A>
void Tree(A* const* v, size_t n, const Bounds& m) {
  std::vector<double> sums(3 * Members(m));
  for (size_t level = 1; level < n; level <<= 1)
    for (size_t r = 0; r + level < n; r += 2 * level) {
      std::fill(sums.begin(), sums.end(), 0.0);
      AddPartials(v[r], v[r + level], m, 0, m.back(), sums.data());
      Combine(v[r], v[r], v[r + level], m, 0, m.back(), sums.data());
    }
}

// `count` elements of a rank's tensor in the compute type, prescaled.
template <typename A>
void Load(const Request& r, size_t count, double prescale, A* out) {
  if constexpr (std::is_same_v<A, float>) {
    if (r.dtype == SYNCD_FLOAT16) HalfToFloats(reinterpret_cast<const uint16_t*>(r.data), out, count);
    if (r.dtype == SYNCD_BFLOAT16) Bfloat16ToFloats(reinterpret_cast<const uint16_t*>(r.data), out, count);
    if (r.dtype == SYNCD_FLOAT32) memcpy(out, r.data, count * sizeof(float));
  } else {
    memcpy(out, r.data, count * sizeof(double));
  }
  if (prescale != 1.0)
    for (size_t k = 0; k < count; ++k) out[k] = A(double(out[k]) * prescale);
}

// Every local rank's tensors into v[0 .. local) (each the group's concatenation).
template <typename A>
void LoadRanks(const CollectiveGroup& group, const Bounds& m, A* const* v) {
  for (size_t i = 0; i < group.size(); ++i) {
    const ReadyTensor& t = *group[i];
    for (size_t l = 0; l < t.requests.size(); ++l) Load(t.requests[l], m[i + 1] - m[i], t.first().prescale, v[l] + m[i]);
  }
}

// The result, postscaled, into every local rank's tensor of each member (`result` is scaled in
// place).
template <typename A>
void StoreResult(const CollectiveGroup& group, const Bounds& m, A* result) {
  for (size_t i = 0; i < group.size(); ++i) {
    const ReadyTensor& t = *group[i];
    const Request& head = t.first();
    A* from = result + m[i];
    const size_t count = m[i + 1] - m[i];
    if (head.postscale != 1.0)
      for (size_t k = 0; k < count; ++k) from[k] = A(double(from[k]) * head.postscale);
    char* first = t.requests.front().data;
    if constexpr (std::is_same_v<A, float>) {
      if (head.dtype == SYNCD_FLOAT16) FloatsToHalf(from, reinterpret_cast<uint16_t*>(first), count);
      if (head.dtype == SYNCD_BFLOAT16) FloatsToBfloat16(from, reinterpret_cast<uint16_t*>(first), count);
      if (head.dtype == SYNCD_FLOAT32) memcpy(first, from, count * sizeof(float));
    } else {
      memcpy(first, from, count * sizeof(double));
    }
    for (size_t l = 1; l < t.requests.size(); ++l) memcpy(t.requests[l].data, first, head.bytes);
  }
}

template <typename A>
void LocalAs(const CollectiveGroup& group) {
  const Bounds m = MemberBounds(group);
  const size_t n = group.front()->requests.size();
  std::vector<A> work(n * m.back());
  std::vector<A*> v(n);
  for (size_t l = 0; l < n; ++l) v[l] = work.data() + l * m.back();
  LoadRanks(group, m, v.data());
  Tree(v.data(), n, m);
  StoreResult(group, m, v[0]);
}

// Whether the set's ranks lie a power of two to a node on a power of two of nodes: the first
// levels of the tree are then within nodes, the others between them.
bool Aligned(const std::vector<uint32_t>& offsets) {
  const size_t nodes = offsets.size() - 1, per = offsets[1] - offsets[0];
  if (!PowerOfTwo(nodes) || !PowerOfTwo(per)) return false;
  for (size_t i = 0; i < nodes; ++i)
    if (offsets[i + 1] - offsets[i] != per) return false;
  return true;
}

// The levels between nodes on this node's vector `v` (the whole group): recursive vector halving,
// each level's dot products summed over the nodes of its subtree in node order (the same sums on
// every node), then distance doubling back. `tmp` holds half a vector.
template <typename A>
CommTask BetweenNodes(AcrossNodes run, const Bounds& m, A* v, A* tmp, BufferOwner owner) {
  const uint32_t me = run.node_rank, nodes = run.nodes();
  const size_t width = 3 * Members(m);
  auto partials = std::make_shared<std::vector<double>>(width * nodes);
  std::vector<double> sums(width);
  absl::InlinedVector<std::pair<size_t, size_t>, 8> ranges;
  size_t lo = 0, hi = m.back();
  uint64_t step = 0;
  for (uint32_t level = 1; level < nodes; level <<= 1, ++step) {
    const uint32_t partner = me ^ level;
    const bool low = (me & level) == 0;  // keeps the lower half; its vector is the rule's a
    const size_t mid = lo + (hi - lo) / 2;
    const size_t klo = low ? lo : mid, khi = low ? mid : hi, slo = low ? mid : lo, shi = low ? hi : mid;
    Transfers sends = {Transfer{partner, reinterpret_cast<char*>(v + slo), (shi - slo) * sizeof(A), owner}};
    Transfers recvs = {Transfer{partner, reinterpret_cast<char*>(tmp), (khi - klo) * sizeof(A), owner}};
    CommTask halve = Exchange(run.transport, run.tag | (2 * step), std::move(sends), std::move(recvs));
    if (Status st = co_await Await(&halve); !st.ok()) co_return st;
    const A* a = low ? v + klo : tmp;
    const A* b = low ? tmp : v + klo;
    double* mine = partials->data() + me * width;
    std::fill(mine, mine + width, 0.0);
    AddPartials(a, b, m, klo, khi, mine);
    const uint32_t base = me & ~(2 * level - 1);
    Transfers out, in;
    for (uint32_t q = base; q < base + 2 * level; ++q) {
      if (q == me) continue;
      out.push_back(Transfer{q, reinterpret_cast<char*>(mine), width * sizeof(double), partials});
      in.push_back(Transfer{q, reinterpret_cast<char*>(partials->data() + q * width), width * sizeof(double), partials});
    }
    CommTask dots = Exchange(run.transport, run.tag | (2 * step + 1), std::move(out), std::move(in));
    if (Status st = co_await Await(&dots); !st.ok()) co_return st;
    std::fill(sums.begin(), sums.end(), 0.0);
    for (uint32_t q = base; q < base + 2 * level; ++q)
      for (size_t j = 0; j < width; ++j) sums[j] += (*partials)[q * width + j];
    Combine(v + klo, a, b, m, klo, khi, sums.data());
    ranges.emplace_back(lo, hi);
    lo = klo;
    hi = khi;
  }
  for (size_t s = ranges.size(); s-- > 0;) {  // this node's piece and its partner's make the level's range
    const uint32_t partner = me ^ (uint32_t{1} << s);
    const bool low = (me & (uint32_t{1} << s)) == 0;
    const auto [plo, phi] = ranges[s];
    const size_t mid = plo + (phi - plo) / 2;
    const size_t olo = low ? mid : plo, ohi = low ? phi : mid;
    Transfers sends = {Transfer{partner, reinterpret_cast<char*>(v + lo), (hi - lo) * sizeof(A), owner}};
    Transfers recvs = {Transfer{partner, reinterpret_cast<char*>(v + olo), (ohi - olo) * sizeof(A), owner}};
    CommTask gather = Exchange(run.transport, run.tag | (64 + s), std::move(sends), std::move(recvs));
    if (Status st = co_await Await(&gather); !st.ok()) co_return st;
    lo = plo;
    hi = phi;
  }
  co_return Status::Ok();
}

template <typename A>
CommTask AcrossAs(CollectiveGroup group, AcrossNodes run) {
  const Bounds m = MemberBounds(group);
  const size_t count = m.back(), local = group.front()->requests.size();
  const std::vector<uint32_t>& offsets = *run.offsets;
  const bool aligned = Aligned(offsets);
  // Aligned: this node's ranks' vectors and half a vector to receive into. Otherwise every rank's.
  const size_t vectors = aligned ? local : offsets.back();
  const HostBuffer::Block block = run.buffer->Reserve((vectors * count + count / 2 + 1) * sizeof(A));
  A* const work = reinterpret_cast<A*>(block->data());
  const size_t first = aligned ? 0 : offsets[run.node_rank];
  std::vector<A*> v(vectors);
  for (size_t r = 0; r < vectors; ++r) v[r] = work + r * count;
  LoadRanks(group, m, v.data() + first);
  if (aligned) {
    Tree(v.data(), local, m);
    CommTask between = BetweenNodes(run, m, v[0], work + vectors * count, block);
    if (Status st = co_await Await(&between); !st.ok()) co_return st;
  } else {
    BlockBounds bounds(offsets.size());
    for (size_t i = 0; i < offsets.size(); ++i) bounds[i] = uint64_t(offsets[i]) * count * sizeof(A);
    CommTask gather = AllgatherBlocks(run.transport, run.tag, work, block, std::move(bounds));
    if (Status st = co_await Await(&gather); !st.ok()) co_return st;
    Tree(v.data(), vectors, m);
  }
  StoreResult(group, m, v[0]);
  co_return Status::Ok();
}

}  // namespace

void AdasumLocal(const CollectiveGroup& group) {
  if (group.front()->first().dtype == SYNCD_FLOAT64) return LocalAs<double>(group);
  LocalAs<float>(group);
}

CommTask RunAdasumAcross(CollectiveGroup group, AcrossNodes run) {
  if (group.front()->first().dtype == SYNCD_FLOAT64) return AcrossAs<double>(std::move(group), std::move(run));
  return AcrossAs<float>(std::move(group), std::move(run));
}

}  // namespace syncd
