// Partial allreduce (eager-SGD: Li et al., "Taming Unbalanced Training Workloads in Deep Learning
// with Partial Collective Operations", PPoPP 2020) for one process set: persistent operations, one
// per name, that run in rounds without waiting for every rank.
//
// Per name and local rank the runner holds an accumulator: the sum of the rank's tensors that no
// round has taken yet, and how many they are. A rank's request is added to its accumulator at
// once (its tensor is free again as soon as the request completes). Then
//   - the rank is late when a round ran since its last result: the request completes at once with
//     the latest round's result, and its tensor waits in the accumulator for the next round;
//   - else it is fresh for the next round and waits for it.
// The next round runs once the mode's condition holds: solo, `quorum` fresh ranks (default 1);
// majority, the round's initiator is fresh (a set rank drawn from the name and the round number,
// the same on every rank), and `quorum` fresh ranks. A round sums every rank's accumulator, fresh
// or not (absent ranks contribute what they left, with no code of theirs running), empties them,
// and completes the fresh requests with the result. Average divides by the number of tensors the
// round summed. So the sum of all rounds is the sum of everything every rank contributed.
//
// One node for now: a set spanning nodes refuses partial requests.
//
// Threads: engine thread only. Nothing here blocks.
#ifndef SYNCD_DAEMON_COORD_PARTIAL_RUNNER_H_
#define SYNCD_DAEMON_COORD_PARTIAL_RUNNER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/coord/partial_stats.h"
#include "daemon/core/request.h"

namespace syncd {

// The majority round's initiator: a set rank drawn from the name and the round number.
uint32_t PartialInitiator(const std::string& name, uint64_t round, uint32_t set_size);

class PartialRunner {
 public:
  using Complete = std::function<void(const std::vector<Request>&, const Status&)>;

  // The set has `set_size` ranks; this node's `local_size` of them are set ranks `first`,
  // `first` + 1, ... (Request::local_rank is the index among them).
  PartialRunner(uint32_t set_size, uint32_t first, uint32_t local_size, Complete complete);
  ~PartialRunner();
  PartialRunner(const PartialRunner&) = delete;
  PartialRunner& operator=(const PartialRunner&) = delete;

  // A partial allreduce request of a local rank. An error (it differs from the name's earlier
  // requests, or the rank has one waiting already) leaves the request to the caller.
  Status Add(Request r);
  // Requests waiting for a round.
  size_t in_flight() const;
  // Fails every waiting request with `why` (named per tensor); the accumulators are dropped.
  void FailAll(const Status& why);
  std::vector<PartialOpSnapshot> Snapshot() const;

 private:
  struct Op;
  Status Check(const Op& op, const Request& r) const;
  // Runs the next round if its condition holds.
  void MaybeRun(const std::string& name, Op& op);
  void Run(Op& op, uint32_t initiator);

  const uint32_t set_size_, first_, local_size_;
  Complete complete_;
  std::map<std::string, Op> ops_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_PARTIAL_RUNNER_H_
