// A process set: the unit of coordination. Every request belongs to one (the global set, id 0,
// unless it says otherwise), and everything that matches, agrees, plans and runs requests is the
// set's own: its tensor table (names are per set), its negotiator and response cache (many
// nodes), its TOPO plan and runner, its fusion buffers, its GPU groups in flight, its stalls, and
// the communicator it runs on. A set lives for one job: the engine makes the global set afresh
// when a job starts.
//
// The pipeline, per Poll(): tensors every local rank submitted leave the table; they go to the
// TOPO runner (a plan tensor), the negotiator (many nodes) or straight to execution (one node).
// Coordination only agrees: the set takes what the negotiator and the TOPO runner agreed
// (coord/agreed_work.h), runs it kind by kind (collectives/), adds its requests to the engine's
// outcomes (core/outcomes.h) and reports back; it also ends what coordination gave up
// (Negotiator::TakeEnded, TopoRunner::FailAll). The set completes nothing and calls nothing up:
// the engine applies the outcomes once the call returns. In the blocking modes (negotiate, gs)
// the global set blocks the engine while a cycle is open (Block), as Horovod's background thread
// blocks in its collectives; the agreement a cycle reached runs while the next cycle agrees (see
// coord/negotiator.h).
//
// Engine thread only.
#ifndef SYNCD_DAEMON_ENGINE_PROCESS_SET_H_
#define SYNCD_DAEMON_ENGINE_PROCESS_SET_H_

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/base/config.h"
#include "daemon/collectives/collective.h"
#include "daemon/collectives/partial/runner.h"
#include "daemon/core/outcomes.h"
#include "daemon/core/residual_store.h"
#include "daemon/coord/gpu_order.h"
#include "daemon/coord/negotiator.h"
#include "daemon/coord/topo_runner.h"
#include "daemon/core/request_ledger.h"
#include "daemon/core/request_pool.h"
#include "daemon/core/tensor_table.h"
#include "daemon/engine/process_set_parts.h"
#include "daemon/exec/gpu_executor.h"
#include "daemon/exec/host_executor.h"
#include "daemon/obs/status_snapshot.h"
#include "daemon/plan/fusion.h"
#include "daemon/transport/host_buffer.h"
#include "daemon/transport/transport.h"

namespace syncd {

// What every set adds to the daemon's counters.
struct ExecutionCounters {
  // By abi::OpKind value: an increment per executed group, names only when the status is built.
  std::array<StatusSnapshot::KindCount, abi::kOpKindLast + 1> by_kind{};
  uint64_t fused_ops = 0, fused_tensors = 0;
  FusionHistogram fusion_sizes;
  // Health reports this daemon sent to the others (engine/health.cc): messages and their bytes.
  uint64_t health_messages = 0, health_bytes = 0;
  // By syncd_compression: allreduces whose inter-node hop ran compressed.
  std::array<StatusSnapshot::Compressed, SYNCD_COMPRESSION_COUNT> compressed{};
};

// What a set runs with: the engine's shared parts, none of them a call back up. What the set
// ends goes to `outcomes`; what the job must act on (set changes, other nodes' notices) it takes
// from the set after each call (TakeSetChanges, TakeNotices).
// How a job shares the engine with the other jobs it serves side by side (engine/tenant.h): a
// one-node host allreduce of more than `slice_bytes` runs `slice_bytes` at a time. It goes on
// slice after slice while no other job has work waiting; once one has, it runs `slices_per_poll`
// more (the job's weight) and lets the engine serve the others before its next poll.
// While the others wait only with large allreduces of their own (sliced too), a slice is
// kLargeSliceFactor times larger: nobody's latency is at stake, and fewer turns cost less (two
// jobs streaming 64 MiB together: 0.89-0.91 of one job alone with 32 KiB slices, 1.02 with these).
enum class OthersWait { kNone, kLarge, kSmall };
// Jobs side by side, a job of several nodes: its pipelined allreduce's reductions and copies back
// go this much at a time, with another job's work between two pieces while it waits (about 10 us
// each here, as a one-node slice).
inline constexpr uint64_t kSideBySidePieceBytes = uint64_t{32} << 10;
// ... and steps aside at most once this long (the others' turns cost it an engine pass each).
inline constexpr uint64_t kSideBySideQuantumNs = 25'000;
// A node service's job of several nodes: its pipelined allreduce's segment (a daemon of one job:
// 1 MiB). Each step of a segment (a send, which the kernel carries through to the other node
// within the call, and a reduction) holds the engine from the other jobs: 1 MiB segments held
// another job's 8-byte allreduce 2.5-3.8 ms at 10 Gbit/s, 128 KiB ones 63 us (bench/tenants.sh).
// Requests larger than this count as large work (OthersWait::kLarge).
inline constexpr uint64_t kNodeServiceSegmentBytes = uint64_t{128} << 10;
inline constexpr uint64_t kLargeSliceFactor = 16;
struct EngineShare {
  // Other jobs with ranks attached are served beside it: no set of it blocks the engine in a cycle (ProcessSet::Block
  // waits on its own job's network alone; another job's 8-byte allreduce waited behind it up to
  // 1 ms at a time, 3.8 ms p50 on two nodes while this one streamed 64 MiB).
  bool others = false;
  uint64_t slice_bytes = 0;  // 0: at once (the job is alone)
  uint32_t slices_per_poll = 1;
  // Whether another job has work waiting: none, only sliced runs, or anything else (its ranks
  // submitted, a collective some of its ranks are in).
  std::function<OthersWait()> others_waiting;
  // Whether another job with small work in flight has something for the engine now: its ranks
  // submitted, its requests wait here, or its network moved (its transport progressed). A
  // pipelined run steps aside for it (AcrossNodes::SideBySide); one that only waits on other
  // nodes costs the run nothing (stepping aside for it anyway slowed a 1 MiB step 1.4-1.7x).
  std::function<bool()> others_ready;
  // Whether its pipelined run may put a segment of `bytes` on the network now: jobs side by side
  // share the links by weight (LinkPacer); a run held back waits for its next turn.
  std::function<bool(uint64_t bytes)> may_post;
};

struct ProcessSetHooks {
  // Where every request the set ends goes, with its status (core/outcomes.h; never null): the
  // engine applies them once the call into the job returns. The set completes nothing itself.
  Outcomes* outcomes = nullptr;
  // The timeline recorder (never null; off unless a timeline runs).
  Timeline* timeline = nullptr;
  // Where completed requests go for their storage (nullptr: nowhere).
  RequestPool* pool = nullptr;
  // Where each request stands (core/request_ledger.h; nullptr: nowhere): the set says when its
  // requests are handed to coordination, agreed and started.
  RequestLedger* ledger = nullptr;
  // The error-feedback residuals of compressed allreduces (core/residual_store.h; nullptr: none).
  ResidualStore* residuals = nullptr;
  // How the job shares the engine with other jobs (nullptr, or slice_bytes 0: it is alone).
  const EngineShare* share = nullptr;
};

// Where a set runs and with what.
struct ProcessSetPlace {
  int32_t id = 0;
  uint64_t job = 0;
  // The set's ranks: global ranks, ascending (so node by node), and where each of its nodes'
  // ranks begin among them (one entry per node of the set, then the size). This node is
  // `node_rank` of the set's nodes, and holds the ranks with node-local ranks `local_ranks`.
  std::vector<uint32_t> ranks;
  std::vector<uint32_t> offsets;
  std::vector<uint32_t> local_ranks;
  uint32_t node_rank = 0;
  Transport* comm = nullptr;   // one participant per node of the set; nullptr: one node
  GpuExecutor* gpu = nullptr;  // this node's GPUs, or nullptr

  uint32_t nodes() const { return uint32_t(offsets.size() - 1); }
  uint32_t local_size() const { return uint32_t(local_ranks.size()); }
  // The global set of a job of `nodes` nodes with `local_size` ranks each.
  static ProcessSetPlace Global(uint64_t job, uint32_t local_size, uint32_t nodes, uint32_t node_rank,
                                Transport* comm, GpuExecutor* gpu);
};

class ProcessSet {
 public:
  // `carried_plan` (global set only): a global set made afresh (a membership change) starts with
  // the old set's registered plan, if its nodes agree on it (coord/job_join.h: nodes without one
  // get it from one that has it); it is installed before the set's first cycle on every node.
  ProcessSet(const Config& config, ProcessSetPlace place, ExecutionCounters* counters, ProcessSetHooks hooks,
             std::shared_ptr<const TopoPlan> carried_plan = nullptr);
  ~ProcessSet();
  ProcessSet(const ProcessSet&) = delete;
  ProcessSet& operator=(const ProcessSet&) = delete;

  int32_t id() const { return place_.id; }
  const ProcessSetPlace& place() const { return place_; }
  // The TOPO plan the job registered in this set (null: none), whether it runs it or not.
  const std::shared_ptr<const TopoPlan>& plan() const { return topo_.plan; }

  // Intake. Why a new request must fail now (the set's job failed, here or on another node),
  // or OK. Then Add: fails (keeping nothing) for a name the rank already has in flight.
  Status Refusal() const;
  Status Add(Request r);

  // The pipeline: matched tensors to the TOPO runner, the negotiator or execution; coordination
  // cycles; GPU and TOPO progress. Returns whether it did work.
  // `may_block` (negotiate and gs, global set): the engine may block in an open cycle, as
  // Horovod's background thread does, for up to kBlockSliceNs at a time; the job says no while a
  // node's return waits for the cycle to end.
  bool Poll(uint64_t now_ns, bool may_block = true);
  static constexpr uint64_t kBlockSliceNs = 1'000'000;
  // The process set changes (kAddProcessSet, kRemoveProcessSet; global set only) agreed in the
  // polls since the last call, in their order: the job applies them once its sets are polled,
  // and completes their requests.
  void TakeSetChanges(std::vector<ReadyTensor>* changes) {
    for (ReadyTensor& t : set_changes_) changes->push_back(std::move(t));
    set_changes_.clear();
  }
  // The other nodes' notices that are the job's or the engine's (global set only; the partial and
  // TOPO ones are the set's own), in arrival order, since the last call.
  void TakeNotices(std::vector<ControlNotice>* notices) {
    for (ControlNotice& n : notices_) notices->push_back(std::move(n));
    notices_.clear();
  }
  // When the set next needs a Poll if nothing arrives: 0 at once (work on the network or the
  // GPUs), UINT64_MAX when it waits for nothing.
  uint64_t NextPollNs(uint64_t now_ns) const;
  // Whether a coordination cycle is all the set waits for on the network (no TOPO group, GPU
  // work or partial round in flight): a wait for other nodes' timers or ranks, often long.
  bool WaitsOnlyOnCycle() const;

  // Ending work: every request the reach covers completes once, failed with `why` (named per
  // tensor). Returns how many tensors were waiting here for local ranks.
  //   kWaiting  what waits here for some local ranks (the job moved on; they will not come).
  //   kHeld     everything held here: waiting, TOPO groups, GPU work (the drain deadline). The
  //             other nodes learn it from Leave.
  //   kRank     a local rank is gone: what waits for it, TOPO groups; with `peers_why` set the
  //             job ends on every node with it (other nodes' ranks wait for the rank too).
  //   kJob      the set cannot go on: what waits here, and on every node (told `peers_why`, or
  //             `why`) everything of the set; new requests are refused.
  //   kRemoved  the set is removed, on every node at the same agreed point: everything it holds
  //             here, negotiated names included; nobody is told (every node does the same).
  enum class Reach { kWaiting, kHeld, kRank, kJob, kRemoved };
  size_t End(const Status& why, Reach reach, const Status& peers_why = Status::Ok());
  // Leave: the daemon stops, or the job ends; the other nodes learn it without a lost node.
  void Leave(uint64_t deadline_ns, const std::string& why, const std::string& peer_reason);
  // Sends `m` on the control channel to node `node` of the set, or to every other node with -1,
  // once every node has started the job and while it runs; returns whether it did.
  bool TellNodes(ControlMessage m, int32_t node = -1);
  bool CanTellNodes() const { return negotiator_ && negotiator_->joined() && !negotiator_->broken(); }
  // The job ended through this set: its coordination broke (here or on another node), or FailJob.
  bool Broken() const { return (negotiator_ && negotiator_->broken()) || !job_failure_.ok(); }
  // Waits (until the deadline) for what TellNodes sent to leave: the set is about to go.
  bool FlushNotices(uint64_t deadline_ns) { return !negotiator_ || negotiator_->FlushControl(deadline_ns); }
  // Whether every node has started the job (the start handshake, coord/job_join.h, is done): what
  // a node sends before may be dropped by a peer still in it. One node: always.
  bool Started() const;
  // Tensors waiting here for some of this node's ranks.
  size_t pending_tensors() const { return table_.pending(); }

  // One node: completes the GPU groups the GPUs are done with; whether any is left. (A set of an
  // ended job is kept for this alone until its GPU work is done.)
  bool PollGpu();
  bool gpu_busy() const { return !gpu_.ops.empty(); }

  // Whether a local rank's departure leaves work of the set unfinished.
  bool Abandons(uint32_t local_rank) const;
  // A local rank is gone and the job goes on without it (--on-loss continue): in the global set
  // it stands in for every name from now on as a joined rank does (TensorTable::MarkLost), adding
  // nothing; what it submitted before runs with its data. False for a set whose ranks cannot
  // join (a process set): the caller ends that set. True when the rank is not one of the set's.
  bool ContinueWithout(uint32_t local_rank);
  // A replacement attached in the place of local rank `local_rank` (global set): it takes part
  // again from the first name it submits itself (TensorTable::Replaced).
  void Replaced(uint32_t local_rank);
  // --on-loss restore: `stand_ins` ranks of the job were never there (--vacant-ranks): a group
  // standing in for that many fails nothing, only one with more (a rank lost since).
  void StartWithStandIns(int64_t stand_ins) {
    for (int64_t& s : loss_stand_ins_) s = stand_ins;
  }
  // A global set made afresh (a membership change failed what was in flight everywhere already):
  // the `local` ranks of this node stood in for from its start fail nothing more, only ranks
  // lost since, its first group included. Each node knows only its own: the groups sum them
  // with their stand-in counts (FailsForLoss).
  void StartAfreshWithStandIns(int64_t local) {
    StartWithStandIns(0);
    stand_in_baseline_ = local;
  }
  // Requests held outside the negotiator (waiting for local ranks, TOPO, GPU).
  size_t InFlight() const;
  size_t SlicedInFlight() const { return slices_.tensors(); }  // of InFlight, in sliced runs
  // Draining: whether the set is done everywhere (`idle_here`: the engine holds nothing and
  // has nothing to take in). Many nodes: a cycle that began after the drain found no node busy.
  bool Drained(bool idle_here);

  // Tensors some ranks submitted and others have not for `min_age_ns`: this node's ranks, and (on
  // node 0) whole nodes the coordinator still waits for; oldest first.
  std::vector<StallSnapshot> Stalls(uint64_t now_ns, uint64_t min_age_ns) const;
  ProcessSetSnapshot Snapshot(uint64_t now_ns) const;

 private:
  std::unique_ptr<Negotiator> MakeNegotiator();
  // A GPU path an earlier job aborted runs again for this job (the global set's): on one node the
  // communicator is rebuilt at once (PrepareGpu); on many, with the NCCL id node 0 sent in the job
  // start, once the negotiator has joined (RestartGpu). A failure is logged, and GPU collectives
  // then fail naming it.
  void PrepareGpu();
  void RestartGpu();
  void RebuildGpu(StatusOr<std::string> nccl_id);
  // Takes the negotiator's agreement, drives its execution, and reports the outcome back.
  bool RunAgreed();
  // Takes the TOPO runner's next groups and runs them, one at a time.
  bool RunTopo();
  // --coord topo on many nodes (topo_stand_in.cc): a node whose every rank joined (hvd.join, or
  // lost for good) has no tensors of its own to start the plan's groups with; it tells the others,
  // which tell it each group they run, and it stands in for it.
  void PollTopoJoin();
  void ReceiveTopoNotice(const ControlNotice& n);
  void TellTopoStandIns(uint64_t seq);
  void StandInForTopoGroup();
  // Stops `run` and fails each of its requests not completed yet with `why`, named per tensor.
  void FailRun(AgreedRun& run, const Status& why);
  // Fails the TOPO group running and every tensor held for a group.
  void FailTopo(const Status& why);
  // Completes what the negotiator gave up, routes its notices, and fails the agreement being run
  // once the job broke.
  void Collect();
  // negotiate and gs, global set: drives the open cycle, and what it agreed, to the end.
  bool Block();
  // Hands a tensor every local rank submitted to the TOPO runner, the negotiator or `local_ready`.
  // An error means the set must fail (the tensor's requests were failed already).
  Status Route(ReadyTensor t, std::vector<ReadyTensor>* local_ready);
  // A TOPO graph every rank registered, agreed at this point on every node: installs its `plan`
  // (under --coord topo) and completes the registrations.
  void RegisterPlan(ReadyTensor& registration, std::shared_ptr<const TopoPlan> plan);
  void InstallPlan();
  // What the start handshake of a global set made afresh agreed of the plan, once joined.
  void AdoptCarriedPlan();
  // End's parts.
  size_t FailWaiting(const Status& why);
  void FailJob(const Status& why);
  void FailHeld(const Status& why);
  void FailPartial(const Status& why);
  // Many nodes: partial requests held until the job started everywhere, then the runner's rounds.
  void PollPartial(bool* did);
  // Sends the partial runner's messages and completes what it finished.
  void CollectPartial();
  size_t PartialInFlight() const { return partial_.in_flight() + partial_early_.size(); }

  // Execution (process_set_execution.cc). Fuse: the fused groups of `ready`, by each kind's rules.
  void Fuse(const std::vector<ReadyTensor>& ready, std::vector<FusionGroup>* groups);
  // The streams of agreed work a set runs, each in the same order on every node: negotiated
  // cycles (one node: what every local rank submitted), and TOPO plan groups.
  enum Stream { kNegotiated = 0, kPlan = 1, kStreams = 2 };
  // One node: runs the ready tensors at once (GPU groups complete later, in PollGpu).
  void Execute(std::vector<ReadyTensor>& ready, Stream stream = kNegotiated);
  // A host allreduce group that runs a slice at a time (EngineShare): whether `g` is one, and
  // if so it is taken from `ready` into the set's sliced runs.
  bool Slice(std::vector<ReadyTensor>& ready, const FusionGroup& g, uint32_t id, uint64_t t0);
  // Runs the oldest runs' next slices (`all`: every slice left, as a set that ends does);
  // completes each run done. Returns whether it ran any.
  bool RunSlices(bool all = false);
  // One node, TOPO: runs a plan group at once (the task is done when it returns).
  CommTask ExecuteLocal(std::vector<ReadyTensor>* ready, uint64_t tag);
  // Many nodes: runs the tensors every node agreed on, group by group, in the same order
  // everywhere. `tag` is unique to this execution across the job. Completes each tensor's
  // requests as its group finishes and clears them (what is left when it fails is failed by
  // FailRun). `buffer`: the fusion buffer of this kind of execution (negotiated and TOPO groups
  // may be in flight at once). `gpu_position`: under --coord topo, where a negotiated cycle's GPU
  // groups go among the plan's GPU groups (AgreedWork); nullopt for a TOPO plan group.
  CommTask ExecuteAgreed(std::vector<ReadyTensor>* ready, uint64_t tag, HostBuffer* buffer,
                         std::optional<uint64_t> gpu_position, std::vector<FusionGroup>* groups, Stream stream);
  // --on-loss continue and restore, global set: whether group `g` (host memory) must count the
  // stand-ins of lost ranks before it runs (restore: every group; continue: an AVERAGE).
  bool CountsStandIns(const Request& first) const;
  // --on-loss restore: a group with more stand-ins (`stand_ins`: its members' most, job-wide)
  // than the group before it in its stream fails instead of running, on every node alike (the
  // count and the stream's order are the same everywhere): each survivor's call of it raises once
  // per loss, and hvd.elastic.run rolls back to the last commit. Completes the group's requests
  // when it fails.
  bool FailsForLoss(std::vector<ReadyTensor>& ready, const FusionGroup& g, int64_t stand_ins, Stream stream);
  // One GPU group of ExecuteAgreed: waits for its turn (--coord topo), enqueues it, waits for it.
  CommTask RunAgreedOnGpu(std::vector<ReadyTensor>* agreed, FusionGroup g, std::optional<uint64_t> gpu_position);
  // One node: enqueues GPU group `g`; its requests complete when the GPUs are done (PollGpu).
  void ExecuteGpu(std::vector<ReadyTensor>& ready, const FusionGroup& g);
  StatusOr<uint64_t> EnqueueGpu(std::vector<ReadyTensor>& ready, const FusionGroup& g);
  // `across`: the group ran across nodes (RunAcross), where a compressed allreduce casts.
  void CountExecuted(const std::vector<ReadyTensor>& ready, const FusionGroup& g, bool across = false);
  // The timeline: a group starts (its requests learn when and their group's number, returned);
  // a group ran from `t0` to now (`what`: kGroup, or kGpu from enqueue to done).
  uint32_t StartGroup(std::vector<ReadyTensor>& ready, const FusionGroup& g);
  void RecordGroup(const std::vector<ReadyTensor>& ready, const FusionGroup& g, uint64_t t0, uint32_t id,
                   TraceKind what = TraceKind::kGroup);
  // Before a group runs: a result block for each request whose kind places its result
  // (Collective::ResultPlace). A rank whose area is full gets none and fails in CompleteRan.
  void PlaceResults(std::vector<ReadyTensor>& ready, const FusionGroup& g);
  // After a group ran: completes each member's requests.
  void CompleteRan(std::vector<ReadyTensor>& ready, const FusionGroup& g);
  // `requests` end with `status` (taken: `requests` is left empty): to the engine's outcomes.
  void Finish(std::vector<Request>& requests, Status status) { hooks_.outcomes->Add(requests, std::move(status)); }
  void Finish(Request r, Status status) { hooks_.outcomes->Add(std::move(r), std::move(status)); }
  void Enter(const std::vector<Request>& requests, RequestState state, uint64_t now_ns) {
    if (hooks_.ledger != nullptr) hooks_.ledger->EnterAll(requests, state, now_ns);
  }
  // Completed requests, done with: to the pool for their storage; `requests` ends empty.
  // The emptied list goes back to the table for the next name's requests.
  void Recycle(std::vector<Request>& requests) {
    if (hooks_.pool != nullptr)
      for (Request& r : requests) hooks_.pool->Give(std::move(r));
    requests.clear();
    table_.GiveBack(std::move(requests));
    requests.clear();  // (moved from: empty already)
  }

  const Config& config_;
  const ProcessSetPlace place_;
  const uint32_t world_size_;
  ExecutionCounters* counters_;
  ProcessSetHooks hooks_;
  // What its pipelined runs across nodes step aside for (AcrossNodes::side_by_side): the engine's
  // other jobs, while it serves any.
  AcrossNodes::SideBySide side_by_side_;
  TensorTable table_;
  HostExecutor host_;
  PartialRunner partial_;  // partial allreduces: rounds of their own, never matched or negotiated
  std::vector<Request> partial_early_;  // partial requests in before the job's nodes all joined
  std::vector<ReadyTensor> set_changes_;  // see TakeSetChanges
  std::vector<ControlNotice> notices_;    // see TakeNotices
  uint32_t group_seq_ = 0;  // the set's fusion groups, numbered for the timeline
  SetGpu gpu_;              // GPU groups in flight, their job-wide order, the GPU path's restart
  std::unique_ptr<Negotiator> negotiator_;   // many nodes
  Status job_failure_;                       // one node: why FailJob was called
  Status deferred_failure_;                  // found inside an execution, or while blocked
  bool blocking_ = false;                    // negotiate and gs, global set: see Block
  uint64_t blocking_since_ns_ = 0;           // when Block first entered the open cycle (0: none)
  uint64_t blocked_ns_ = 0;                  // inside Block
  AgreedRun cycle_run_;                      // a negotiated cycle's agreement being run
  SetTopo topo_;                             // the plan, and --coord topo's runner and group running
  int64_t loss_stand_ins_[kStreams] = {};    // --on-loss restore: the last group's, see FailsForLoss
  int64_t stand_in_baseline_ = 0;            // StartAfreshWithStandIns's, this node's
  SetScratch scratch_;  // storage reused turn after turn
  SetSlices slices_;    // host allreduces run a slice at a time (jobs side by side)
  HostBuffer fusion_buffer_;  // negotiated groups' (TOPO groups have their own: SetTopo)
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_PROCESS_SET_H_
