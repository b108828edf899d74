#include "daemon/exec/gpu_stream_wait.h"

#include <string>

#include "daemon/exec/cuda_status.h"

namespace syncd {

StreamWaiter::StreamWaiter() {
  cudaDriverEntryPointQueryResult found{};
  void* fn = nullptr;
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &fn, 12000, cudaEnableDefault, &found) == cudaSuccess &&
      found == cudaDriverEntryPointSuccess)
    wait_value64_ = reinterpret_cast<decltype(wait_value64_)>(fn);
  else
    cudaGetLastError();
}

Status StreamWaiter::Check(const abi::GpuDescriptor& desc) const {
  if (desc.ready != abi::kReadyNow && desc.ready != abi::kReadyEvent && desc.ready != abi::kReadyFlag)
    return Status(SYNCD_ERR_INVALID, "its descriptor's ready kind " + std::to_string(desc.ready) + " is unknown");
  if (desc.ready != abi::kReadyFlag) return Status::Ok();
  if (wait_value64_ == nullptr)
    return Status(SYNCD_ERR_INVALID, "its stream is to be waited on through a flag, but this daemon's CUDA driver has "
                                     "no cuStreamWaitValue64 (the client's SYNCD_GPU_WAIT=event uses events)");
  if (desc.flag_offset % 8 != 0 || desc.flag_offset > desc.flag_bytes || desc.flag_bytes - desc.flag_offset < 8)
    return Status(SYNCD_ERR_INVALID, "its ready flag at offset " + std::to_string(desc.flag_offset) +
                                         " is not an aligned 8 bytes inside its allocation of " +
                                         std::to_string(desc.flag_bytes) + " bytes");
  return Status::Ok();
}

Status StreamWaiter::Wait(cudaStream_t stream, const Request& r) {
  const GpuReady& ready = r.gpu_ready;
  if (ready.event != nullptr) {
    ++event_waits_;
    return Cuda(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(ready.event), 0),
                "cudaStreamWaitEvent (rank " + std::to_string(r.rank) + "'s stream, tensor '" + r.name + "')");
  }
  if (ready.flag != nullptr) {
    ++flag_waits_;
    const CUresult res =
        wait_value64_(stream, reinterpret_cast<CUdeviceptr>(ready.flag), ready.value, CU_STREAM_WAIT_VALUE_GEQ);
    if (res != CUDA_SUCCESS)
      return Status(SYNCD_ERR_SYSTEM, "cuStreamWaitValue64 (rank " + std::to_string(r.rank) + "'s stream, tensor '" +
                                          r.name + "') failed: CUDA driver error " + std::to_string(int(res)));
    awaited_.push_back(AwaitedFlag{r.gpu_device, const_cast<uint64_t*>(ready.flag), ready.value});
  }
  return Status::Ok();
}

}  // namespace syncd
