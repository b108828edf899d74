// A job's membership as this node knows it (--on-loss continue and restore): which nodes its
// global set spans, the nodes it went on without, the number every node gives the membership and
// why it last changed, and the notices by which a node comes back (node_back.cc) or a restarted
// daemon is reached (restarted_node.cc). It holds state and its rules only: the job (job.h) owns
// it and makes the global set afresh where it changes; nothing here touches a set or a request.
//
// Engine thread only.
#ifndef SYNCD_DAEMON_ENGINE_MEMBERSHIP_H_
#define SYNCD_DAEMON_ENGINE_MEMBERSHIP_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "daemon/obs/status_snapshot.h"
#include "daemon/transport/control_message.h"
#include "daemon/transport/transport.h"

namespace syncd {

// Wall-clock seconds now (what the status shows as when).
double UnixSeconds();

class Membership {
 public:
  // How many times the job's membership changed (0 until a node is lost), and why it last did. A
  // rank's requests fail until it has acknowledged the latest (NodePage::membership).
  uint32_t number() const { return number_; }
  const std::string& why() const { return why_; }
  // Every change, and every rank that came back or asks to, with when.
  const std::vector<StatusSnapshot::MembershipChange>& changes() const { return changes_; }
  // The membership changes to `number` because `why` (logged; `routine`: at info, a node joining as
  // planned, not a warning).
  void Change(uint32_t number, std::string why, bool routine = false);
  // An event of the membership that leaves its number as it is (a rank back, a replacement waiting).
  void Record(std::string why) { changes_.push_back({number_, UnixSeconds(), std::move(why)}); }

  // The global set's nodes, ascending, once it was made afresh; empty: every node of the job.
  // TellNodes and the notices speak the job's node numbers: JobNode and SetNode translate.
  const std::vector<uint32_t>& global_nodes() const { return global_nodes_; }
  void SetGlobalNodes(std::vector<uint32_t> nodes) { global_nodes_ = std::move(nodes); }
  uint32_t Leader() const { return global_nodes_.empty() ? 0 : global_nodes_.front(); }
  uint32_t JobNode(uint32_t set_node) const {
    return global_nodes_.empty() || set_node >= global_nodes_.size() ? set_node : global_nodes_[set_node];
  }
  // The global set's index of job node `node`; -1 when it is not in the set.
  int32_t SetNode(uint32_t node) const;

  // Lost nodes: those the transport lost since the last look, now gone on without.
  std::vector<uint32_t> SeeLostNodes(Transport* t);
  bool NodeLost(uint32_t node) const { return node < nodes_lost_.size() && nodes_lost_[node]; }
  std::vector<uint32_t> LostNodes() const;
  // By node, for the health view (empty: none lost yet).
  const std::vector<bool>& nodes_lost() const { return nodes_lost_; }
  // Node `node`'s daemon was restarted: it is in the job again.
  void NodeRestarted(uint32_t node) {
    if (node < nodes_lost_.size()) nodes_lost_[node] = false;
  }
  // A daemon restarted under the job starts where node 0 has it: `lost` gone on without, `number`.
  void Resume(uint32_t nodes, const std::vector<uint32_t>& lost, uint32_t number, std::string why);

  // A node comes back into the global set (node_back.cc). This node's part: a replacement (or a
  // new rank in a vacant node: `joins`) waits for the job to take the node back; `Ask` once node 0
  // of the global set was asked (cleared when that node is lost: ask the next one).
  void WantBack(bool joins) {
    if (!back_pending_) back_joins_ = joins;
    back_pending_ = true;
  }
  bool wants_back() const { return back_pending_; }
  bool back_joins() const { return back_joins_; }
  bool asked() const { return back_sent_; }
  void Asked(bool sent) { back_sent_ = sent; }
  void TakenBack() { back_pending_ = back_sent_ = back_joins_ = false; }
  // Node 0 of the global set: node `node` asks to come back (`joins`: to join). TakeAsking hands
  // over the nodes asking, ascending, each once; AskAgain keeps those to answer on the next poll.
  void Asking(uint32_t node, bool joins);
  std::vector<uint32_t> TakeAsking();
  void AskAgain(std::vector<uint32_t> nodes) { back_asked_.insert(back_asked_.end(), nodes.begin(), nodes.end()); }
  bool Joins(uint32_t node) const { return node < joining_.size() && joining_[node]; }
  void Joined(uint32_t node) {
    if (node < joining_.size()) joining_[node] = false;
  }
  // Node 0's answer (kNodeJoin; node 0's own too): node `node` comes back on `slot`.
  struct NodeJoin {
    uint32_t node, number, slot;
    bool joins;
  };
  void Answer(NodeJoin j) { node_joins_.push_back(j); }
  std::vector<NodeJoin> TakeAnswers() { return std::exchange(node_joins_, {}); }
  // The notices of a node's return that reach this node (kNodeBack, kNodeJoin, kNodeRestarted,
  // kNodeAddress) from job node `node`; false: not one of them.
  bool Receive(uint32_t node, const ControlMessage& m);
  static constexpr const char* kJoinsWord = "joins";

  // A daemon restarted under the job (restarted_node.cc): node 0's notices of it, until its address
  // is whole and the old daemon is seen lost here.
  struct RestartedNode {
    uint32_t node = 0, number = 0, slot = 0;
    std::string address, host;  // its UCX worker address, its machine
    int32_t pid = 0;
    bool tell_others = false;
    // The other nodes, while node 0's notices come in (kNodeRestarted, kNodeAddress).
    uint32_t chunks = 0, got = 0;
    uint64_t deadline_ns = 0;  // to see the old daemon lost here
  };
  std::vector<RestartedNode>& restarts() { return restarts_; }

  // Whether a node's return waits to be applied (a cycle's blocking stops for it: the set it
  // blocks in is about to be made afresh), or, with `asking`, this node still asks.
  bool ReturnWaits(bool asking) const {
    return !back_asked_.empty() || !node_joins_.empty() || !restarts_.empty() || (asking && back_pending_);
  }

 private:
  void ReceiveRestart(const ControlMessage& m);

  uint32_t number_ = 0;
  std::string why_;
  std::vector<StatusSnapshot::MembershipChange> changes_;
  std::vector<uint32_t> global_nodes_;
  std::vector<bool> nodes_lost_;  // by node: lost and gone on without
  bool back_pending_ = false;     // a replacement here waits for the node to be taken back
  bool back_joins_ = false;       // ... a new rank: the node had only vacant slots, it joins
  bool back_sent_ = false;        // ... and node 0 of the global set was asked
  std::vector<uint32_t> back_asked_;  // node 0 of the global set: nodes asking to come back
  std::vector<bool> joining_;         // ... by node: it asked to join (its slots were all vacant)
  std::vector<NodeJoin> node_joins_;  // node 0's answers, to apply
  std::vector<RestartedNode> restarts_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_MEMBERSHIP_H_
