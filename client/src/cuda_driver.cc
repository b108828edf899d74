#include "client/src/cuda_driver.h"

#include "syncd/client.h"

#ifdef SYNCD_CLIENT_CUDA
#include <cuda.h>
#include <dlfcn.h>

#include <cstring>
#include <vector>

#include "proto/mutex.h"
#endif

namespace syncd::client {

#ifndef SYNCD_CLIENT_CUDA

CudaDriver* CudaDriver::Get(std::string* error) {
  *error = "libsyncclient was built without CUDA support (rebuild syncd where the CUDA toolkit is found)";
  return nullptr;
}

#else

namespace {

// Driver entry points, resolved through cuGetProcAddress for the CUDA version the headers are
// from (the driver picks the matching versioned symbol).
struct Api {
  decltype(&::cuInit) Init = nullptr;
  decltype(&::cuPointerGetAttribute) PointerGetAttribute = nullptr;
  decltype(&::cuMemGetAddressRange) MemGetAddressRange = nullptr;
  decltype(&::cuIpcGetMemHandle) IpcGetMemHandle = nullptr;
  decltype(&::cuIpcGetEventHandle) IpcGetEventHandle = nullptr;
  decltype(&::cuEventCreate) EventCreate = nullptr;
  decltype(&::cuEventRecord) EventRecord = nullptr;
  decltype(&::cuCtxPushCurrent) CtxPushCurrent = nullptr;
  decltype(&::cuCtxPopCurrent) CtxPopCurrent = nullptr;
  decltype(&::cuDeviceGetUuid) DeviceGetUuid = nullptr;
  decltype(&::cuGetErrorString) GetErrorString = nullptr;
  decltype(&::cuStreamQuery) StreamQuery = nullptr;
};

class DlCudaDriver final : public CudaDriver {
 public:
  bool Load(std::string* error) {
    lib_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) {
      *error = std::string("cannot load the CUDA driver (libcuda.so.1): ") + dlerror();
      return false;
    }
    using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
    auto get_proc = reinterpret_cast<GetProc>(dlsym(lib_, "cuGetProcAddress_v2"));
    if (get_proc == nullptr) {
      *error = "the CUDA driver is too old: it has no cuGetProcAddress_v2 (need a CUDA 12 or newer driver)";
      return false;
    }
    bool ok = true;
    auto resolve = [&](const char* name, auto* fn) {
      void* p = nullptr;
      CUdriverProcAddressQueryResult found{};
      if (get_proc(name, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS || p == nullptr) {
        if (ok) *error = std::string("the CUDA driver lacks ") + name;
        ok = false;
      }
      *fn = reinterpret_cast<std::remove_reference_t<decltype(*fn)>>(p);
    };
    resolve("cuInit", &api_.Init);
    resolve("cuPointerGetAttribute", &api_.PointerGetAttribute);
    resolve("cuMemGetAddressRange", &api_.MemGetAddressRange);
    resolve("cuIpcGetMemHandle", &api_.IpcGetMemHandle);
    resolve("cuIpcGetEventHandle", &api_.IpcGetEventHandle);
    resolve("cuEventCreate", &api_.EventCreate);
    resolve("cuEventRecord", &api_.EventRecord);
    resolve("cuCtxPushCurrent", &api_.CtxPushCurrent);
    resolve("cuCtxPopCurrent", &api_.CtxPopCurrent);
    resolve("cuDeviceGetUuid", &api_.DeviceGetUuid);
    resolve("cuGetErrorString", &api_.GetErrorString);
    resolve("cuStreamQuery", &api_.StreamQuery);
    if (!ok) return false;
    if (CUresult r = api_.Init(0); r != CUDA_SUCCESS) {
      *error = "cuInit failed: " + Text(r);
      return false;
    }
    return true;
  }

  int Export(const void* ptr, uint64_t bytes, void* stream, abi::GpuDescriptor* out, int* event_slot,
             std::string* error) override {
    const CUdeviceptr p = reinterpret_cast<CUdeviceptr>(ptr);
    unsigned int memory_type = 0;
    CUcontext ctx = nullptr;
    int ordinal = -1;
    if (api_.PointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS ||
        memory_type != CU_MEMORYTYPE_DEVICE) {
      *error = "is not CUDA device memory";
      return SYNCD_ERR_INVALID;
    }
    if (CUresult r = api_.PointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, p); r != CUDA_SUCCESS)
      return Failed("cuPointerGetAttribute(CONTEXT)", r, error);
    if (CUresult r = api_.PointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p); r != CUDA_SUCCESS)
      return Failed("cuPointerGetAttribute(DEVICE_ORDINAL)", r, error);
    if (api_.CtxPushCurrent(ctx) != CUDA_SUCCESS) {
      *error = "cannot make the tensor's CUDA context current";
      return SYNCD_ERR_SYSTEM;
    }
    const int rc = ExportInContext(p, bytes, ordinal, ctx, static_cast<CUstream>(stream), out, event_slot, error);
    CUcontext popped = nullptr;
    api_.CtxPopCurrent(&popped);
    return rc;
  }

  void Release(int slot) override {
    MutexLock lock(&mu_);
    if (slot >= 0 && size_t(slot) < events_.size()) events_[slot].busy = false;
  }

 private:
  struct Event {
    CUcontext ctx;
    CUevent event;
    CUipcEventHandle handle;
    bool busy;
  };

  int ExportInContext(CUdeviceptr p, uint64_t bytes, int ordinal, CUcontext ctx, CUstream stream,
                      abi::GpuDescriptor* out, int* event_slot, std::string* error) {
    CUdeviceptr base = 0;
    size_t size = 0;
    if (CUresult r = api_.MemGetAddressRange(&base, &size, p); r != CUDA_SUCCESS)
      return Failed("cuMemGetAddressRange", r, error);
    if (p - base + bytes > size) {
      *error = "runs past the end of its CUDA allocation (" + std::to_string(size) + " bytes)";
      return SYNCD_ERR_INVALID;
    }
    CUipcMemHandle mem{};
    if (CUresult r = api_.IpcGetMemHandle(&mem, base); r != CUDA_SUCCESS) return Failed("cuIpcGetMemHandle", r, error);
    CUuuid uuid{};
    if (CUresult r = api_.DeviceGetUuid(&uuid, ordinal); r != CUDA_SUCCESS) return Failed("cuDeviceGetUuid", r, error);
    memset(out, 0, sizeof(*out));
    memcpy(out->mem_handle, mem.reserved, sizeof(out->mem_handle));
    memcpy(out->device_uuid, uuid.bytes, sizeof(out->device_uuid));
    out->alloc_base = base;
    out->alloc_bytes = size;
    out->offset = p - base;
    *event_slot = -1;
    // Nothing queued on the stream any more: the tensor is ready, and the daemon need not wait
    // on an interprocess event (which costs it more than this query costs here).
    if (api_.StreamQuery(stream) == CUDA_SUCCESS) return SYNCD_OK;
    int slot = -1;
    Event chosen{};  // copied out under the lock: another thread may grow events_ meanwhile
    {
      MutexLock lock(&mu_);
      for (size_t i = 0; i < events_.size(); ++i)
        if (!events_[i].busy && events_[i].ctx == ctx) {
          slot = int(i);
          break;
        }
      if (slot < 0) {
        Event e{ctx, nullptr, {}, false};
        if (CUresult r = api_.EventCreate(&e.event, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS); r != CUDA_SUCCESS)
          return Failed("cuEventCreate(INTERPROCESS)", r, error);
        if (CUresult r = api_.IpcGetEventHandle(&e.handle, e.event); r != CUDA_SUCCESS)
          return Failed("cuIpcGetEventHandle", r, error);
        events_.push_back(e);
        slot = int(events_.size() - 1);
      }
      events_[slot].busy = true;
      chosen = events_[slot];
    }
    if (CUresult r = api_.EventRecord(chosen.event, stream); r != CUDA_SUCCESS) {
      Release(slot);
      return Failed("cuEventRecord on the caller's stream", r, error);
    }
    memcpy(out->event_handle, chosen.handle.reserved, sizeof(out->event_handle));
    out->has_event = 1;
    *event_slot = slot;
    return SYNCD_OK;
  }

  std::string Text(CUresult r) const {
    const char* s = nullptr;
    if (api_.GetErrorString != nullptr) api_.GetErrorString(r, &s);
    return s ? s : "CUDA error " + std::to_string(int(r));
  }
  int Failed(const char* what, CUresult r, std::string* error) const {
    *error = std::string(what) + " failed: " + Text(r);
    return SYNCD_ERR_SYSTEM;
  }

  void* lib_ = nullptr;
  Api api_;
  Mutex mu_;
  std::vector<Event> events_ SYNCD_GUARDED_BY(mu_);  // never destroyed: the daemon may hold them open
};

static_assert(sizeof(CUipcMemHandle) == abi::kIpcHandleBytes && sizeof(CUipcEventHandle) == abi::kIpcHandleBytes);

}  // namespace

CudaDriver* CudaDriver::Get(std::string* error) {
  static std::string load_error;
  static DlCudaDriver* driver = [] {
    auto* d = new DlCudaDriver();
    if (d->Load(&load_error)) return d;
    delete d;
    return static_cast<DlCudaDriver*>(nullptr);
  }();
  if (driver == nullptr) *error = load_error;
  return driver;
}

#endif  // SYNCD_CLIENT_CUDA

}  // namespace syncd::client
