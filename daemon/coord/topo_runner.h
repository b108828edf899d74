// TOPO coordination (`--coord topo`): releases the tensors of a registered plan
// (daemon/plan/topo.h) in the plan's order and fusion groups, with no negotiation. Every daemon
// of the job holds the same plan (their hashes were compared at registration), so each can decide
// alone: group g is released once the groups before it ran and every local rank submitted all of
// g's tensors. The process set runs it (Next, then Done); the group's collective itself is what
// waits for the other nodes. After the last group a step ends and the next one starts again at
// group 0. The runner never runs a collective or completes a request.
//
// Tensors are checked against the plan (operation, dtype, element count, reduce op, memory,
// compression with its ratio or rank) as they arrive: the plan is the agreement, so a deviation
// can only fail the whole job.
//
// Threads: engine thread only. Nothing here blocks.
#ifndef SYNCD_DAEMON_COORD_TOPO_RUNNER_H_
#define SYNCD_DAEMON_COORD_TOPO_RUNNER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/coord/agreed_work.h"
#include "daemon/coord/topo_stats.h"
#include "daemon/core/tensor_table.h"
#include "daemon/plan/topo.h"
#include "daemon/transport/tag_space.h"

namespace syncd {

class TopoRunner {
 public:
  explicit TopoRunner(std::shared_ptr<const TopoPlan> plan);

  const TopoPlan& plan() const { return *plan_; }
  bool Has(const std::string& name) const { return index_.count(name) > 0; }

  // A plan tensor that every local rank submitted. An error (it differs from the plan) means the
  // job cannot go on: the caller aborts it; the tensor's requests are left to the caller.
  Status Add(ReadyTensor* t);
  // The next group, when every local rank submitted all of it and no group runs: the caller runs
  // it (its tag has the low 24 bits free) and reports Done. nullopt otherwise.
  std::optional<AgreedWork> Next();
  // A node whose every rank has joined (hvd.join, or lost for good) stands in for the next group
  // when another node runs it: `make` gives the stand-in of each of its tensors no local rank
  // submitted. Next() then returns it.
  void StandInForNext(const std::function<ReadyTensor(const PlannedTensor&)>& make);
  // The sequence number of the next group Next() returns (every node's are the same: groups run in
  // the same order everywhere), and of the one it returned last.
  uint64_t seq() const { return seq_; }
  // The group taken last ran (`ok`), or failed: the job is over (the caller fails what is left).
  void Done(bool ok);
  // The job failed: every held tensor's requests, each with its error ("tensor 'x': <why>"), for
  // the caller to complete.
  void FailAll(const Status& why, std::vector<FailedTensor>* ended);

  const TopoStats& stats() const { return stats_; }
  uint32_t next_group() const { return next_group_; }
  bool running() const { return running_; }
  // Tensors held for their group (not the running group's: those are the caller's).
  size_t in_flight() const;
  // Tensors of the group the runner waits for that no local rank completed yet, with how long
  // the group has been waiting (since its first tensor arrived), once that is `min_age_ns`.
  struct Wait {
    uint32_t group;
    uint64_t waiting_ns;
    std::vector<std::string> missing;
  };
  std::optional<Wait> Waiting(uint64_t now_ns, uint64_t min_age_ns) const;

 private:
  std::shared_ptr<const TopoPlan> plan_;
  std::unordered_map<std::string, uint32_t> index_;  // tensor name -> position in plan_->tensors
  std::vector<std::optional<ReadyTensor>> held_;     // by position: submitted, not yet issued
  std::vector<uint32_t> group_of_;                    // by position
  std::vector<uint32_t> ready_in_group_;
  std::vector<uint64_t> first_ready_ns_;             // by group: when its first tensor arrived
  uint32_t next_group_ = 0;
  uint64_t seq_ = 0;
  uint64_t issued_ns_ = 0;
  bool running_ = false;
  size_t running_tensors_ = 0;
  TopoStats stats_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_TOPO_RUNNER_H_
