// Reading and writing tensor elements of any dtype as doubles, for checking results in tests.
#ifndef SYNCD_TESTS_INTEGRATION_VALUES_H_
#define SYNCD_TESTS_INTEGRATION_VALUES_H_

#include <syncd/client.h>

#include <cmath>
#include <cstdint>

#include "daemon/core/reduce_kernels.h"

namespace syncd::testing {

inline void SetValue(void* b, syncd_dtype dt, size_t i, double v) {
  switch (dt) {
    case SYNCD_INT8: static_cast<int8_t*>(b)[i] = int8_t(v); break;
    case SYNCD_UINT8: static_cast<uint8_t*>(b)[i] = uint8_t(v); break;
    case SYNCD_INT32: static_cast<int32_t*>(b)[i] = int32_t(v); break;
    case SYNCD_INT64: static_cast<int64_t*>(b)[i] = int64_t(v); break;
    case SYNCD_FLOAT16: static_cast<uint16_t*>(b)[i] = FloatToHalf(float(v)); break;
    case SYNCD_BFLOAT16: static_cast<uint16_t*>(b)[i] = FloatToBfloat16(float(v)); break;
    case SYNCD_FLOAT32: static_cast<float*>(b)[i] = float(v); break;
    case SYNCD_FLOAT64: static_cast<double*>(b)[i] = v; break;
    case SYNCD_INT16: static_cast<int16_t*>(b)[i] = int16_t(v); break;
    case SYNCD_BOOL: static_cast<uint8_t*>(b)[i] = v != 0 ? 1 : 0; break;
    default: break;
  }
}

inline double GetValue(const void* b, syncd_dtype dt, size_t i) {
  switch (dt) {
    case SYNCD_INT8: return static_cast<const int8_t*>(b)[i];
    case SYNCD_UINT8: return static_cast<const uint8_t*>(b)[i];
    case SYNCD_INT32: return static_cast<const int32_t*>(b)[i];
    case SYNCD_INT64: return double(static_cast<const int64_t*>(b)[i]);
    case SYNCD_FLOAT16: return HalfToFloat(static_cast<const uint16_t*>(b)[i]);
    case SYNCD_BFLOAT16: return Bfloat16ToFloat(static_cast<const uint16_t*>(b)[i]);
    case SYNCD_FLOAT32: return static_cast<const float*>(b)[i];
    case SYNCD_FLOAT64: return static_cast<const double*>(b)[i];
    case SYNCD_INT16: return static_cast<const int16_t*>(b)[i];
    case SYNCD_BOOL: return static_cast<const uint8_t*>(b)[i];
    default: return NAN;
  }
}

// The value rank `r` contributes at element `i`: 1 or 2, so that every sum and product over up
// to 8 ranks is exact in every dtype, however a reduction orders and rounds its steps (products
// are powers of two up to 256; int8/uint8 wrap at 256 as documented).
inline double Input(int r, size_t i) { return double((i * 7 + size_t(r) * 3) % 2 + 1); }
// The same for `dt`: bool takes 0 and 1 (false and true) instead.
inline double InputFor(syncd_dtype dt, int r, size_t i) { return dt == SYNCD_BOOL ? Input(r, i) - 1 : Input(r, i); }
// What `v` becomes stored as `dt` (bool: 0 or 1).
inline double Representable(syncd_dtype dt, double v) { return dt == SYNCD_BOOL ? (v != 0 ? 1 : 0) : v; }
// Whether syncd allreduces `dt` with `op` (bool cannot average); on GPUs int16 neither (no NCCL type).
inline bool Allreducible(syncd_dtype dt, syncd_reduce_op op, bool gpu = false) {
  return !(dt == SYNCD_BOOL && op == SYNCD_AVERAGE) && !(gpu && dt == SYNCD_INT16);
}

// Expected allreduce result at element i over `n` ranks, following syncd's documented semantics.
inline double Expected(syncd_dtype dt, syncd_reduce_op op, int n, size_t i) {
  if (dt == SYNCD_BOOL) {  // SUM and MAX: logical or; MIN and PRODUCT: logical and
    bool any = false, all = true;
    for (int r = 0; r < n; ++r) {
      any = any || InputFor(dt, r, i) != 0;
      all = all && InputFor(dt, r, i) != 0;
    }
    return (op == SYNCD_MIN || op == SYNCD_PRODUCT ? all : any) ? 1 : 0;
  }
  double acc = Input(0, i);
  for (int r = 1; r < n; ++r) {
    const double v = Input(r, i);
    acc = op == SYNCD_MIN ? std::fmin(acc, v) : op == SYNCD_MAX ? std::fmax(acc, v)
        : op == SYNCD_PRODUCT ? acc * v : acc + v;
  }
  if (op != SYNCD_AVERAGE) {
    switch (dt) {  // integer results wrap like the daemon's (two's complement)
      case SYNCD_INT8: return double(int8_t(int64_t(acc)));
      case SYNCD_UINT8: return double(uint8_t(int64_t(acc)));
      case SYNCD_INT32: return double(int32_t(int64_t(acc)));
      case SYNCD_INT16: return double(int16_t(int64_t(acc)));
      default: return acc;
    }
  }
  switch (dt) {
    case SYNCD_FLOAT64: return acc * (1.0 / n);
    case SYNCD_FLOAT32: return float(acc) * float(1.0 / n);
    case SYNCD_FLOAT16: return HalfToFloat(FloatToHalf(float(acc) * float(1.0 / n)));
    case SYNCD_BFLOAT16: return Bfloat16ToFloat(FloatToBfloat16(float(acc) * float(1.0 / n)));
    default: return std::trunc(acc / n);
  }
}

}  // namespace syncd::testing

#endif  // SYNCD_TESTS_INTEGRATION_VALUES_H_
