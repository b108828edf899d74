// The pieces of syncd's c10d backend (c10d_backend.cc) that are not the process group: dtype and
// op mapping, copying results out, and SyncdWork, one collective's requests to the daemon and its
// completion (Work::wait/isCompleted drive it on the caller's thread; a FutureTracker completes
// the futures of works nobody waits on).
#ifndef SYNCD_CLIENT_PYTHON_SRC_C10D_WORK_H_
#define SYNCD_CLIENT_PYTHON_SRC_C10D_WORK_H_

#include <syncd/client.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace syncd::c10d_backend {

class SyncdWork;

// Whoever completes the futures of works in flight (the process group's completion thread).
class FutureTracker {
 public:
  virtual ~FutureTracker() = default;
  virtual void Track(c10::intrusive_ptr<SyncdWork> work) = 0;
};

inline syncd_dtype DtypeOf(const at::Tensor& t, const char* op) {
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

inline syncd_reduce_op ReduceOpOf(const c10d::ReduceOp& op, const char* what) {
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

inline void CheckCpu(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.device().is_cpu(), "syncd backend: ", op, " of a tensor on ", t.device(),
              ": only CPU tensors so far");
  TORCH_CHECK(!t.is_sparse(), "syncd backend: ", op, " of a sparse tensor is not supported");
}


// What staging costs a process group (ProcessGroupSyncd.staging_stats()): bytes copied into the
// arena before requests and out of it after, the time those copies took, and the tensors that
// needed no copy (already in the arena).
struct StagingStats {
  std::atomic<uint64_t> bytes_in{0}, bytes_out{0}, ns_in{0}, ns_out{0}, zero_copy{0};
};

inline uint64_t NowNs() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count());
}

// Copies `data` into `outs` end to end (each tensor's bytes in its own layout); a tensor the
// result already lies in (a request on the tensor's own arena memory) is left alone.
inline void CopyOut(const char* data, std::vector<at::Tensor>& outs, StagingStats* stats = nullptr) {
  size_t at = 0;
  const uint64_t t0 = stats ? NowNs() : 0;
  size_t copied = 0;
  for (at::Tensor& o : outs) {
    const size_t bytes = size_t(o.numel()) * o.element_size();
    if (bytes == 0) continue;
    if (o.is_contiguous() && o.data_ptr() == data + at) {
      at += bytes;
      continue;
    }
    copied += bytes;
    if (o.is_contiguous()) {
      memcpy(o.data_ptr(), data + at, bytes);
    } else {
      at::Tensor staged = at::empty(o.sizes(), o.options());
      memcpy(staged.data_ptr(), data + at, bytes);
      o.copy_(staged);
    }
    at += bytes;
  }
  if (stats != nullptr && copied > 0) {
    stats->bytes_out += copied;
    stats->ns_out += NowNs() - t0;
  }
}

// One collective: its requests to the daemon (each with its arena buffer) and what to do with
// the results once every request completed.
class SyncdWork : public c10d::Work {
 public:
  struct Request {
    syncd_handle handle = 0;
    void* buffer = nullptr;  // arena staging buffer, freed at the end
    bool owned = true;       // false: the tensor's own arena memory (nothing to free)
    bool done = false;
    syncd_result result{};  // allgather's
    bool has_result = false;
    bool recv = false;  // a receive: its completion names the sender
  };

  SyncdWork(syncd_client* c, int rank, c10d::OpType type, std::vector<at::Tensor> outputs, int64_t timeout_ms)
      : c10d::Work(rank, type), client_(c), outputs_(std::move(outputs)), timeout_ms_(timeout_ms),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  ~SyncdWork() override {
    // Requests abandoned in flight keep their buffers (the daemon may still write them);
    // completed ones were released in Finish().
    std::lock_guard<std::mutex> lock(drive_mu_);
    for (Request& r : requests_)
      if (r.done && r.buffer != nullptr && r.owned) syncd_free(client_, r.buffer);
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
      int source = -1;
      const int rc = r.recv                ? syncd_recv_wait(client_, r.handle, timeout_ms, &source)
                     : timeout_ms == 0 ? syncd_poll(client_, r.handle)
                                       : syncd_wait(client_, r.handle, timeout_ms);
      if (rc == SYNCD_OK && r.recv) source_ = source;
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
        // "Timed out": the words torch's own tests and users' retry code match (gloo: "Timed out
        // waiting 1000ms for ...", NCCL's watchdog: "... before timing out").
        TORCH_CHECK(false, "syncd backend: Timed out after ", ms, " ms waiting for ", c10d::opTypeToString(opType_),
                    " (still in flight)");
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  std::vector<at::Tensor> result() override { return outputs_; }

  // A receive's sender, as a rank of the group (`to_group` maps the global rank syncd names).
  int sourceRank() const override {
    TORCH_CHECK(source_ >= 0, "syncd backend: sourceRank() of a work that is not a completed receive");
    return to_group_ ? to_group_(source_) : source_;
  }
  void set_source_map(std::function<int(int)> to_group) { to_group_ = std::move(to_group); }

  void set_group(FutureTracker* pg) { pg_ = pg; }

 private:
  void Complete(std::exception_ptr e) {
    if (finished_) return;
    finished_ = true;
    for (Request& r : requests_) {
      if (r.has_result) syncd_release_result(client_, &r.result);
      r.has_result = false;
      if (r.done && r.buffer != nullptr) {
        if (r.owned) syncd_free(client_, r.buffer);
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
  FutureTracker* pg_ = nullptr;
  int source_ = -1;
  std::function<int(int)> to_group_;
};

inline c10::intrusive_ptr<c10::ivalue::Future> SyncdWork::getFuture() {
  if (pg_ != nullptr && !Drive(0)) pg_->Track(c10::intrusive_ptr<SyncdWork>::reclaim_copy(this));
  return future_;
}

}  // namespace syncd::c10d_backend

#endif  // SYNCD_CLIENT_PYTHON_SRC_C10D_WORK_H_
