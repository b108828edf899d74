// The CUDA driver, as the thin client uses it for GPU tensors: loaded with dlopen the first time a
// GPU tensor is submitted, so libsyncclient links nothing of CUDA and loads on machines without
// it. Only what describing a tensor to the daemon needs: the allocation's IPC handle and an
// interprocess event recorded on the caller's stream.
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

  // Describes [ptr, ptr + bytes) of device memory and records an event on `stream` (a CUstream;
  // nullptr: the legacy default stream) that the daemon waits on, unless the stream has nothing
  // queued. *event_slot receives the event (-1: none), which stays busy until Release(). Thread-safe. Returns SYNCD_OK or an error code with *error.
  virtual int Export(const void* ptr, uint64_t bytes, void* stream, abi::GpuDescriptor* out, int* event_slot,
                     std::string* error) = 0;
  // The request that used the event completed: it may be recorded again.
  virtual void Release(int event_slot) = 0;

 protected:
  virtual ~CudaDriver() = default;
};

}  // namespace syncd::client

#endif  // SYNCD_CLIENT_SRC_CUDA_DRIVER_H_
