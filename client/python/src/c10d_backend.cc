// syncd as a torch.distributed backend: a c10d::ProcessGroup (torch 1.13's interface) whose
// collectives go through the thin client to the node's daemon, as syncd.torch's do. Built as the
// extension syncd._c10d; syncd/torch/distributed.py registers it as the backend "syncd".
//
// Tensors are staged through the client's shared-memory arena: one copy in before the request,
// one copy out when it completes. Requests are named after the process group and a per-group
// sequence number: c10d requires every rank to call a group's collectives in the same order,
// which makes the names agree across ranks without any negotiation of our own.
//
// Completion: Work::wait() and isCompleted() drive the requests themselves on the caller's
// thread. A Work's future (getFuture(), which DDP's reducer and communication hooks wait on) must
// be completed by some thread, and c10::ivalue::Future cannot be subclassed, so the first
// getFuture() starts one completion thread for the process group. It sleeps in syncd_wait (on
// the client's doorbell, not spinning) on the oldest request in flight.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <syncd/client.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace py = pybind11;

namespace syncd::c10d_backend {
namespace {

syncd_dtype DtypeOf(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kChar: return SYNCD_INT8;
    case at::kByte: return SYNCD_UINT8;
    case at::kShort: return SYNCD_INT16;
    case at::kInt: return SYNCD_INT32;
    case at::kLong: return SYNCD_INT64;
    case at::kHalf: return SYNCD_FLOAT16;
    case at::kBFloat16: return SYNCD_BFLOAT16;
    case at::kFloat: return SYNCD_FLOAT32;
    case at::kDouble: return SYNCD_FLOAT64;
    case at::kBool: return SYNCD_BOOL;
    default:
      TORCH_CHECK(false, "syncd backend: ", op, " of a ", t.scalar_type(), " tensor is not supported");
  }
}

syncd_reduce_op ReduceOpOf(const c10d::ReduceOp& op, const char* what) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return SYNCD_SUM;
    case c10d::ReduceOp::AVG: return SYNCD_AVERAGE;
    case c10d::ReduceOp::PRODUCT: return SYNCD_PRODUCT;
    case c10d::ReduceOp::MIN: return SYNCD_MIN;
    case c10d::ReduceOp::MAX: return SYNCD_MAX;
    case c10d::ReduceOp::BAND: TORCH_CHECK(false, "syncd backend: ", what, " with ReduceOp.BAND is not supported");
    case c10d::ReduceOp::BOR: TORCH_CHECK(false, "syncd backend: ", what, " with ReduceOp.BOR is not supported");
    case c10d::ReduceOp::BXOR: TORCH_CHECK(false, "syncd backend: ", what, " with ReduceOp.BXOR is not supported");
    default: TORCH_CHECK(false, "syncd backend: ", what, " with this ReduceOp is not supported");
  }
}

void CheckCpu(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.device().is_cpu(), "syncd backend: ", op, " of a tensor on ", t.device(),
              ": only CPU tensors so far");
  TORCH_CHECK(!t.is_sparse(), "syncd backend: ", op, " of a sparse tensor is not supported");
}

class ProcessGroupSyncd;

// One collective: its requests to the daemon (each with its arena buffer) and what to do with
// the results once every request completed.
class SyncdWork : public c10d::Work {
 public:
  struct Request {
    syncd_handle handle = 0;
    void* buffer = nullptr;  // arena staging buffer, freed at the end
    bool done = false;
    syncd_result result{};  // allgather's
    bool has_result = false;
  };

  SyncdWork(syncd_client* c, int rank, c10d::OpType type, std::vector<at::Tensor> outputs, int64_t timeout_ms)
      : c10d::Work(rank, type), client_(c), outputs_(std::move(outputs)), timeout_ms_(timeout_ms),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  ~SyncdWork() override {
    // Requests abandoned in flight keep their buffers (the daemon may still write them);
    // completed ones were released in Finish().
    std::lock_guard<std::mutex> lock(drive_mu_);
    for (Request& r : requests_)
      if (r.done && r.buffer != nullptr) syncd_free(client_, r.buffer);
  }

  // A deque: the client writes an allgather's result into the request in place.
  std::deque<Request>& requests() { return requests_; }
  // Runs on completion with every request's result, before the tensors are handed back.
  void set_unstage(std::function<void(std::deque<Request>&)> f) { unstage_ = std::move(f); }
  // A failure while submitting: the work completes with it at once.
  void FailNow(const std::string& why) {
    std::lock_guard<std::mutex> lock(drive_mu_);
    Complete(std::make_exception_ptr(std::runtime_error(why)));
  }

  // Moves the requests on: with timeout_ms 0 only looks, otherwise waits up to it for each.
  // Returns whether the work has completed (successfully or not).
  bool Drive(int64_t timeout_ms) {
    std::lock_guard<std::mutex> lock(drive_mu_);
    if (finished_) return true;
    for (Request& r : requests_) {
      if (r.done) continue;
      const int rc = timeout_ms == 0 ? syncd_poll(client_, r.handle) : syncd_wait(client_, r.handle, timeout_ms);
      if (rc == SYNCD_IN_PROGRESS || rc == SYNCD_ERR_TIMEOUT) return false;
      r.done = true;
      if (rc != SYNCD_OK) {
        error_ = std::string("syncd backend: ") + c10d::opTypeToString(opType_) + " failed: " + syncd_last_error();
      }
    }
    if (!error_.empty()) {
      Complete(std::make_exception_ptr(std::runtime_error(error_)));
      return true;
    }
    try {
      if (unstage_) unstage_(requests_);
    } catch (...) {
      Complete(std::current_exception());
      return true;
    }
    Complete(nullptr);
    return true;
  }

  bool isCompleted() override { return Drive(0); }

  bool wait(std::chrono::milliseconds timeout) override {
    const int64_t ms = timeout == kNoTimeout ? timeout_ms_ : int64_t(timeout.count());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms < 0 ? 0 : ms);
    while (!Drive(ms < 0 ? -1 : 50)) {
      if (ms >= 0 && std::chrono::steady_clock::now() >= deadline) {
        TORCH_CHECK(false, "syncd backend: ", c10d::opTypeToString(opType_), " not complete after ", ms,
                    " ms (still in flight)");
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  std::vector<at::Tensor> result() override { return outputs_; }

  void set_group(ProcessGroupSyncd* pg) { pg_ = pg; }

 private:
  void Complete(std::exception_ptr e) {
    if (finished_) return;
    finished_ = true;
    for (Request& r : requests_) {
      if (r.has_result) syncd_release_result(client_, &r.result);
      r.has_result = false;
      if (r.done && r.buffer != nullptr) {
        syncd_free(client_, r.buffer);
        r.buffer = nullptr;
      }
    }
    finish(e);  // c10d::Work's state (completed_, exception_) and its waiters
    if (e) future_->setErrorIfNeeded(e);
    else future_->markCompleted(c10::IValue(outputs_));
  }

  syncd_client* client_;
  std::vector<at::Tensor> outputs_;
  int64_t timeout_ms_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::mutex drive_mu_;
  std::deque<Request> requests_;
  std::function<void(std::deque<Request>&)> unstage_;
  bool finished_ = false;
  std::string error_;
  ProcessGroupSyncd* pg_ = nullptr;
};

class ProcessGroupSyncd : public c10d::ProcessGroup {
 public:
  ProcessGroupSyncd(py::object store, int rank, int size, std::chrono::milliseconds timeout, uintptr_t client,
                    py::object keep_alive)
      : c10d::ProcessGroup(rank, size), store_(std::move(store)), keep_alive_(std::move(keep_alive)),
        client_(reinterpret_cast<syncd_client*>(client)), timeout_ms_(int64_t(timeout.count())),
        uid_(next_uid_++) {
    TORCH_CHECK(client_ != nullptr, "syncd backend: no syncd client (is this rank attached to a daemon?)");
    TORCH_CHECK(rank == syncd_rank(client_) && size == syncd_size(client_), "syncd backend: torch.distributed says rank ",
                rank, " of ", size, " but the daemon serves this process as rank ", syncd_rank(client_), " of ",
                syncd_size(client_), " (set RANK and WORLD_SIZE as syncrun does, or leave them unset)");
  }

  ~ProcessGroupSyncd() override {
    {
      std::lock_guard<std::mutex> lock(progress_mu_);
      stop_ = true;
    }
    progress_cv_.notify_all();
    if (progress_.joinable()) progress_.join();
  }

  const std::string getBackendName() const override { return "syncd"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1, "syncd backend: allreduce takes one tensor per process, got ", tensors.size());
    return Reduce(tensors, ReduceOpOf(opts.reduceOp, "allreduce"), c10d::OpType::ALLREDUCE, "allreduce");
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    return Reduce(tensors, ReduceOpOf(opts.reduceOp, "allreduce_coalesced"), c10d::OpType::ALLREDUCE_COALESCED,
                  "allreduce_coalesced");
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1, "syncd backend: broadcast takes one tensor per process, got ", tensors.size());
    TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(), "syncd backend: broadcast root ", opts.rootRank,
                " out of range (size ", getSize(), ")");
    auto work = Stage(tensors, c10d::OpType::BROADCAST, "broadcast",
                      [&](const syncd_tensor& t, syncd_handle* h) {
                        return syncd_broadcast_async(client_, &t, int(opts.rootRank), h);
                      });
    return work;
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override {
    TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
                "syncd backend: allgather takes one input tensor and one output list per process");
    TORCH_CHECK(int(outputs[0].size()) == getSize(), "syncd backend: allgather's output list has ",
                outputs[0].size(), " tensors for ", getSize(), " ranks");
    for (const at::Tensor& o : outputs[0])
      TORCH_CHECK(o.numel() == inputs[0].numel() && o.scalar_type() == inputs[0].scalar_type(),
                  "syncd backend: allgather's outputs must match the input's size and dtype");
    std::vector<at::Tensor> outs = outputs[0];
    return Gather(inputs[0], outs, c10d::OpType::ALLGATHER, "allgather");
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override {
    TORCH_CHECK(output.numel() == input.numel() * getSize() && output.scalar_type() == input.scalar_type(),
                "syncd backend: _allgather_base's output must hold size x the input (", input.numel() * getSize(),
                " elements of ", input.scalar_type(), ")");
    std::vector<at::Tensor> outs = {output};
    return Gather(input, outs, c10d::OpType::_ALLGATHER_BASE, "_allgather_base");
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    auto work = c10::make_intrusive<SyncdWork>(client_, getRank(), c10d::OpType::BARRIER, std::vector<at::Tensor>{},
                                               timeout_ms_);
    work->set_group(this);
    SyncdWork::Request r;
    if (syncd_barrier_async(client_, &r.handle) != SYNCD_OK) {
      work->FailNow(std::string("syncd backend: barrier failed: ") + syncd_last_error());
      return work;
    }
    work->requests().push_back(r);
    return work;
  }

  // Completion thread (for futures): started on the first getFuture().
  void Track(c10::intrusive_ptr<SyncdWork> work) {
    std::lock_guard<std::mutex> lock(progress_mu_);
    tracked_.push_back(std::move(work));
    if (!progress_.joinable()) progress_ = std::thread([this] { Progress(); });
    progress_cv_.notify_one();
  }

 private:
  std::string NextName(const char* op) {
    return "c10d." + std::to_string(uid_) + "." + op + "." + std::to_string(seq_++);
  }

  // Copies `t` into a fresh arena buffer; nullptr (and the work failed) when the arena is full.
  void* StageIn(const at::Tensor& t, SyncdWork* work, const char* op) {
    const size_t bytes = size_t(t.numel()) * t.element_size();
    void* buf = syncd_alloc(client_, bytes == 0 ? 1 : bytes);
    if (buf == nullptr) {
      work->FailNow(std::string("syncd backend: ") + op + ": the shared arena has no room for " +
                    std::to_string(bytes) + " bytes (raise syncd --arena-size)");
      return nullptr;
    }
    const at::Tensor c = t.contiguous();
    if (bytes > 0) memcpy(buf, c.data_ptr(), bytes);
    return buf;
  }

  template <typename Submit>
  c10::intrusive_ptr<c10d::Work> Stage(std::vector<at::Tensor>& tensors, c10d::OpType type, const char* op,
                                       Submit submit) {
    for (const at::Tensor& t : tensors) CheckCpu(t, op);
    auto work = c10::make_intrusive<SyncdWork>(client_, getRank(), type, tensors, timeout_ms_);
    work->set_group(this);
    const std::string base = NextName(op);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const at::Tensor& t = tensors[i];
      SyncdWork::Request r;
      r.buffer = StageIn(t, work.get(), op);
      if (r.buffer == nullptr) return work;
      const std::string name = base + "." + std::to_string(i);
      const int64_t count = t.numel();
      syncd_tensor st{name.c_str(), r.buffer, DtypeOf(t, op), 1, &count, 0};
      if (submit(st, &r.handle) != SYNCD_OK) {
        syncd_free(client_, r.buffer);
        work->FailNow(std::string("syncd backend: ") + op + " failed: " + syncd_last_error());
        return work;
      }
      work->requests().push_back(r);
    }
    std::vector<at::Tensor> outs = tensors;
    work->set_unstage([outs](std::deque<SyncdWork::Request>& rs) mutable {
      for (size_t i = 0; i < outs.size(); ++i) {
        at::Tensor& t = outs[i];
        const size_t bytes = size_t(t.numel()) * t.element_size();
        if (bytes == 0) continue;
        if (t.is_contiguous()) {
          memcpy(t.data_ptr(), rs[i].buffer, bytes);
        } else {
          at::Tensor staged = at::empty(t.sizes(), t.options());
          memcpy(staged.data_ptr(), rs[i].buffer, bytes);
          t.copy_(staged);
        }
      }
    });
    return work;
  }

  c10::intrusive_ptr<c10d::Work> Reduce(std::vector<at::Tensor>& tensors, syncd_reduce_op op, c10d::OpType type,
                                        const char* what) {
    return Stage(tensors, type, what, [&](const syncd_tensor& t, syncd_handle* h) {
      return syncd_allreduce_async(client_, &t, op, 1.0, 1.0, h);
    });
  }

  // Allgather of `input` into `outs`: one tensor of size x the input, or a tensor per rank.
  c10::intrusive_ptr<c10d::Work> Gather(const at::Tensor& input, std::vector<at::Tensor>& outs, c10d::OpType type,
                                        const char* op) {
    CheckCpu(input, op);
    for (const at::Tensor& o : outs) CheckCpu(o, op);
    auto work = c10::make_intrusive<SyncdWork>(client_, getRank(), type, outs, timeout_ms_);
    work->set_group(this);
    void* buffer = StageIn(input, work.get(), op);
    if (buffer == nullptr) return work;
    SyncdWork::Request& r = work->requests().emplace_back();  // the client fills r.result in place
    r.buffer = buffer;
    const std::string name = NextName(op);
    const int64_t count = input.numel();
    syncd_tensor st{name.c_str(), r.buffer, DtypeOf(input, op), 1, &count, 0};
    if (syncd_allgather_async(client_, &st, &r.result, &r.handle) != SYNCD_OK) {
      syncd_free(client_, buffer);
      work->requests().pop_back();
      work->FailNow(std::string("syncd backend: ") + op + " failed: " + syncd_last_error());
      return work;
    }
    r.has_result = true;
    const size_t piece = size_t(input.numel()) * input.element_size();
    work->set_unstage([outs, piece](std::deque<SyncdWork::Request>& rs) mutable {
      const char* data = static_cast<const char*>(rs[0].result.data);
      TORCH_CHECK(rs[0].result.bytes == piece * (outs.size() == 1 ? 1 : outs.size()) ||
                      (outs.size() == 1 && rs[0].result.bytes == size_t(outs[0].numel()) * outs[0].element_size()),
                  "syncd backend: allgather returned ", rs[0].result.bytes, " bytes");
      size_t at = 0;
      for (at::Tensor& o : outs) {
        const size_t bytes = size_t(o.numel()) * o.element_size();
        if (o.is_contiguous()) {
          memcpy(o.data_ptr(), data + at, bytes);
        } else {
          at::Tensor staged = at::empty(o.sizes(), o.options());
          memcpy(staged.data_ptr(), data + at, bytes);
          o.copy_(staged);
        }
        at += bytes;
      }
    });
    return work;
  }

  void Progress() {
    std::unique_lock<std::mutex> lock(progress_mu_);
    while (!stop_) {
      if (tracked_.empty()) {
        progress_cv_.wait(lock, [&] { return stop_ || !tracked_.empty(); });
        continue;
      }
      c10::intrusive_ptr<SyncdWork> oldest = tracked_.front();
      lock.unlock();
      // Sleeps in the client (doorbell) up to 20 ms: new work and stopping are noticed by then.
      const bool done = oldest->Drive(20);
      lock.lock();
      if (done && !tracked_.empty() && tracked_.front() == oldest) tracked_.pop_front();
    }
  }

  static inline std::atomic<int> next_uid_{0};
  py::object store_;       // kept alive as torch.distributed expects of a process group
  py::object keep_alive_;  // the Python client that owns syncd_client
  syncd_client* client_;
  int64_t timeout_ms_;
  int uid_;
  uint64_t seq_ = 0;
  std::mutex progress_mu_;
  std::condition_variable progress_cv_;
  std::deque<c10::intrusive_ptr<SyncdWork>> tracked_;
  std::thread progress_;
  bool stop_ = false;
};

c10::intrusive_ptr<c10::ivalue::Future> SyncdWork::getFuture() {
  if (pg_ != nullptr && !Drive(0)) pg_->Track(c10::intrusive_ptr<SyncdWork>::reclaim_copy(this));
  return future_;
}

}  // namespace
}  // namespace syncd::c10d_backend

PYBIND11_MODULE(_c10d, m) {
  using syncd::c10d_backend::ProcessGroupSyncd;
  m.doc() = "syncd's torch.distributed backend (c10d ProcessGroup); use syncd.torch.distributed";
  py::module_::import("torch.distributed");  // registers c10d::ProcessGroup with pybind11 first
  py::class_<ProcessGroupSyncd, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupSyncd>>(m, "ProcessGroupSyncd")
      .def(py::init([](py::object store, int rank, int size, std::chrono::milliseconds timeout, uintptr_t client,
                       py::object keep_alive) {
             return c10::make_intrusive<ProcessGroupSyncd>(std::move(store), rank, size, timeout, client,
                                                           std::move(keep_alive));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("client"),
           py::arg("keep_alive"));
}
