// TOPO groups on a node whose every rank has joined (hvd.join at the end of uneven data, or every
// rank lost for good under --on-loss continue or restore). Under negotiation such a node stands
// in for the names the coordinator agrees; under TOPO nobody agrees anything, and a group starts
// on a node once its ranks submitted its tensors: a node without ranks submitting would never
// start one, and the other nodes' groups would wait for it for ever.
//
// So that node tells the others (kTopoJoined) once its join waits for theirs; each of them then
// tells it every group it runs (kTopoRun, the group's sequence number, which every node shares:
// groups run in the same order everywhere), the one running when the word came included. The
// joined node stands in for the group (each tensor no local rank submitted, as a joined rank
// does: JoinedRequest, the identity of the reduction, left out of the sums; AVERAGE divides by the
// tensors that contributed for ranks lost for good, by every rank for joined ones) and runs it with
// them. It never runs a group nobody asked for, so nothing is left waiting on the network when the
// others stop. Once a node's own join is agreed (every rank of the job joined), every node's is:
// nobody stands in any more, and each forgets who did.
//
// Engine thread only.
#include <spdlog/spdlog.h>

#include "daemon/collectives/collective.h"
#include "daemon/engine/process_set.h"

namespace syncd {

void ProcessSet::PollTopoJoin() {
  SetTopo::StandIn& s = topo_.stand_in;
  if (s.joined_nodes.size() != place_.nodes()) s.joined_nodes.assign(place_.nodes(), false);
  const bool joined = !negotiator_->broken() && negotiator_->HasPending(abi::kJoinName);
  if (joined == s.joined_here) return;
  s.joined_here = joined;
  s.wanted = false;
  if (joined) {
    negotiator_->Tell(-1, ControlMessage{ControlMessage::Kind::kTopoJoined, place_.job, topo_.runner->seq(), ""});
    return;
  }
  // Our join was agreed, so was every node's: nobody stands in for groups from now on.
  s.joined_nodes.assign(s.joined_nodes.size(), false);
}

void ProcessSet::ReceiveTopoNotice(const ControlNotice& n) {
  SetTopo::StandIn& s = topo_.stand_in;
  if (!topo_.runner || !negotiator_) return;
  if (s.joined_nodes.size() != place_.nodes()) s.joined_nodes.assign(place_.nodes(), false);
  if (n.message.kind == ControlMessage::Kind::kTopoJoined) {
    if (n.from >= s.joined_nodes.size()) return;
    s.joined_nodes[n.from] = true;
    // The group running here may have started before the word came: it waits for that node.
    if (topo_.run.active)
      negotiator_->Tell(int32_t(n.from), ControlMessage{ControlMessage::Kind::kTopoRun, place_.job, s.running_seq, ""});
    return;
  }
  if (!s.joined_here) return;  // our join was agreed meanwhile: every node's was
  if (!s.wanted || n.message.cycle > s.wanted_seq) s.wanted_seq = n.message.cycle;
  s.wanted = true;
}

void ProcessSet::TellTopoStandIns(uint64_t seq) {
  SetTopo::StandIn& s = topo_.stand_in;
  s.running_seq = seq;
  if (!negotiator_) return;
  for (uint32_t node = 0; node < s.joined_nodes.size(); ++node)
    if (s.joined_nodes[node])
      negotiator_->Tell(int32_t(node), ControlMessage{ControlMessage::Kind::kTopoRun, place_.job, seq, ""});
}

void ProcessSet::StandInForTopoGroup() {
  SetTopo::StandIn& s = topo_.stand_in;
  if (!s.joined_here || !s.wanted || topo_.runner->running() || topo_.runner->seq() > s.wanted_seq) return;
  const TopoPlan& plan = topo_.runner->plan();
  const uint32_t g = topo_.runner->next_group();
  for (size_t i = plan.group_begin[g]; i < plan.group_end(g); ++i) {
    if (plan.tensors[i].op == SYNCD_ADASUM) {  // pairs every rank's tensor: nobody can stand in
      deferred_failure_ = Status(SYNCD_ERR_INVALID, "tensor '" + plan.tensors[i].name + "': Adasum pairs every rank's "
                                                        "tensor, and every rank of node " +
                                                        std::to_string(place_.node_rank) +
                                                        " has joined or was lost (the TOPO plan's group " +
                                                        std::to_string(g) + ")");
      s.wanted = false;
      return;
    }
    if (plan.tensors[i].gpu) {  // joined ranks take part in host collectives only
      deferred_failure_ = Status(SYNCD_ERR_INVALID, "tensor '" + plan.tensors[i].name + "': every rank of node " +
                                                        std::to_string(place_.node_rank) +
                                                        " has joined, and joined ranks take part in host collectives "
                                                        "only (the TOPO plan's group " + std::to_string(g) +
                                                        " is in GPU memory)");
      s.wanted = false;
      return;
    }
  }
  const uint32_t first = place_.offsets[place_.node_rank];
  topo_.runner->StandInForNext([&](const PlannedTensor& p) {
    Request like;
    like.kind = abi::OpKind::kAllreduce;
    like.name = p.name;
    like.process_set = place_.id;
    like.dtype = p.dtype;
    like.op = p.op;
    like.compression = p.compression;
    like.compression_ppm = p.compression_ppm;
    like.shape = {int64_t(p.count)};
    ReadyTensor t;
    for (uint32_t l = 0; l < place_.local_size(); ++l) {
      const bool lost = table_.LostForGood(l);
      StatusOr<Request> r = JoinedRequest(like, place_.ranks[first + l], first + l, l, lost);
      if (!r.ok()) continue;  // not for a host allreduce
      r->absent = lost;
      t.requests.push_back(std::move(r.value()));
    }
    return t;
  });
}

}  // namespace syncd
