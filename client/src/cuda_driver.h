// The CUDA driver, as the thin client uses it for GPU tensors: loaded with dlopen the first time a
// GPU tensor is submitted, so libsyncclient links nothing of CUDA and loads on machines without
// it. Only what describing a tensor to the daemon needs: the allocation's IPC handle and, when the
// caller's stream still has work queued, a signal on that stream the daemon's stream waits for: a
// flag in device memory written by the stream (cuStreamWriteValue64), or an interprocess event
// where the driver has no 64-bit stream memory operations (or SYNCD_GPU_WAIT=event asks for one).
#ifndef SYNCD_CLIENT_SRC_CUDA_DRIVER_H_
#define SYNCD_CLIENT_SRC_CUDA_DRIVER_H_

#include <cstdint>
#include <string>

#include "proto/shm_abi.h"

namespace syncd::client {

class CudaDriver {
 public:
  // The process's driver, loaded on first use; nullptr (and *error says why) when libcuda cannot
  // be loaded or this library was built without CUDA support. Thread-safe.
  static CudaDriver* Get(std::string* error);

  // Describes [ptr, ptr + bytes) of device memory and signals on `stream` (a CUstream; nullptr:
  // the legacy default stream) what the daemon waits for, unless the stream has nothing queued.
  // *slot receives the signal's slot (-1: none), which stays busy until Release(). Thread-safe.
  // Returns SYNCD_OK or an error code with *error.
  virtual int Export(const void* ptr, uint64_t bytes, void* stream, abi::GpuDescriptor* out, int* slot,
                     std::string* error) = 0;
  // The request that used the slot completed: its flag or event may signal again.
  virtual void Release(int slot) = 0;

 protected:
  virtual ~CudaDriver() = default;
};

}  // namespace syncd::client

#endif  // SYNCD_CLIENT_SRC_CUDA_DRIVER_H_
