#include "client/src/cuda_driver.h"

#include "syncd/client.h"

#ifdef SYNCD_CLIENT_CUDA
#include <cuda.h>
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <map>
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
  decltype(&::cuDeviceGet) DeviceGet = nullptr;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute = nullptr;
  decltype(&::cuMemAlloc) MemAlloc = nullptr;
  decltype(&::cuMemsetD8) MemsetD8 = nullptr;
  // Optional: drivers without it signal with events.
  decltype(&::cuStreamWriteValue64) StreamWriteValue64 = nullptr;
};

// Flags live in device allocations of the caller's context, kFlagSlabBytes each: 2 MiB, the
// driver's allocation granule, so that no other allocation shares its IPC mapping (the driver packs
// small allocations together, and the daemon could not open a tensor's handle next to a flag's:
// cudaErrorAlreadyMapped, seen on an H200 with 4 KiB slabs).
constexpr uint64_t kFlagSlabBytes = 2 << 20;

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
    auto resolve = [&](const char* name, auto* fn, bool required = true) {
      void* p = nullptr;
      CUdriverProcAddressQueryResult found{};
      if ((get_proc(name, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS || p == nullptr) &&
          required) {
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
    resolve("cuDeviceGet", &api_.DeviceGet);
    resolve("cuDeviceGetAttribute", &api_.DeviceGetAttribute);
    resolve("cuMemAlloc", &api_.MemAlloc);
    resolve("cuMemsetD8", &api_.MemsetD8);
    resolve("cuStreamWriteValue64", &api_.StreamWriteValue64, false);
    if (!ok) return false;
    const char* wait = getenv("SYNCD_GPU_WAIT");  // "event": interprocess events even where flags work
    flags_allowed_ = api_.StreamWriteValue64 != nullptr && !(wait != nullptr && strcmp(wait, "event") == 0);
    if (CUresult r = api_.Init(0); r != CUDA_SUCCESS) {
      *error = "cuInit failed: " + Text(r);
      return false;
    }
    return true;
  }

  int Export(const void* ptr, uint64_t bytes, void* stream, abi::GpuDescriptor* out, int* slot,
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
    const int rc = ExportInContext(p, bytes, ordinal, ctx, static_cast<CUstream>(stream), out, slot, error);
    CUcontext popped = nullptr;
    api_.CtxPopCurrent(&popped);
    return rc;
  }

  void Release(int slot) override {
    MutexLock lock(&mu_);
    if (slot >= 0 && size_t(slot) < slots_.size()) slots_[slot].busy = false;
  }

 private:
  // What one request in flight signals the daemon with: a flag (its values only grow) or an event.
  struct Slot {
    CUcontext ctx = nullptr;
    bool busy = false;
    bool flag = false;
    size_t slab = 0;  // flag: in slabs_[slab], at `offset`, last written `value`
    uint64_t offset = 0;
    uint64_t value = 0;
    CUevent event = nullptr;  // event
    CUipcEventHandle handle{};
  };
  struct Slab {
    CUcontext ctx;
    CUdeviceptr base;
    CUipcMemHandle handle;
    uint64_t used;  // bytes handed to slots
  };

  int ExportInContext(CUdeviceptr p, uint64_t bytes, int ordinal, CUcontext ctx, CUstream stream,
                      abi::GpuDescriptor* out, int* slot_out, std::string* error) {
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
    out->ready = abi::kReadyNow;
    *slot_out = -1;
    // Nothing queued on the stream any more: the tensor is ready, and the daemon need not wait.
    if (api_.StreamQuery(stream) == CUDA_SUCCESS) return SYNCD_OK;
    bool flag = false;
    int slot = -1;
    Slot chosen;  // copied out under the lock: another thread may grow slots_ meanwhile
    CUdeviceptr at = 0;
    {
      MutexLock lock(&mu_);
      if (int rc = UsesFlags(ordinal, &flag, error); rc != SYNCD_OK) return rc;
      if (int rc = TakeSlot(ctx, flag, &slot, error); rc != SYNCD_OK) return rc;
      Slot& s = slots_[slot];
      if (flag) {
        ++s.value;
        at = slabs_[s.slab].base + s.offset;
        out->ready = abi::kReadyFlag;
        memcpy(out->flag_handle, slabs_[s.slab].handle.reserved, sizeof(out->flag_handle));
        out->flag_base = slabs_[s.slab].base;
        out->flag_bytes = kFlagSlabBytes;
        out->flag_offset = s.offset;
        out->flag_value = s.value;
      }
      chosen = s;
    }
    const CUresult r = flag ? api_.StreamWriteValue64(stream, at, chosen.value, CU_STREAM_WRITE_VALUE_DEFAULT)
                            : api_.EventRecord(chosen.event, stream);
    if (r != CUDA_SUCCESS) {
      Release(slot);
      return Failed(flag ? "cuStreamWriteValue64 on the caller's stream" : "cuEventRecord on the caller's stream", r,
                    error);
    }
    if (!flag) {
      memcpy(out->event_handle, chosen.handle.reserved, sizeof(out->event_handle));
      out->ready = abi::kReadyEvent;
    }
    *slot_out = slot;
    return SYNCD_OK;
  }

  // Whether the device `ordinal` takes 64-bit stream memory operations (asked once per device).
  int UsesFlags(int ordinal, bool* flag, std::string* error) SYNCD_REQUIRES(mu_) {
    *flag = false;
    if (!flags_allowed_) return SYNCD_OK;
    auto it = flag_devices_.find(ordinal);
    if (it == flag_devices_.end()) {
      CUdevice dev = 0;
      int v = 0;
      if (CUresult r = api_.DeviceGet(&dev, ordinal); r != CUDA_SUCCESS) return Failed("cuDeviceGet", r, error);
      if (api_.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev) != CUDA_SUCCESS) v = 0;
      it = flag_devices_.emplace(ordinal, v != 0).first;
    }
    *flag = it->second;
    return SYNCD_OK;
  }

  // A free slot of context `ctx` and kind `flag`, made if there is none; marked busy.
  int TakeSlot(CUcontext ctx, bool flag, int* slot, std::string* error) SYNCD_REQUIRES(mu_) {
    for (size_t i = 0; i < slots_.size(); ++i)
      if (!slots_[i].busy && slots_[i].ctx == ctx && slots_[i].flag == flag) {
        slots_[i].busy = true;
        *slot = int(i);
        return SYNCD_OK;
      }
    Slot s;
    s.ctx = ctx;
    s.flag = flag;
    if (flag) {
      size_t slab = slabs_.size();
      for (size_t i = 0; i < slabs_.size(); ++i)
        if (slabs_[i].ctx == ctx && slabs_[i].used + 8 <= kFlagSlabBytes) slab = i;
      if (slab == slabs_.size()) {
        Slab fresh{ctx, 0, {}, 0};
        if (CUresult r = api_.MemAlloc(&fresh.base, kFlagSlabBytes); r != CUDA_SUCCESS)
          return Failed("cuMemAlloc (ready flags)", r, error);
        if (CUresult r = api_.MemsetD8(fresh.base, 0, kFlagSlabBytes); r != CUDA_SUCCESS)
          return Failed("cuMemsetD8 (ready flags)", r, error);
        if (CUresult r = api_.IpcGetMemHandle(&fresh.handle, fresh.base); r != CUDA_SUCCESS)
          return Failed("cuIpcGetMemHandle (ready flags)", r, error);
        slabs_.push_back(fresh);
      }
      s.slab = slab;
      s.offset = slabs_[slab].used;
      slabs_[slab].used += 8;
    } else {
      if (CUresult r = api_.EventCreate(&s.event, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS); r != CUDA_SUCCESS)
        return Failed("cuEventCreate(INTERPROCESS)", r, error);
      if (CUresult r = api_.IpcGetEventHandle(&s.handle, s.event); r != CUDA_SUCCESS)
        return Failed("cuIpcGetEventHandle", r, error);
    }
    s.busy = true;
    slots_.push_back(s);
    *slot = int(slots_.size() - 1);
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
  bool flags_allowed_ = false;  // the driver writes stream values and SYNCD_GPU_WAIT does not ask for events
  Mutex mu_;
  // Never freed: the daemon may hold them open.
  std::vector<Slot> slots_ SYNCD_GUARDED_BY(mu_);
  std::vector<Slab> slabs_ SYNCD_GUARDED_BY(mu_);
  std::map<int, bool> flag_devices_ SYNCD_GUARDED_BY(mu_);  // ordinal -> 64-bit stream memory operations
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
