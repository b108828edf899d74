// A daemon restarted under its job (--on-loss continue and restore): job.h, TakeRestartedNodeBack,
// Resume, ApplyRestarts (the notices are read in membership.cc).
//
// Its node was lost first (lost_nodes.cc). The new daemon joins node 0's rendezvous again; node 0's
// engine reaches it at its new address (Transport::Reconnect) and takes the node back: the global
// set made afresh with it on a new tag slot, the membership + 1, the node's ranks stood in for by
// the new daemon until ranks attach in their place (then node_back.cc takes the node back once
// more, its ranks taking part). The new daemon starts the job where node 0 has it (Resume).
//
// The other nodes must reach the new daemon too: node 0 tells them (kNodeRestarted: the node, its
// pid and host, the membership and slot) with its address after it in hex (kNodeAddress, as many as
// it takes: a UCX worker address is a few hundred bytes). Each, once it has the whole address and
// has seen the old daemon lost itself (for up to 10 s; a node that never does cannot reconnect),
// reconnects and takes the node back the same way.
//
// Engine thread only.
#include <spdlog/spdlog.h>

#include "daemon/base/hex.h"
#include "daemon/engine/job.h"

namespace syncd {
namespace {

constexpr size_t kHexPerMessage = kControlTextBytes / 2 * 2;
}  // namespace

JobResume Job::TakeRestartedNodeBack(const Membership::RestartedNode& n) {
  const uint32_t membership = std::max(membership_.number() + 1, n.number);
  if (n.tell_others && membership_.global_nodes().size() > 1) {
    // The other nodes of the old global set (the restarted node is not in it) reach it too.
    const std::string hex = Hex(n.address);
    const size_t chunks = (hex.size() + kHexPerMessage - 1) / kHexPerMessage;
    bool told = TellNodes(ControlMessage{ControlMessage::Kind::kNodeRestarted, id_, membership,
                                         std::to_string(n.node) + " " + std::to_string(n.pid) + " " +
                                             std::to_string(chunks) + " " + n.host,
                                         int32_t(n.slot)},
                          -1);
    for (size_t i = 0; told && i < chunks; ++i)
      told = TellNodes(ControlMessage{ControlMessage::Kind::kNodeAddress, id_, n.node,
                                      hex.substr(i * kHexPerMessage, kHexPerMessage), int32_t(i)},
                       -1);
    if (!told) spdlog::error("node {}'s restarted daemon: the other nodes could not be told", n.node);
    else sets_[0]->FlushNotices(abi::MonotonicNs() + kNoticeFlushNs);
  }
  membership_.NodeRestarted(n.node);
  RemakeGlobalSet(membership, n.slot, "node " + std::to_string(n.node) + "'s daemon was restarted: the node is back, "
                                      "its ranks stood in for until ranks attach in their place (membership " +
                                          std::to_string(membership) + ")");
  return JobResume{membership_.number(), n.slot, membership_.LostNodes()};
}

bool Job::ApplyRestarts(uint64_t now_ns) {
  bool did = false;
  std::vector<Membership::RestartedNode>& restarts = membership_.restarts();
  for (auto it = restarts.begin(); it != restarts.end();) {
    const Membership::RestartedNode n = *it;
    Transport* t = links_.transport;
    if (n.got < n.chunks || (!t->PeerLost(n.node) && now_ns < n.deadline_ns)) {
      ++it;
      continue;
    }
    Status st = t->Reconnect(n.node, n.address, n.host == host_ ? n.pid : 0, n.slot);
    if (st.ok()) {
      TakeRestartedNodeBack(n);
      did = true;
    } else {
      spdlog::error("node {}'s restarted daemon cannot be reached from here: {}", n.node, st.message());
    }
    it = restarts.erase(it);
  }
  return did;
}

void Job::Resume(const JobResume& resume) {
  membership_.Resume(links_.transport != nullptr ? links_.transport->size() : 0, resume.lost_nodes, resume.membership,
                     "this daemon was restarted under job " + std::to_string(id_) + " (membership " +
                         std::to_string(resume.membership) +
                         "): its ranks take part again once ranks attach in their place");
  for (uint32_t lr = 0; lr < local_size_; ++lr) {
    LostRank& lost = lost_[lr] = LostRank{0, "rank " + std::to_string(config_.node_rank * local_size_ + lr) +
                                                 " was lost with its daemon, restarted since",
                                          false, ++loss_seq_};
    lost.continued = true;
    lost.lost_unix_s = UnixSeconds();
  }
  last_slot_ = resume.slot;
  MakeGlobalSet(resume.slot);
}

}  // namespace syncd
