// Coordination of one job's daemons in `negotiate` mode: Horovod's cycle, the baseline that the
// paper's techniques are measured against.
//
// Every cycle (cycle_time after the previous one started):
//  1. One bit-vector allreduce: AND of "cached and ready here" bits, OR of invalidation bits, OR
//     of "someone has names the cache does not know".
//  2. Only if that flag is set: the uncached names go to the coordinator (node 0), which matches
//     them across nodes, checks that every node agrees on dtype/shape/op/root, assigns cache bits,
//     and broadcasts the responses.
//  3. Every node then hands the same list, in the same order, to its process set to run (cache
//     hits in bit order, then the coordinator's responses): TakeAgreed, and Executed when done.
//     Coordination only agrees; it never runs a collective or completes a request.
// Agreements are handed out one at a time, in cycle order, and overlap with the next cycle: a
// cycle ends once its agreement is taken, so cycle N+1 agrees while N's runs (as NCCL's proxy
// agrees on the next operation while the GPU runs the last), and N+2 starts once N has run. A
// cycle whose agreement changes what later cycles agree on (a TOPO plan's registration, a
// process set change) or runs on the GPUs (their job-wide order, GpuOrder) stays open until it
// has run: a fence.
// A failure anywhere (lost peer, dead local rank) aborts the job on every node: the node that
// sees it sends the reason to all others, and everything pending fails with it (TakeEnded).
//
// Threads: engine thread only. The cycle is a CommTask: nothing here blocks.
#ifndef SYNCD_DAEMON_COORD_NEGOTIATOR_H_
#define SYNCD_DAEMON_COORD_NEGOTIATOR_H_

#include <array>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "daemon/coord/agreed_work.h"
#include "daemon/coord/control_channel.h"
#include "daemon/coord/coordinator.h"
#include "daemon/coord/cycle_clock.h"
#include "daemon/coord/gpu_order.h"
#include "daemon/coord/job_join.h"
#include "daemon/coord/negotiation_stats.h"
#include "daemon/coord/pending_tensors.h"
#include "daemon/coord/response_cache.h"
#include "daemon/coord/wire.h"
#include "daemon/core/tensor_table.h"
#include "daemon/core/timeline.h"
#include "daemon/transport/comm_task.h"
#include "daemon/transport/counting_transport.h"
#include "proto/doorbell.h"

namespace syncd {

struct NegotiatorOptions {
  uint64_t cycle_ns = 1'000'000;
  // gs: every gs_period cycles the daemons agree on the minimum of their local sleeps
  // (cycle_ns - T_previous) and all sleep that. 0: no global sleep.
  uint32_t gs_period = 0;
  // false (Horovod): a cycle starts cycle_ns after the previous one started. true: also as soon as
  // a tensor became ready here since the last cycle started (each name gets one early try; a
  // name still waiting on other nodes waits for the timer).
  bool start_on_work = false;
  // topo: no timer. A cycle runs when this node has new names (it asks the other nodes to join
  // with one message each) or when another node asked. An idle job sends nothing at all; the
  // engine still looks for requests every cycle_ns.
  bool on_demand = false;
  // The job this negotiator coordinates (control messages about another job are ignored).
  uint64_t job = 0;
  uint32_t cache_capacity = 1024;
  // Stalls: a cached name that has been ready here this long goes to the coordinator again (its
  // cache entry is invalidated on every node), so that node 0 learns which nodes lack it, as
  // Horovod's stall inspector does. 0: never.
  uint64_t stall_ns = 0;
  // The global ranks of the set on each node, node by node (empty: one rank per node, numbered
  // as the nodes): whom the coordinator's agreement check and its messages name.
  std::vector<std::vector<uint32_t>> node_ranks;
  // topo with GPUs: each agreement also agrees where negotiated GPU collectives go among the
  // plan's (see gpu_order.h). nullptr: no plan GPU groups to order against.
  GpuOrder* gpu_order = nullptr;
  // The job start's GPU part (job_join.h): whether this node's GPU path needs rebuilding, and
  // where the fresh NCCL id arrives. nullptr: not this set's business (only the global set's).
  GpuRestart* gpu_restart = nullptr;
  // The job start's TOPO part (job_join.h): the plan this node holds, and the set's once joined.
  // nullptr: not this set's business (only the global set's).
  PlanCarry* plan_carry = nullptr;
  // Whether the set holds requests outside the negotiator (a collective waiting for another rank
  // of this node, TOPO tensors waiting for their group): asked as each cycle starts, draining or
  // not, since a draining node learns from the others' agreements (QuietSinceDrain).
  std::function<bool()> holds_work;
  // Cycles that agreed on tensors are recorded here as set `set`'s (nullptr: none).
  Timeline* timeline = nullptr;
  int32_t set = 0;
};


// A message of the job's control channel that is not coordination's: a partial round's
// (kPartialReport, kPartialRun) or the engine's (kHealth, kTimeline*, kClock*).
struct ControlNotice {
  uint32_t from = 0;
  ControlMessage message;
};

class Negotiator {
 public:
  Negotiator(Transport* transport, NegotiatorOptions options);
  ~Negotiator();

  // A tensor every local rank submitted. `local_error` set: the local ranks disagreed; the error
  // reaches every rank of the job once all nodes have the name.
  void Add(ReadyTensor t, Status local_error = Status::Ok());
  // Starts a cycle when one is due and drives the current one. Returns whether it did work. It
  // never waits: blocking (negotiate, gs) is the caller's rule (ProcessSet::Block).
  // `may_start` false: only drives the running cycle (a caller blocking in it).
  bool Poll(uint64_t now_ns, bool may_start = true);
  // The running cycle started with nothing pending here (nothing of this node's waits for it).
  bool cycle_started_idle() const { return clock_.started_idle(); }
  // The next agreement (agreed_work.h) for the caller to run, once the one taken before it has
  // run (Executed): agreements run one at a time, in cycle order. nullopt otherwise.
  std::optional<AgreedWork> TakeAgreed();
  // The outcome of the agreement taken last. An error aborts the job (every node is told); the
  // tensors whose requests the caller did not complete are the caller's to fail.
  void Executed(Status status);
  // An agreement's tensor list, run and emptied: its room holds the next agreement's.
  void Recycle(std::vector<ReadyTensor>&& spent) { handoff_.Recycle(std::move(spent)); }
  // Whether an agreement was taken and its outcome is not reported yet.
  bool executing() const { return handoff_.executing(); }
  // Whether an agreement waits to be taken.
  bool has_agreement() const { return handoff_.offered(); }
  // Requests the negotiator gave up (the job failed or a name was refused), each with its error:
  // the caller completes them. The negotiator completes nothing itself.
  std::vector<FailedTensor> TakeEnded() { return std::exchange(ended_, {}); }
  // Control messages for others (see ControlNotice), in arrival order.
  std::vector<ControlNotice> TakeNotices() { return std::exchange(notices_, {}); }
  bool has_output() const { return handoff_.offered() || !ended_.empty() || !notices_.empty(); }
  // Waits up to `timeout_ns` for network events of the job's transport; false if it cannot.
  bool WaitForEvent(uint64_t timeout_ns) { return t_->WaitForEvent(timeout_ns, -1); }
  // When the next cycle is due (for the engine's idle sleep); 0 while one is running.
  uint64_t next_cycle_ns() const {
    const uint64_t now = abi::MonotonicNs();
    if (!joined_) return now + kJoinPollNs;  // other nodes may not have started the job yet
    return clock_.NextNs(now, pending_.empty());
  }
  // Fails the whole job with `why`: tells every other node and fails everything pending here.
  void Abort(Status why);  // by value: callers pass statuses that Abort itself destroys (the cycle's)
  // As Abort, without telling the other nodes: for a failure every node sees by itself. `expected`:
  // the set goes at a point every node agreed (the job's membership changed; logged there), so
  // this logs nothing of its own.
  void Break(Status why, bool expected = false);
  // The daemon is stopping: fails what is pending here and tells the other nodes, so that they
  // end the job without reporting a lost node. Waits until the notices are sent or the deadline
  // passes; returns whether they were sent.
  // `why` becomes each pending tensor's error ("tensor 'x': <why>"); the other nodes report
  // "node N left the job (<peer_reason>)".
  bool Leave(uint64_t deadline_ns, const std::string& why, const std::string& peer_reason = "its daemon was stopped");
  bool broken() const { return broken_; }
  // Whether the job start handshake is done: messages sent before it may be discarded by a node
  // that has not started the job yet.
  bool joined() const { return joined_; }
  const Status& failure() const { return failure_; }
  size_t pending() const { return pending_.size(); }
  bool HasPending(const std::string& name) const { return pending_.Has(name); }
  bool cycle_running() const { return clock_.running(); }
  // Graceful drain, job-wide. Each cycle's agreement says whether any node holds work: names
  // pending here, what the set holds outside the negotiator (options' holds_work), and while
  // this node drains, `local_busy` (the engine holds work: requests not taken in yet too).
  // While draining, on-demand mode runs a cycle every cycle_ns so that QuietSinceDrain is known.
  void Drain(bool local_busy) { clock_.Drain(local_busy); }
  // Whether a cycle filled everywhere after the drain began found no node holding work, and
  // nothing came here since.
  bool QuietSinceDrain() const { return clock_.QuietSinceDrain(PendingWork()); }
  uint64_t cycle_seq() const { return clock_.seq(); }
  NegotiationStats stats() const {
    NegotiationStats s = stats_;
    s.coordination_messages = counting_.sent();
    s.coordination_bytes = counting_.sent_bytes();
    return s;
  }

  // Sends `m` on the control channel to `node`, or to every other node when `node` is -1.
  void Tell(int32_t node, ControlMessage m);
  // Waits until what was sent on the control channel has left (before the negotiator goes: its
  // sends are cancelled then), or the deadline passes; returns whether it has.
  bool FlushControl(uint64_t deadline_ns) { return control_.Flush(deadline_ns); }

  // Takes the pending names `pred` selects out of negotiation, on every node at the same point
  // of the cycle sequence (call it while running an agreed cycle): the coordinator forgets what was
  // announced of them. Each comes with the local ranks' disagreement, if any.
  std::vector<std::pair<ReadyTensor, Status>> Withdraw(const std::function<bool(const std::string&)>& pred);

  // Coordinator (node 0): names some nodes announced at least `min_age_ns` ago and others not
  // yet, with the nodes still missing. Any node, before every node has started the job: names
  // ready here that long, missing the nodes that have not started it. Oldest first.
  std::vector<Stall> Stalled(uint64_t now_ns, uint64_t min_age_ns) const;

 private:
  static constexpr uint64_t kJoinPollNs = 1'000'000;
  // Drives the job start handshake (job_join.h); once it is done, cycles may run.
  bool PollJoin();
  CommTask Cycle();
  CommTask Negotiate(uint64_t base);  // agreement and execution: the body of a cycle
  // The cycle's steps. FillAgreement: this node's part of the agreement vector (cache hits,
  // invalidations, flags) and the names it announces to the coordinator; whether a GPU name is
  // pending. ApplyAgreement: the agreed vector's evictions and the cached names to run, in bit
  // order (the same on every node). ExchangeUncached: the coordinator round. TakeAgreedNames: moves
  // the agreed names out of pending (failing those the coordinator refused); an error when the
  // nodes' TOPO plans differ.
  bool FillAgreement(uint64_t now_ns, std::vector<uint64_t>* agree, std::vector<NameRequest>* uncached);
  size_t ApplyAgreement(std::vector<uint64_t>& agree, std::vector<std::string>* run);
  CommTask ExchangeUncached(uint64_t base, std::vector<NameRequest> uncached, std::vector<NameResponse>* responses);
  Status TakeAgreedNames(std::span<const std::string> run, const std::vector<NameResponse>& responses,
                    std::vector<ReadyTensor>* ready);
  // Whether this node's tensor (`mine`: its ranks' rows and splits) is what the response cache
  // holds for its name (`cached`: every rank's, for a kind whose shapes vary by rank).
  bool CachedMatches(const TensorMeta& cached, const TensorMeta& mine) const;
  // This node's ranks all joined (the join waits here for the other nodes): they stand in for
  // the names other nodes run (JoinedRequest), as the coordinator agreed them.
  bool JoinedHere() const { return pending_.Has(abi::kJoinName); }
  // Whether a pending name waits for work: any but a join of stand-ins only (the joins of lost and
  // vacant ranks, made for them: they wait for the others' joins, nobody waits for them). A node
  // whose every rank was lost would otherwise keep every drain of the job open.
  bool PendingWork() const;
  // Whether this node's ranks, all joined, can stand in for a cached name (Collective::Joined: not
  // a root of theirs, not GPU memory, a collective kind).
  bool CanStandIn(const TensorMeta& meta) const;
  ReadyTensor StandIn(const std::string& name, const TensorMeta& meta) const;
  void TakeAndFail(const std::string& name, const Status& st);
  void EndJob(Status why, bool tell_peers, bool expected = false);  // Abort and Break
  bool CheckAbortMessages();
  void PeerLeft(uint32_t node, const std::string& reason);
  // Sends one control message to every peer not known to be lost.
  void SendControl(ControlMessage m) { Tell(-1, std::move(m)); }
  // on_demand: asks every other node to run cycle number `cycle`.
  void RequestCycle(uint64_t cycle);
  // Stops the current cycle; an agreement not taken yet fails with `why` (one taken is the
  // caller's to fail: it sees broken()).
  void CancelCycle(const Status& why);
  void Fail(std::vector<Request> requests, Status why) { ended_.push_back(FailedTensor{std::move(requests), std::move(why)}); }

  CountingTransport counting_;  // every coordination message the negotiator sends goes through it
  Transport* t_;
  const NegotiatorOptions options_;
  ResponseCache cache_;
  PendingTensors pending_;
  Coordinator coordinator_;  // node 0's part (every node knows the ranks of each)

  CommTask join_;
  bool joined_ = false;
  std::vector<bool> joined_nodes_;  // whose HELLO is in (job_join.h)
  CommTask cycle_;
  // The agreement vector (shared with its transfers) and the agreed cached names: one cycle at a
  // time, so their storage is reused cycle after cycle.
  std::shared_ptr<std::vector<uint64_t>> agree_buffer_;
  std::vector<std::string> run_names_;
  TensorMeta meta_scratch_;  // FillAgreement's, one pending name at a time
  AgreementHandoff handoff_;  // the agreement reached, taken, run (a fence: see the top of this file)
  std::vector<FailedTensor> ended_;      // see TakeEnded
  std::vector<ControlNotice> notices_;   // see TakeNotices
  CycleClock clock_;  // when cycles run, and the drain
  bool failed_everywhere_ = false;  // the running cycle's failure is every node's (see Poll)
  ControlChannel control_;  // the control channel (the destructor ends cycle_ and join_ first)
  NegotiationStats stats_;

  bool broken_ = false;
  Status failure_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_NEGOTIATOR_H_
