#include <cuda_runtime.h>
#include <nccl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>
#include <algorithm>
#include <deque>
#include <map>

#include "daemon/core/reduce_kernels.h"
#include "daemon/exec/cuda_status.h"
#include "daemon/exec/gpu_executor.h"
#include "daemon/exec/gpu_ipc_cache.h"
#include "daemon/exec/gpu_kernels.h"
#include "daemon/exec/gpu_stream_wait.h"
#include "daemon/exec/nccl_comms.h"
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
    cudaStream_t rescue = nullptr;  // releases the flags `stream` waits for after an abort
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
      // What releases clients' flags after an abort is ready before anything can get stuck.
      if (cudaError_t e = cudaStreamCreateWithPriority(&d.rescue, cudaStreamNonBlocking, hi); e != cudaSuccess)
        return Cuda(e, "cudaStreamCreateWithPriority");
      if (int e = gpu::PreloadRaiseFlag(); e != 0) return Cuda(cudaError_t(e), "loading the flag release kernel");
    }
    std::vector<int> ordinals;
    std::vector<NcclComms::Gpu> gpus;
    for (const Device& d : devices_) {
      ordinals.push_back(d.ordinal);
      gpus.push_back(NcclComms::Gpu{d.ordinal, d.name});
    }
    ipc_ = std::make_unique<GpuIpcCache>(std::move(ordinals), ipc_cache_);
    comms_ = std::make_unique<NcclComms>(std::move(gpus));
    return Status::Ok();
  }

  ~CudaGpuExecutor() override {
    for (Device& d : devices_) {
      CudaWarn(cudaSetDevice(d.ordinal), "cudaSetDevice");
      if (d.stream) CudaWarn(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize");
    }
    ipc_.reset();  // the streams are idle: every mapping may close
    comms_.reset();  // finalized and destroyed
    for (Device& d : devices_) {
      CudaWarn(cudaSetDevice(d.ordinal), "cudaSetDevice");
      if (d.fusion) CudaWarn(cudaFree(d.fusion), "cudaFree");
      for (cudaEvent_t e : d.spare_events) CudaWarn(cudaEventDestroy(e), "cudaEventDestroy");
      if (d.stream) CudaWarn(cudaStreamDestroy(d.stream), "cudaStreamDestroy");
      if (d.rescue) CudaWarn(cudaStreamDestroy(d.rescue), "cudaStreamDestroy");
    }
  }

  uint32_t devices() const override { return uint32_t(devices_.size()); }
  std::vector<std::string> uuids() const override {
    std::vector<std::string> u;
    for (const Device& d : devices_) u.push_back(UuidText(d.uuid));
    return u;
  }
  bool connected() const override { return comms_->connected(); }
  bool aborted() const override { return !failure_.ok(); }

  StatusOr<std::string> MakeNcclId() override {
    ncclUniqueId id;
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return NcclError("ncclGetUniqueId", r);
    return std::string(id.internal, sizeof(id.internal));
  }

  Status Connect(const std::string& nccl_id, const std::vector<uint32_t>& gpus_per_node, uint32_t node_rank,
                 uint32_t timeout_s) override {
    return comms_->Connect(nccl_id, gpus_per_node, node_rank, timeout_s);
  }

  Status Rebuild(const std::string& nccl_id) override {
    // Whatever the last job left: its work fails (its ranks are gone), its flags are released
    // and its communicators aborted, and the streams must run dry before anything is reused.
    if (failure_.ok()) Abort(Status(SYNCD_ERR_INTERNAL, "the job's GPU communicators are being rebuilt"));
    if (!DrainStreams()) {
      failure_ = Status(SYNCD_ERR_SYSTEM, failure_.message() + "; the daemon's GPU streams are still busy " +
                                              std::to_string(kDrainTimeoutNs / 1'000'000'000ull) +
                                              " s later, so they cannot be used again (restart the daemon)");
      return failure_;
    }
    for (auto it = tickets_.begin(); it != tickets_.end();) Drop(it++);
    ipc_->CloseRetired();
    if (Status st = comms_->Reconnect(nccl_id); !st.ok()) {
      failure_ = Status(st.code(), "GPU collectives aborted, and rebuilding the NCCL communicator failed: " + st.message());
      return failure_;
    }
    failure_ = Status::Ok();
    ++stats_.rebuilds;
    spdlog::info("NCCL communicator rebuilt after an abort ({} so far)", stats_.rebuilds);
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

  bool Signalled(const GpuReady& ready) override {
    if (ready.event == nullptr) return true;
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(ready.event));
    if (e == cudaErrorNotReady) return false;
    if (e != cudaSuccess) cudaGetLastError();  // a broken event: the stream's wait reports it
    return true;
  }

  void ForgetClient(uint32_t client_id) override {
    ipc_->ForgetClient(client_id);
    CloseRetired();
  }

  StatusOr<uint64_t> Allreduce(const TensorGroup& group, uint32_t world_size) override {
    issue_start_ns_ = abi::MonotonicNs();
    if (!failure_.ok()) return failure_;
    if (!comms_->connected()) return Status(SYNCD_ERR_INTERNAL, "the GPUs of this job are not connected (NCCL)");
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
        uint64_t identity = 0;
        if (l.n == 0) ReductionIdentity(dtype, op, &identity);
        int e = l.n > 0 ? gpu::LaunchReduce(l, d.stream) : gpu::LaunchFill(out, count, dtype, identity, d.stream);
        if (e != 0) return AbortWith(Cuda(cudaError_t(e), "reduce kernel"));
        at += t->first().bytes;
      }
    }
    // 2. One allreduce over every GPU of the job.
    if (Status st = NcclAll([&](size_t di, ncclComm_t comm) {
          char* buf = reduced[di];
          return ncclAllReduce(buf, buf, total / esize, NcclType(dtype), NcclOp(op), comm, devices_[di].stream);
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
    if (!comms_->connected()) return Status(SYNCD_ERR_INTERNAL, "the GPUs of this job are not connected (NCCL)");
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
    const int nccl_root = comms_->NodeFirstRank(root_node);
    if (Status st = NcclAll([&](size_t di, ncclComm_t comm) {
          Device& d = devices_[di];
          return ncclBroadcast(d.fusion, d.fusion, bytes, ncclUint8, nccl_root, comm, d.stream);
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
    Ticket ticket;
    ticket.id = ++next_ticket_;
    return Enqueued(std::move(ticket));
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
        if (Status st = comms_->AsyncErrors(); !st.ok()) {
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
    ++stats_.aborts;
    // The streams go on past the clients' flags that will never be written (their ranks died or
    // their streams are stuck); the NCCL calls behind them end with the communicators.
    ReleaseFlags();
    comms_->Abort();
    spdlog::info("GPU path aborted ({} client flags released so far); the next job rebuilds it", stats_.flags_released);
  }

  GpuStats stats() const override {
    GpuStats s = stats_;
    s.devices = uint32_t(devices_.size());
    s.nccl_ranks = comms_->nranks();
    s.failure = failure_.ok() ? "" : failure_.message();
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
    std::vector<AwaitedFlag> flags;  // the clients' flags its streams wait for
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

  // One NCCL call per GPU in one group; a failure ends the GPU path (AbortWith).
  template <typename F>
  Status NcclAll(F call, const char* what) {
    return AbortWith(comms_->Group(call, what));
  }

  // Every client flag that queued work waits for is raised to its value on the device's rescue
  // stream, and those streams are waited for (bounded): whatever waited on them goes on.
  void ReleaseFlags() {
    std::vector<AwaitedFlag> flags = waiter_.TakeAwaited();  // a collective cut off while issued
    for (auto& [id, t] : tickets_) flags.insert(flags.end(), t.flags.begin(), t.flags.end());
    std::vector<bool> used(devices_.size(), false);
    for (const AwaitedFlag& f : flags) {
      Device& d = devices_.at(size_t(f.device));
      CudaWarn(cudaSetDevice(d.ordinal), "cudaSetDevice");
      if (int e = gpu::LaunchRaiseFlag(f.flag, f.value, d.rescue); e != 0) {
        CudaWarn(cudaError_t(e), "releasing a client's flag");
        continue;
      }
      used[size_t(f.device)] = true;
      ++stats_.flags_released;
    }
    for (size_t di = 0; di < devices_.size(); ++di)
      if (used[di] && !Drained(devices_[di], devices_[di].rescue))
        spdlog::error("releasing its clients' flags on {} did not finish", devices_[di].name);
  }

  // Whether `stream` of `d` ran dry within the drain bound (polled: a stream stuck for good must
  // not take the engine with it).
  bool Drained(Device& d, cudaStream_t stream) {
    CudaWarn(cudaSetDevice(d.ordinal), "cudaSetDevice");
    const uint64_t start = abi::MonotonicNs();
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream);
      if (e != cudaErrorNotReady) {
        if (e != cudaSuccess) CudaWarn(e, "cudaStreamQuery");
        return true;  // idle, or failed: nothing more will run on it
      }
      if (abi::MonotonicNs() - start > kDrainTimeoutNs) return false;
      usleep(100);
    }
  }

  // Every device's stream ran dry (bounded); false, with the stuck ones named in the log, if not.
  bool DrainStreams() {
    bool all = true;
    for (Device& d : devices_)
      if (!Drained(d, d.stream)) {
        spdlog::error("the daemon's stream on {} is still busy {} s after an abort", d.name,
                      kDrainTimeoutNs / 1'000'000'000ull);
        all = false;
      }
    return all;
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
    t.flags = waiter_.TakeAwaited();
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
    // Aborted: the streams drain before anything is unmapped; a stream that stays stuck keeps
    // its mappings open (and the GPU path down: Rebuild refuses).
    if (!tickets_.empty() && !DrainStreams()) return;
    ipc_->CloseRetired();
  }

  const bool ipc_cache_;
  std::vector<Device> devices_;
  std::unique_ptr<GpuIpcCache> ipc_;  // clients' allocations and events (Init)
  std::unique_ptr<NcclComms> comms_;  // the job's NCCL communicators (Init)
  // How long the streams may take to run dry after an abort (their work is a few collectives).
  static constexpr uint64_t kDrainTimeoutNs = 10'000'000'000ull;
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
