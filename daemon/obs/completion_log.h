// What the engine tells the rest of the daemon about each completed collective, as fixed-size
// events on a bounded queue: the engine appends (no allocation, no lock, no formatting) and
// whoever builds the status or a health report folds them into the per-collective metrics and
// the straggler window (obs/metrics.h, obs/stragglers.h), off the engine thread.
//
// A completed tensor is one kTensor event followed by `arrivals` kArrival events, one per local
// rank's request (its global rank and when it reached the daemon). Each tensor carries its job's
// slot (a small number the engine gives each job it serves, reused once the job is gone): a
// job's first tensor is preceded by kJobBegin, which ties the slot to the job's id, and metrics
// and stragglers are each job's own. A node service serves several jobs side by side, each with
// figures of its own; kJobEnd drops a job's figures once it is gone (its series go with it).
//
// Threads: Append and BeginJob from the engine thread only; Fold (and what it hands over) from
// any other thread, serialized by the log's mutex.
#ifndef SYNCD_DAEMON_OBS_COMPLETION_LOG_H_
#define SYNCD_DAEMON_OBS_COMPLETION_LOG_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "daemon/base/spsc_queue.h"
#include "daemon/obs/metrics.h"
#include "daemon/obs/stragglers.h"
#include "proto/mutex.h"

namespace syncd {

struct CompletionEvent {
  enum Type : uint8_t { kTensor, kArrival, kJobBegin, kJobEnd };
  uint64_t t_ns = 0;      // kTensor: when it completed; kArrival: when the rank's request came
  uint64_t first_ns = 0;  // kTensor: the earliest request's arrival (0: none known)
  uint64_t bytes = 0;     // kTensor: the local ranks' input bytes
  int32_t set = 0;        // kTensor: its process set
  uint32_t rank = 0;      // kTensor: how many kArrival follow; kArrival: the global rank
  Type type = kTensor;
  uint8_t kind = 0;          // kTensor: abi::OpKind
  uint8_t code = 0;          // kTensor: its status code (0: OK)
  bool spans_nodes = false;  // kTensor: its set spans nodes (the node-wait figures)
  bool stragglers = false;   // kTensor: counts in the straggler window (not partial rounds, not send/recv)
  uint16_t job = 0;          // kTensor, kJobBegin, kJobEnd: the job's slot
};
static_assert(sizeof(CompletionEvent) == 40, "one event, fixed size");

// What the events fold into: each job's per-collective metrics and straggler window.
struct JobFigures {
  CollectiveMetricsByKind metrics;
  StragglerWindow stragglers;
};
struct CompletionFigures {
  std::map<uint64_t, JobFigures> jobs;  // by job id (0: tensors of a slot no kJobBegin named)
  uint64_t dropped = 0;  // events the full queue refused (their tensors are missing from the figures)
};

class CompletionLog {
 public:
  // Room for this many events between two folds: the engine's observer folds every 50 ms, and a
  // 4-rank 8-byte allreduce appends five events per ~8 µs (about 31,000 in 50 ms).
  static constexpr size_t kCapacity = 1 << 16;

  CompletionLog() : queue_(kCapacity) {}

  // Engine thread. A full queue drops the event and counts it (never blocks the engine).
  void Append(const CompletionEvent& e) {
    CompletionEvent copy = e;
    if (!queue_.Push(std::move(copy))) dropped_.fetch_add(1, std::memory_order_relaxed);
  }
  // `job` starts in `slot` with figures of its own; `alone`: the daemon serves one job at a time,
  // and any other job's figures go.
  void BeginJob(uint16_t slot, uint64_t job, bool alone) {
    CompletionEvent e;
    e.type = CompletionEvent::kJobBegin;
    e.job = slot;
    e.bytes = job;
    e.rank = alone;
    Append(e);
  }
  // The job in `slot` is gone: its figures too.
  void EndJob(uint16_t slot) {
    CompletionEvent e;
    e.type = CompletionEvent::kJobEnd;
    e.job = slot;
    Append(e);
  }

  // Any thread but the engine's: folds every event appended so far and calls `f` with the figures.
  template <typename F>
  auto Fold(F&& f) {
    MutexLock lock(&mu_);
    FoldLocked();
    figures_.dropped = dropped_.load(std::memory_order_relaxed);
    return f(const_cast<const CompletionFigures&>(figures_));
  }

 private:
  void FoldLocked() SYNCD_REQUIRES(mu_);
  uint64_t JobOf(uint16_t slot) const SYNCD_REQUIRES(mu_);
  // The open tensor's arrivals are all in (or cut short): into the straggler window.
  void CloseTensor() SYNCD_REQUIRES(mu_);

  SpscQueue<CompletionEvent> queue_;
  std::atomic<uint64_t> dropped_{0};
  Mutex mu_;
  CompletionFigures figures_ SYNCD_GUARDED_BY(mu_);
  // A tensor whose arrivals are still being read (the queue may end between its events).
  CompletionEvent open_ SYNCD_GUARDED_BY(mu_);
  // The job each slot holds (kJobBegin); a slot no kJobBegin named holds job 0.
  std::vector<uint64_t> slot_jobs_ SYNCD_GUARDED_BY(mu_);
  uint32_t open_left_ SYNCD_GUARDED_BY(mu_) = 0;
  std::vector<std::pair<uint32_t, uint64_t>> arrivals_ SYNCD_GUARDED_BY(mu_);
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_OBS_COMPLETION_LOG_H_
