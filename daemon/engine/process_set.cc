// ProcessSet: intake, the pipeline's routing and coordination, ending work, observing. How
// agreed tensors run is in process_set_execution.cc.
#include "daemon/engine/process_set.h"

#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/collectives/agreement.h"
#include "proto/status_names.h"

namespace syncd {

ProcessSetPlace ProcessSetPlace::Global(uint64_t job, uint32_t local_size, uint32_t nodes, uint32_t node_rank,
                                        Transport* comm, GpuExecutor* gpu) {
  ProcessSetPlace p;
  p.job = job;
  for (uint32_t r = 0; r < local_size * nodes; ++r) p.ranks.push_back(r);
  for (uint32_t n = 0; n <= nodes; ++n) p.offsets.push_back(n * local_size);
  for (uint32_t l = 0; l < local_size; ++l) p.local_ranks.push_back(l);
  p.node_rank = node_rank;
  p.comm = comm;
  p.gpu = gpu;
  return p;
}

namespace {

constexpr uint64_t kPartialPollNs = 50'000;

PartialPlace PartialPlaceOf(const ProcessSetPlace& place, Timeline* timeline) {
  PartialPlace p;
  p.set_size = uint32_t(place.ranks.size());
  p.offsets = place.offsets;
  p.node = place.node_rank;
  p.job = place.job;
  p.comm = place.comm;
  p.timeline = timeline;
  p.set = place.id;
  return p;
}

}  // namespace

ProcessSet::ProcessSet(const Config& config, ProcessSetPlace place, ExecutionCounters* counters, ProcessSetHooks hooks,
                       std::shared_ptr<const TopoPlan> carried_plan)
    : config_(config),
      place_(std::move(place)),
      world_size_(uint32_t(place_.ranks.size())),
      counters_(counters),
      hooks_(std::move(hooks)),
      side_by_side_{kSideBySidePieceBytes,
                    [share = hooks_.share, last = uint64_t{0}]() mutable {
                      // At most once a quantum: the others' turns cost this run a pass each.
                      const uint64_t now = abi::MonotonicNs();
                      if (share == nullptr || !share->others_ready || now - last < kSideBySideQuantumNs || !share->others_ready())
                        return false;
                      last = now;
                      return true;
                    },
                    [share = hooks_.share](uint64_t bytes) {
                      return share == nullptr || !share->may_post || share->may_post(bytes);
                    }},
      // Ranks join the global set (hvd.join) only.
      table_(place_.local_size(), CheckAgreement, place_.id == 0 ? JoinedRequest : nullptr),
      host_(world_size_),
      partial_(PartialPlaceOf(place_, hooks_.timeline)) {
  if (place_.id == 0 && place_.gpu != nullptr) PrepareGpu();
  if (place_.id == 0 && place_.comm != nullptr) {
    topo_.carry.plan = std::move(carried_plan);
    topo_.carry_pending = true;
  } else if (carried_plan) {  // one node: nobody to agree with
    topo_.plan = std::move(carried_plan);
    if (config_.coord == abi::CoordMode::kTopo) InstallPlan();
  }
  if (place_.comm != nullptr) negotiator_ = MakeNegotiator();
  // Only the global set blocks the engine in its cycles (as Horovod's). Two blocking sets spanning
  // the same nodes would each wait in its own cycle for a node that waits in the other's; the
  // other sets' cycles are tested from the engine loop instead (as under nbcs).
  blocking_ = negotiator_ && place_.id == 0 &&
              (config_.coord == abi::CoordMode::kNegotiate || config_.coord == abi::CoordMode::kGs);
}

Status ProcessSet::Add(Request r) {
  // The table and the kinds know a request by its place among this node's ranks of the set.
  const auto at = std::find(place_.local_ranks.begin(), place_.local_ranks.end(), r.local_rank);
  if (at == place_.local_ranks.end())
    return InvalidArgument("tensor '" + r.name + "': rank " + std::to_string(r.rank) + " is not in process set " +
                           std::to_string(place_.id));
  r.local_rank = uint32_t(at - place_.local_ranks.begin());
  r.set_rank = place_.offsets[place_.node_rank] + r.local_rank;
  if (const Collective* kind = FindCollective(r.kind); kind != nullptr && kind->partial()) {
    // Rounds go on the network: not before every node has started the job (Negotiator::joined).
    if (negotiator_ && !negotiator_->joined()) {
      partial_early_.push_back(std::move(r));
      return Status::Ok();
    }
    if (hooks_.ledger != nullptr) hooks_.ledger->Enter(r, RequestState::kNegotiating, abi::MonotonicNs());
    Status st = partial_.Add(std::move(r));
    CollectPartial();  // one node: the round may have run at once
    return st;
  }
  return table_.Add(std::move(r));
}

ProcessSet::~ProcessSet() {
  // Executions first: they use the set's buffers and the negotiator's transport.
  cycle_run_.task = CommTask();
  topo_.run.task = CommTask();
  negotiator_.reset();
  topo_.runner.reset();
}

std::unique_ptr<Negotiator> ProcessSet::MakeNegotiator() {
  NegotiatorOptions opts;
  opts.job = place_.job;
  opts.cycle_ns = uint64_t(config_.cycle_time_us) * 1000;
  opts.start_on_work = config_.cycle_start == CycleStart::kWork;
  opts.cache_capacity = config_.cache_capacity;
  opts.stall_ns = uint64_t(config_.stall_shutdown_s ? std::min(config_.stall_warning_s, config_.stall_shutdown_s)
                                                    : config_.stall_warning_s) * 1'000'000'000ull;
  for (uint32_t n = 0; n < place_.nodes(); ++n)
    opts.node_ranks.emplace_back(place_.ranks.begin() + place_.offsets[n], place_.ranks.begin() + place_.offsets[n + 1]);
  opts.on_demand = config_.coord == abi::CoordMode::kTopo;
  opts.gs_period = config_.coord == abi::CoordMode::kGs ? config_.gs_period : 0;
  if (config_.coord == abi::CoordMode::kTopo) opts.gpu_order = &gpu_.order;
  opts.timeline = hooks_.timeline;
  opts.set = place_.id;
  opts.holds_work = [this] { return InFlight() > 0; };
  if (gpu_.restart_pending) opts.gpu_restart = &gpu_.restart;
  if (topo_.carry_pending) opts.plan_carry = &topo_.carry;
  return std::make_unique<Negotiator>(place_.comm, std::move(opts));
}

bool ProcessSet::Started() const { return !negotiator_ || negotiator_->joined(); }

bool ProcessSet::TellNodes(ControlMessage m, int32_t node) {
  if (!CanTellNodes()) return false;
  negotiator_->Tell(node, std::move(m));
  return true;
}

Status ProcessSet::Refusal() const {
  if (!job_failure_.ok()) return job_failure_;
  if (negotiator_ && negotiator_->broken()) return negotiator_->failure();
  return Status::Ok();
}

bool ProcessSet::Poll(uint64_t now_ns, bool may_block) {
  // The set's scratch vectors, taken for this turn (a nested turn would find them empty) and
  // given back, emptied, at its end: no heap allocation per collective for them.
  std::vector<ReadyTensor> ready = std::move(scratch_.ready);
  std::vector<FailedTensor> failed = std::move(scratch_.failed);
  std::vector<ReadyTensor> local_ready = std::move(scratch_.local_ready);
  table_.TakeCompleted(&ready, &failed);
  bool did = !ready.empty() || !failed.empty();
  for (FailedTensor& f : failed) {
    if (topo_.runner && topo_.runner->Has(f.requests.front().name)) {
      // The plan is the job's agreement: ranks that break it stop the job on every node.
      Status job(f.error.code(), "the registered TOPO plan cannot run: " + f.error.message());
      Finish(f.requests, f.error);
      FailJob(job);
    } else if (negotiator_) {
      // Other nodes must learn of a local disagreement too: it travels with the name.
      Enter(f.requests, RequestState::kNegotiating, now_ns);
      negotiator_->Add(ReadyTensor{std::move(f.requests)}, f.error);
    } else {
      Finish(f.requests, f.error);
    }
  }
  for (ReadyTensor& t : ready)
    if (Status st = Route(std::move(t), &local_ready); !st.ok()) FailJob(st);
  if (negotiator_) {
    did |= negotiator_->Poll(now_ns);
    // Before anything of the job can run on the GPUs (agreements need every node's messages).
    if (gpu_.restart_pending && negotiator_->joined()) RestartGpu();
    if (topo_.carry_pending && negotiator_->joined()) AdoptCarriedPlan();
    did |= RunAgreed();
    // Blocking modes: the engine takes nothing new while the global set's cycle is open (the
    // job's alone: with others beside it the engine goes on serving them).
    const bool others = hooks_.share != nullptr && hooks_.share->others;
    if (blocking_ && may_block && !others && negotiator_->cycle_running()) did |= Block();
    Collect();
  }
  if (!deferred_failure_.ok()) FailJob(std::exchange(deferred_failure_, Status::Ok()));
  if (negotiator_ && negotiator_->broken()) {
    const Status& why = negotiator_->failure();
    // However the job broke (here or on another node), tensors waiting for their group fail too,
    if (topo_.runner && (topo_.runner->in_flight() > 0 || topo_.run.active)) FailTopo(why);
    // and so do tensors still waiting here for some local ranks: those ranks will be told too,
    if (table_.pending() > 0 || PartialInFlight() > 0) FailWaiting(Status(why.code(), "cannot run, " + why.message()));
    // and NCCL calls that wait for other nodes.
    if (place_.gpu && place_.gpu->in_flight() > 0) place_.gpu->Abort(why);
  }
  if (!local_ready.empty()) Execute(local_ready);
  did |= RunSlices();
  PollPartial(&did);
  if (!deferred_failure_.ok()) FailJob(std::exchange(deferred_failure_, Status::Ok()));
  if (place_.gpu) did |= PollGpu();
  if (topo_.runner) {
    if (negotiator_) PollTopoJoin();
    did |= RunTopo();
  }
  for (ReadyTensor& t : local_ready) Recycle(t.requests);  // run and completed (Execute)
  ready.clear();
  failed.clear();
  local_ready.clear();
  scratch_.ready = std::move(ready);
  scratch_.failed = std::move(failed);
  scratch_.local_ready = std::move(local_ready);
  return did;
}

bool ProcessSet::RunAgreed() {
  bool did = false;
  for (;;) {
    if (!cycle_run_.active) {
      std::optional<AgreedWork> work = negotiator_->TakeAgreed();
      if (!work) return did;
      cycle_run_.work = std::move(*work);
      cycle_run_.active = true;
      const uint64_t now = abi::MonotonicNs();
      for (const ReadyTensor& t : cycle_run_.work.tensors) Enter(t.requests, RequestState::kAgreed, now);
      cycle_run_.task = ExecuteAgreed(&cycle_run_.work.tensors, cycle_run_.work.tag, &fusion_buffer_,
                                      cycle_run_.work.gpu_position, &cycle_run_.groups, kNegotiated);
      did = true;
    }
    if (!cycle_run_.task.Poll()) return did;
    const Status st = cycle_run_.task.status();
    if (!st.ok()) FailRun(cycle_run_, st);  // the negotiator aborts the job with it
    cycle_run_.active = false;
    cycle_run_.task = CommTask();
    negotiator_->Recycle(std::move(cycle_run_.work.tensors));
    cycle_run_.work.tensors.clear();  // (moved from: empty already)
    negotiator_->Executed(st);
    // A fence's cycle ends now, not at the next poll; the next cycle's agreement may be waiting
    // (agreed while this one ran): it runs at once.
    negotiator_->Poll(abi::MonotonicNs(), /*may_start=*/false);
    did = true;
    if (negotiator_->broken()) return did;
  }
}

bool ProcessSet::RunTopo() {
  bool did = false;
  for (;;) {
    if (!topo_.run.active) {
      StandInForTopoGroup();
      std::optional<AgreedWork> group = topo_.runner->Next();
      if (!group) return did;
      TellTopoStandIns(topo_.runner->seq() - 1);
      if (hooks_.timeline->on()) {  // a marker: the plan's group issued (its execution follows as a group)
        TraceEvent e;
        e.kind = TraceKind::kPlanGroup;
        e.t0 = e.t1 = abi::MonotonicNs();
        e.set = place_.id;
        e.group = topo_.runner->next_group();
        hooks_.timeline->Record(e);
      }
      topo_.run.work = std::move(*group);
      topo_.run.active = true;
      topo_.run.task = negotiator_ ? ExecuteAgreed(&topo_.run.work.tensors, topo_.run.work.tag, &topo_.fusion_buffer,
                                                   std::nullopt, &topo_.run.groups, kPlan)
                                   : ExecuteLocal(&topo_.run.work.tensors, topo_.run.work.tag);
      did = true;
    }
    if (!topo_.run.task.Poll()) return did;
    did = true;
    const Status st = topo_.run.task.status();
    topo_.runner->Done(st.ok());
    if (!st.ok()) {
      FailTopo(st);
      FailJob(st);
      return did;
    }
    topo_.run.active = false;
    topo_.run.task = CommTask();
    topo_.run.work.tensors.clear();
  }
}

void ProcessSet::FailRun(AgreedRun& run, const Status& why) {
  run.task = CommTask();  // cancels its network and GPU waits
  run.active = false;
  for (ReadyTensor& t : run.work.tensors)
    if (!t.requests.empty()) {
      Status failed(why.code(), "tensor '" + t.first().name + "': " + why.message());
      Finish(t.requests, std::move(failed));
    }
  run.work.tensors.clear();
}

void ProcessSet::FailTopo(const Status& why) {
  if (topo_.run.active) {
    topo_.runner->Done(false);
    FailRun(topo_.run, why);
  }
  std::vector<FailedTensor> ended;
  topo_.runner->FailAll(why, &ended);
  for (FailedTensor& f : ended) Finish(f.requests, f.error);
}

void ProcessSet::Collect() {
  for (FailedTensor& f : negotiator_->TakeEnded()) Finish(f.requests, f.error);
  for (ControlNotice& n : negotiator_->TakeNotices()) {
    const auto k = n.message.kind;
    if (k == ControlMessage::Kind::kPartialReport || k == ControlMessage::Kind::kPartialRun) partial_.Receive(n.from, n.message);
    else if (k == ControlMessage::Kind::kTopoJoined || k == ControlMessage::Kind::kTopoRun) ReceiveTopoNotice(n);
    else if (place_.id == 0) notices_.push_back(std::move(n));
  }
  // An agreement this node was running when the job broke: its tensors fail as the job's.
  if (negotiator_->broken() && cycle_run_.active) FailRun(cycle_run_, negotiator_->failure());
}

bool ProcessSet::Block() {
  // Like a blocking MPI collective: wait on the network and nothing else until the cycle is over
  // (its agreement taken, which waits for the agreement before it to run; a fence's run too), the
  // runs going on meanwhile. Abort messages still count, or a
  // node that gave up on the job would leave this one waiting for ever, and so do partial rounds
  // (they run outside cycles). Spin for 20 us, or --spin-us if shorter (most cycles end within
  // it; an idle cycle not at all: nothing here waits for it), then sleep on the transport's event
  // descriptor between polls:
  // a spinning engine would take the core from the ranks and daemons that share it (3 daemons on
  // 2 cores: 8 ms per 8-byte allreduce instead of 0.1 ms), and idle cycles of a quiet job would
  // burn a core each (60 % per daemon at 2 nodes). Transports that cannot sleep yield the core
  // between polls instead (as MPI does when oversubscribed).
  const uint64_t spin_before_sleep_ns = std::min<uint64_t>(20'000, uint64_t(config_.spin_us) * 1000);
  //
  // The engine's loop gets the thread back whenever requests ended or a notice came (it sends
  // the completions out, the job acts on the notice) and at least every kBlockSliceNs (its
  // heartbeat, a client attaching or dying, a command, the stall check, the daemon stopping);
  // its next Poll blocks again while the cycle is open. What ranks submit meanwhile waits for the
  // next cycle, as it does in Horovod's queue.
  const uint64_t start = abi::MonotonicNs();
  if (blocking_since_ns_ == 0) blocking_since_ns_ = start;
  bool did = false;
  const size_t outcomes = hooks_.outcomes->count(), notices = notices_.size();
  while (negotiator_->cycle_running() && !negotiator_->broken()) {
    did |= negotiator_->Poll(abi::MonotonicNs(), /*may_start=*/false);
    did |= RunAgreed();
    Collect();
    PollPartial(&did);
    if (!negotiator_->cycle_running() || hooks_.outcomes->count() > outcomes || notices_.size() > notices) break;
    const uint64_t now = abi::MonotonicNs();
    if (now - start > kBlockSliceNs) break;
    if ((negotiator_->cycle_started_idle() || now - blocking_since_ns_ > spin_before_sleep_ns) &&
        !negotiator_->WaitForEvent(kBlockSliceNs - (now - start)))
      sched_yield();
  }
  if (!negotiator_->cycle_running() || negotiator_->broken()) blocking_since_ns_ = 0;
  blocked_ns_ += abi::MonotonicNs() - start;
  return did;
}

uint64_t ProcessSet::NextPollNs(uint64_t now_ns) const {
  uint64_t next = UINT64_MAX;
  if (negotiator_ && !negotiator_->broken()) {
    const uint64_t cycle = negotiator_->next_cycle_ns();  // 0: a cycle is in flight, keep polling
    next = cycle > now_ns ? cycle : 0;
  }
  if (topo_.run.active) next = 0;  // a TOPO group waits on the network: keep polling it
  if (cycle_run_.active) next = 0;  // an agreement runs (its cycle may have ended)
  if (!gpu_.ops.empty()) next = 0;          // GPU work completes without ringing the doorbell
  if (partial_.busy()) next = 0;            // partial rounds and their activation on the network
  // A round another node starts needs this node's accumulators at once (no rank here runs any
  // code for it): look at the network every kPartialPollNs while the job has partial operations.
  if (partial_.active()) next = std::min(next, now_ns + kPartialPollNs);
  return next;
}

bool ProcessSet::WaitsOnlyOnCycle() const {
  if (topo_.run.active || !gpu_.ops.empty() || partial_.busy() || partial_.active()) return false;
  return negotiator_ && !negotiator_->broken() && (negotiator_->next_cycle_ns() == 0 || cycle_run_.active);
}

Status ProcessSet::Route(ReadyTensor t, std::vector<ReadyTensor>* local_ready) {
  if (topo_.runner && topo_.runner->Has(t.first().name)) {
    if (negotiator_ && negotiator_->broken()) {
      const Status& why = negotiator_->failure();
      Status failed(why.code(), "tensor '" + t.first().name + "': cannot run, " + why.message());
      Finish(t.requests, std::move(failed));
      return Status::Ok();
    }
    Enter(t.requests, RequestState::kAgreed, abi::MonotonicNs());  // the plan is the agreement
    Status st = topo_.runner->Add(&t);
    if (st.ok()) return st;
    Finish(t.requests, st);
    return Status(st.code(), "the registered TOPO plan cannot run: " + st.message());
  }
  if (topo_.runner) ++topo_.fallback_tensors;
  if (negotiator_) {
    Enter(t.requests, RequestState::kNegotiating, abi::MonotonicNs());
    negotiator_->Add(std::move(t));
  } else {
    local_ready->push_back(std::move(t));
  }
  return Status::Ok();
}

void ProcessSet::RegisterPlan(ReadyTensor& registration, std::shared_ptr<const TopoPlan> plan) {
  if (!plan) {  // the coordinator checked that the nodes holding one agree: cannot happen
    Finish(registration.requests, Status(SYNCD_ERR_INTERNAL, "TOPO plan registration: no node has the plan"));
    return;
  }
  char hex[32];
  snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)plan->hash);
  Status result(SYNCD_OK, std::string("plan ") + hex);
  if (topo_.plan && topo_.plan->hash != plan->hash) {
    char old[32];
    snprintf(old, sizeof(old), "%016llx", (unsigned long long)topo_.plan->hash);
    result = Status(SYNCD_ERR_INVALID, std::string("a different TOPO plan (") + old +
                                           ") is already registered for this job; one plan per job");
  } else if (!topo_.plan) {
    topo_.plan = plan;
    spdlog::info("TOPO plan {} registered: {} tensors in {} groups{}", hex, plan->tensors.size(), plan->groups(),
                 config_.coord == abi::CoordMode::kTopo ? "" : std::string(" (not used: --coord is ") + CoordName(config_.coord) + ")");
    if (config_.coord == abi::CoordMode::kTopo) InstallPlan();
  }
  Finish(registration.requests, std::move(result));
}

void ProcessSet::InstallPlan() {
  topo_.runner = std::make_unique<TopoRunner>(topo_.plan);
  if (!negotiator_) return;
  // Plan tensors already waiting for negotiation now wait for their group instead. Every node
  // does this at the same point of the cycle sequence, so none negotiates them further.
  for (auto& [t, local_error] : negotiator_->Withdraw([this](const std::string& n) { return topo_.runner->Has(n); })) {
    // Runs inside an agreed cycle's execution: the job fails once that has returned.
    Status st = local_error;
    if (!st.ok()) Finish(t.requests, st);
    else st = Route(std::move(t), nullptr);
    if (!st.ok() && deferred_failure_.ok())
      deferred_failure_ = Status(st.code(), "the registered TOPO plan cannot run: " + st.message());
  }
}

void ProcessSet::AdoptCarriedPlan() {
  topo_.carry_pending = false;
  if (!topo_.carry.error.ok()) spdlog::warn("job {}: {}", place_.job, topo_.carry.error.message());
  if (!topo_.carry.plan || negotiator_->broken()) return;
  topo_.plan = std::move(topo_.carry.plan);
  spdlog::info("job {}: the global set made afresh goes on with TOPO {}", place_.job, DescribePlan(PlanShape(*topo_.plan)));
  if (config_.coord == abi::CoordMode::kTopo) InstallPlan();
}

size_t ProcessSet::FailWaiting(const Status& why) {
  std::vector<FailedTensor> failed;
  table_.FailAll(why, &failed);
  for (FailedTensor& f : failed) Finish(f.requests, f.error);
  const size_t partial = PartialInFlight();
  FailPartial(why);
  return failed.size() + partial;
}

void ProcessSet::PollPartial(bool* did) {
  if (!negotiator_ || negotiator_->broken() || !negotiator_->joined()) return;
  for (Request& r : std::exchange(partial_early_, {})) {
    Request copy = r;  // Add leaves a refused request to us
    if (hooks_.ledger != nullptr) hooks_.ledger->Enter(r, RequestState::kNegotiating, abi::MonotonicNs());
    if (Status st = partial_.Add(std::move(r)); !st.ok()) Finish(std::move(copy), std::move(st));
  }
  // May run while the engine blocks in a cycle: the job fails once it has returned.
  if (Status st = partial_.Poll(did); !st.ok() && deferred_failure_.ok()) deferred_failure_ = st;
  CollectPartial();
}

void ProcessSet::CollectPartial() {
  for (PartialMessage& m : partial_.TakeMessages())
    if (negotiator_) negotiator_->Tell(m.node, std::move(m.message));
  for (PartialCompletion& c : partial_.TakeCompleted()) Finish(c.requests, c.status);
}

size_t ProcessSet::InFlight() const {
  size_t n = table_.pending() + gpu_.ops.size() + PartialInFlight() + topo_.run.work.tensors.size() + slices_.tensors();
  if (topo_.runner) n += topo_.runner->in_flight();
  return n;
}

bool ProcessSet::Drained(bool idle_here) {
  if (!negotiator_ || negotiator_->broken()) return idle_here;
  // Many nodes: leave only once a cycle every node filled after the drain began found no node
  // holding work, so that a collective other nodes' ranks are still submitting is not cut off.
  negotiator_->Drain(!idle_here);
  return idle_here && !cycle_run_.active && negotiator_->QuietSinceDrain();
}

std::vector<StallSnapshot> ProcessSet::Stalls(uint64_t now_ns, uint64_t min_age_ns) const {
  std::vector<StallSnapshot> out;
  const uint32_t first = place_.offsets[place_.node_rank], local = place_.local_size();
  for (const Stall& st : table_.Stalled(now_ns, min_age_ns)) {
    StallSnapshot ss{st.name, double(st.waiting_ns) / 1e9, {}, {}, "", 0};
    for (uint32_t lr = 0; lr < local; ++lr)
      (st.Misses(lr) ? ss.missing_ranks : ss.submitted_ranks).push_back(place_.ranks[first + lr]);
    out.push_back(std::move(ss));
  }
  if (topo_.runner)
    if (std::optional<TopoRunner::Wait> w = topo_.runner->Waiting(now_ns, min_age_ns))
      // The plan's group waits for tensors no local rank has submitted (all ranks must).
      for (const std::string& name : w->missing) {
        StallSnapshot ss{name + " (TOPO group " + std::to_string(w->group) + ")", double(w->waiting_ns) / 1e9, {}, {},
                         "", 0};
        for (uint32_t lr = 0; lr < local; ++lr) ss.missing_ranks.push_back(place_.ranks[first + lr]);
        out.push_back(std::move(ss));
      }
  if (negotiator_)
    for (const Stall& st : negotiator_->Stalled(now_ns, min_age_ns)) {
      StallSnapshot ss{st.name, double(st.waiting_ns) / 1e9, {}, {}, "", 0};
      for (uint32_t node = 0; node < place_.nodes(); ++node)
        for (uint32_t r = place_.offsets[node]; r < place_.offsets[node + 1]; ++r)
          (st.Misses(node) ? ss.missing_ranks : ss.submitted_ranks).push_back(place_.ranks[r]);
      out.push_back(std::move(ss));
    }
  for (const PartialRunner::Stall& st : partial_.Stalled(now_ns, min_age_ns)) {
    StallSnapshot ss{st.name, double(st.waiting_ns) / 1e9, {}, {}, "", 0};
    for (uint32_t r : st.awaited) ss.missing_ranks.push_back(place_.ranks[r]);
    for (uint32_t r : st.waiting) ss.submitted_ranks.push_back(place_.ranks[r]);
    out.push_back(std::move(ss));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.waiting_s > b.waiting_s; });
  return out;
}

ProcessSetSnapshot ProcessSet::Snapshot(uint64_t now_ns) const {
  ProcessSetSnapshot s;
  s.id = place_.id;
  s.size = world_size_;
  s.ranks = place_.ranks;
  s.nodes = place_.nodes();
  s.pending_tensors = table_.pending();
  s.partial_ops = partial_.Snapshot();
  s.stalls = Stalls(now_ns, uint64_t(config_.stall_warning_s) * 1'000'000'000ull);
  if (s.stalls.size() > 32) s.stalls.resize(32);
  if (topo_.plan) {
    s.has_plan = true;
    s.plan_hash = topo_.plan->hash;
    s.plan_tensors = topo_.plan->tensors.size();
    s.plan_groups = topo_.plan->groups();
    s.plan_gpu_tensors = GpuTensors(*topo_.plan);
    s.plan_in_use = topo_.runner != nullptr;
    if (topo_.runner) {
      s.topo = topo_.runner->stats();
      s.topo_next_group = topo_.runner->next_group();
    }
    s.fallback_tensors = topo_.fallback_tensors;
  }
  if (negotiator_) {
    s.coordinated = true;
    s.negotiation = negotiator_->stats();
    s.negotiation.blocked_ns_total = blocked_ns_;
    s.pending_names = negotiator_->pending();
    if (negotiator_->broken()) s.failure = negotiator_->failure().message();
  }
  return s;
}

}  // namespace syncd
