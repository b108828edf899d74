#include "daemon/exec/gpu_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace syncd::gpu {
namespace {

constexpr int kThreads = 256;

// How a stored type computes: float for the 16-bit floats, itself otherwise.
template <typename T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };

template <typename T> __device__ __forceinline__ typename Acc<T>::type Load(T v) { return v; }
template <> __device__ __forceinline__ float Load(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float Load(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T Store(typename Acc<T>::type v) { return v; }
template <> __device__ __forceinline__ __half Store<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 Store<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename A>
__device__ __forceinline__ A Scale(A v, double factor) {
  if constexpr (std::is_integral_v<A>) return A(trunc(double(v) * factor));
  else return A(v * A(factor));
}

template <typename A, syncd_reduce_op Op>
__device__ __forceinline__ A Combine(A a, A b) {
  if constexpr (Op == SYNCD_SUM) {
    if constexpr (std::is_integral_v<A>) return A(std::make_unsigned_t<A>(a) + std::make_unsigned_t<A>(b));
    else return a + b;
  } else if constexpr (Op == SYNCD_PRODUCT) {
    if constexpr (std::is_integral_v<A>) return A(std::make_unsigned_t<A>(a) * std::make_unsigned_t<A>(b));
    else return a * b;
  } else if constexpr (Op == SYNCD_MIN) {
    return b < a ? b : a;
  } else {
    return a < b ? b : a;
  }
}

template <typename T, syncd_reduce_op Op>
__global__ void Reduce(ReduceLaunch l) {
  using A = typename Acc<T>::type;
  const bool scaled = l.prescale != 1.0;
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < l.count; i += stride) {
    A acc = Load(static_cast<const T*>(l.inputs[0])[i]);
    if (scaled) acc = Scale(acc, l.prescale);
    for (int k = 1; k < l.n; ++k) {
      A v = Load(static_cast<const T*>(l.inputs[k])[i]);
      if (scaled) v = Scale(v, l.prescale);
      acc = Combine<A, Op>(acc, v);
    }
    static_cast<T*>(l.output)[i] = Store<T>(acc);
  }
}

template <typename T>
__global__ void Finish(T* data, uint64_t count, double postscale, uint64_t divisor) {
  using A = typename Acc<T>::type;
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    A v = Load(data[i]);
    if constexpr (std::is_integral_v<A>) {
      if (divisor > 1) v = A(int64_t(v) / int64_t(divisor));
      if (postscale != 1.0) v = Scale(v, postscale);
    } else {
      v = Scale(v, postscale / double(divisor));
    }
    data[i] = Store<T>(v);
  }
}

template <typename T>
__global__ void Fill(T* data, uint64_t count, T value) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) data[i] = value;
}

unsigned Blocks(uint64_t count) {
  // Enough blocks to fill every multiprocessor several times over; the loops stride the rest.
  const uint64_t needed = (count + kThreads - 1) / kThreads;
  return unsigned(needed < 4096 ? (needed ? needed : 1) : 4096);
}

template <typename T>
int ReduceTyped(const ReduceLaunch& l, cudaStream_t s) {
  const unsigned b = Blocks(l.count);
  switch (l.op) {
    case SYNCD_SUM:
    case SYNCD_AVERAGE: Reduce<T, SYNCD_SUM><<<b, kThreads, 0, s>>>(l); break;
    case SYNCD_MIN: Reduce<T, SYNCD_MIN><<<b, kThreads, 0, s>>>(l); break;
    case SYNCD_MAX: Reduce<T, SYNCD_MAX><<<b, kThreads, 0, s>>>(l); break;
    case SYNCD_PRODUCT: Reduce<T, SYNCD_PRODUCT><<<b, kThreads, 0, s>>>(l); break;
    default: return int(cudaErrorInvalidValue);
  }
  return int(cudaGetLastError());
}

template <typename T>
int FinishTyped(void* data, uint64_t count, double postscale, uint64_t divisor, cudaStream_t s) {
  Finish<T><<<Blocks(count), kThreads, 0, s>>>(static_cast<T*>(data), count, postscale, divisor);
  return int(cudaGetLastError());
}

// `element` holds one value of T (ReductionIdentity's bytes).
template <typename T>
int FillTyped(void* data, uint64_t count, uint64_t element, cudaStream_t s) {
  T value;
  memcpy(static_cast<void*>(&value), &element, sizeof(T));
  Fill<T><<<Blocks(count), kThreads, 0, s>>>(static_cast<T*>(data), count, value);
  return int(cudaGetLastError());
}

template <template <typename> class F, typename... Args>
int ByDtype(syncd_dtype dtype, Args&&... args) {
  switch (dtype) {
    case SYNCD_INT8: return F<int8_t>::Run(args...);
    case SYNCD_UINT8: return F<uint8_t>::Run(args...);
    case SYNCD_INT32: return F<int32_t>::Run(args...);
    case SYNCD_INT64: return F<int64_t>::Run(args...);
    case SYNCD_FLOAT16: return F<__half>::Run(args...);
    case SYNCD_BFLOAT16: return F<__nv_bfloat16>::Run(args...);
    case SYNCD_FLOAT32: return F<float>::Run(args...);
    case SYNCD_FLOAT64: return F<double>::Run(args...);
    default: return int(cudaErrorInvalidValue);
  }
}

__global__ void RaiseFlagKernel(unsigned long long* flag, unsigned long long value) {
  atomicMax(flag, value);
  __threadfence_system();
}

template <typename T> struct ReduceOp { static int Run(const ReduceLaunch& l, cudaStream_t s) { return ReduceTyped<T>(l, s); } };
template <typename T> struct FinishOp {
  static int Run(void* d, uint64_t n, double p, uint64_t div, cudaStream_t s) { return FinishTyped<T>(d, n, p, div, s); }
};
template <typename T> struct FillOp {
  static int Run(void* d, uint64_t n, uint64_t element, cudaStream_t s) { return FillTyped<T>(d, n, element, s); }
};

}  // namespace

int LaunchReduce(const ReduceLaunch& l, void* stream) {
  if (l.count == 0) return 0;
  if (l.n < 1 || l.n > kMaxReduceInputs) return int(cudaErrorInvalidValue);
  return ByDtype<ReduceOp>(l.dtype, l, static_cast<cudaStream_t>(stream));
}

int LaunchFinish(void* data, uint64_t count, syncd_dtype dtype, double postscale, uint64_t divisor, void* stream) {
  if (count == 0 || (postscale == 1.0 && divisor <= 1)) return 0;
  return ByDtype<FinishOp>(dtype, data, count, postscale, divisor, static_cast<cudaStream_t>(stream));
}

int LaunchFill(void* data, uint64_t count, syncd_dtype dtype, uint64_t element, void* stream) {
  if (count == 0) return 0;
  return ByDtype<FillOp>(dtype, data, count, element, static_cast<cudaStream_t>(stream));
}

int PreloadRaiseFlag() {
  cudaFuncAttributes attributes{};
  return int(cudaFuncGetAttributes(&attributes, RaiseFlagKernel));
}

int LaunchRaiseFlag(uint64_t* flag, uint64_t value, void* stream) {
  RaiseFlagKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(reinterpret_cast<unsigned long long*>(flag), value);
  return int(cudaGetLastError());
}

}  // namespace syncd::gpu
