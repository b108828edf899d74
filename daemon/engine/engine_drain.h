// A daemon's graceful drain (Engine::Drain): any thread begins it, or brings its deadline
// forward; the engine thread serves until nothing is in flight or the deadline passes, counting
// what completed and what failed meanwhile, then finishes.
#ifndef SYNCD_DAEMON_ENGINE_ENGINE_DRAIN_H_
#define SYNCD_DAEMON_ENGINE_ENGINE_DRAIN_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "proto/mutex.h"

namespace syncd {

class EngineDrain {
 public:
  struct Result {
    uint64_t completed = 0, failed = 0;
    bool deadline_passed = false;
  };

  // Any thread. The first reason stays; a later deadline may only come sooner.
  void Begin(uint64_t deadline_ns, const std::string& why) {
    {
      MutexLock lock(&mu_);
      if (why_.empty()) why_ = why;
    }
    deadline_ns = std::max<uint64_t>(deadline_ns, 1);
    uint64_t current = deadline_ns_.load(std::memory_order_acquire);
    while ((current == 0 || deadline_ns < current) &&
           !deadline_ns_.compare_exchange_weak(current, deadline_ns, std::memory_order_acq_rel)) {
    }
  }
  bool on() const { return deadline_ns_.load(std::memory_order_acquire) != 0; }
  uint64_t deadline_ns() const { return deadline_ns_.load(std::memory_order_acquire); }

  // Engine thread: a request completed while draining (counted only then).
  void Count(bool ok) {
    if (deadline_ns_.load(std::memory_order_relaxed) != 0) ++(ok ? result_.completed : result_.failed);
  }
  // Engine thread: the deadline passed; what is left fails with the drain's reason (leave_why).
  void DeadlinePassed() {
    result_.deadline_passed = true;
    MutexLock lock(&mu_);
    leave_why_ = why_;
  }
  // Engine thread: the reason the deadline failed requests with ("" when it did not pass).
  const std::string& leave_why() const { return leave_why_; }

  // Engine thread, once Run() is about to return; any thread reads the result after finished().
  void Finish() { finished_.store(true, std::memory_order_release); }
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  const Result& result() const { return result_; }

 private:
  std::atomic<uint64_t> deadline_ns_{0};  // 0: not draining
  std::atomic<bool> finished_{false};
  mutable Mutex mu_;
  std::string why_ SYNCD_GUARDED_BY(mu_);
  std::string leave_why_;  // engine thread
  Result result_;          // engine thread until finished_, then read-only
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_ENGINE_DRAIN_H_
