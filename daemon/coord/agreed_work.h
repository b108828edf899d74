// What coordination hands to execution: tensors every node of a set agreed to run, in the same
// order on every node (a negotiation cycle's agreement, or a TOPO plan group). The process set
// takes it, runs it (exec/, collectives/), completes its requests and reports the outcome back;
// coordination itself never runs a collective or completes a request.
#ifndef SYNCD_DAEMON_COORD_AGREED_WORK_H_
#define SYNCD_DAEMON_COORD_AGREED_WORK_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/core/tensor_table.h"

namespace syncd {

struct AgreedWork {
  std::vector<ReadyTensor> tensors;
  // Unique to this work across the job: the executor uses slots 1..4095 of it
  // (tag | slot << 12 | segment; transport/tag_space.h).
  uint64_t tag = 0;
  // A negotiated cycle under --coord topo: its GPU collectives go after this many plan GPU groups
  // (GpuOrder). nullopt: a TOPO plan group.
  std::optional<uint64_t> gpu_position;
};

// Where a cycle's agreement waits for the process set (negotiator.h): one reached and not taken,
// one taken and running, and a fence's outcome, which its cycle waits for. Agreements are taken
// one at a time, in cycle order.
class AgreementHandoff {
 public:
  // A cycle reached `work` (`fence`: its cycle stays open until it has run).
  void Offer(AgreedWork work, bool fence) {
    agreed_ = std::move(work);
    agreed_fence_ = fence;
  }
  bool offered() const { return agreed_.has_value(); }
  // The agreement offered, once the one taken before it has run; nullopt otherwise.
  std::optional<AgreedWork> Take(uint64_t now_ns) {
    if (executing_ || !agreed_) return std::nullopt;
    executing_ = true;
    executing_fence_ = agreed_fence_;
    executing_since_ns_ = now_ns;
    return std::exchange(agreed_, std::nullopt);
  }
  bool executing() const { return executing_; }
  // Whether an agreement waits or runs.
  bool busy() const { return executing_ || agreed_.has_value(); }
  // The agreement taken ran, with `status`, for `*ran_ns`. A fence's outcome is kept for its cycle
  // when it still waits (`cycle_waits`: the cycle runs); otherwise it is returned. Nothing (and
  // OK) when none was taken.
  Status Ran(Status status, bool cycle_waits, uint64_t now_ns, uint64_t* ran_ns) {
    *ran_ns = 0;
    if (!executing_) return Status::Ok();
    executing_ = false;
    *ran_ns = now_ns - executing_since_ns_;
    if (executing_fence_ && cycle_waits) {
      outcome_ = std::move(status);
      return Status::Ok();
    }
    return status;
  }
  bool has_outcome() const { return outcome_.has_value(); }
  Status TakeOutcome() { return *std::exchange(outcome_, std::nullopt); }
  // The cycle was cancelled: what runs is forgotten (the caller fails it); the agreement not
  // taken yet is returned, for the caller to fail.
  std::optional<AgreedWork> Cancel() {
    executing_ = false;
    outcome_.reset();
    return std::exchange(agreed_, std::nullopt);
  }
  // An agreement's tensor list, run and emptied: its room holds the next agreement's.
  void Recycle(std::vector<ReadyTensor>&& spent) {
    spent.clear();
    if (spares_.size() < kSpares && spent.capacity() > 0) spares_.push_back(std::move(spent));
  }
  std::vector<ReadyTensor> Spare() {
    if (spares_.empty()) return {};
    std::vector<ReadyTensor> spare = std::move(spares_.back());
    spares_.pop_back();
    return spare;
  }

 private:
  // More than one: the next cycle may agree while the last agreement runs (under load, most
  // cycles), and an idle cycle's list comes back unused.
  static constexpr size_t kSpares = 4;
  std::vector<std::vector<ReadyTensor>> spares_;
  std::optional<AgreedWork> agreed_;  // reached, not taken yet
  bool agreed_fence_ = false;         // agreed_ is a fence
  bool executing_ = false;            // taken, its outcome not reported yet
  bool executing_fence_ = false;      // what runs is a fence: its cycle waits for outcome_
  uint64_t executing_since_ns_ = 0;
  std::optional<Status> outcome_;     // a fence's outcome, reported by Ran
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_AGREED_WORK_H_
