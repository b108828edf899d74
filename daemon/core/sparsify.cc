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
void Take(T* v, const uint32_t* idx, size_t k, T* val) {
  for (size_t i = 0; i < k; ++i) {
    val[i] = v[idx[i]];
    v[idx[i]] = T(0);
  }
}

template <typename T>
void Add(const uint32_t* idx, const T* val, size_t k, T* out) {
  for (size_t i = 0; i < k; ++i) out[idx[i]] += val[i];
}

template <typename T>
T ScaledSign(T* v, size_t n, uint8_t* bits) {
  double sum[4] = {0, 0, 0, 0};  // four chains, so that the additions overlap
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (size_t j = 0; j < 4; ++j) sum[j] += std::fabs(double(v[i + j]));
  for (; i < n; ++i) sum[0] += std::fabs(double(v[i]));
  const T scale = n == 0 ? T(0) : T((sum[0] + sum[1] + sum[2] + sum[3]) / double(n));
  for (size_t b = 0; b < (n + 7) / 8; ++b) {
    uint8_t mask = 0;
    for (size_t j = 0, end = std::min<size_t>(8, n - b * 8); j < end; ++j) {
      T& x = v[b * 8 + j];
      const bool positive = x >= T(0);
      mask = uint8_t(mask | (uint32_t(positive) << j));
      x -= positive ? scale : -scale;
    }
    bits[b] = mask;
  }
  return scale;
}

template <typename T>
void AddSign(const uint8_t* bits, T scale, size_t n, T* out) {
  // +-scale for each bit of each byte value: a byte's eight additions become one row's, which the
  // compiler vectorizes (40x faster than testing bit by bit on a 1 MiB segment). The table costs
  // 2048 stores: short runs (a fused group's small tensors) go bit by bit.
  const size_t whole = n >= 4096 ? n / 8 : 0;
  std::array<std::array<T, 8>, 256> rows;
  if (whole > 0)
    for (size_t b = 0; b < 256; ++b)
      for (size_t j = 0; j < 8; ++j) rows[b][j] = ((b >> j) & 1) ? scale : -scale;
  for (size_t i = 0; i < whole; ++i) {
    const T* row = rows[bits[i]].data();
    T* o = out + i * 8;
    for (size_t j = 0; j < 8; ++j) o[j] += row[j];
  }
  for (size_t i = whole * 8; i < n; ++i) out[i] += ((bits[i / 8] >> (i % 8)) & 1) ? scale : -scale;
}

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
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

// Floyd's sampling: for j = n-k .. n-1 draw t in [0, j]; take t, or j when t is taken already.
// Every subset of k is equally likely; the bitmap yields the indices in order.
void RandomIndices(uint64_t seed, size_t n, size_t k, uint32_t* idx, uint64_t* bitmap) {
  k = std::min(k, n);
  const size_t words = (n + 63) / 64;
  std::fill(bitmap, bitmap + words, 0);
  uint64_t state = seed;
  for (size_t j = n - k; j < n; ++j) {
    size_t t = size_t(SplitMix64(&state) % (j + 1));
    if ((bitmap[t / 64] >> (t % 64)) & 1) t = j;
    bitmap[t / 64] |= uint64_t{1} << (t % 64);
  }
  size_t m = 0;
  for (size_t w = 0; w < words; ++w)
    for (uint64_t b = bitmap[w]; b != 0; b &= b - 1) idx[m++] = uint32_t(w * 64 + size_t(__builtin_ctzll(b)));
}

void TakeAt(float* v, const uint32_t* idx, size_t k, float* val) { Take(v, idx, k, val); }
void TakeAt(double* v, const uint32_t* idx, size_t k, double* val) { Take(v, idx, k, val); }
void AddAt(const uint32_t* idx, const float* val, size_t k, float* out) { Add(idx, val, k, out); }
void AddAt(const uint32_t* idx, const double* val, size_t k, double* out) { Add(idx, val, k, out); }
float TakeScaledSign(float* v, size_t n, uint8_t* bits) { return ScaledSign(v, n, bits); }
double TakeScaledSign(double* v, size_t n, uint8_t* bits) { return ScaledSign(v, n, bits); }
void AddScaledSign(const uint8_t* bits, float scale, size_t n, float* out) { AddSign(bits, scale, n, out); }
void AddScaledSign(const uint8_t* bits, double scale, size_t n, double* out) { AddSign(bits, scale, n, out); }

}  // namespace syncd
