// Partial allreduce (eager-SGD: Li et al., "Taming Unbalanced Training Workloads in Deep Learning
// with Partial Collective Operations", PPoPP 2020) for one process set: persistent operations, one
// per name, that run in rounds without waiting for every rank.
//
// Per name and local rank the runner holds an accumulator: the sum of the rank's tensors that no
// round has taken yet, and how many they are. A rank's request is added to its accumulator at
// once (its tensor is free again as soon as the request completes). A rank's i-th request of a
// name is for round i (the i-th step of training, as in eager-SGD). Then
//   - the rank is late when round i has started already: the request completes with round i's
//     result (at once, or when the round ends here), and its tensor waits in the accumulator for
//     the next round. So every rank applies the same results in the same order, and models that
//     start equal stay equal. Results are kept for the rounds some local rank has yet to call for,
//     at most kPartialHistory (64) of them: a rank further behind gets the latest round's result
//     (its model then differs until the next full synchronisation);
//   - else it is fresh for round i (the next one) and waits for it.
// So a round needs nothing of a rank beyond its i-th call: ranks that make the same number of
// calls before a synchronous collective never wait on one another's later steps.
// The next round runs once the mode's condition holds, counted over the whole set: solo, `quorum`
// fresh ranks (default 1); majority, the round's initiator is fresh (a set rank drawn from the
// name and the round number, the same on every node) and `quorum` fresh ranks. A round sums every
// rank's accumulator, fresh or not (absent ranks contribute what they left, with no code of theirs
// running), empties them, and completes the fresh requests with the result. Average divides by
// the number of tensors the round summed. So the sum of all rounds is the sum of everything every
// rank contributed.
//
// Activation, many nodes: each name has a coordinator, a node of the set drawn from the name
// (PartialCoordinator: the names of a model spread over the nodes, so no node does every name's
// counting). A node whose fresh ranks may meet the condition reports its count to the name's
// coordinator (kPartialReport); the coordinator decides, numbers the round (its own count,
// interleaved with the other coordinators': unique in the set) and tells every node (kPartialRun)
// through the binomial tree rooted at it (transport/binomial_tree.h): each node forwards the run
// message to its children as it takes it, so no node sends more than log2 N of them per round
// where the coordinator used to send N - 1. Each node then takes its accumulators
// and the round runs as two allreduces between the nodes (a header: tensors summed, which ranks
// were fresh, which nodes disagree; and the data), tagged by the sequence number, so rounds of
// different names never wait for one another. A name's rounds run one after the other on each
// node. A node that never saw the name joins with zeros (the run message carries what the round
// is). No rank polls: a rank only ever submits and waits. On one node the same steps happen at
// once, inside Add.
//
// Threads: engine thread only. Nothing here blocks.
#ifndef SYNCD_DAEMON_COLLECTIVES_PARTIAL_RUNNER_H_
#define SYNCD_DAEMON_COLLECTIVES_PARTIAL_RUNNER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/collectives/partial/stats.h"
#include "daemon/core/request.h"
#include "daemon/core/timeline.h"
#include "daemon/transport/control_message.h"
#include "daemon/transport/transport.h"

namespace syncd {

// The majority round's initiator: a set rank drawn from the name and the round number.
uint32_t PartialInitiator(const std::string& name, uint64_t round, uint32_t set_size);
// The node (0..nodes-1 of the set) that counts a name's reports and starts its rounds.
uint32_t PartialCoordinator(const std::string& name, uint32_t nodes);

// Where a set's partial rounds run.
struct PartialPlace {
  uint32_t set_size = 1;
  // Set ranks: node n holds [offsets[n], offsets[n + 1]); this node is `node`.
  std::vector<uint32_t> offsets{0, 1};
  uint32_t node = 0;
  uint64_t job = 0;
  Transport* comm = nullptr;  // one participant per node of the set; nullptr: one node
  // Rounds are recorded here, as set `set`'s (nullptr: nowhere).
  Timeline* timeline = nullptr;
  int32_t set = 0;

  uint32_t nodes() const { return uint32_t(offsets.size() - 1); }
  uint32_t first() const { return offsets[node]; }
  uint32_t local_size() const { return offsets[node + 1] - offsets[node]; }
};

// What the runner hands its process set: requests to complete, and control messages to send to a
// node of the set (-1: every other node) on the set's control channel. It completes nothing and
// sends no control message itself.
struct PartialCompletion {
  std::vector<Request> requests;
  Status status;
};
struct PartialMessage {
  int32_t node = -1;
  ControlMessage message;
};

class PartialRunner {
 public:
  explicit PartialRunner(PartialPlace place);
  ~PartialRunner();
  PartialRunner(const PartialRunner&) = delete;
  PartialRunner& operator=(const PartialRunner&) = delete;

  // A partial allreduce request of a local rank (Request::local_rank: its index among this node's
  // ranks of the set). An error (it differs from the name's earlier requests, or the rank has one
  // in flight already) leaves the request to the caller.
  Status Add(Request r);
  // Requests finished since the last call (by Add, Poll or FailAll), for the caller to complete;
  // control messages for the caller to send.
  std::vector<PartialCompletion> TakeCompleted() { return std::exchange(completed_, {}); }
  std::vector<PartialMessage> TakeMessages() { return std::exchange(messages_, {}); }
  // A kPartialReport or kPartialRun from node `from`; taken in at the next Poll.
  void Receive(uint32_t from, const ControlMessage& m);
  // Takes in messages and drives the rounds on the network; `*did` says whether anything moved.
  // An error (a round failed on the network, or a node broke the protocol): the set's job must
  // end; nothing was completed for it.
  Status Poll(bool* did);
  // Whether Poll has work now (rounds on the network, messages in, reports to be answered).
  bool busy() const;
  // Whether the set has partial operations (many nodes): another node may start a round any time.
  bool active() const { return place_.comm != nullptr && !ops_.empty(); }
  // Requests waiting for a round.
  size_t in_flight() const;
  // Fresh requests that have waited at least `min_age_ns` for their round: per operation, the
  // set ranks waiting here and those the round waits for (majority: its initiator; a quorum: the
  // set's ranks not waiting here, some of which must come).
  struct Stall {
    std::string name;
    uint64_t waiting_ns = 0;
    std::vector<uint32_t> waiting, awaited;
  };
  std::vector<Stall> Stalled(uint64_t now_ns, uint64_t min_age_ns) const;
  // Fails every waiting request with `why` (named per tensor); everything is dropped.
  void FailAll(const Status& why);
  // Local rank `local` is gone for good and the job goes on (--on-loss continue): it never comes
  // again, so as a majority round's initiator it counts as fresh here, and the round starts once
  // the quorum of other ranks is fresh (its node reports that, even with no rank of its own left).
  void LoseRank(uint32_t local);
  std::vector<PartialOpSnapshot> Snapshot() const;

 private:
  struct Meta;
  struct Op;
  struct Flight;
  struct Order;  // the name's coordinator: its next round, as the nodes' reports count it
  Op& OpFor(const std::string& name, const Meta& meta, const Request* first);
  Status Check(const Op& op, const std::string& name, const Request& r) const;
  // This node's fresh count for the name's next round, to its coordinator (or counted here).
  void Report(const std::string& name, Op& op);
  // The coordinator: a node's count for the name's round `round`; runs the round once the
  // condition holds.
  void Count(const std::string& name, const Meta& meta, uint32_t node, uint64_t round, uint32_t fresh, uint32_t first,
             bool initiator_fresh);
  // Every node: round `round` of the name runs as the `seq`-th partial round of the set.
  void Run(const std::string& name, const Meta& meta, uint64_t round, uint64_t seq, uint32_t initiator);
  // A run message of the name on to this node's children in the coordinator's tree.
  void Forward(const std::string& name, const ControlMessage& run);
  void Start(const std::string& name, Op& op);
  void Finish(const std::string& name, Op& op);
  Status Take(uint32_t from, const ControlMessage& m);

  void Complete(std::vector<Request> requests, Status status) {
    completed_.push_back(PartialCompletion{std::move(requests), std::move(status)});
  }
  void Tell(int32_t node, ControlMessage m) { messages_.push_back(PartialMessage{node, std::move(m)}); }

  const PartialPlace place_;
  std::vector<bool> lost_;  // by local index (LoseRank)
  bool any_lost_ = false;
  std::vector<PartialCompletion> completed_;
  std::vector<PartialMessage> messages_;
  std::map<std::string, Op> ops_;
  std::map<std::string, Order> orders_;  // the names this node coordinates
  uint64_t next_seq_ = 0;                // rounds this node started as a coordinator
  std::vector<std::pair<uint32_t, ControlMessage>> inbox_;
  // Kept as they change, so that the engine's every-turn questions (busy, Poll) need no walk over
  // the operations: rounds in flight here, and fresh requests waiting over all operations.
  size_t flights_ = 0;
  uint64_t fresh_total_ = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COLLECTIVES_PARTIAL_RUNNER_H_
