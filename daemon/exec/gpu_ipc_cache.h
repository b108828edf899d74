// The daemon's side of CUDA IPC: clients' GPU allocations, their flag allocations and stream
// events, opened in the daemon's address space and cached per client (the pointer cache of
// CUDA-aware MPI).
//
// - OpenAllocation(): a descriptor's allocation becomes a device pointer. A cached allocation is
//   reused; a different handle at a cached allocation base means the client freed that
//   allocation and got a new one there, so the stale mapping is retired. Without the cache
//   (`cache` false) every mapping is retired as soon as it is handed out.
// - OpenFlag(): the allocation holding a descriptor's ready flag (kReadyFlag), cached always (a
//   client keeps a few small ones for its life) and apart from the allocations' counters.
// - Retired mappings and events stay open until CloseRetired(), which the executor calls once no
//   queued GPU work can still touch them.
// - ForgetClient(): a client left; all of its mappings and events are retired.
//
// Built with CUDA only. Engine thread only (through the GPU executor).
#ifndef SYNCD_DAEMON_EXEC_GPU_IPC_CACHE_H_
#define SYNCD_DAEMON_EXEC_GPU_IPC_CACHE_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "daemon/base/status.h"
#include "proto/shm_abi.h"

namespace syncd {

class GpuIpcCache {
 public:
  struct Counters {
    uint64_t hits = 0, opens = 0, closes = 0;
  };

  // `ordinals[i]`: the CUDA ordinal of the executor's device i.
  GpuIpcCache(std::vector<int> ordinals, bool cache) : ordinals_(std::move(ordinals)), cache_(cache) {}
  ~GpuIpcCache();
  GpuIpcCache(const GpuIpcCache&) = delete;
  GpuIpcCache& operator=(const GpuIpcCache&) = delete;

  // The start of `desc`'s allocation on device `device`, open in this process (add desc.offset
  // for the tensor). The current device must be `device`'s.
  StatusOr<char*> OpenAllocation(uint32_t client_id, int device, const abi::GpuDescriptor& desc);
  // The 8-byte flag of `desc` (desc.ready == kReadyFlag) on device `device`, open in this
  // process. The current device must be `device`'s.
  StatusOr<const uint64_t*> OpenFlag(uint32_t client_id, int device, const abi::GpuDescriptor& desc);
  // The client's stream event of `desc` (desc.ready == kReadyEvent), open in this process.
  StatusOr<cudaEvent_t> OpenEvent(uint32_t client_id, const abi::GpuDescriptor& desc);
  void ForgetClient(uint32_t client_id);
  // Closes what was retired. Only when no queued GPU work can still use it.
  void CloseRetired();

  const Counters& counters() const { return counters_; }
  uint64_t open_allocations() const;

 private:
  struct Mapping {
    uint8_t handle[abi::kIpcHandleBytes];
    uint64_t bytes = 0;
    int device = -1;
    void* ptr = nullptr;
    bool flag = false;  // a ready flag's allocation: not in the counters
  };
  using Allocations = std::map<uint64_t, Mapping>;  // allocation base (in the client) -> mapping
  // The allocation at `base` in `allocs`, opened unless a mapping of the same handle is there.
  StatusOr<Mapping*> Open(Allocations& allocs, int device, const uint8_t* handle, uint64_t base, uint64_t bytes,
                          const char* what, bool* opened);
  void Close(const Mapping& m);

  const std::vector<int> ordinals_;
  const bool cache_;
  std::map<uint32_t, Allocations> mappings_;                       // client -> its tensors' allocations
  std::map<uint32_t, Allocations> flags_;                          // client -> its flag allocations
  std::map<uint32_t, std::map<std::string, cudaEvent_t>> events_;  // client -> event handle -> event
  std::vector<Mapping> retired_;
  std::vector<cudaEvent_t> retired_events_;
  Counters counters_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_EXEC_GPU_IPC_CACHE_H_
