#include "daemon/core/reduce_kernels.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "daemon/core/float_casts.h"
#include "proto/status_names.h"

namespace syncd {

float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) return sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0);  // inf / nan
  if (abs >= 0x477ff000) return sign | 0x7c00;                                   // overflow -> inf
  if (abs < 0x38800000) {  // below the smallest normal half: a multiple of 2^-24, round to even
    float magnitude;
    memcpy(&magnitude, &abs, 4);
    return sign | uint16_t(std::nearbyint(magnitude * 16777216.0f));
  }
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return sign | uint16_t(h);
}

float Bfloat16ToFloat(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBfloat16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x40);  // quiet nan
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

namespace {

struct Half { uint16_t bits; };
struct Bf16 { uint16_t bits; };

// Storage type -> accumulator type and conversions.
template <typename T> struct Acc { using type = T; static T In(T v) { return v; } static T Out(T v) { return v; } };
template <> struct Acc<Half> {
  using type = float;
  static float In(Half v) { return HalfToFloat(v.bits); }
  static Half Out(float v) { return Half{FloatToHalf(v)}; }
};
template <> struct Acc<Bf16> {
  using type = float;
  static float In(Bf16 v) { return Bfloat16ToFloat(v.bits); }
  static Bf16 Out(float v) { return Bf16{FloatToBfloat16(v)}; }
};

// Whole chunks to and from the accumulator type (half precision: float_casts.h's vectorised casts).
template <typename T, typename A>
void Load(const T* in, A* out, size_t count) {
  if constexpr (std::is_same_v<T, Half>) HalfToFloats(reinterpret_cast<const uint16_t*>(in), out, count);
  else if constexpr (std::is_same_v<T, Bf16>) Bfloat16ToFloats(reinterpret_cast<const uint16_t*>(in), out, count);
  else for (size_t k = 0; k < count; ++k) out[k] = Acc<T>::In(in[k]);
}
template <typename A, typename T>
void Store(const A* in, T* out, size_t count) {
  if constexpr (std::is_same_v<T, Half>) FloatsToHalf(in, reinterpret_cast<uint16_t*>(out), count);
  else if constexpr (std::is_same_v<T, Bf16>) FloatsToBfloat16(in, reinterpret_cast<uint16_t*>(out), count);
  else for (size_t k = 0; k < count; ++k) out[k] = Acc<T>::Out(in[k]);
}

// Integer sum/product wrap: compute in the unsigned type to avoid signed-overflow UB.
template <typename A>
A Add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return A(U(a) + U(b));
  } else {
    return a + b;
  }
}
template <typename A>
A Mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    // 16-bit values promote to int, whose product can overflow: multiply as unsigned int.
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return A(U(W(U(a)) * W(U(b))));
  } else {
    return a * b;
  }
}

template <typename A>
A Scale(A v, double factor) {
  if constexpr (std::is_integral_v<A>) {
    return A(std::trunc(double(v) * factor));
  } else {
    return A(v * A(factor));
  }
}

// The AVERAGE divisor and the postscale, in place on accumulated values.
template <typename A>
void Finish(const ReduceSpec& spec, A* acc, size_t count) {
  if constexpr (std::is_integral_v<A>) {
    if (spec.divisor > 1)
      for (size_t k = 0; k < count; ++k) acc[k] = A(int64_t(acc[k]) / int64_t(spec.divisor));
    if (spec.postscale != 1.0)
      for (size_t k = 0; k < count; ++k) acc[k] = Scale(acc[k], spec.postscale);
  } else {
    const double factor = spec.postscale / double(spec.divisor);
    if (factor != 1.0)
      for (size_t k = 0; k < count; ++k) acc[k] = Scale(acc[k], factor);
  }
}

template <typename T, syncd_reduce_op Op>
void Kernel(const ReduceSpec& spec, const void* const* inputs, size_t n, void* out, size_t count) {
  using A = typename Acc<T>::type;
  const bool prescaled = spec.prescale != 1.0;
  T* o = static_cast<T*>(out);
  if constexpr (std::is_same_v<A, T>) {
    // No conversion: straight into the output, without staging in the accumulator. The output
    // may be the first input, no other.
    bool direct = !prescaled;
    for (size_t i = 1; i < n && direct; ++i) direct = inputs[i] != out;
    if (direct) {
      auto combine = [](T a, T b) {
        if constexpr (Op == SYNCD_SUM) return Add(a, b);
        else if constexpr (Op == SYNCD_MIN) return std::min(a, b);
        else if constexpr (Op == SYNCD_MAX) return std::max(a, b);
        else return Mul(a, b);
      };
      const T* a = static_cast<const T*>(inputs[0]);
      if (n == 1) {
        if (a != o) memcpy(o, a, count * sizeof(T));
      } else {
        const T* b = static_cast<const T*>(inputs[1]);
        for (size_t k = 0; k < count; ++k) o[k] = combine(a[k], b[k]);
      }
      for (size_t i = 2; i < n; ++i) {
        const T* in = static_cast<const T*>(inputs[i]);
        for (size_t k = 0; k < count; ++k) o[k] = combine(o[k], in[k]);
      }
      Finish(spec, o, count);
      return;
    }
  }
  constexpr bool kConverted = !std::is_same_v<A, T>;
  A acc[kReduceChunkElements];
  A converted[kConverted ? kReduceChunkElements : 1];  // an input in the accumulator's type
  Load(static_cast<const T*>(inputs[0]), acc, count);
  if (prescaled)
    for (size_t k = 0; k < count; ++k) acc[k] = Scale(acc[k], spec.prescale);
  for (size_t i = 1; i < n; ++i) {
    const A* in;
    if constexpr (kConverted) {
      Load(static_cast<const T*>(inputs[i]), converted, count);
      in = converted;
    } else {
      in = static_cast<const T*>(inputs[i]);
    }
    if (prescaled) {
      for (size_t k = 0; k < count; ++k) {
        const A v = Scale(in[k], spec.prescale);
        if constexpr (Op == SYNCD_SUM) acc[k] = Add(acc[k], v);
        else if constexpr (Op == SYNCD_MIN) acc[k] = std::min(acc[k], v);
        else if constexpr (Op == SYNCD_MAX) acc[k] = std::max(acc[k], v);
        else acc[k] = Mul(acc[k], v);
      }
    } else {
      for (size_t k = 0; k < count; ++k) {
        const A v = in[k];
        if constexpr (Op == SYNCD_SUM) acc[k] = Add(acc[k], v);
        else if constexpr (Op == SYNCD_MIN) acc[k] = std::min(acc[k], v);
        else if constexpr (Op == SYNCD_MAX) acc[k] = std::max(acc[k], v);
        else acc[k] = Mul(acc[k], v);
      }
    }
  }
  Finish(spec, acc, count);
  Store(acc, o, count);
}

template <typename T>
void Dispatch(const ReduceSpec& spec, const void* const* inputs, size_t n, void* out, size_t count) {
  switch (spec.op) {
    case SYNCD_SUM:
    case SYNCD_AVERAGE: return Kernel<T, SYNCD_SUM>(spec, inputs, n, out, count);
    case SYNCD_MIN: return Kernel<T, SYNCD_MIN>(spec, inputs, n, out, count);
    case SYNCD_MAX: return Kernel<T, SYNCD_MAX>(spec, inputs, n, out, count);
    case SYNCD_PRODUCT: return Kernel<T, SYNCD_PRODUCT>(spec, inputs, n, out, count);
    default: return;
  }
}

template <typename T>
T IdentityOf(syncd_reduce_op op) {
  using A = typename Acc<T>::type;
  using Limits = std::numeric_limits<A>;
  switch (op) {
    case SYNCD_PRODUCT: return Acc<T>::Out(A(1));
    case SYNCD_MIN: return Acc<T>::Out(Limits::has_infinity ? Limits::infinity() : Limits::max());
    case SYNCD_MAX: return Acc<T>::Out(Limits::has_infinity ? -Limits::infinity() : Limits::lowest());
    default: return Acc<T>::Out(A(0));
  }
}

template <typename T>
void Put(const T& v, void* element) {
  memcpy(element, &v, sizeof(T));
}

// ReduceChunk's reduction of n >= 1 inputs into `first`.
void ReduceInputs(const ReduceSpec& spec, const void* const* inputs, size_t n, void* first, size_t count) {
  switch (spec.dtype) {
    case SYNCD_INT8: Dispatch<int8_t>(spec, inputs, n, first, count); break;
    case SYNCD_UINT8: Dispatch<uint8_t>(spec, inputs, n, first, count); break;
    case SYNCD_INT32: Dispatch<int32_t>(spec, inputs, n, first, count); break;
    case SYNCD_INT64: Dispatch<int64_t>(spec, inputs, n, first, count); break;
    case SYNCD_FLOAT16: Dispatch<Half>(spec, inputs, n, first, count); break;
    case SYNCD_BFLOAT16: Dispatch<Bf16>(spec, inputs, n, first, count); break;
    case SYNCD_FLOAT32: Dispatch<float>(spec, inputs, n, first, count); break;
    case SYNCD_FLOAT64: Dispatch<double>(spec, inputs, n, first, count); break;
    case SYNCD_INT16: Dispatch<int16_t>(spec, inputs, n, first, count); break;
    case SYNCD_BOOL: {
      ReduceSpec logical = spec;
      logical.op = LogicalOp(spec.op);
      Dispatch<uint8_t>(logical, inputs, n, first, count);
      break;
    }
    default: return;
  }
}

}  // namespace

void ReductionIdentity(syncd_dtype dtype, syncd_reduce_op op, void* element) {
  switch (dtype) {
    case SYNCD_INT8: return Put(IdentityOf<int8_t>(op), element);
    case SYNCD_UINT8: return Put(IdentityOf<uint8_t>(op), element);
    case SYNCD_INT16: return Put(IdentityOf<int16_t>(op), element);
    case SYNCD_INT32: return Put(IdentityOf<int32_t>(op), element);
    case SYNCD_INT64: return Put(IdentityOf<int64_t>(op), element);
    case SYNCD_FLOAT16: return Put(IdentityOf<Half>(op), element);
    case SYNCD_BFLOAT16: return Put(IdentityOf<Bf16>(op), element);
    case SYNCD_FLOAT32: return Put(IdentityOf<float>(op), element);
    case SYNCD_FLOAT64: return Put(IdentityOf<double>(op), element);
    case SYNCD_BOOL: {  // 0/1 values: or's identity false, and's true
      const uint8_t v = LogicalOp(op) == SYNCD_MIN ? 1 : 0;
      return Put(v, element);
    }
    default: return;
  }
}

void FillIdentity(syncd_dtype dtype, syncd_reduce_op op, void* data, size_t count) {
  const size_t esize = abi::DtypeSize(dtype);
  if (count == 0 || esize == 0) return;
  char* out = static_cast<char*>(data);
  ReductionIdentity(dtype, op, out);
  bool zero = true;
  for (size_t b = 0; b < esize; ++b) zero &= out[b] == 0;
  if (zero) {
    memset(out, 0, count * esize);
    return;
  }
  // Doubling copies: log2(count) memcpy calls.
  for (size_t have = 1; have < count;) {
    const size_t n = std::min(have, count - have);
    memcpy(out + have * esize, out, n * esize);
    have += n;
  }
}

void ReduceInto(syncd_dtype dtype, syncd_reduce_op op, char* acc, const char* other, size_t count) {
  const ReduceSpec spec{dtype, op == SYNCD_AVERAGE ? SYNCD_SUM : op};
  const size_t esize = abi::DtypeSize(dtype);
  for (size_t off = 0; off < count; off += kReduceChunkElements) {
    const size_t n = std::min(kReduceChunkElements, count - off);
    const void* in[2] = {acc + off * esize, other + off * esize};
    void* out[1] = {acc + off * esize};
    ReduceChunk(spec, in, 2, out, 1, n);
  }
}

void CopyStreaming(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  if (bytes < kStreamingCopyMinBytes) {
    memcpy(dst, src, bytes);
    return;
  }
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  const size_t head = (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16;  // streaming stores need 16 B alignment
  memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  const size_t body = bytes / 64 * 64;
  for (size_t i = 0; i < body; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  _mm_sfence();  // the completion that follows must not overtake these stores
  memcpy(d + body, s + body, bytes - body);
#else
  memcpy(dst, src, bytes);
#endif
}

void ReduceChunk(const ReduceSpec& spec, const void* const* inputs, size_t n, void* const* outputs,
                 size_t n_outputs, size_t count) {
  if (count == 0 || n_outputs == 0) return;
  void* first = outputs[0];
  if (n == 0) {
    FillIdentity(spec.dtype, spec.op, first, count);
  } else {
    ReduceInputs(spec, inputs, n, first, count);
  }
  const size_t bytes = count * abi::DtypeSize(spec.dtype);
  for (size_t i = 1; i < n_outputs; ++i)
    if (outputs[i] != first) memcpy(outputs[i], first, bytes);
}

}  // namespace syncd
