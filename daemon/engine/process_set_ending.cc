// A process set's work ending (process_set.h): by reach (End), when the daemon or the job leaves
// (Leave), and a rank the job goes on without (ContinueWithout). Engine thread only.
#include "daemon/engine/process_set.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace syncd {

void ProcessSet::FailPartial(const Status& why) {
  for (Request& r : std::exchange(partial_early_, {})) {
    Status failed(why.code(), "tensor '" + r.name + "': " + why.message());
    Finish(std::move(r), std::move(failed));
  }
  partial_.FailAll(why);
  CollectPartial();
}

void ProcessSet::FailJob(const Status& why) {
  if (negotiator_) {
    negotiator_->Abort(why);  // tells the other nodes; gives up everything it holds
    Collect();
    if (topo_.runner) FailTopo(negotiator_->failure());
    return;
  }
  if (job_failure_.ok()) {
    job_failure_ = why;
    spdlog::error("job failed: {}", why.message());
  }
  if (topo_.runner) FailTopo(why);
}

size_t ProcessSet::End(const Status& why, Reach reach, const Status& peers_why) {
  // A sliced run has every input it needs: it finishes now, whatever else ends.
  RunSlices(/*all=*/true);
  switch (reach) {
    case Reach::kWaiting:
      return FailWaiting(why);
    case Reach::kHeld: {
      const size_t waiting = table_.pending() + PartialInFlight();
      FailHeld(why);
      return waiting;
    }
    case Reach::kRank: {
      const bool topo_in_flight = topo_.runner && (topo_.runner->in_flight() > 0 || topo_.run.active);
      const size_t waiting = FailWaiting(why);
      if (topo_in_flight) FailTopo(why);
      // A rank lost with GPU work in flight may never signal its stream: the GPU path ends (its
      // flags released), and the job's other ranks get the error instead of waiting for ever.
      if (!peers_why.ok() && place_.gpu && !gpu_.ops.empty()) {
        place_.gpu->Abort(why);
        PollGpu();
      }
      if (negotiator_ && !peers_why.ok()) {
        negotiator_->Abort(peers_why);
        Collect();
      }
      return waiting;
    }
    case Reach::kRemoved: {
      const size_t waiting = table_.pending() + PartialInFlight();
      FailHeld(why);
      if (negotiator_ && (negotiator_->pending() > 0 || cycle_run_.active)) {  // else nothing to fail
        negotiator_->Break(why, /*expected=*/true);
        Collect();
      }
      return waiting;
    }
    case Reach::kJob: {
      const size_t waiting = FailWaiting(why);
      FailJob(peers_why.ok() ? why : peers_why);  // many nodes: tells the others, which fail what they hold
      return waiting;
    }
  }
  return 0;
}

void ProcessSet::Leave(uint64_t deadline_ns, const std::string& why, const std::string& peer_reason) {
  if (!negotiator_) return;
  negotiator_->Leave(deadline_ns, why, peer_reason);
  Collect();
}

bool ProcessSet::ContinueWithout(uint32_t local_rank) {
  const auto at = std::find(place_.local_ranks.begin(), place_.local_ranks.end(), local_rank);
  if (at == place_.local_ranks.end()) return true;
  if (place_.id != 0) return false;
  const uint32_t index = uint32_t(at - place_.local_ranks.begin());
  Request join;
  join.client_id = kNoClient;
  join.kind = abi::OpKind::kJoin;
  join.name = abi::kJoinName;
  join.set_rank = place_.offsets[place_.node_rank] + index;
  join.rank = place_.ranks[join.set_rank];
  join.local_rank = index;
  join.process_set = place_.id;
  join.received_ns = abi::MonotonicNs();
  join.absent = true;
  table_.MarkLost(index, join);
  partial_.LoseRank(index);
  CollectPartial();
  return true;
}

void ProcessSet::Replaced(uint32_t local_rank) {
  const auto at = std::find(place_.local_ranks.begin(), place_.local_ranks.end(), local_rank);
  if (at != place_.local_ranks.end()) table_.Replaced(uint32_t(at - place_.local_ranks.begin()));
}

bool ProcessSet::Abandons(uint32_t local_rank) const {
  const auto at = std::find(place_.local_ranks.begin(), place_.local_ranks.end(), local_rank);
  if (at == place_.local_ranks.end()) return false;  // not one of the set's
  return table_.HasRequestsOf(uint32_t(at - place_.local_ranks.begin())) || (topo_.runner && topo_.runner->in_flight() > 0) ||
         topo_.run.active || (negotiator_ && negotiator_->pending() > 0) || PartialInFlight() > 0;
}

}  // namespace syncd
