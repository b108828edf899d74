// ProcessSet: intake, the pipeline's routing and coordination, ending work, observing. How
// agreed tensors run is in process_set_execution.cc.
#include "daemon/engine/process_set.h"

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

PartialPlace PartialPlaceOf(const ProcessSetPlace& place, std::function<void(int32_t, ControlMessage)> tell,
                            Timeline* timeline) {
  PartialPlace p;
  p.set_size = uint32_t(place.ranks.size());
  p.offsets = place.offsets;
  p.node = place.node_rank;
  p.job = place.job;
  p.comm = place.comm;
  p.tell = std::move(tell);
  p.timeline = timeline;
  p.set = place.id;
  return p;
}

}  // namespace

ProcessSet::ProcessSet(const Config& config, ProcessSetPlace place, ExecutionCounters* counters, ProcessSetHooks hooks)
    : config_(config),
      place_(std::move(place)),
      world_size_(uint32_t(place_.ranks.size())),
      counters_(counters),
      hooks_(std::move(hooks)),
      // Ranks join the global set (hvd.join) only.
      table_(place_.local_size(), CheckAgreement, place_.id == 0 ? JoinedRequest : nullptr),
      host_(world_size_),
      partial_(PartialPlaceOf(place_, [this](int32_t node, ControlMessage m) { negotiator_->Tell(node, std::move(m)); },
                              hooks_.timeline),
               [this](const std::vector<Request>& requests, const Status& st) { CompleteAll(requests, st); }) {
  if (place_.comm != nullptr) negotiator_ = MakeNegotiator();
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
    return partial_.Add(std::move(r));
  }
  return table_.Add(std::move(r));
}

ProcessSet::~ProcessSet() {
  negotiator_.reset();  // its cycle may run executions of this set: before anything they use
  topo_.reset();
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
  // Only the global set blocks the engine in its cycles (as Horovod's). Two blocking sets spanning
  // the same nodes would each wait in its own cycle for a node that waits in the other's; the
  // other sets' cycles are tested from the engine loop instead (as under nbcs).
  opts.blocking = place_.id == 0 && (config_.coord == abi::CoordMode::kNegotiate || config_.coord == abi::CoordMode::kGs);
  opts.on_demand = config_.coord == abi::CoordMode::kTopo;
  opts.gs_period = config_.coord == abi::CoordMode::kGs ? config_.gs_period : 0;
  if (config_.coord == abi::CoordMode::kTopo) opts.gpu_order = &gpu_order_;
  opts.while_blocked = hooks_.keep_blocking;
  opts.on_partial = [this](uint32_t from, const ControlMessage& m) { partial_.Receive(from, m); };
  if (place_.id == 0) opts.on_notice = hooks_.on_notice;
  opts.timeline = hooks_.timeline;
  opts.set = place_.id;
  opts.poll_while_blocked = [this] {
    bool did = false;
    PollPartial(&did);
  };
  return std::make_unique<Negotiator>(
      place_.comm, opts,
      [this](std::vector<ReadyTensor>* ready, uint64_t tag) {
        return ExecuteAgreed(ready, tag, &fusion_buffer_, negotiator_->agreed_gpu_position());
      },
      [this](const std::vector<Request>& requests, const Status& st) { CompleteAll(requests, st); });
}

bool ProcessSet::Started() const { return !negotiator_ || negotiator_->joined(); }

bool ProcessSet::TellNodes(ControlMessage m, int32_t node) {
  if (!negotiator_ || !negotiator_->joined() || negotiator_->broken()) return false;
  negotiator_->Tell(node, std::move(m));
  return true;
}

Status ProcessSet::Refusal() const {
  if (!job_failure_.ok()) return job_failure_;
  if (negotiator_ && negotiator_->broken()) return negotiator_->failure();
  return Status::Ok();
}

bool ProcessSet::Poll(uint64_t now_ns) {
  std::vector<ReadyTensor> ready;
  std::vector<FailedTensor> failed;
  table_.TakeCompleted(&ready, &failed);
  bool did = !ready.empty() || !failed.empty();
  std::vector<ReadyTensor> local_ready;
  for (FailedTensor& f : failed) {
    if (topo_ && topo_->Has(f.requests.front().name)) {
      // The plan is the job's agreement: ranks that break it stop the job on every node.
      CompleteAll(f.requests, f.error);
      FailJob(Status(f.error.code(), "the registered TOPO plan cannot run: " + f.error.message()));
    } else if (negotiator_) {
      // Other nodes must learn of a local disagreement too: it travels with the name.
      negotiator_->Add(ReadyTensor{std::move(f.requests)}, f.error);
    } else {
      CompleteAll(f.requests, f.error);
    }
  }
  for (ReadyTensor& t : ready)
    if (Status st = Route(std::move(t), &local_ready); !st.ok()) FailJob(st);
  if (negotiator_) did |= negotiator_->Poll(now_ns);
  if (!deferred_failure_.ok()) FailJob(std::exchange(deferred_failure_, Status::Ok()));
  if (negotiator_ && negotiator_->broken()) {
    const Status& why = negotiator_->failure();
    // However the job broke (here or on another node), tensors waiting for their group fail too,
    if (topo_ && topo_->in_flight() > 0) topo_->FailAll(why);
    // and so do tensors still waiting here for some local ranks: those ranks will be told too,
    if (table_.pending() > 0 || PartialInFlight() > 0) FailWaiting(Status(why.code(), "cannot run, " + why.message()));
    // and NCCL calls that wait for other nodes.
    if (place_.gpu && place_.gpu->in_flight() > 0) place_.gpu->Abort(why);
  }
  if (!local_ready.empty()) Execute(local_ready);
  PollPartial(&did);
  if (!deferred_failure_.ok()) FailJob(std::exchange(deferred_failure_, Status::Ok()));
  if (place_.gpu) did |= PollGpu();
  if (topo_) {
    Status error;
    did |= topo_->Poll(&error);
    if (!error.ok()) FailJob(error);
  }
  return did;
}

uint64_t ProcessSet::NextPollNs(uint64_t now_ns) const {
  uint64_t next = UINT64_MAX;
  if (negotiator_ && !negotiator_->broken()) {
    const uint64_t cycle = negotiator_->next_cycle_ns();  // 0: a cycle is in flight, keep polling
    next = cycle > now_ns ? cycle : 0;
  }
  if (topo_ && topo_->running()) next = 0;  // a TOPO group waits on the network: keep polling it
  if (!gpu_ops_.empty()) next = 0;          // GPU work completes without ringing the doorbell
  if (partial_.busy()) next = 0;            // partial rounds and their activation on the network
  // A round another node starts needs this node's accumulators at once (no rank here runs any
  // code for it): look at the network every kPartialPollNs while the job has partial operations.
  if (partial_.active()) next = std::min(next, now_ns + kPartialPollNs);
  return next;
}

bool ProcessSet::WaitsOnlyOnCycle() const {
  if ((topo_ && topo_->running()) || !gpu_ops_.empty() || partial_.busy() || partial_.active()) return false;
  return negotiator_ && !negotiator_->broken() && negotiator_->next_cycle_ns() == 0;
}

Status ProcessSet::Route(ReadyTensor t, std::vector<ReadyTensor>* local_ready) {
  if (topo_ && topo_->Has(t.first().name)) {
    if (negotiator_ && negotiator_->broken()) {
      const Status& why = negotiator_->failure();
      CompleteAll(t.requests, Status(why.code(), "tensor '" + t.first().name + "': cannot run, " + why.message()));
      return Status::Ok();
    }
    Status st = topo_->Add(&t);
    if (st.ok()) return st;
    CompleteAll(t.requests, st);
    return Status(st.code(), "the registered TOPO plan cannot run: " + st.message());
  }
  if (topo_) ++fallback_tensors_;
  if (negotiator_) negotiator_->Add(std::move(t));
  else local_ready->push_back(std::move(t));
  return Status::Ok();
}

void ProcessSet::RegisterPlan(ReadyTensor& registration) {
  const std::shared_ptr<const TopoPlan>& plan = registration.first().plan;
  char hex[32];
  snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)plan->hash);
  Status result(SYNCD_OK, std::string("plan ") + hex);
  if (plan_ && plan_->hash != plan->hash) {
    char old[32];
    snprintf(old, sizeof(old), "%016llx", (unsigned long long)plan_->hash);
    result = Status(SYNCD_ERR_INVALID, std::string("a different TOPO plan (") + old +
                                           ") is already registered for this job; one plan per job");
  } else if (!plan_) {
    plan_ = plan;
    spdlog::info("TOPO plan {} registered: {} tensors in {} groups{}", hex, plan->tensors.size(), plan->groups(),
                 config_.coord == abi::CoordMode::kTopo ? "" : std::string(" (not used: --coord is ") + CoordName(config_.coord) + ")");
    if (config_.coord == abi::CoordMode::kTopo) InstallPlan();
  }
  CompleteAll(registration.requests, result);
  registration.requests.clear();
}

void ProcessSet::InstallPlan() {
  auto execute = [this](std::vector<ReadyTensor>* group, uint64_t tag) {
    if (hooks_.timeline->on()) {  // a marker: the plan's group issued (its execution follows as a group)
      TraceEvent e;
      e.kind = TraceKind::kPlanGroup;
      e.t0 = e.t1 = abi::MonotonicNs();
      e.set = place_.id;
      e.group = topo_->next_group();
      hooks_.timeline->Record(e);
    }
    return negotiator_ ? ExecuteAgreed(group, tag, &topo_fusion_buffer_, std::nullopt) : ExecuteLocal(group, tag);
  };
  topo_ = std::make_unique<TopoRunner>(plan_, execute, [this](const std::vector<Request>& rs, const Status& st) {
    CompleteAll(rs, st);
  });
  if (!negotiator_) return;
  // Plan tensors already waiting for negotiation now wait for their group instead. Every node
  // does this at the same point of the cycle sequence, so none negotiates them further.
  for (auto& [t, local_error] : negotiator_->Withdraw([this](const std::string& n) { return topo_->Has(n); })) {
    // Runs inside a negotiation cycle: the job fails once the cycle has returned.
    Status st = local_error;
    if (!st.ok()) CompleteAll(t.requests, st);
    else st = Route(std::move(t), nullptr);
    if (!st.ok() && deferred_failure_.ok())
      deferred_failure_ = Status(st.code(), "the registered TOPO plan cannot run: " + st.message());
  }
}

size_t ProcessSet::FailWaiting(const Status& why) {
  std::vector<FailedTensor> failed;
  table_.FailAll(why, &failed);
  for (const FailedTensor& f : failed) CompleteAll(f.requests, f.error);
  const size_t partial = PartialInFlight();
  FailPartial(why);
  return failed.size() + partial;
}

void ProcessSet::PollPartial(bool* did) {
  if (!negotiator_ || negotiator_->broken() || !negotiator_->joined()) return;
  for (Request& r : std::exchange(partial_early_, {})) {
    Request copy = r;  // Add leaves a refused request to us
    if (Status st = partial_.Add(std::move(r)); !st.ok()) CompleteAll({copy}, st);
  }
  // May run inside a blocking negotiation cycle: the job fails once the cycle has returned.
  if (Status st = partial_.Poll(did); !st.ok() && deferred_failure_.ok()) deferred_failure_ = st;
}

void ProcessSet::FailPartial(const Status& why) {
  for (const Request& r : std::exchange(partial_early_, {}))
    CompleteAll({r}, Status(why.code(), "tensor '" + r.name + "': " + why.message()));
  partial_.FailAll(why);
}

void ProcessSet::FailJob(const Status& why) {
  if (negotiator_) {
    negotiator_->Abort(why);  // tells the other nodes; fails everything it holds
    if (topo_) topo_->FailAll(negotiator_->failure());
    return;
  }
  if (job_failure_.ok()) {
    job_failure_ = why;
    spdlog::error("job failed: {}", why.message());
  }
  if (topo_) topo_->FailAll(why);
}

size_t ProcessSet::End(const Status& why, Reach reach, const Status& peers_why) {
  switch (reach) {
    case Reach::kWaiting:
      return FailWaiting(why);
    case Reach::kHeld: {
      const size_t waiting = table_.pending() + PartialInFlight();
      FailHeld(why);
      return waiting;
    }
    case Reach::kRank: {
      const bool topo_in_flight = topo_ && topo_->in_flight() > 0;
      const size_t waiting = FailWaiting(why);
      if (topo_in_flight) topo_->FailAll(why);
      if (negotiator_ && !peers_why.ok()) negotiator_->Abort(peers_why);
      return waiting;
    }
    case Reach::kRemoved: {
      const size_t waiting = table_.pending() + PartialInFlight();
      FailHeld(why);
      if (negotiator_ && negotiator_->pending() > 0) negotiator_->Break(why);  // else nothing to fail
      return waiting;
    }
    case Reach::kJob: {
      const size_t waiting = FailWaiting(why);
      FailJob(peers_why.ok() ? why : peers_why);  // many nodes: tells the others, which fail what they hold
      return waiting;
    }
  }
  return 0;
}

void ProcessSet::FailHeld(const Status& why) {
  std::vector<FailedTensor> failed;
  table_.FailAll(why, &failed);
  for (FailedTensor& f : failed)
    CompleteAll(f.requests, Status(why.code(), "tensor '" + f.requests.front().name + "': " + why.message()));
  if (topo_) topo_->FailAll(why);
  FailPartial(why);
  if (place_.gpu && place_.gpu->in_flight() > 0) {
    place_.gpu->Abort(why);
    PollGpu();
  }
  // Negotiated tensors fail when the daemon leaves the job (Leave).
}

void ProcessSet::Leave(uint64_t deadline_ns, const std::string& why, const std::string& peer_reason) {
  if (negotiator_) negotiator_->Leave(deadline_ns, why, peer_reason);
}

bool ProcessSet::Abandons(uint32_t local_rank) const {
  const auto at = std::find(place_.local_ranks.begin(), place_.local_ranks.end(), local_rank);
  if (at == place_.local_ranks.end()) return false;  // not one of the set's
  return table_.HasRequestsOf(uint32_t(at - place_.local_ranks.begin())) || (topo_ && topo_->in_flight() > 0) ||
         (negotiator_ && negotiator_->pending() > 0) || PartialInFlight() > 0;
}

size_t ProcessSet::InFlight() const {
  size_t n = table_.pending() + gpu_ops_.size() + PartialInFlight();
  if (topo_) n += topo_->in_flight();
  return n;
}

bool ProcessSet::Drained(bool idle_here) {
  if (!negotiator_ || negotiator_->broken()) return idle_here;
  // Many nodes: leave only once a cycle that began after the drain found no node holding work,
  // so that a collective other nodes' ranks are still submitting is not cut off.
  negotiator_->SetDrain(true, !idle_here);
  if (drain_first_cycle_ == 0) drain_first_cycle_ = negotiator_->cycle_seq() + 1;
  const uint64_t quiet = negotiator_->quiet_cycle();
  return idle_here && negotiator_->pending() == 0 && !negotiator_->cycle_running() &&
         quiet == negotiator_->cycle_seq() && quiet >= drain_first_cycle_;
}

std::vector<StallSnapshot> ProcessSet::Stalls(uint64_t now_ns, uint64_t min_age_ns) const {
  std::vector<StallSnapshot> out;
  const uint32_t first = place_.offsets[place_.node_rank], local = place_.local_size();
  for (const TensorTable::Stall& st : table_.Stalled(now_ns, min_age_ns)) {
    StallSnapshot ss{st.name, double(st.waiting_ns) / 1e9, {}, {}, "", 0};
    for (uint32_t lr = 0; lr < local; ++lr) {
      const bool missing = std::count(st.missing_local_ranks.begin(), st.missing_local_ranks.end(), lr) > 0;
      (missing ? ss.missing_ranks : ss.submitted_ranks).push_back(place_.ranks[first + lr]);
    }
    out.push_back(std::move(ss));
  }
  if (topo_)
    if (std::optional<TopoRunner::Wait> w = topo_->Waiting(now_ns, min_age_ns))
      // The plan's group waits for tensors no local rank has submitted (all ranks must).
      for (const std::string& name : w->missing) {
        StallSnapshot ss{name + " (TOPO group " + std::to_string(w->group) + ")", double(w->waiting_ns) / 1e9, {}, {},
                         "", 0};
        for (uint32_t lr = 0; lr < local; ++lr) ss.missing_ranks.push_back(place_.ranks[first + lr]);
        out.push_back(std::move(ss));
      }
  if (negotiator_)
    for (const Negotiator::NodeStall& st : negotiator_->Stalled(now_ns, min_age_ns)) {
      StallSnapshot ss{st.name, double(st.waiting_ns) / 1e9, {}, {}, "", 0};
      for (uint32_t node = 0; node < place_.nodes(); ++node) {
        const bool missing = std::count(st.missing_nodes.begin(), st.missing_nodes.end(), node) > 0;
        for (uint32_t r = place_.offsets[node]; r < place_.offsets[node + 1]; ++r)
          (missing ? ss.missing_ranks : ss.submitted_ranks).push_back(place_.ranks[r]);
      }
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
  if (plan_) {
    s.has_plan = true;
    s.plan_hash = plan_->hash;
    s.plan_tensors = plan_->tensors.size();
    s.plan_groups = plan_->groups();
    s.plan_gpu_tensors = GpuTensors(*plan_);
    s.plan_in_use = topo_ != nullptr;
    if (topo_) {
      s.topo = topo_->stats();
      s.topo_next_group = topo_->next_group();
    }
    s.fallback_tensors = fallback_tensors_;
  }
  if (negotiator_) {
    s.coordinated = true;
    s.negotiation = negotiator_->stats();
    s.pending_names = negotiator_->pending();
    if (negotiator_->broken()) s.failure = negotiator_->failure().message();
  }
  return s;
}

}  // namespace syncd
