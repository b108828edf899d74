#include "daemon/obs/completion_log.h"

#include <algorithm>

#include "proto/status_names.h"

namespace syncd {

uint64_t CompletionLog::JobOf(uint16_t slot) const { return slot < slot_jobs_.size() ? slot_jobs_[slot] : 0; }

void CompletionLog::CloseTensor() {
  const CompletionEvent& t = open_;
  open_left_ = 0;
  if (!t.stragglers) return;
  StragglerWindow& stragglers = figures_.jobs[JobOf(t.job)].stragglers;
  stragglers.Record(arrivals_);
  uint64_t ready_ns = 0, first_here = UINT64_MAX;
  for (const auto& [rank, ns] : arrivals_) {
    ready_ns = std::max(ready_ns, ns);
    first_here = std::min(first_here, ns);
  }
  if (ready_ns != 0 && t.spans_nodes) stragglers.RecordNodeWait(t.t_ns - ready_ns, ready_ns - first_here);
}

void CompletionLog::FoldLocked() {
  // A tensor is complete once its arrivals are in; one whose arrivals the full queue dropped is
  // closed by the next event that is not an arrival (its figures without the missing ranks).
  while (std::optional<CompletionEvent> e = queue_.Pop()) {
    if (e->type == CompletionEvent::kArrival) {
      if (open_left_ == 0) continue;  // its tensor was dropped
      arrivals_.emplace_back(e->rank, e->t_ns);
      if (--open_left_ == 0) CloseTensor();
      continue;
    }
    if (open_left_ != 0) CloseTensor();
    if (e->type == CompletionEvent::kJobBegin) {
      if (e->rank != 0) figures_.jobs.clear();
      if (slot_jobs_.size() <= e->job) slot_jobs_.resize(e->job + 1, 0);
      slot_jobs_[e->job] = e->bytes;
      figures_.jobs[e->bytes] = JobFigures();
      continue;
    }
    if (e->type == CompletionEvent::kJobEnd) {
      figures_.jobs.erase(JobOf(e->job));
      if (e->job < slot_jobs_.size()) slot_jobs_[e->job] = 0;
      continue;
    }
    CollectiveMetrics& m = figures_.jobs[JobOf(e->job)].metrics[{e->set, uint32_t(e->kind)}];
    if (e->code != 0) {
      ++m.errors[abi::StatusName(e->code)];
      continue;
    }
    ++m.ops;
    m.bytes += e->bytes;
    if (e->first_ns != 0) m.latency.Observe(kLatencyBounds, double(e->t_ns - e->first_ns) / 1e9);
    open_ = *e;
    arrivals_.clear();
    open_left_ = e->rank;
    if (open_left_ == 0) CloseTensor();
  }
}

}  // namespace syncd
