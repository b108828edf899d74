// Element-wise reduction of n equally shaped inputs, written to n outputs, for every dtype and op.
// Pure functions, no state; the host executor calls them chunk by chunk so inputs and outputs may
// alias (each chunk is read completely before it is written).
//
// Semantics: out = postscale * reduce_i(prescale * in_i), then divided by `divisor` (the rank
// count for AVERAGE, else 1). float16/bfloat16 accumulate in float. Integer SUM/PRODUCT wrap like
// NCCL's; integer AVERAGE divides the exact sum and truncates toward zero; integer scaling rounds
// toward zero as well.
#ifndef SYNCD_DAEMON_CORE_REDUCE_KERNELS_H_
#define SYNCD_DAEMON_CORE_REDUCE_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "syncd/client.h"

namespace syncd {

// bool reduces as uint8 0/1 values: SUM and MAX are logical or, MIN and PRODUCT logical and.
inline syncd_reduce_op LogicalOp(syncd_reduce_op op) {
  return op == SYNCD_SUM || op == SYNCD_AVERAGE ? SYNCD_MAX : op == SYNCD_PRODUCT ? SYNCD_MIN : op;
}

struct ReduceSpec {
  syncd_dtype dtype;
  syncd_reduce_op op;  // AVERAGE is SUM with divisor = ranks
  double prescale = 1.0;
  double postscale = 1.0;
  uint64_t divisor = 1;
};

// The identity of `op` over `dtype`: what a rank that stands in for one that cannot contribute (a
// joined, lost or vacant rank, a node without ranks) adds to a reduction without changing it. Sum
// and Average 0, Product 1, Min the dtype's largest value (+inf for floating types), Max its lowest
// (-inf); bool (LogicalOp) false for or, true for and. The one definition: the host reductions, the
// stand-ins' data and the GPU path's fill (gpu_kernels.h) all take it from here.
// ReductionIdentity writes one element (abi::DtypeSize(dtype) bytes) at `element`; FillIdentity
// `count` elements at `data`.
void ReductionIdentity(syncd_dtype dtype, syncd_reduce_op op, void* element);
void FillIdentity(syncd_dtype dtype, syncd_reduce_op op, void* data, size_t count);

// Elements processed per call of ReduceChunk by the executor: every rank's piece of a chunk (4 KiB
// of float32 each, 16 KiB for 4 ranks) stays in L1 while it is reduced and copied back out.
// Measured (issue 64, `syncrun -n 4 -- syncd-bench allreduce --sizes 64M,1M`, builds alternated
// three times): 64 MiB busbw 3.4-4.3 GB/s at 1,024 elements against 2.5-3.9 at 4,096 (the
// earlier value, 64 KiB for 4 ranks), 3.5-3.6 at 512; 2 x 2 no slower.
inline constexpr size_t kReduceChunkElements = 1024;

// Reduces `count` (<= kReduceChunkElements) elements of each of `n` inputs into every output. No
// inputs (every rank stands in): every output gets the identity, unscaled.
void ReduceChunk(const ReduceSpec& spec, const void* const* inputs, size_t n, void* const* outputs,
                 size_t n_outputs, size_t count);
// acc = op(acc, other), element-wise over any number of elements (AVERAGE adds: whoever finishes
// the reduction divides once).
void ReduceInto(syncd_dtype dtype, syncd_reduce_op op, char* acc, const char* other, size_t count);

// memcpy for data nobody reads soon (results scattered into large rank tensors): non-temporal
// stores skip the read-for-ownership of every destination line and leave the caches alone, which
// saves a third of the memory traffic of a copy. Small copies use memcpy.
inline constexpr size_t kStreamingCopyMinBytes = 256 * 1024;
void CopyStreaming(void* dst, const void* src, size_t bytes);

// IEEE half and bfloat16 <-> float, exact where representable, round to nearest even.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float Bfloat16ToFloat(uint16_t b);
uint16_t FloatToBfloat16(float f);

}  // namespace syncd

#endif  // SYNCD_DAEMON_CORE_REDUCE_KERNELS_H_
