// Waiting for clients' streams: the daemon's stream waits for the work a rank queued on its own
// stream before it submitted a GPU tensor (proto/shm_abi.h's GpuDescriptor::ready), through the
// client's flag (cuStreamWaitValue64, a driver entry point the runtime lacks) or its
// interprocess event. Built with CUDA only. Engine thread only (through the GPU executor).
#ifndef SYNCD_DAEMON_EXEC_GPU_STREAM_WAIT_H_
#define SYNCD_DAEMON_EXEC_GPU_STREAM_WAIT_H_

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/core/request.h"
#include "proto/shm_abi.h"

namespace syncd {

// A flag a daemon stream waits for: on the executor's device `device`, until it reaches `value`.
struct AwaitedFlag {
  int device = -1;
  uint64_t* flag = nullptr;
  uint64_t value = 0;
};

class StreamWaiter {
 public:
  // Resolves cuStreamWaitValue64 from the driver; without it only events can be waited on.
  StreamWaiter();

  // The descriptor's ready signal is one this daemon can wait for, and its flag lies inside its
  // allocation.
  Status Check(const abi::GpuDescriptor& desc) const;
  // `stream` waits for the work rank r queued before submitting: its event, or its flag.
  Status Wait(cudaStream_t stream, const Request& r);

  // The flags waited on since the last call: one collective's, which its ticket keeps so that an
  // abort can release them (a rank that dies before its stream writes its flag would otherwise
  // hold the daemon's stream, and every later collective on it, forever).
  std::vector<AwaitedFlag> TakeAwaited() { return std::exchange(awaited_, {}); }

  uint64_t flag_waits() const { return flag_waits_; }
  uint64_t event_waits() const { return event_waits_; }

 private:
  CUresult (*wait_value64_)(CUstream, CUdeviceptr, cuuint64_t, unsigned int) = nullptr;
  std::vector<AwaitedFlag> awaited_;
  uint64_t flag_waits_ = 0, event_waits_ = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_EXEC_GPU_STREAM_WAIT_H_
