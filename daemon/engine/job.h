// A job on this node: what its ranks run together, from its first rank's attach until the next
// job's first. The job owns its process sets (the global one, and those it adds and removes at
// agreed points), its point-to-point transfers, the ranks it lost and what waits for them, its
// stalls (warned about, then the job shut down) and its job-wide health view. The engine
// (engine.h) owns what outlives a job: the clients and their rings, validation, completion,
// metrics, the timeline and the status; it hands the job each checked request (Take) and each
// rank's coming and going, and the job ends work by scope (End). Every request the job or its
// sets end goes to the engine's outcome list (core/outcomes.h) with its status, and the engine
// applies the list once the call into the job returns: the job completes nothing itself.
//
// Engine thread only.
#ifndef SYNCD_DAEMON_ENGINE_JOB_H_
#define SYNCD_DAEMON_ENGINE_JOB_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/base/config.h"
#include "daemon/coord/job_health.h"
#include "daemon/engine/membership.h"
#include "daemon/engine/point_to_point.h"
#include "daemon/engine/process_set.h"
#include "daemon/obs/status_snapshot.h"
#include "daemon/obs/stragglers.h"

namespace syncd {

// What Engine::End ends: one request, what a gone rank leaves behind, a process set, or the job.
struct EndScope {
  enum class Kind { kRequest, kClient, kProcessSet, kJob };
  Kind kind = Kind::kJob;
  const Request* request = nullptr;  // kRequest
  uint32_t local_rank = 0;           // kClient: the rank that is gone
  int32_t set = 0;                   // kProcessSet
  // kClient, kProcessSet, kJob: how far it reaches (ProcessSet::Reach; kClient: kRank).
  ProcessSet::Reach reach = ProcessSet::Reach::kJob;
  Status peers_why;  // what the other nodes are told (kRank: OK means nothing; kJob: OK means `why`)

  static EndScope OneRequest(const Request& r) {
    EndScope s;
    s.kind = Kind::kRequest;
    s.request = &r;
    return s;
  }
  static EndScope Client(uint32_t local_rank, Status peers_why) {
    EndScope s;
    s.kind = Kind::kClient;
    s.local_rank = local_rank;
    s.reach = ProcessSet::Reach::kRank;
    s.peers_why = std::move(peers_why);
    return s;
  }
  static EndScope Set(int32_t id, ProcessSet::Reach reach) {
    EndScope s;
    s.kind = Kind::kProcessSet;
    s.set = id;
    s.reach = reach;
    return s;
  }
  static EndScope Job(ProcessSet::Reach reach) {
    EndScope s;
    s.reach = reach;
    return s;
  }
};

// A rank of this node that is gone, and why.
struct LostRank {
  int32_t pid = 0;
  std::string reason;
  bool blocking = true;  // new requests fail at once; cleared when the job's last client leaves
  uint64_t seq = 0;      // order of loss
  // A rank that detached between collectives may attach again (hvd.shutdown(), then init()):
  // until this deadline requests that need it wait; 0 when not waiting for it.
  uint64_t rejoin_deadline_ns = 0;
  // --on-loss continue: the job went on without it (Job::ContinueWithout), at this wall time.
  bool continued = false;
  // Every rank of this node was lost and a replacement attached in this one's place: the global
  // set takes the node back (node_back.cc); until then its requests are refused.
  bool awaiting_node_back = false;
  // A slot no rank held since the job started (--vacant-ranks): the rank that attaches in its
  // place is new to the job, not a replacement.
  bool vacant = false;
  // It detached between collectives and did not attach again in time (ExpireDepartures): the job
  // goes on without it, but it was not lost (ranks finishing apart at a job's end).
  bool departed = false;
  // It detached between collectives with nothing in flight (hvd.shutdown(), the end of its
  // script): status says it left, within its rejoin grace and at the job's end too.
  bool clean = false;
  double lost_unix_s = 0;
};

// Where a job stands, for a daemon restarted under it (node_back.cc): it starts the job there.
struct JobResume {
  uint32_t membership = 0;
  uint32_t slot = 0;                 // the global set's tag slot
  std::vector<uint32_t> lost_nodes;  // nodes the job went on without
};

// When a rank of this node last called syncd (the stall messages say so).
struct RankActivity {
  uint32_t rank = 0;
  uint64_t last_call_ns = 0;  // 0: not since it attached
  int32_t pid = 0;            // its process (stopped or exited: the stall says so)
};

class Job {
 public:
  struct Links {
    Transport* transport = nullptr;  // the job's daemons; nullptr: one node
    GpuExecutor* gpu = nullptr;      // this node's GPUs, or nullptr
    ExecutionCounters* counters = nullptr;
    // What every set of the job runs with (the job keeps them as set_hooks_).
    ProcessSetHooks hooks;
    // A daemon restarted under the job: the job as node 0 has it (the global set on its slot, this
    // node's ranks stood in for until ranks attach in their place); nullptr: the job's start.
    const JobResume* resume = nullptr;
  };
  Job(const Config& config, uint64_t id, uint32_t local_size, Links links);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  uint64_t id() const { return id_; }
  Transport* transport() const { return links_.transport; }  // its daemons; nullptr: one node

  // Intake: a checked request of a rank of this node goes to its process set or to
  // point-to-point. A refusal (no such set, the job failed, a rank it needs is lost) is returned;
  // `r` is then the caller's to complete with it.
  Status Take(Request&& r);
  // Moves every set and transfer on; applies agreed set changes. Returns whether it did work.
  bool Poll(uint64_t now_ns);
  // Other nodes' notices that are neither the job's nor its sets' (the timeline's), in arrival
  // order, since the last call: the engine takes them with the outcomes (Engine::Settle).
  std::vector<ControlNotice> TakeNotices() { return std::exchange(notices_out_, {}); }
  // Ends work in `scope` (not kRequest: that is the engine's): every pending request of it
  // completes exactly once with `why`. Returns how many tensors were waiting for local ranks.
  size_t End(const EndScope& scope, const Status& why);
  // This node leaves the job (the daemon stops, or the next job starts): the other nodes learn it
  // without a lost node.
  void Leave(uint64_t deadline_ns, const std::string& why, const std::string& peer_reason);
  // The job is over: sets with GPU work still enqueued move to `retired` (they complete it to
  // nobody); the rest go with the job.
  void Retire(std::vector<std::unique_ptr<ProcessSet>>* retired);

  // Ranks. A local rank attached (again); it is not lost any more. Returns whether it takes the
  // place of a rank the job went on without (--on-loss continue, restore): a replacement, that
  // takes part again from the first name it submits itself (TensorTable). Where every rank of this
  // node was lost, the node stands in for every name (joined for good): the job takes it back
  // instead (node_back.cc), and the replacement's requests are refused until it has.
  bool Attached(uint32_t local_rank);
  // Local rank `local_rank` (global `rank`, process `pid`) left: `who_why` says who and why;
  // `clean`: it detached with syncd_shutdown; `attached_left`: how many of this node's ranks are
  // still attached. What needs it fails (and, unless it left cleanly between collectives, the job
  // ends on every node); a clean detach with nothing in flight waits for a rejoin instead.
  // Returns whether the job is over here (every local rank came and went).
  bool RankLeft(uint32_t local_rank, uint32_t rank, int32_t pid, const std::string& who_why, bool clean,
                size_t attached_left);
  // Fails what waits for ranks that detached cleanly and did not attach again in time (or, with
  // --on-loss continue, goes on without them).
  void ExpireDepartures(uint64_t now_ns, bool any_attached);
  const std::map<uint32_t, LostRank>& lost() const { return lost_; }

  // Lost nodes (lost_nodes.cc), --on-loss continue and restore: the job's membership (its
  // number, why it last changed, the global set's nodes). A rank's requests fail until it has
  // acknowledged the latest (the engine checks: NodePage::membership).
  const Membership& membership() const { return membership_; }

  // A daemon restarted under the job (restarted_node.cc), node 0 of the global set's part: the
  // tag slot the global set takes when node `node` comes back (Transport::Reconnect keeps what
  // arrives on it), then the node taken back (its ranks stood in for by its new daemon until ranks
  // attach in their place): the other nodes told where it is (`tell_others`), the global set made
  // afresh with it, the membership + 1. Returns where the job now stands, for the new daemon.
  uint32_t NextGlobalSlot() { return FreeSlot(/*except_set=*/0); }
  JobResume TakeRestartedNodeBack(const Membership::RestartedNode& n);
  // Whether the job ended with a failure (a loss under --on-loss fail, a stall shutdown, an abort
  // here or on another node): its global set can run nothing more.
  bool Broken() const {
    const auto it = sets_.find(0);
    return it != sets_.end() && it->second->Broken();
  }
  // Whether the global set runs here, so that the other nodes can be told (TellNodes).
  bool GlobalSetRuns() const {
    const auto it = sets_.find(0);
    return it != sets_.end() && it->second->CanTellNodes();
  }

  // The ranks of set `id` a request names (nullptr: not a set of this job).
  const std::vector<uint32_t>* SetRanksOf(int32_t id) const;
  // How many nodes set `id` spans here (0: this node holds none of its ranks).
  uint32_t NodesOf(int32_t id) const {
    const auto it = sets_.find(id);
    return it == sets_.end() ? 0 : it->second->place().nodes();
  }
  // Sends on the global set's control channel (JobTimeline): to node `node`, -1 every other.
  bool TellNodes(ControlMessage m, int32_t node);

  // The engine's loop: requests held here; whether the job is drained everywhere (`idle_here`:
  // the engine holds nothing else); when the sets next need a poll (0: at once; UINT64_MAX:
  // nothing waits) and whether data, not only a coordination cycle, waits on the network.
  size_t InFlight() const;
  size_t SlicedInFlight() const;  // of InFlight, the tensors of sliced runs (jobs side by side)
  bool Drained(bool idle_here);
  uint64_t NextPollNs(uint64_t now_ns, bool* data_waits) const;
  bool WaitsOnNetwork() const { return p2p_.WaitsOnNetwork(); }

  // Stalls (stalls.cc): every set's, and with `transfers` the sends and receives waiting as long,
  // oldest first. Once a second: logs those past --stall-warning-s (returns how many) and shuts
  // the job down when one passes --stall-shutdown-s; `here` says when this node's ranks last
  // called syncd.
  std::vector<StallSnapshot> Stalls(uint64_t now_ns, uint64_t min_age_ns, bool transfers = true) const;
  uint64_t CheckStalls(uint64_t now_ns, const std::vector<RankActivity>& here);

  // Health (health.cc): this node's report (built off the engine thread) into the health tree;
  // the other nodes' latest reports as this node sees them now; this machine's name; tensors
  // waiting here for some of this node's ranks.
  void SendHealth(const NodeHealth& mine);
  std::vector<NodeHealth> PeerHealth(uint64_t now_ns) const;
  // Whether another node's latest health report (a fresh one) shows a rank of its attached.
  bool PeersAttached(uint64_t now_ns) const;
  const std::string& host() const { return host_; }
  uint64_t PendingTensors() const;

  // Each set's snapshot with its requests by state (from `ledger`) and its transfers waiting
  // `stall_ns` or longer; every stall among them into `stalls`.
  void SnapshotSets(uint64_t now_ns, const RequestLedger& ledger, uint64_t stall_ns,
                    std::vector<ProcessSetSnapshot>* sets, std::vector<StallSnapshot>* stalls) const;

 private:
  // Every process set of the job, whether this node holds ranks of it or not: its ranks, the tag
  // slot its messages carry, and (a member spanning nodes) its view of the transport.
  struct SetInfo {
    std::vector<uint32_t> ranks;
    uint32_t slot = 0;
    std::unique_ptr<Transport> comm;
  };
  ProcessSet* SetOf(int32_t id);
  // A tag slot no live set uses, the least recently freed first (a removed set's late messages
  // then meet no new set for a long while); 0 when every slot is taken.
  uint32_t FreeSlot(int32_t except_set = -1);  // `except_set`: count its slot as free
  // An instant mark in the job's timeline (when one runs): a loss, a node gone, a rank back.
  void Mark(int32_t rank, const std::string& what);
  // Where a set of global ranks `ranks` (ascending) runs: its place (no transport yet) and its
  // nodes, in order.
  ProcessSetPlace PlaceOf(int32_t id, const std::vector<int64_t>& ranks, std::vector<uint32_t>* nodes) const;
  // --on-loss continue and restore: nodes the transport lost since the last look. The global set
  // is made afresh over the nodes left (its own tag slot; what the old one held fails here, as on
  // every other node left, with nobody told), process sets spanning a lost node end, and the
  // membership changes (ranks must acknowledge it before their requests run again).
  void LoseNodes();
  // The job's membership changes to `membership` (`what` says why): the global set as it stands ends
  // (what it holds fails, RANK_LOST, as on every other node) and goes.
  // `routine`: a node joining as planned (logged at info, not as a warning).
  void EndGlobalSet(uint32_t membership, const std::string& what, bool routine = false);
  // The global set made afresh on tag slot `slot` over the nodes not lost, the ranks the job goes
  // on without stood in for again.
  void MakeGlobalSet(uint32_t slot);

  // A node comes back into the global set (node_back.cc): a replacement attached on a node whose
  // every rank was lost. That node asks the global set's node 0 (kNodeBack, RequestNodeBack);
  // node 0 picks the membership and the new set's slot and tells every node (kNodeJoin); each
  // (node 0 too) ends the global set as it stands and makes it afresh with the node (TakeNodeBack).
  // Applied from Poll, once the sets are polled (the notices arrive inside them).
  void RequestNodeBack();
  bool ApplyNodeBack();  // whether it took a node back
  // The restarted daemon's part: the job started where `resume` says.
  void Resume(const JobResume& resume);
  // The other nodes' part: node 0's notices of a restarted daemon (Membership::restarts); once its
  // address is whole and the old daemon is seen lost here, reconnect and take the node back.
  // Returns whether it did.
  bool ApplyRestarts(uint64_t now_ns);
  // `joins`: the node's every slot was vacant since the job started (it joins, it is not back).
  void TakeNodeBack(uint32_t node, uint32_t membership, uint32_t slot, bool joins);
  // EndGlobalSet, then MakeGlobalSet on `slot` (node 0's choice, which every node continues from).
  void RemakeGlobalSet(uint32_t membership, uint32_t slot, const std::string& what, bool routine = false);
  // How long node 0 waits for its notices to leave before the old global set goes (its sends are
  // cancelled with it). The peers are alive: a 384-byte message leaves in microseconds.
  static constexpr uint64_t kNoticeFlushNs = 200'000'000;
  // Process set changes the global set agreed (ProcessSet::TakeSetChanges), applied in the
  // order agreed once the sets are polled: every node makes the same ones at the same point.
  void ApplySetChanges();
  Status AddSet(const std::vector<int64_t>& ranks);
  Status RemoveSet(int32_t id);
  // The global set's notices for the job (health reports, the membership's) handled, the
  // others kept for the engine (TakeNotices): after every call that may have received some.
  void RouteNotices();
  // Hands what point-to-point ended to the outcomes (it ends nothing itself): after every call into it.
  void CompleteTransfers();
  // --on-loss continue: the job goes on without local rank `local_rank` (global `rank`), lost
  // because `why`: transfers with it fail, the global set stands in for it (every other node's
  // collectives go on without it), and each process set holding it ends (they cannot).
  void ContinueWithout(uint32_t local_rank, uint32_t rank, const std::string& why);
  // ExpireDepartures under --on-loss continue or restore: ContinueWithout a rank that detached
  // cleanly and did not come back, as one that left (LostRank::departed), not one lost.
  void GoOnWithoutDeparted(uint32_t local_rank);
  // --vacant-ranks: the job starts without this node's vacant ranks, as it goes on without lost
  // ones (nothing logged, marked or counted as a loss).
  void StartWithoutVacantRanks();
  // Why new requests must fail now (every blocking loss, first loss first), or "".
  std::string BlockingLosses() const;
  // A stall in words, with how long each missing rank has not called syncd (`here`: this node's
  // ranks; other nodes' as their daemons' latest reports say).
  std::string DescribeStall(const StallSnapshot& s, uint64_t now_ns, const std::vector<RankActivity>& here) const;
  // The ranks a stall waits for that have left the job ("rank 2", "ranks 2,3"; "" if none): this
  // node's that departed and are past their rejoin grace, other nodes' that their daemons' latest
  // reports say are not attached.
  std::string DepartedRanks(const StallSnapshot& s, uint64_t now_ns) const;
  void StartHealth(uint64_t now_ns);
  void ReceiveHealth(uint32_t from, const ControlMessage& m);
  void DeliverHealth(uint32_t from, bool down, const std::string& text);
  // Bundles go inline in a control message when they fit, else a control message announces them
  // and they follow on kHealthTag (one in flight per peer: a stopped peer gets no pile).
  void SendHealthBundles(std::vector<HealthBundle> bundles);
  bool PollHealth();
  void CancelHealth();
  // By node: whether the transport lost it (for the health view; Membership says which the job
  // went on without).
  std::vector<bool> LostNodes() const;

  const Config& config_;
  const uint64_t id_;
  const uint32_t local_size_;
  Links links_;
  std::map<int32_t, SetInfo> set_info_;
  int32_t last_set_id_ = 0;
  uint32_t last_slot_ = 0;
  std::vector<ReadyTensor> set_changes_;
  std::vector<ControlNotice> notices_in_, notices_out_;  // RouteNotices's, TakeNotices's
  ProcessSetHooks set_hooks_;  // what every set runs with
  // The job's process sets this node holds ranks of, by id. Declared after set_info_: a set goes
  // before the transport view it runs on.
  std::map<int32_t, std::unique_ptr<ProcessSet>> sets_;
  PointToPoint p2p_;  // send and recv: outside the sets' coordination
  std::map<uint32_t, LostRank> lost_;  // local rank -> why it is gone
  Membership membership_;
  // The TOPO plan of the global set EndGlobalSet ended, for MakeGlobalSet to carry over.
  std::shared_ptr<const TopoPlan> carried_plan_;
  uint64_t loss_seq_ = 0;
  JobHealth health_;
  struct HealthTransfer {
    uint32_t peer = 0;
    bool down = false;
    std::shared_ptr<std::string> bytes;
    CommHandle handle = 0;
  };
  std::vector<HealthTransfer> health_out_, health_in_;
  std::string host_;  // this machine's name, for the health view
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_JOB_H_
