// A node comes back into the job's collectives (--on-loss continue and restore): job.h,
// RequestNodeBack, ApplyNodeBack, TakeNodeBack.
//
// A node whose every rank was lost stands in for each of them (TensorTable::MarkLost), so the
// coordination counts the whole node as joined for good: the other nodes no longer wait for it
// in any name. Taking one rank's stand-in away (what a replacement does where the node keeps other
// ranks: TensorTable::Replaced) cannot work there: the node would have to un-join, at a point
// every node agrees on. Instead the job makes its global set afresh with the node taking part
// again, as it does after a lost node (lost_nodes.cc): what the old set held fails everywhere,
// the membership changes, and every rank acknowledges it before its next call (hvd.elastic.run
// does; the replacement's first call is refused until then, its run loop resets and goes on).
//
// One node decides, so that every node makes the same set: node 0 of the global set (the lowest
// node left). The replacement's node asks it (kNodeBack); it picks the new membership and the new
// set's tag slot (FreeSlot, which every node then continues from) and tells every node of the old
// set (kNodeJoin), then takes the node back itself. Should node 0 be lost first, the asking node
// asks the next one (LoseNodes clears Membership::asked).
//
// Engine thread only.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/engine/job.h"

namespace syncd {

void Job::RequestNodeBack() {
  if (!membership_.wants_back() || membership_.asked()) return;
  const uint32_t leader = membership_.Leader();
  const bool joins = membership_.back_joins();
  if (leader == config_.node_rank) {
    membership_.Asking(leader, joins);
    membership_.Asked(true);
    return;
  }
  const bool sent = TellNodes(ControlMessage{ControlMessage::Kind::kNodeBack, id_, membership_.number(),
                                             joins ? Membership::kJoinsWord : ""},
                              int32_t(leader));
  membership_.Asked(sent);
  if (sent)
    spdlog::info("node {} asks node {} to take it {} the job's collectives", config_.node_rank, leader,
                 joins ? "into" : "back into");
}

bool Job::ApplyNodeBack() {
  RequestNodeBack();  // not sent yet (the set was not started), or to a new node 0
  const std::vector<uint32_t> asked = membership_.TakeAsking();
  std::vector<uint32_t> retry;  // those it could not answer yet
  for (size_t i = 0; i < asked.size(); ++i) {
    const uint32_t node = asked[i];
    // Only node 0 of the global set decides; a node asking a node 0 since lost asks again.
    if (membership_.Leader() != config_.node_rank || membership_.NodeLost(node)) continue;
    const uint32_t membership = membership_.number() + 1;
    const uint32_t slot = FreeSlot(/*except_set=*/0);
    const bool joins = membership_.Joins(node);
    const std::vector<uint32_t>& global = membership_.global_nodes();
    if (global.size() > 1 || (global.empty() && links_.transport != nullptr)) {
      const std::string text = std::to_string(node) + (joins ? std::string(" ") + Membership::kJoinsWord : "");
      ControlMessage join{ControlMessage::Kind::kNodeJoin, id_, membership, text, int32_t(slot)};
      if (!TellNodes(std::move(join), -1)) {
        spdlog::warn("node {} cannot be taken back now (the global set is not running); trying again", node);
        retry.push_back(node);
        continue;
      }
      sets_[0]->FlushNotices(abi::MonotonicNs() + kNoticeFlushNs);
    }
    membership_.Answer({node, membership, slot, joins});
    retry.insert(retry.end(), asked.begin() + ptrdiff_t(i) + 1, asked.end());  // on the set made afresh
    break;
  }
  membership_.AskAgain(std::move(retry));
  const std::vector<Membership::NodeJoin> joins = membership_.TakeAnswers();
  for (const Membership::NodeJoin& j : joins) TakeNodeBack(j.node, j.number, j.slot, j.joins);
  return !joins.empty();
}

void Job::TakeNodeBack(uint32_t node, uint32_t membership, uint32_t slot, bool joins) {
  membership = std::max(membership_.number() + 1, membership);
  const std::string afresh =
      "the job's collectives start afresh with it (membership " + std::to_string(membership) + ")";
  // The ranks attached there take part in the set made afresh (MakeGlobalSet stands in for none of them).
  RemakeGlobalSet(membership, slot,
                  "node " + std::to_string(node) +
                      (joins ? " joins: a new rank attached in a vacant slot there, and " + afresh
                             : " is back: a replacement attached there, and " + afresh),
                  joins);
  membership_.Joined(node);
  if (node == config_.node_rank) {
    for (auto it = lost_.begin(); it != lost_.end();)
      it = it->second.awaiting_node_back ? lost_.erase(it) : std::next(it);
    membership_.TakenBack();
  }
}

void Job::RemakeGlobalSet(uint32_t membership, uint32_t slot, const std::string& what, bool routine) {
  EndGlobalSet(membership, what, routine);
  last_slot_ = slot;  // every node goes on choosing slots from the same point (FreeSlot)
  MakeGlobalSet(slot);
  Mark(-1, membership_.why());
  CompleteTransfers();
}

}  // namespace syncd
