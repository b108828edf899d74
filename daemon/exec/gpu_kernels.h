// Element-wise kernels of the GPU executor, on the daemon's stream of one device. Semantics are
// the host path's (reduce_kernels.h): out = reduce_i(prescale * in_i); Finish applies the AVERAGE
// divisor and the postscale; integer SUM/PRODUCT wrap, integer scaling truncates toward zero;
// float16/bfloat16 compute in float.
#ifndef SYNCD_DAEMON_EXEC_GPU_KERNELS_H_
#define SYNCD_DAEMON_EXEC_GPU_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "syncd/client.h"

namespace syncd::gpu {

inline constexpr int kMaxReduceInputs = 8;

struct ReduceLaunch {
  const void* inputs[kMaxReduceInputs];
  int n = 0;  // 1..kMaxReduceInputs; an input may be the output
  void* output = nullptr;
  uint64_t count = 0;
  syncd_dtype dtype = SYNCD_FLOAT32;
  syncd_reduce_op op = SYNCD_SUM;  // AVERAGE reduces as SUM
  double prescale = 1.0;
};

// Each returns the launch's cudaError_t (0: cudaSuccess). `stream` is a cudaStream_t.
int LaunchReduce(const ReduceLaunch& l, void* stream);
// data[i] = data[i] / divisor * postscale (integers: divide, then scale; floats: one factor).
int LaunchFinish(void* data, uint64_t count, syncd_dtype dtype, double postscale, uint64_t divisor, void* stream);
// data[i] = `element` (one value of `dtype` in its low bytes): with core/reduce_kernels.h's
// ReductionIdentity, the identity of a reduction, so that a GPU without local ranks in a collective
// still takes part in the NCCL call adding nothing.
int LaunchFill(void* data, uint64_t count, syncd_dtype dtype, uint64_t element, void* stream);
// *flag = max(*flag, value), atomically: releases a stream that waits for the flag to reach
// `value` (cuStreamWaitValue64) when whoever was to write it never will.
int LaunchRaiseFlag(uint64_t* flag, uint64_t value, void* stream);
// Loads LaunchRaiseFlag's kernel into the current device's context now. With lazy loading (CUDA's
// default) a kernel's first launch loads it, and loading may wait for the whole context: for a
// stream stuck on a flag that only this kernel can release, that wait never ends.
int PreloadRaiseFlag();

}  // namespace syncd::gpu

#endif  // SYNCD_DAEMON_EXEC_GPU_KERNELS_H_
