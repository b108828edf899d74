#include "daemon/core/sparsify.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

namespace syncd {
namespace {

// The order top-k ranks by: the magnitude, a NaN above everything.
template <typename T>
double Key(T x) {
  return std::isnan(x) ? std::numeric_limits<double>::infinity() : std::fabs(double(x));
}

// A threshold from a sample of `v`'s magnitudes such that about 2k elements are at or above it
// (0 when the segment is too small for a sample to save anything).
template <typename T>
double SampledThreshold(const T* v, size_t n, size_t k) {
  constexpr size_t kSamples = 2048;
  if (n < 8 * kSamples || k * 4 > n) return 0;
  std::array<double, kSamples> sample;
  const size_t stride = n / kSamples;
  for (size_t s = 0; s < kSamples; ++s) sample[s] = Key(v[s * stride]);
  const size_t at = std::min(kSamples - 1, 2 * k * kSamples / n);
  std::nth_element(sample.begin(), sample.begin() + ptrdiff_t(at), sample.end(), std::greater<double>());
  return sample[at];
}

// The k-th largest key among the candidates `cand[0, m)` (k <= m), by nth_element over their keys
// copied into `keys` (contiguous, so the selection runs on values, not through indices).
template <typename T>
double KthKey(const T* v, const uint32_t* cand, size_t m, size_t k, T* keys) {
  for (size_t j = 0; j < m; ++j) keys[j] = T(Key(v[cand[j]]));
  std::nth_element(keys, keys + ptrdiff_t(k - 1), keys + m, std::greater<T>());
  return double(keys[k - 1]);
}

template <typename T>
void TopK(T* v, size_t n, size_t k, uint32_t* idx, T* val, uint32_t* scratch) {
  k = std::min(k, n);
  if (k == 0) return;
  // Candidates, ascending: every element at or above the threshold. With at least k of them, the
  // top k are all among them (an element left out is below every candidate); otherwise all are.
  size_t m = 0;
  if (const double t = SampledThreshold(v, n, k); t > 0) {
    // Without a branch (a fifth of the elements pass, unpredictably): a NaN is not below `t`.
    const T at_least = T(t);
    for (size_t i = 0; i < n; ++i) {
      scratch[m] = uint32_t(i);
      m += !(std::fabs(v[i]) < at_least);
    }
    if (m < k) m = 0;
  }
  if (m == 0) {
    for (size_t i = 0; i < n; ++i) scratch[i] = uint32_t(i);
    m = n;
  }
  // The candidates' keys go after them in `scratch` where they fit; the k-th largest is the cut:
  // every candidate above it, then those equal to it in index order until there are k.
  const size_t key_at = (m * 4 + sizeof(T) - 1) / sizeof(T) * sizeof(T);
  double cut;
  if (key_at + m * sizeof(T) <= n * 4) {
    cut = KthKey(v, scratch, m, k, reinterpret_cast<T*>(reinterpret_cast<char*>(scratch) + key_at));
  } else {  // (too many candidates for their keys to fit: ordered through their indices)
    const auto before = [v](uint32_t a, uint32_t b) { return Key(v[a]) > Key(v[b]); };
    std::nth_element(scratch, scratch + ptrdiff_t(k - 1), scratch + m, before);
    cut = Key(v[scratch[k - 1]]);
    m = n;  // the pass below then goes over every element, in order
    for (size_t i = 0; i < n; ++i) scratch[i] = uint32_t(i);
  }
  size_t above = 0;
  for (size_t j = 0; j < m; ++j) above += Key(v[scratch[j]]) > cut;
  // Without branches (about half the candidates are taken): each is written at the next place and
  // kept there only when taken.
  size_t equal = k - above, taken = 0;  // (at least 1: the cut itself)
  for (size_t j = 0; j < m && taken < k; ++j) {
    const uint32_t i = scratch[j];
    const T x = v[i];
    const double key = Key(x);
    const bool tie = key == cut && equal > 0, take = key > cut || tie;
    idx[taken] = i;
    val[taken] = x;
    v[i] = take ? T(0) : x;
    taken += take;
    equal -= tie;
  }
}

template <typename T>
void Add(const uint32_t* idx, const T* val, size_t k, T* out) {
  for (size_t i = 0; i < k; ++i) out[idx[i]] += val[i];
}

template <typename T>
bool OneBit(T* v, size_t n, uint8_t* bits, T* scales) {
  bool finite = true;
  for (size_t b = 0; b < OneBitBlocks(n); ++b) {
    T* const x = v + b * kOneBitBlock;
    const size_t m = std::min(kOneBitBlock, n - b * kOneBitBlock);
    double sum_pos = 0, sum_neg = 0;
    size_t pos = 0;
    uint64_t word = 0;
    for (size_t j = 0; j < m; ++j) {  // without branches: the signs are unpredictable
      const bool p = x[j] >= T(0);
      sum_pos += p ? double(x[j]) : 0.0;
      sum_neg += p ? 0.0 : double(x[j]);
      pos += p;
      word |= uint64_t(p) << j;
    }
    const T up = pos == 0 ? T(0) : T(sum_pos / double(pos)), down = pos == m ? T(0) : T(sum_neg / double(m - pos));
    finite = finite && std::isfinite(up) && std::isfinite(down);
    for (size_t j = 0; j < m; ++j) x[j] -= ((word >> j) & 1) ? up : down;
    scales[2 * b] = up;
    scales[2 * b + 1] = down;
    memcpy(bits + b * (kOneBitBlock / 8), &word, (m + 7) / 8);  // little-endian: bit j of byte j / 8
  }
  return finite;
}

template <typename T>
void AddBits(const uint8_t* bits, const T* scales, size_t n, T* out) {
  for (size_t b = 0; b < OneBitBlocks(n); ++b) {
    T* const o = out + b * kOneBitBlock;
    const size_t m = std::min(kOneBitBlock, n - b * kOneBitBlock);
    uint64_t word = 0;
    memcpy(&word, bits + b * (kOneBitBlock / 8), (m + 7) / 8);
    const T up = scales[2 * b], down = scales[2 * b + 1];
    for (size_t j = 0; j < m; ++j) o[j] += ((word >> j) & 1) ? up : down;
  }
}

}  // namespace

size_t SparseCount(size_t n, uint32_t ratio_ppm) {
  const size_t k = size_t((uint64_t(n) * ratio_ppm + 999'999) / 1'000'000);
  return std::min(n, std::max<size_t>(1, k));
}

void TakeTopK(float* v, size_t n, size_t k, uint32_t* idx, float* val, uint32_t* scratch) {
  TopK(v, n, k, idx, val, scratch);
}
void TakeTopK(double* v, size_t n, size_t k, uint32_t* idx, double* val, uint32_t* scratch) {
  TopK(v, n, k, idx, val, scratch);
}

void AddAt(const uint32_t* idx, const float* val, size_t k, float* out) { Add(idx, val, k, out); }
void AddAt(const uint32_t* idx, const double* val, size_t k, double* out) { Add(idx, val, k, out); }
bool TakeOneBit(float* v, size_t n, uint8_t* bits, float* scales) { return OneBit(v, n, bits, scales); }
bool TakeOneBit(double* v, size_t n, uint8_t* bits, double* scales) { return OneBit(v, n, bits, scales); }
void AddOneBit(const uint8_t* bits, const float* scales, size_t n, float* out) { AddBits(bits, scales, n, out); }
void AddOneBit(const uint8_t* bits, const double* scales, size_t n, double* out) { AddBits(bits, scales, n, out); }

}  // namespace syncd
