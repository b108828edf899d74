#include "daemon/exec/gpu_ipc_cache.h"

#include <cstring>

#include "daemon/exec/cuda_status.h"

namespace syncd {

GpuIpcCache::~GpuIpcCache() {
  for (auto* table : {&mappings_, &flags_})
    for (auto& [client, allocs] : *table)
      for (auto& [base, m] : allocs) Close(m);
  for (auto& [client, events] : events_)
    for (auto& [key, ev] : events) CudaWarn(cudaEventDestroy(ev), "cudaEventDestroy");
  CloseRetired();
}

StatusOr<GpuIpcCache::Mapping*> GpuIpcCache::Open(Allocations& allocs, int device, const uint8_t* handle,
                                                  uint64_t base, uint64_t bytes, const char* what,
                                                  bool* opened) {
  auto it = allocs.find(base);
  if (it != allocs.end() && (memcmp(it->second.handle, handle, abi::kIpcHandleBytes) != 0 ||
                             it->second.bytes != bytes || it->second.device != device)) {
    // The client freed that allocation and got a new one at the same address.
    retired_.push_back(it->second);
    allocs.erase(it);
    it = allocs.end();
  }
  if (it != allocs.end()) return &it->second;
  *opened = true;
  Mapping m;
  memcpy(m.handle, handle, abi::kIpcHandleBytes);
  m.bytes = bytes;
  m.device = device;
  cudaIpcMemHandle_t mh;
  memcpy(mh.reserved, handle, sizeof(mh.reserved));
  if (cudaError_t e = cudaIpcOpenMemHandle(&m.ptr, mh, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess)
    return Cuda(e, std::string("cudaIpcOpenMemHandle of its ") + what);
  return &allocs.emplace(base, m).first->second;
}

StatusOr<char*> GpuIpcCache::OpenAllocation(uint32_t client_id, int device, const abi::GpuDescriptor& desc) {
  auto& allocs = mappings_[client_id];
  bool opened = false;
  SYNCD_ASSIGN_OR_RETURN(Mapping * m, Open(allocs, device, desc.mem_handle, desc.alloc_base, desc.alloc_bytes,
                                           "allocation", &opened));
  ++(opened ? counters_.opens : counters_.hits);
  char* base = static_cast<char*>(m->ptr);
  if (!cache_) {  // used by this request only: closed once the queued work is done
    retired_.push_back(*m);
    allocs.erase(desc.alloc_base);
  }
  return base;
}

StatusOr<const uint64_t*> GpuIpcCache::OpenFlag(uint32_t client_id, int device, const abi::GpuDescriptor& desc) {
  bool opened = false;
  SYNCD_ASSIGN_OR_RETURN(Mapping * m, Open(flags_[client_id], device, desc.flag_handle, desc.flag_base,
                                           desc.flag_bytes, "ready flag's allocation", &opened));
  m->flag = true;
  return reinterpret_cast<const uint64_t*>(static_cast<char*>(m->ptr) + desc.flag_offset);
}

StatusOr<cudaEvent_t> GpuIpcCache::OpenEvent(uint32_t client_id, const abi::GpuDescriptor& desc) {
  const std::string key(reinterpret_cast<const char*>(desc.event_handle), abi::kIpcHandleBytes);
  auto& evs = events_[client_id];
  auto ev = evs.find(key);
  if (ev == evs.end()) {
    cudaIpcEventHandle_t eh;
    memcpy(eh.reserved, desc.event_handle, sizeof(eh.reserved));
    cudaEvent_t opened = nullptr;
    if (cudaError_t e = cudaIpcOpenEventHandle(&opened, eh); e != cudaSuccess)
      return Cuda(e, "cudaIpcOpenEventHandle of its stream's event");
    ev = evs.emplace(key, opened).first;
  }
  return ev->second;
}

void GpuIpcCache::ForgetClient(uint32_t client_id) {
  for (auto* table : {&mappings_, &flags_})
    if (auto it = table->find(client_id); it != table->end()) {
      for (auto& [base, m] : it->second) retired_.push_back(m);
      table->erase(it);
    }
  if (auto it = events_.find(client_id); it != events_.end()) {
    for (auto& [key, ev] : it->second) retired_events_.push_back(ev);
    events_.erase(it);
  }
}

void GpuIpcCache::CloseRetired() {
  for (const Mapping& m : retired_) Close(m);
  retired_.clear();
  for (cudaEvent_t e : retired_events_) CudaWarn(cudaEventDestroy(e), "cudaEventDestroy");
  retired_events_.clear();
}

uint64_t GpuIpcCache::open_allocations() const {
  uint64_t n = 0;
  for (const auto& [client, allocs] : mappings_) n += allocs.size();
  return n;
}

void GpuIpcCache::Close(const Mapping& m) {
  CudaWarn(cudaSetDevice(ordinals_[m.device]), "cudaSetDevice");
  CudaWarn(cudaIpcCloseMemHandle(m.ptr), "cudaIpcCloseMemHandle");
  if (!m.flag) ++counters_.closes;
}

}  // namespace syncd
