// Whole arrays of float16 and bfloat16 to and from float32 and float64: what the inter-node hop's
// compression (an allreduce cast to half precision between nodes) and the reduction of half-precision
// tensors need. Element for element the same as the scalar conversions of reduce_kernels.h: round
// to nearest even, overflow to infinity, a NaN stays a NaN (its payload may differ). float16 uses
// the CPU's F16C instructions where it has them; bfloat16 is integer arithmetic the compiler
// vectorises. Pure functions; `in` and `out` must not overlap.
#ifndef SYNCD_DAEMON_CORE_FLOAT_CASTS_H_
#define SYNCD_DAEMON_CORE_FLOAT_CASTS_H_

#include <cstddef>
#include <cstdint>

#include "syncd/client.h"

namespace syncd {

void HalfToFloats(const uint16_t* in, float* out, size_t n);
void FloatsToHalf(const float* in, uint16_t* out, size_t n);
void Bfloat16ToFloats(const uint16_t* in, float* out, size_t n);
void FloatsToBfloat16(const float* in, uint16_t* out, size_t n);

// The dtype an allreduce's inter-node hop travels in under `compression` (syncd_compression): float16
// or bfloat16; `dtype` itself for NONE.
syncd_dtype WireDtype(uint32_t compression, syncd_dtype dtype);
// `n` elements of `dtype` (float32 or float64) to `wire` (float16 or bfloat16), and back.
void CastToWire(syncd_dtype dtype, syncd_dtype wire, const void* in, void* out, size_t n);
void CastFromWire(syncd_dtype wire, syncd_dtype dtype, const void* in, void* out, size_t n);

}  // namespace syncd

#endif  // SYNCD_DAEMON_CORE_FLOAT_CASTS_H_
