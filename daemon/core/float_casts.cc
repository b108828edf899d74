#include "daemon/core/float_casts.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>

#include "daemon/core/reduce_kernels.h"

namespace syncd {
namespace {

#if defined(__x86_64__)
// Asked once, of CPUID itself (clang 14's __builtin_cpu_supports knows no "f16c"): F16C and AVX,
// and the OS saving the YMM registers (XGETBV: XMM and YMM state enabled).
bool HasF16c() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    if (!(c & bit_F16C) || !(c & bit_AVX) || !(c & bit_OSXSAVE)) return false;
    uint32_t lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 0x6u) == 0x6u;
  }();
  return has;
}

__attribute__((target("avx,f16c"))) size_t HalfToFloatsF16c(const uint16_t* in, float* out, size_t n) {
  size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + k));
    _mm256_storeu_ps(out + k, _mm256_cvtph_ps(h));
  }
  return k;
}

__attribute__((target("avx,f16c"))) size_t FloatsToHalfF16c(const float* in, uint16_t* out, size_t n) {
  size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + k), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k), h);
  }
  return k;
}
#endif

// float64 goes through float32 in chunks of this many elements (on the stack).
constexpr size_t kChunk = 2048;

}  // namespace

void HalfToFloats(const uint16_t* in, float* out, size_t n) {
  size_t k = 0;
#if defined(__x86_64__)
  if (HasF16c()) k = HalfToFloatsF16c(in, out, n);
#endif
  for (; k < n; ++k) out[k] = HalfToFloat(in[k]);
}

void FloatsToHalf(const float* in, uint16_t* out, size_t n) {
  size_t k = 0;
#if defined(__x86_64__)
  if (HasF16c()) k = FloatsToHalfF16c(in, out, n);
#endif
  for (; k < n; ++k) out[k] = FloatToHalf(in[k]);
}

void Bfloat16ToFloats(const uint16_t* in, float* out, size_t n) {
  for (size_t k = 0; k < n; ++k) {
    const uint32_t bits = uint32_t(in[k]) << 16;
    memcpy(out + k, &bits, 4);
  }
}

void FloatsToBfloat16(const float* in, uint16_t* out, size_t n) {
  for (size_t k = 0; k < n; ++k) {
    uint32_t x;
    memcpy(&x, in + k, 4);
    const uint32_t rounded = (x + 0x7fff + ((x >> 16) & 1)) >> 16;
    const uint32_t quiet_nan = (x >> 16) | 0x40;
    out[k] = uint16_t((x & 0x7fffffff) > 0x7f800000 ? quiet_nan : rounded);
  }
}

syncd_dtype WireDtype(uint32_t compression, syncd_dtype dtype) {
  switch (compression) {
    case SYNCD_COMPRESSION_FP16:
      return SYNCD_FLOAT16;
    case SYNCD_COMPRESSION_BF16:
      return SYNCD_BFLOAT16;
    default:
      return dtype;
  }
}

void CastToWire(syncd_dtype dtype, syncd_dtype wire, const void* in, void* out, size_t n) {
  auto* o = static_cast<uint16_t*>(out);
  auto down = wire == SYNCD_FLOAT16 ? FloatsToHalf : FloatsToBfloat16;
  if (dtype == SYNCD_FLOAT32) return down(static_cast<const float*>(in), o, n);
  const auto* d = static_cast<const double*>(in);
  float chunk[kChunk];
  for (size_t off = 0; off < n; off += kChunk) {
    const size_t m = std::min(kChunk, n - off);
    for (size_t k = 0; k < m; ++k) chunk[k] = float(d[off + k]);
    down(chunk, o + off, m);
  }
}

void CastFromWire(syncd_dtype wire, syncd_dtype dtype, const void* in, void* out, size_t n) {
  const auto* h = static_cast<const uint16_t*>(in);
  auto up = wire == SYNCD_FLOAT16 ? HalfToFloats : Bfloat16ToFloats;
  if (dtype == SYNCD_FLOAT32) return up(h, static_cast<float*>(out), n);
  auto* d = static_cast<double*>(out);
  float chunk[kChunk];
  for (size_t off = 0; off < n; off += kChunk) {
    const size_t m = std::min(kChunk, n - off);
    up(h + off, chunk, m);
    for (size_t k = 0; k < m; ++k) d[off + k] = double(chunk[k]);
  }
}

}  // namespace syncd
