#include <cuda_runtime.h>
#include <nccl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <map>

#include "daemon/core/reduce_kernels.h"
#include "daemon/exec/cuda_status.h"
#include "daemon/exec/gpu_executor.h"
#include "daemon/exec/gpu_ipc_cache.h"
#include "daemon/exec/gpu_kernels.h"
#include "daemon/exec/gpu_stream_wait.h"
#include "proto/doorbell.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

class CudaGpuExecutor final : public GpuExecutor {
 public:
  struct Device {
    int ordinal;
    uint8_t uuid[16];
    std::string name;
    cudaStream_t stream = nullptr;
    ncclComm_t comm = nullptr;
    void* fusion = nullptr;
    size_t fusion_bytes = 0;
    std::vector<cudaEvent_t> spare_events;
  };

  explicit CudaGpuExecutor(bool ipc_cache) : ipc_cache_(ipc_cache) {}

  Status Init() {
    int n = 0;
    if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess) return Cuda(e, "cudaGetDeviceCount");
    if (n == 0) return Status(SYNCD_ERR_INVALID, "no CUDA device is visible");
    devices_.resize(n);
    for (int i = 0; i < n; ++i) {
      Device& d = devices_[i];
      d.ordinal = i;
      cudaDeviceProp prop{};
      if (cudaError_t e = cudaGetDeviceProperties(&prop, i); e != cudaSuccess)
        return Cuda(e, "cudaGetDeviceProperties");
      memcpy(d.uuid, prop.uuid.bytes, 16);
      d.name = std::to_string(i) + ": " + prop.name + " (" + UuidText(d.uuid) + ")";
      SYNCD_RETURN_IF_ERROR(Cuda(cudaSetDevice(i), "cudaSetDevice(" + d.name + ")"));
      int lo = 0, hi = 0;
      SYNCD_RETURN_IF_ERROR(Cuda(cudaDeviceGetStreamPriorityRange(&lo, &hi), "cudaDeviceGetStreamPriorityRange"));
      // The daemon's copies and reductions go ahead of the framework's compute kernels.
      if (cudaError_t e = cudaStreamCreateWithPriority(&d.stream, cudaStreamNonBlocking, hi); e != cudaSuccess)
        return Cuda(e, "cudaStreamCreateWithPriority");
    }
    std::vector<int> ordinals;
    for (const Device& d : devices_) ordinals.push_back(d.ordinal);
    ipc_ = std::make_unique<GpuIpcCache>(std::move(ordinals), ipc_cache_);
    return Status::Ok();
  }

  ~CudaGpuExecutor() override {
    for (Device& d : devices_) {
      CudaWarn(cudaSetDevice(d.ordinal), "cudaSetDevice");
      if (d.stream) CudaWarn(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize");
    }
    ipc_.reset();  // the streams are idle: every mapping may close
    DestroyComms();
    for (Device& d : devices_) {
      CudaWarn(cudaSetDevice(d.ordinal), "cudaSetDevice");
      if (d.fusion) CudaWarn(cudaFree(d.fusion), "cudaFree");
      for (cudaEvent_t e : d.spare_events) CudaWarn(cudaEventDestroy(e), "cudaEventDestroy");
      if (d.stream) CudaWarn(cudaStreamDestroy(d.stream), "cudaStreamDestroy");
    }
  }

  uint32_t devices() const override { return uint32_t(devices_.size()); }
  std::vector<std::string> uuids() const override {
    std::vector<std::string> u;
    for (const Device& d : devices_) u.push_back(UuidText(d.uuid));
    return u;
  }
  bool connected() const override { return nranks_ > 0; }

  StatusOr<std::string> MakeNcclId() override {
    ncclUniqueId id;
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return NcclError("ncclGetUniqueId", r);
    return std::string(id.internal, sizeof(id.internal));
  }

  Status Connect(const std::string& nccl_id, const std::vector<uint32_t>& gpus_per_node, uint32_t node_rank,
                 uint32_t timeout_s) override {
    ncclUniqueId id;
    if (nccl_id.size() != sizeof(id.internal))
      return Status(SYNCD_ERR_PROTOCOL, "NCCL unique id of " + std::to_string(nccl_id.size()) + " bytes");
    memcpy(id.internal, nccl_id.data(), sizeof(id.internal));
    uint32_t total = 0;
    node_first_rank_.clear();
    for (uint32_t g : gpus_per_node) {
      node_first_rank_.push_back(total);
      total += g;
    }
    if (node_rank >= gpus_per_node.size() || gpus_per_node[node_rank] != devices_.size())
      return Status(SYNCD_ERR_INTERNAL, "GPU count of this node disagrees with the rendezvous");
    const uint32_t first = node_first_rank_[node_rank];
    const std::string ranks = "NCCL ranks " + std::to_string(first) + ".." +
                              std::to_string(first + devices_.size() - 1) + " of " + std::to_string(total);
    // Nonblocking communicators: creation can be given up (NCCL's own rendezvous waits forever for
    // a rank that never comes), and every later call is settled the same way (Settle).
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    settle_timeout_ns_ = uint64_t(timeout_s) * 1'000'000'000ull;
    if (ncclResult_t r = ncclGroupStart(); r != ncclSuccess) return NcclError("ncclGroupStart", r);
    ncclResult_t init = ncclSuccess;
    Status device;
    for (size_t i = 0; i < devices_.size() && init == ncclSuccess && device.ok(); ++i) {
      device = Cuda(cudaSetDevice(devices_[i].ordinal), "cudaSetDevice(" + devices_[i].name + ")");
      if (!device.ok()) break;
      init = ncclCommInitRankConfig(&devices_[i].comm, int(total), id, int(first + i), &config);
      if (init == ncclInProgress) init = ncclSuccess;
    }
    ncclResult_t end = ncclGroupEnd();
    if (end == ncclInProgress) end = ncclSuccess;
    Status st = !device.ok()              ? device
                : init != ncclSuccess     ? NcclError("ncclCommInitRankConfig (" + ranks + ")", init)
                : end != ncclSuccess      ? NcclError("ncclCommInitRankConfig (" + ranks + ", group)", end)
                                          : Settle("creating the NCCL communicator (" + ranks + ")");
    if (!st.ok()) {
      for (Device& d : devices_)
        if (d.comm) {
          CudaWarn(cudaSetDevice(d.ordinal), "cudaSetDevice");
          ncclCommAbort(d.comm);
          d.comm = nullptr;
        }
      if (st.code() == SYNCD_ERR_TIMEOUT)
        st = Status(SYNCD_ERR_TIMEOUT, st.message() + ": every daemon of the job creates its ranks at once; one that "
                                                      "never does is down or cannot reach this one over NCCL's "
                                                      "network (NCCL_SOCKET_IFNAME; NCCL_DEBUG=INFO says more)");
      return st;
    }
    nranks_ = total;
    first_rank_ = first;
    spdlog::info("NCCL: {} ranks in the job, this daemon holds ranks {}..{} (NCCL {})", total, first,
                 first + devices_.size() - 1, NCCL_VERSION_CODE);
    return Status::Ok();
  }

  StatusOr<GpuMapping> Map(uint32_t client_id, const abi::GpuDescriptor& desc, uint64_t bytes) override {
    const uint64_t t0 = abi::MonotonicNs();
    StatusOr<GpuMapping> m = MapTimed(client_id, desc, bytes);
    stats_.map_ns += abi::MonotonicNs() - t0;
    return m;
  }

  StatusOr<GpuMapping> MapTimed(uint32_t client_id, const abi::GpuDescriptor& desc, uint64_t bytes) {
    int dev = -1;
    for (size_t i = 0; i < devices_.size(); ++i)
      if (memcmp(devices_[i].uuid, desc.device_uuid, 16) == 0) dev = int(i);
    if (dev < 0)
      return Status(SYNCD_ERR_INVALID, "its GPU " + UuidText(desc.device_uuid) +
                                           " is not one this syncd sees (check CUDA_VISIBLE_DEVICES of the daemon)");
    if (desc.offset > desc.alloc_bytes || bytes > desc.alloc_bytes - desc.offset)
      return Status(SYNCD_ERR_INVALID, "[" + std::to_string(desc.offset) + ", +" + std::to_string(bytes) +
                                           ") lies outside its allocation of " + std::to_string(desc.alloc_bytes) + " bytes");
    SYNCD_RETURN_IF_ERROR(waiter_.Check(desc));
    GpuMapping m;
    m.device = dev;
    if (cudaError_t e = cudaSetDevice(devices_[dev].ordinal); e != cudaSuccess) return Cuda(e, "cudaSetDevice");
    SYNCD_ASSIGN_OR_RETURN(char* base, ipc_->OpenAllocation(client_id, dev, desc));
    m.data = base + desc.offset;
    if (desc.ready == abi::kReadyEvent) {
      SYNCD_ASSIGN_OR_RETURN(m.ready.event, ipc_->OpenEvent(client_id, desc));
    } else if (desc.ready == abi::kReadyFlag) {
      SYNCD_ASSIGN_OR_RETURN(m.ready.flag, ipc_->OpenFlag(client_id, dev, desc));
      m.ready.value = desc.flag_value;
    }
    return m;
  }

  void ForgetClient(uint32_t client_id) override {
    ipc_->ForgetClient(client_id);
    CloseRetired();
  }

  StatusOr<uint64_t> Allreduce(const TensorGroup& group, uint32_t world_size) override {
    issue_start_ns_ = abi::MonotonicNs();
    if (!failure_.ok()) return failure_;
    if (nranks_ == 0) return Status(SYNCD_ERR_INTERNAL, "the GPUs of this job are not connected (NCCL)");
    const Request& head = group.front()->first();
    if (head.dtype == SYNCD_INT16)
      return InvalidArgument("NCCL has no 16-bit integer type, so int16 GPU tensors cannot be allreduced (Horovod's "
                             "NCCL path refuses them too); allreduce them as int32 or on the host");
    // bool: uint8 values 0/1 under the logical op.
    const syncd_dtype dtype = head.dtype == SYNCD_BOOL ? SYNCD_UINT8 : head.dtype;
    const syncd_reduce_op op = head.dtype == SYNCD_BOOL ? LogicalOp(head.op) : head.op;
    const size_t esize = abi::DtypeSize(dtype);
    uint64_t total = 0;
    for (const ReadyTensor* t : group) total += t->first().bytes;
    if (total == 0) return Finished();
    Ticket ticket;
    ticket.id = ++next_ticket_;
    // 1. Every GPU: wait for its ranks' streams, reduce their tensors into its buffer: for a group
    // of one tensor, in place into the tensor of the GPU's first rank (no fusion buffer, one
    // copy fewer), else into the GPU's fusion buffer.
    std::vector<const Request*> home(devices_.size(), nullptr);  // the GPU's in-place tensor
    std::vector<char*> reduced(devices_.size(), nullptr);        // where the GPU's sum builds
    for (size_t di = 0; di < devices_.size(); ++di) {
      Device& d = devices_[di];
      if (Status st = Cuda(cudaSetDevice(d.ordinal), "cudaSetDevice(" + d.name + ")"); !st.ok()) return AbortWith(st);
      if (group.size() == 1)
        for (const Request& r : group.front()->requests)
          if (r.gpu && r.gpu_device == int(di) && home[di] == nullptr) home[di] = &r;
      if (home[di] == nullptr) {
        if (Status st = EnsureFusion(d, total); !st.ok()) return st;
        reduced[di] = static_cast<char*>(d.fusion);
      } else {
        reduced[di] = home[di]->data;
      }
      if (Status st = WaitForClients(group, int(di), d.stream); !st.ok()) return AbortWith(st);
      uint64_t at = 0;
      for (const ReadyTensor* t : group) {
        const uint64_t count = t->first().bytes / esize;
        char* out = reduced[di] + at;  // reading every input at an index before writing it there
        gpu::ReduceLaunch l;
        l.output = out;
        l.count = count;
        l.dtype = dtype;
        l.op = op;
        l.prescale = head.prescale;
        for (const Request& r : t->requests) {
          if (!r.gpu || r.gpu_device != int(di)) continue;
          if (l.n == gpu::kMaxReduceInputs) {  // fold what we have, keep reducing into the output
            if (int e = gpu::LaunchReduce(l, d.stream); e != 0) return AbortWith(Cuda(cudaError_t(e), "reduce kernel"));
            l.n = 1;
            l.inputs[0] = out;
            l.prescale = 1.0;
          }
          l.inputs[l.n++] = r.data;
        }
        int e = l.n > 0 ? gpu::LaunchReduce(l, d.stream) : gpu::LaunchFillIdentity(out, count, dtype, op, d.stream);
        if (e != 0) return AbortWith(Cuda(cudaError_t(e), "reduce kernel"));
        at += t->first().bytes;
      }
    }
    // 2. One allreduce over every GPU of the job.
    if (Status st = NcclAll([&](Device& d) {
          char* buf = reduced[size_t(&d - devices_.data())];
          return ncclAllReduce(buf, buf, total / esize, NcclType(dtype), NcclOp(op), d.comm, d.stream);
        }, "ncclAllReduce");
        !st.ok())
      return st;
    // 3. Finish and copy back into every rank's tensor.
    const uint64_t divisor = head.op == SYNCD_AVERAGE ? world_size : 1;
    for (size_t di = 0; di < devices_.size(); ++di) {
      Device& d = devices_[di];
      if (Status st = Cuda(cudaSetDevice(d.ordinal), "cudaSetDevice(" + d.name + ")"); !st.ok()) return AbortWith(st);
      if (int e = gpu::LaunchFinish(reduced[di], total / esize, dtype, head.postscale, divisor, d.stream); e != 0)
        return AbortWith(Cuda(cudaError_t(e), "finish kernel"));
      uint64_t at = 0;
      for (const ReadyTensor* t : group) {
        const uint64_t bytes = t->first().bytes;
        for (const Request& r : t->requests)
          if (r.gpu && r.gpu_device == int(di) && bytes > 0 && &r != home[di])
            if (cudaError_t e = cudaMemcpyAsync(r.data, reduced[di] + at, bytes, cudaMemcpyDeviceToDevice, d.stream);
                e != cudaSuccess)
              return AbortWith(Cuda(e, "cudaMemcpyAsync (result to rank " + std::to_string(r.rank) + ")"));
        at += bytes;
      }
    }
    ++stats_.allreduces;
    stats_.bytes += total;
    return Enqueued(std::move(ticket));
  }

  StatusOr<uint64_t> Broadcast(const ReadyTensor& t, uint32_t root_node) override {
    issue_start_ns_ = abi::MonotonicNs();
    if (!failure_.ok()) return failure_;
    if (nranks_ == 0) return Status(SYNCD_ERR_INTERNAL, "the GPUs of this job are not connected (NCCL)");
    const Request& head = t.first();
    const uint64_t bytes = head.bytes;
    if (bytes == 0) return Finished();
    // The root's tensor goes into the fusion buffer of the root node's first GPU, whose NCCL rank
    // is the broadcast's root; every GPU then copies it into its ranks' tensors.
    const Request* root = nullptr;
    for (const Request& r : t.requests)
      if (int32_t(r.rank) == r.root) root = &r;
    for (Device& d : devices_) {
      if (Status st = Cuda(cudaSetDevice(d.ordinal), "cudaSetDevice(" + d.name + ")"); !st.ok()) return AbortWith(st);
      if (Status st = EnsureFusion(d, bytes); !st.ok()) return st;
    }
    if (root != nullptr) {
      Device& d0 = devices_[0];
      if (Status st = Cuda(cudaSetDevice(d0.ordinal), "cudaSetDevice(" + d0.name + ")"); !st.ok()) return AbortWith(st);
      if (Status st = waiter_.Wait(d0.stream, *root); !st.ok()) return AbortWith(st);
      cudaError_t e = root->gpu_device == 0
                          ? cudaMemcpyAsync(d0.fusion, root->data, bytes, cudaMemcpyDeviceToDevice, d0.stream)
                          : cudaMemcpyPeerAsync(d0.fusion, d0.ordinal, root->data, devices_[root->gpu_device].ordinal,
                                                bytes, d0.stream);
      if (e != cudaSuccess) return AbortWith(Cuda(e, "cudaMemcpyAsync (root's tensor)"));
    }
    for (size_t di = 0; di < devices_.size(); ++di) {
      if (Status st = Cuda(cudaSetDevice(devices_[di].ordinal), "cudaSetDevice(" + devices_[di].name + ")"); !st.ok())
        return AbortWith(st);
      // Ranks' tensors are overwritten after their work.
      if (Status st = WaitForClients({&t}, int(di), devices_[di].stream); !st.ok()) return AbortWith(st);
    }
    const int nccl_root = int(node_first_rank_.at(root_node));
    if (Status st = NcclAll([&](Device& d) {
          return ncclBroadcast(d.fusion, d.fusion, bytes, ncclUint8, nccl_root, d.comm, d.stream);
        }, "ncclBroadcast");
        !st.ok())
      return st;
    for (size_t di = 0; di < devices_.size(); ++di) {
      Device& d = devices_[di];
      if (Status st = Cuda(cudaSetDevice(d.ordinal), "cudaSetDevice(" + d.name + ")"); !st.ok()) return AbortWith(st);
      for (const Request& r : t.requests)
        if (r.gpu && r.gpu_device == int(di) && &r != root)
          if (cudaError_t e = cudaMemcpyAsync(r.data, d.fusion, bytes, cudaMemcpyDeviceToDevice, d.stream); e != cudaSuccess)
            return AbortWith(Cuda(e, "cudaMemcpyAsync (broadcast to rank " + std::to_string(r.rank) + ")"));
    }
    ++stats_.broadcasts;
    stats_.bytes += bytes;
    return Enqueued(Ticket{++next_ticket_, {}});
  }

  CommState Test(uint64_t id, Status* error) override {
    auto it = tickets_.find(id);
    if (it == tickets_.end()) return CommState::kDone;  // finished when enqueued (nothing to do)
    Ticket& t = it->second;
    if (!failure_.ok()) {
      *error = failure_;
      Drop(it);
      return CommState::kFailed;
    }
    for (size_t di = 0; di < t.done.size(); ++di) {
      if (t.done[di] == nullptr) continue;
      if (Status st = Cuda(cudaSetDevice(devices_[di].ordinal), "cudaSetDevice(" + devices_[di].name + ")"); !st.ok()) {
        Abort(st);
        *error = failure_;
        Drop(it);
        return CommState::kFailed;
      }
      const cudaError_t e = cudaEventQuery(t.done[di]);
      if (e == cudaErrorNotReady) {
        if (Status st = AsyncErrors(); !st.ok()) {
          Abort(st);
          *error = failure_;
          Drop(it);
          return CommState::kFailed;
        }
        return CommState::kPending;
      }
      if (e != cudaSuccess) {
        Abort(Cuda(e, "GPU work of a collective"));
        *error = failure_;
        Drop(it);
        return CommState::kFailed;
      }
      devices_[di].spare_events.push_back(t.done[di]);
      t.done[di] = nullptr;
    }
    stats_.device_ns += abi::MonotonicNs() - t.issued_ns;
    ++stats_.completed;
    tickets_.erase(it);
    CloseRetired();
    return CommState::kDone;
  }

  size_t in_flight() const override { return tickets_.size(); }

  void Abort(const Status& why) override {
    if (!failure_.ok()) return;
    failure_ = Status(why.code() == SYNCD_OK ? SYNCD_ERR_INTERNAL : why.code(), "GPU collectives aborted: " + why.message());
    spdlog::error("{}", failure_.message());
    for (Device& d : devices_)
      if (d.comm) {
        CudaWarn(cudaSetDevice(d.ordinal), "cudaSetDevice");
        if (ncclResult_t r = ncclCommAbort(d.comm); r != ncclSuccess)
          spdlog::warn("ncclCommAbort on {} failed (NCCL: {})", d.name, ncclGetErrorString(r));
        d.comm = nullptr;
      }
  }

  GpuStats stats() const override {
    GpuStats s = stats_;
    s.devices = uint32_t(devices_.size());
    s.nccl_ranks = nranks_;
    s.flag_waits = waiter_.flag_waits();
    s.event_waits = waiter_.event_waits();
    s.handle_hits = ipc_->counters().hits;
    s.handle_opens = ipc_->counters().opens;
    s.handle_closes = ipc_->counters().closes;
    s.open_handles = ipc_->open_allocations();
    for (const Device& d : devices_) s.names.push_back(d.name);
    return s;
  }

 private:
  struct Ticket {
    uint64_t id = 0;
    std::vector<cudaEvent_t> done;  // by device
    uint64_t issued_ns = 0;
  };

  Status EnsureFusion(Device& d, uint64_t bytes) {
    if (d.fusion_bytes >= bytes) return Status::Ok();
    if (d.fusion) {
      // Queued work may still use the old buffer.
      SYNCD_RETURN_IF_ERROR(AbortWith(Cuda(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize (" + d.name + ")")));
      CudaWarn(cudaFree(d.fusion), "cudaFree");
      d.fusion = nullptr;
      d.fusion_bytes = 0;
    }
    const uint64_t want = std::max<uint64_t>(bytes, 4 << 20);
    if (cudaError_t e = cudaMalloc(&d.fusion, want); e != cudaSuccess) {
      cudaGetLastError();
      return Status(SYNCD_ERR_NO_MEMORY, "cannot allocate a GPU fusion buffer of " + std::to_string(want) + " bytes on " +
                                             d.name + " (" + CudaText(e) + ")");
    }
    d.fusion_bytes = want;
    return Status::Ok();
  }

  // The daemon's stream waits for the work each rank queued before submitting.
  Status WaitForClients(const TensorGroup& group, int device, cudaStream_t stream) {
    for (const ReadyTensor* t : group)
      for (const Request& r : t->requests)
        if (r.gpu && r.gpu_device == device) SYNCD_RETURN_IF_ERROR(waiter_.Wait(stream, r));
    return Status::Ok();
  }

  // A failure after this node has agreed to run the collective: the other nodes' daemons are in
  // NCCL already, so the GPU path of the job ends here (Abort) rather than leaving them waiting.
  Status AbortWith(const Status& st) {
    if (st.ok()) return st;
    Abort(st);
    return failure_;
  }

  // Waits until no communicator has a nonblocking NCCL call in progress (creation, or a group of
  // collectives connecting lazily), at most `timeout_ns` (default: Connect's). Spins first: most
  // settle at once.
  Status Settle(const std::string& what, uint64_t timeout_ns = 0) {
    if (timeout_ns == 0) timeout_ns = settle_timeout_ns_;
    const uint64_t start = abi::MonotonicNs();
    for (uint32_t spin = 0;; ++spin) {
      bool busy = false;
      for (Device& d : devices_) {
        if (!d.comm) continue;
        const ncclResult_t state = NcclState(d.comm);
        if (state == ncclInProgress) busy = true;
        else if (state != ncclSuccess) return NcclError(what + " on " + d.name, state);
      }
      if (!busy) return Status::Ok();
      const uint64_t waited = abi::MonotonicNs() - start;
      if (waited > timeout_ns)
        return Status(SYNCD_ERR_TIMEOUT, what + " did not finish within " +
                                             std::to_string(timeout_ns / 1'000'000'000ull) + " s");
      if (spin > 1000) usleep(waited < 10'000'000 ? 50 : 1000);
    }
  }

  // Finalizes (nonblocking: settled) and destroys the communicators; aborts one that cannot be.
  void DestroyComms() {
    for (Device& d : devices_) {
      if (!d.comm) continue;
      CudaWarn(cudaSetDevice(d.ordinal), "cudaSetDevice");
      if (ncclResult_t r = ncclCommFinalize(d.comm); r != ncclSuccess && r != ncclInProgress)
        spdlog::warn("ncclCommFinalize on {} failed (NCCL: {})", d.name, ncclGetErrorString(r));
    }
    const Status settled = Settle("finalizing the NCCL communicator", 10'000'000'000ull);
    if (!settled.ok()) spdlog::warn("{}: aborting it", settled.message());
    for (Device& d : devices_) {
      if (!d.comm) continue;
      CudaWarn(cudaSetDevice(d.ordinal), "cudaSetDevice");
      const ncclResult_t r = settled.ok() ? ncclCommDestroy(d.comm) : ncclCommAbort(d.comm);
      if (r != ncclSuccess) spdlog::warn("destroying the NCCL communicator on {} failed (NCCL: {})", d.name, ncclGetErrorString(r));
      d.comm = nullptr;
    }
  }

  template <typename F>
  Status NcclAll(F call, const char* what) {
    if (ncclResult_t r = ncclGroupStart(); r != ncclSuccess) return AbortWith(NcclError("ncclGroupStart", r));
    ncclResult_t first = ncclSuccess;
    Status device;
    for (Device& d : devices_) {
      device = Cuda(cudaSetDevice(d.ordinal), "cudaSetDevice(" + d.name + ")");
      if (!device.ok()) break;
      if (ncclResult_t r = call(d); r != ncclSuccess && r != ncclInProgress && first == ncclSuccess) first = r;
    }
    const ncclResult_t end = ncclGroupEnd();
    if (!device.ok()) return AbortWith(device);
    if (first != ncclSuccess || (end != ncclSuccess && end != ncclInProgress))
      return AbortWith(NcclError(what, first != ncclSuccess ? first : end));
    // Nonblocking communicators: the group may still be enqueueing (connecting on first use).
    if (end == ncclInProgress) return AbortWith(Settle(what));
    return Status::Ok();
  }

  Status AsyncErrors() {
    for (Device& d : devices_) {
      if (!d.comm) continue;
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(d.comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
        return NcclError("NCCL on " + d.name, async);
    }
    return Status::Ok();
  }

  StatusOr<uint64_t> Finished() { return ++next_ticket_; }

  StatusOr<uint64_t> Enqueued(Ticket t) {
    t.done.resize(devices_.size(), nullptr);
    for (size_t di = 0; di < devices_.size(); ++di) {
      Device& d = devices_[di];
      if (Status st = Cuda(cudaSetDevice(d.ordinal), "cudaSetDevice(" + d.name + ")"); !st.ok()) {
        ReleaseDone(&t);
        return AbortWith(st);
      }
      cudaEvent_t e = nullptr;
      if (!d.spare_events.empty()) {
        e = d.spare_events.back();
        d.spare_events.pop_back();
      } else if (cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming); err != cudaSuccess) {
        ReleaseDone(&t);
        return AbortWith(Cuda(err, "cudaEventCreate"));
      }
      t.done[di] = e;
      if (Status st = Cuda(cudaEventRecord(e, d.stream), "cudaEventRecord (" + d.name + ")"); !st.ok()) {
        ReleaseDone(&t);
        return AbortWith(st);
      }
    }
    const uint64_t id = t.id;
    t.issued_ns = abi::MonotonicNs();
    stats_.issue_ns += t.issued_ns - issue_start_ns_;
    tickets_.emplace(id, std::move(t));
    return id;
  }

  void Drop(std::map<uint64_t, Ticket>::iterator it) {
    ReleaseDone(&it->second);
    tickets_.erase(it);
  }

  // A ticket's events go back to their devices' spares.
  void ReleaseDone(Ticket* t) {
    for (size_t di = 0; di < t->done.size(); ++di)
      if (t->done[di]) devices_[di].spare_events.push_back(t->done[di]);
    t->done.clear();
  }

  // Closes the IPC mappings and events nobody will use again, once no queued work can still
  // touch them.
  void CloseRetired() {
    if (!tickets_.empty() && failure_.ok()) return;
    if (!tickets_.empty())  // aborted: let the streams drain before unmapping
      for (Device& d : devices_) {
        CudaWarn(cudaSetDevice(d.ordinal), "cudaSetDevice");
        CudaWarn(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize");
      }
    ipc_->CloseRetired();
  }

  const bool ipc_cache_;
  std::vector<Device> devices_;
  std::vector<uint32_t> node_first_rank_;
  uint32_t nranks_ = 0, first_rank_ = 0;
  uint64_t settle_timeout_ns_ = 60'000'000'000ull;  // Connect's timeout
  std::unique_ptr<GpuIpcCache> ipc_;  // clients' allocations and events (Init)
  StreamWaiter waiter_;  // waits for clients' streams
  std::map<uint64_t, Ticket> tickets_;
  uint64_t next_ticket_ = 0;
  uint64_t issue_start_ns_ = 0;
  Status failure_;
  GpuStats stats_;
};

}  // namespace

std::unique_ptr<GpuExecutor> GpuExecutor::Probe(bool ipc_cache, std::string* why) {
  auto g = std::make_unique<CudaGpuExecutor>(ipc_cache);
  if (Status st = g->Init(); !st.ok()) {
    *why = st.message();
    return nullptr;
  }
  return g;
}

}  // namespace syncd
