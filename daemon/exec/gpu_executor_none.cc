// The GPU executor of a build without CUDA: there is none.
#include "daemon/exec/gpu_executor.h"

namespace syncd {

std::unique_ptr<GpuExecutor> GpuExecutor::Probe(bool, std::string* why) {
  *why = "syncd was built without CUDA and NCCL (SYNCD_WITH_CUDA=OFF)";
  return nullptr;
}

}  // namespace syncd
