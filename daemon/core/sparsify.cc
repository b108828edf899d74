#include "daemon/core/sparsify.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

// Each byte value's eight bits as 0 or 1 in T: a byte of bits adds its eight values as one row
// the compiler vectorizes (bit by bit was 5x slower on ResNet-50's gradients).
template <typename T>
const std::array<std::array<T, 8>, 256>& BitRows() {
  static const auto rows = [] {
    std::array<std::array<T, 8>, 256> r{};
    for (size_t b = 0; b < 256; ++b)
      for (size_t j = 0; j < 8; ++j) r[b][j] = T((b >> j) & 1);
    return r;
  }();
  return rows;
}

// a where `take`, else b, by the bits (a compare and two masks: the compiler turned every ternary
// and 0/1 product into a branch, mispredicted half the time on gradients' signs).
template <typename T>
T Select(bool take, T a, T b) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  U ua, ub;
  memcpy(&ua, &a, sizeof(T));
  memcpy(&ub, &b, sizeof(T));
  const U mask = U(0) - U(take);
  const U r = (ua & mask) | (ub & ~mask);
  T out;
  memcpy(&out, &r, sizeof(T));
  return out;
}

#if defined(__SSE2__)
// A whole block of float32 in four-lane vectors, one sign mask for its sums, bits and residual:
// 0.9 ns per element where the generic loop below took 2.1 (ResNet-18's 11.7 M gradients, a build
// on both cores beside it). Returns whether both of the block's values are finite.
bool OneBitBlock(float* x, uint8_t* bits, float* scales) {
  static_assert(kOneBitBlock == 32);
  const __m128 zero = _mm_setzero_ps(), one = _mm_set1_ps(1.0f), scale = _mm_set1_ps(1.0f / kOneBitBlock);
  __m128 up_sum = zero, down_sum = zero, ups = zero, keep[8];
  uint32_t word = 0;
  for (int k = 0; k < 8; ++k) {
    const __m128 v = _mm_loadu_ps(x + 4 * k);
    const __m128 y = _mm_mul_ps(v, scale);  // over the block's size (exact): finite values never sum to infinity
    keep[k] = _mm_cmpge_ps(v, zero);  // a NaN is not kept: it goes to the other value, which it makes NaN
    up_sum = _mm_add_ps(up_sum, _mm_and_ps(keep[k], y));
    down_sum = _mm_add_ps(down_sum, _mm_andnot_ps(keep[k], y));
    ups = _mm_add_ps(ups, _mm_and_ps(keep[k], one));
    word |= uint32_t(_mm_movemask_ps(keep[k])) << (4 * k);
  }
  alignas(16) float lanes[3][4];
  _mm_store_ps(lanes[0], up_sum);
  _mm_store_ps(lanes[1], down_sum);
  _mm_store_ps(lanes[2], ups);
  const float sum_up = (lanes[0][0] + lanes[0][1]) + (lanes[0][2] + lanes[0][3]);
  const float sum_down = (lanes[1][0] + lanes[1][1]) + (lanes[1][2] + lanes[1][3]);
  const float count_up = (lanes[2][0] + lanes[2][1]) + (lanes[2][2] + lanes[2][3]);
  const float up = count_up == 0.0f ? 0.0f : sum_up / count_up * float(kOneBitBlock);
  const float down = count_up == float(kOneBitBlock) ? 0.0f : sum_down / (float(kOneBitBlock) - count_up) * float(kOneBitBlock);
  const __m128 up4 = _mm_set1_ps(up), down4 = _mm_set1_ps(down);
  for (int k = 0; k < 8; ++k) {
    const __m128 sent = _mm_or_ps(_mm_and_ps(keep[k], up4), _mm_andnot_ps(keep[k], down4));
    _mm_storeu_ps(x + 4 * k, _mm_sub_ps(_mm_loadu_ps(x + 4 * k), sent));
  }
  memcpy(bits, &word, sizeof(word));  // little-endian: byte k holds elements 8k to 8k + 7
  scales[0] = up;
  scales[1] = down;
  return std::isfinite(up) && std::isfinite(down);
}

// out += a whole block's values by its bits, four lanes at a time (each lane's bit tested in
// place): 0.5 ns per element where the byte rows below took 6.4 (their select became a branch on
// every bit).
void AddBitsBlock(const uint8_t* bits, float up, float down, float* out) {
  uint32_t word;
  memcpy(&word, bits, sizeof(word));
  const __m128i lane_bit = _mm_set_epi32(8, 4, 2, 1);
  const __m128 up4 = _mm_set1_ps(up), down4 = _mm_set1_ps(down);
  for (int k = 0; k < 8; ++k) {
    const __m128i nibble = _mm_and_si128(_mm_set1_epi32(int((word >> (4 * k)) & 15)), lane_bit);
    const __m128 keep = _mm_castsi128_ps(_mm_cmpeq_epi32(nibble, lane_bit));
    const __m128 sent = _mm_or_ps(_mm_and_ps(keep, up4), _mm_andnot_ps(keep, down4));
    _mm_storeu_ps(out + 4 * k, _mm_add_ps(_mm_loadu_ps(out + 4 * k), sent));
  }
}
#endif

template <typename T>
bool OneBit(T* v, size_t n, uint8_t* bits, T* scales) {
  bool finite = true;
  for (size_t b = 0; b < OneBitBlocks(n); ++b) {
    T* const x = v + b * kOneBitBlock;
    const size_t m = std::min(kOneBitBlock, n - b * kOneBitBlock);
#if defined(__SSE2__)
    if constexpr (std::is_same_v<T, float>) {
      if (m == kOneBitBlock) {
        finite = OneBitBlock(x, bits + b * (kOneBitBlock / 8), scales + 2 * b) && finite;
        continue;
      }
    }
#endif
    // Eight lanes of sums, so that the additions vectorize without reordering one chain; of each
    // value over the block's size (a power of two: exact), so that finite values never sum to an
    // infinity in T.
    // Without branches (the signs are unpredictable).
    constexpr T kScale = T(1) / T(kOneBitBlock);
    T up_sum[8] = {}, down_sum[8] = {}, ups[8] = {};
    size_t j = 0;
    for (; j + 8 <= m; j += 8)
      for (size_t l = 0; l < 8; ++l) {
        const T y = x[j + l] * kScale;
        const bool keep = y >= T(0);
        up_sum[l] += Select(keep, y, T(0));
        down_sum[l] += Select(keep, T(0), y);
        ups[l] += Select(keep, T(1), T(0));
      }
    for (; j < m; ++j) {
      const T y = x[j] * kScale;
      const bool keep = y >= T(0);
      up_sum[0] += Select(keep, y, T(0));
      down_sum[0] += Select(keep, T(0), y);
      ups[0] += Select(keep, T(1), T(0));
    }
    T sum_up = 0, sum_down = 0, count_up = 0;
    for (size_t l = 0; l < 8; ++l) sum_up += up_sum[l], sum_down += down_sum[l], count_up += ups[l];
    const T up = count_up == T(0) ? T(0) : sum_up / count_up * T(kOneBitBlock);
    const T down = count_up == T(m) ? T(0) : sum_down / (T(m) - count_up) * T(kOneBitBlock);
    finite = finite && std::isfinite(up) && std::isfinite(down);
    for (size_t k = 0; k < (m + 7) / 8; ++k) {
      uint8_t mask = 0;
      for (size_t j = 0; j < std::min<size_t>(8, m - k * 8); ++j) mask = uint8_t(mask | (uint32_t(x[k * 8 + j] >= T(0)) << j));
      bits[b * (kOneBitBlock / 8) + k] = mask;
    }
    for (size_t i = 0; i < m; ++i) x[i] -= Select(x[i] >= T(0), up, down);
    scales[2 * b] = up;
    scales[2 * b + 1] = down;
  }
  return finite;
}

template <typename T>
void AddBits(const uint8_t* bits, const T* scales, size_t n, T* out) {
  const auto& rows = BitRows<T>();
  for (size_t b = 0; b < OneBitBlocks(n); ++b) {
    T* const o = out + b * kOneBitBlock;
    const size_t m = std::min(kOneBitBlock, n - b * kOneBitBlock);
    const T up = scales[2 * b], down = scales[2 * b + 1];
    const uint8_t* const mine = bits + b * (kOneBitBlock / 8);
#if defined(__SSE2__)
    if constexpr (std::is_same_v<T, float>) {
      if (m == kOneBitBlock) {
        AddBitsBlock(mine, up, down, o);
        continue;
      }
    }
#endif
    if (m == kOneBitBlock) {
      for (size_t k = 0; k < kOneBitBlock / 8; ++k) {
        const T* row = rows[mine[k]].data();
        T* ok = o + k * 8;
        for (size_t j = 0; j < 8; ++j) ok[j] += row[j] != T(0) ? up : down;
      }
      continue;
    }
    for (size_t j = 0; j < m; ++j) o[j] += ((mine[j / 8] >> (j % 8)) & 1) ? up : down;
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
