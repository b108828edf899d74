// A job that loses a node and goes on (--on-loss continue and restore): job.h, LoseNodes.
//
// A lost daemon took its node's ranks and whatever it held of the collectives in flight, in the
// middle of their exchanges: those cannot complete anywhere. So every node left ends the global
// set as it stands (each of its requests fails, as a removed set's: every node left does the same
// on its own, nobody is told) and makes it afresh over the nodes left, on a tag slot of its own
// (nothing the old one left on the wire can reach it), starting with the start handshake among
// them. The ranks on the nodes left keep their numbers; the lost node's are simply not in the new
// set (a rank lost earlier on a node left is stood in for again).
//
// Which of a rank's requests belong to the old membership and which to the new cannot be told
// from the requests: a rank may have submitted before its daemon saw the loss and another after.
// So the membership has a number (NodePage::membership): once it changed, a rank's requests fail
// until it has acknowledged the new one (syncd_acknowledge_membership, after its calls in flight
// completed; hvd.elastic.run does it when it resets). Every rank then starts the new membership
// from nothing in flight, with the same calls.
//
// Engine thread only.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "daemon/engine/job.h"
#include "daemon/transport/set_transport.h"

namespace syncd {

void Job::LoseNodes() {
  Transport* t = links_.transport;
  const std::vector<uint32_t> newly = membership_.SeeLostNodes(t);
  if (newly.empty()) return;
  std::string lost;
  for (uint32_t p : newly) lost += (lost.empty() ? "node " : ", node ") + std::to_string(p);
  if (std::optional<Status> failure = t->PeerFailure(); failure && newly.size() == 1) lost = failure->message();
  const uint32_t next = membership_.number() + 1;
  EndGlobalSet(next, lost + "; the job went on without it (--on-loss " +
                         (config_.on_loss == OnLoss::kRestore ? "restore" : "continue") + ", membership " +
                         std::to_string(next) + ")");
  // Process sets holding a lost node's ranks cannot go on.
  for (auto& [id, set] : sets_) {
    const std::vector<uint32_t>& ranks = set_info_[id].ranks;
    if (std::any_of(ranks.begin(), ranks.end(), [&](uint32_t r) { return membership_.NodeLost(r / local_size_); }))
      set->End(Status(SYNCD_ERR_RANK_LOST, "process set " + std::to_string(id) + ": " + membership_.why() +
                                               " (a process set cannot go on without a rank)"),
               ProcessSet::Reach::kJob);
  }
  MakeGlobalSet(FreeSlot());
  // A replacement here still waiting to be taken back asks the global set's node 0 again (it may
  // be a new one).
  membership_.Asked(false);
  Mark(-1, lost + " lost; the job goes on without it");
  CompleteTransfers();
}

void Job::EndGlobalSet(uint32_t membership, const std::string& what, bool routine) {
  membership_.Change(membership, what, routine);
  // What the old global set holds fails here, as on every other node.
  End(EndScope::Set(0, ProcessSet::Reach::kRemoved),
      Status(SYNCD_ERR_RANK_LOST, membership_.why() + ": what was in flight fails; each rank's calls fail until it "
                                                    "acknowledges the new membership (hvd.elastic.run does)"));
  carried_plan_ = sets_.count(0) ? sets_[0]->plan() : nullptr;
  sets_.erase(0);
  set_info_.erase(0);
}

void Job::MakeGlobalSet(uint32_t slot) {
  RouteNotices();  // what the set about to go received
  Transport* t = links_.transport;
  std::vector<int64_t> ranks;
  const uint32_t nodes_in_job = t == nullptr ? 1 : t->size();
  for (uint32_t node = 0; node < nodes_in_job; ++node)
    if (!membership_.NodeLost(node))
      for (uint32_t l = 0; l < local_size_; ++l) ranks.push_back(int64_t(node) * local_size_ + l);
  std::vector<uint32_t> nodes;
  ProcessSetPlace place = PlaceOf(0, ranks, &nodes);
  // The GPUs' communicator spans the job as it started: GPU collectives fail from now on (naming why).
  place.gpu = nullptr;
  SetInfo info{place.ranks, slot, nullptr};
  if (nodes.size() > 1) info.comm = std::make_unique<SetTransport>(t, nodes, slot);
  place.comm = info.comm.get();
  set_info_[0] = std::move(info);
  // Its TOPO plan: the old set's, where the nodes of the new one agree on it (coord/job_join.h).
  sets_[0] = std::make_unique<ProcessSet>(config_, std::move(place), links_.counters, set_hooks_,
                                          std::exchange(carried_plan_, nullptr));
  membership_.SetGlobalNodes(std::move(nodes));
  // The ranks stood in for now fail nothing more (the membership change failed what was in flight).
  int64_t stood_in = 0;
  for (const auto& [lr, l] : lost_)
    if (l.continued && !l.awaiting_node_back) {
      sets_[0]->ContinueWithout(lr);
      ++stood_in;
    }
  sets_[0]->StartAfreshWithStandIns(stood_in);
}

}  // namespace syncd
