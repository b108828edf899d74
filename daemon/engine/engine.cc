#include "daemon/engine/engine.h"

#include <sched.h>
#include <sys/resource.h>
#include <time.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "daemon/plan/fusion.h"
#include "daemon/engine/engine_timing.h"
#include "daemon/engine/submission.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

constexpr uint64_t kSnapshotPeriodNs = 20'000'000;
constexpr uint64_t kHeartbeatPeriodNs = 1'000'000;
constexpr uint64_t kIdleSleepNs = 50'000'000;  // bounded so the heartbeat stays fresh
using engine_timing::kLeaveNoticeNs;
using engine_timing::kStallCheckPeriodNs;

}  // namespace

Engine::Engine(const Config& config, const NodePage* node_page, uint32_t local_size,
               std::function<void(uint32_t)> kick_client, std::unique_ptr<Transport> transport)
    : config_(config),
      node_page_(node_page),
      local_size_(local_size),
      world_size_(local_size * config.nodes),
      kick_client_(std::move(kick_client)),
      table_(local_size, CheckAgreement),
      executor_(local_size * config.nodes),
      transport_(std::move(transport)) {
  start_ns_ = abi::MonotonicNs();
  PublishSnapshot();
}

bool Engine::Post(EngineEvent&& event) {
  if (!inbox_.Push(std::move(event))) return false;
  node_page_->Wake();
  return true;
}

void Engine::Stop() {
  stop_.store(true, std::memory_order_release);
  node_page_->Wake();
}

void Engine::Drain(uint64_t deadline_ns, const std::string& why) {
  {
    std::lock_guard lock(drain_mu_);
    if (drain_why_.empty()) drain_why_ = why;
  }
  deadline_ns = std::max<uint64_t>(deadline_ns, 1);
  uint64_t current = drain_deadline_ns_.load(std::memory_order_acquire);
  while ((current == 0 || deadline_ns < current) &&
         !drain_deadline_ns_.compare_exchange_weak(current, deadline_ns, std::memory_order_acq_rel)) {
  }
  node_page_->Wake();
}

size_t Engine::InFlight() const {
  size_t n = table_.pending() + gpu_ops_.size();
  if (topo_) n += topo_->in_flight();
  return n;
}

bool Engine::Drained() {
  const bool idle_here = InFlight() == 0 && !HasWork();
  if (!negotiator_ || negotiator_->broken()) return idle_here;
  // Many nodes: leave only once a cycle that began after the drain found no node holding work,
  // so that a collective other nodes' ranks are still submitting is not cut off.
  negotiator_->SetDrain(true, !idle_here);
  if (drain_first_cycle_ == 0) drain_first_cycle_ = negotiator_->cycle_seq() + 1;
  const uint64_t quiet = negotiator_->quiet_cycle();
  return idle_here && negotiator_->pending() == 0 && !negotiator_->cycle_running() &&
         quiet == negotiator_->cycle_seq() && quiet >= drain_first_cycle_;
}

void Engine::FailInFlight(const Status& why) {
  std::vector<FailedTensor> failed;
  table_.FailAll(why, &failed);
  for (FailedTensor& f : failed)
    CompleteAll(f.requests, Status(why.code(), "tensor '" + f.requests.front().name + "': " + why.message()));
  if (topo_) topo_->FailAll(why);
  if (gpu_ && gpu_->in_flight() > 0) {
    gpu_->Abort(why);
    PollGpu();
  }
  // Negotiated tensors fail in Run() when the daemon leaves the job (Negotiator::Leave).
  FlushClients();
}

bool Engine::HasWork() {
  if (!inbox_.Empty()) return true;
  for (auto& [id, c] : clients_)
    if (c.info->segment.HasSubmission()) return true;
  return false;
}

void Engine::Run() {
  node_page_->SetState(abi::DaemonState::kRunning);
  const uint64_t spin_ns = uint64_t(config_.spin_us) * 1000;
  uint64_t last_work = abi::MonotonicNs(), last_snapshot = 0, last_beat = 0;
  while (!stop_.load(std::memory_order_acquire)) {
    const uint64_t t0 = abi::MonotonicNs();
    const bool did = Poll();
    const uint64_t t1 = abi::MonotonicNs();
    if (did) {
      busy_ns_ += t1 - t0;
      last_work = t1;
    }
    if (t1 - last_beat > kHeartbeatPeriodNs) {
      node_page_->Heartbeat();
      last_beat = t1;
    }
    if (t1 - last_stall_check_ns_ > kStallCheckPeriodNs) {
      CheckStalls(t1);
      ExpireDepartures(t1);
    }
    if (t1 - last_snapshot > kSnapshotPeriodNs ||
        snapshot_requested_.load(std::memory_order_relaxed) != snapshot_published_.load(std::memory_order_relaxed)) {
      PublishSnapshot();
      last_snapshot = t1;
    }
    uint64_t sleep_ns = kIdleSleepNs;
    if (negotiator_ && !negotiator_->broken()) {
      const uint64_t next = negotiator_->next_cycle_ns();  // 0: a cycle is in flight, keep polling
      sleep_ns = next > t1 ? std::min(sleep_ns, next - t1) : 0;
    }
    if (topo_ && topo_->running()) sleep_ns = 0;  // a TOPO group waits on the network: keep polling it
    if (gpu_ && gpu_->in_flight() > 0) sleep_ns = 0;  // GPU work completes without ringing the doorbell
    if (!did && t1 - last_work > spin_ns && sleep_ns > 0) {
      if (abi::SleepUnlessWork(&node_page_->page()->engine_doorbell, sleep_ns, [this] {
            return HasWork() || stop_.load(std::memory_order_relaxed) ||
                   snapshot_requested_.load(std::memory_order_relaxed) !=
                       snapshot_published_.load(std::memory_order_relaxed);
          }))
        ++wakeups_;
      node_page_->Heartbeat();
      last_work = abi::MonotonicNs();
    } else if (!did && sleep_ns == 0) {
      // A cycle waits on the network: give the core to whoever shares it (ranks, other daemons).
      sched_yield();
    } else if (!did) {
      __builtin_ia32_pause();
    }
    if (const uint64_t deadline = drain_deadline_ns_.load(std::memory_order_acquire); deadline != 0) {
      if (Drained()) break;
      if (abi::MonotonicNs() >= deadline) {
        drain_result_.deadline_passed = true;
        std::lock_guard lock(drain_mu_);
        drain_leave_why_ = drain_why_;
        break;
      }
    }
  }
  const bool draining = drain_deadline_ns_.load(std::memory_order_acquire) != 0;
  if (draining && drain_result_.deadline_passed) FailInFlight(Status(SYNCD_ERR_DAEMON_LOST, drain_leave_why_));
  // Tell the other nodes this one is leaving, so that a job that ends normally (every daemon
  // stopped) is not reported as a lost node.
  if (negotiator_) {
    negotiator_->Leave(abi::MonotonicNs() + kLeaveNoticeNs,
                       drain_leave_why_.empty() ? "the daemon is shutting down" : drain_leave_why_);
    FlushClients();
  }
  PublishSnapshot();
  finished_.store(true, std::memory_order_release);
}

bool Engine::Poll() {
  bool did = DrainEvents();
  std::vector<uint32_t> broken;
  for (auto& [id, c] : clients_)
    if (!DrainSubmissions(c, &did)) broken.push_back(id);
  for (uint32_t id : broken) {
    Disconnect(id, "broke the shared-memory protocol (corrupt ring indices)");
    kick_client_(id);
    did = true;
  }
  std::vector<ReadyTensor> ready;
  std::vector<FailedTensor> failed;
  table_.TakeCompleted(&ready, &failed);
  did |= !ready.empty() || !failed.empty();
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
  if (negotiator_) did |= negotiator_->Poll(abi::MonotonicNs());
  if (!deferred_failure_.ok()) FailJob(std::exchange(deferred_failure_, Status::Ok()));
  // However the job broke (here or on another node), tensors waiting for their group fail too.
  if (topo_ && negotiator_ && negotiator_->broken() && topo_->in_flight() > 0) topo_->FailAll(negotiator_->failure());
  // And so do tensors still waiting here for some local ranks: those ranks will be told too.
  if (negotiator_ && negotiator_->broken() && table_.pending() > 0) {
    std::vector<FailedTensor> failed;
    table_.FailAll(Status(negotiator_->failure().code(), "cannot run, " + negotiator_->failure().message()), &failed);
    for (FailedTensor& f : failed) CompleteAll(f.requests, f.error);
  }
  // However the job broke, NCCL calls that wait for other nodes must end too.
  if (gpu_ && gpu_->in_flight() > 0 && negotiator_ && negotiator_->broken()) gpu_->Abort(negotiator_->failure());
  if (!local_ready.empty()) Execute(local_ready);
  if (gpu_) did |= PollGpu();
  if (topo_) {
    Status error;
    did |= topo_->Poll(&error);
    if (!error.ok()) FailJob(error);
  }
  FlushClients();
  return did;
}

Status Engine::Route(ReadyTensor t, std::vector<ReadyTensor>* local_ready) {
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

void Engine::FailJob(const Status& why) {
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

void Engine::RegisterPlan(ReadyTensor& registration) {
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
    if (config_.coord == abi::CoordMode::kTopo) {
      auto execute = [this](std::vector<ReadyTensor>* group, uint64_t tag) {
        return negotiator_ ? ExecuteAgreed(group, tag, &topo_fusion_buffer_, std::nullopt) : ExecuteLocal(group, tag);
      };
      topo_ = std::make_unique<TopoRunner>(plan_, execute, [this](const std::vector<Request>& rs, const Status& st) {
        CompleteAll(rs, st);
      });
      // Plan tensors already waiting for negotiation now wait for their group instead. Every
      // node does this at the same point of the cycle sequence, so none negotiates them further.
      if (negotiator_)
        for (auto& [t, local_error] : negotiator_->Withdraw([this](const std::string& n) { return topo_->Has(n); })) {
          // Runs inside a negotiation cycle: the job fails once the cycle has returned.
          Status st = local_error;
          if (!st.ok()) CompleteAll(t.requests, st);
          else st = Route(std::move(t), nullptr);
          if (!st.ok() && deferred_failure_.ok())
            deferred_failure_ = Status(st.code(), "the registered TOPO plan cannot run: " + st.message());
        }
    }
  }
  CompleteAll(registration.requests, result);
  registration.requests.clear();
}

CommTask Engine::ExecuteLocal(std::vector<ReadyTensor>* ready, uint64_t) {
  Execute(*ready);
  for (ReadyTensor& t : *ready) t.requests.clear();
  co_return Status::Ok();
}

bool Engine::DrainSubmissions(ClientState& c, bool* did) {
  ClientSegment& seg = c.info->segment;
  for (;;) {
    bool corrupt = false;
    std::optional<abi::SubmitEntry> e = seg.PopSubmission(&corrupt);
    if (corrupt) return false;
    if (!e) return true;
    *did = true;
    std::optional<Request> r = Validate(c, *e);
    if (!r) continue;  // already completed with an error
    if (!job_failure_.ok()) {
      Complete(*r, Status(job_failure_.code(), "tensor '" + r->name + "': cannot run, " + job_failure_.message()));
      continue;
    }
    if (negotiator_ && negotiator_->broken()) {
      Complete(*r, Status(negotiator_->failure().code(),
                          "tensor '" + r->name + "': cannot run, " + negotiator_->failure().message()));
      continue;
    }
    if (!lost_ranks_.empty()) {
      if (std::string losses = BlockingLosses(); !losses.empty()) {
        Complete(*r, Status(SYNCD_ERR_RANK_LOST, "tensor '" + r->name + "': cannot run, " + losses));
        continue;
      }
    }
    Request copy_for_error = *r;
    Status st = table_.Add(std::move(*r));
    if (!st.ok()) Complete(copy_for_error, st);
  }
}

std::optional<Request> Engine::Validate(ClientState& c, const abi::SubmitEntry& e) {
  const Submitter who{c.info->client_id, c.info->rank, c.info->local_rank, &c.info->segment, world_size_,
                      config_.fusion_threshold};
  std::optional<abi::GpuDescriptor> gpu;
  StatusOr<Request> r = ParseSubmission(e, who, &gpu);
  Status error = r.status();
  if (r.ok() && gpu) {  // a GPU tensor: the executor opens the client's allocation
    const std::string what = "tensor '" + r->name + "' from rank " + std::to_string(r->rank);
    if (!gpu_) {
      error = InvalidArgument(what + " is a GPU tensor, but this syncd runs no GPU collectives: " + gpu_unavailable_);
    } else if (StatusOr<GpuMapping> m = gpu_->Map(c.info->client_id, *gpu, r->bytes); !m.ok()) {
      error = Status(m.status().code(), what + " (GPU tensor): " + m.status().message());
    } else {
      r->data = r->bytes > 0 ? m->data : nullptr;
      r->gpu_device = m->device;
      r->gpu_event = m->event;
    }
  }
  if (error.ok()) return std::move(r.value());
  spdlog::warn("refused request from rank {}: {}", c.info->rank, error.message());
  Request failed;
  failed.client_id = c.info->client_id;
  failed.handle = e.handle;
  Complete(failed, error);
  return std::nullopt;
}

std::vector<FusionGroup> Engine::Fuse(const std::vector<ReadyTensor>& ready) const {
  std::vector<FusionCandidate> candidates;
  candidates.reserve(ready.size());
  for (const ReadyTensor& t : ready) {
    const Request& f = t.first();
    const Collective* kind = FindCollective(f.kind);
    candidates.push_back({kind != nullptr ? kind->FusionKeyOf(f) : std::nullopt, f.bytes});
  }
  return PlanFusion(candidates, config_.fusion_threshold);
}

CollectiveGroup Engine::Members(const std::vector<ReadyTensor>& ready, const FusionGroup& g) {
  CollectiveGroup members;
  members.reserve(g.size());
  for (size_t i : g) members.push_back(&ready[i]);
  return members;
}

void Engine::Execute(std::vector<ReadyTensor>& ready) {
  for (const FusionGroup& g : Fuse(ready)) {
    ReadyTensor& head = ready[g.front()];
    if (head.first().kind == abi::OpKind::kRegisterGraph) {
      RegisterPlan(head);  // completes the registrations itself
      continue;
    }
    if (head.first().gpu) {
      ExecuteGpu(ready, g);
      continue;
    }
    // A failure notice is never agreed (CheckAgreement) and never gets here.
    if (const Collective* kind = FindCollective(head.first().kind)) kind->RunLocal(Members(ready, g), executor_);
    CountExecuted(ready, g);
    for (size_t i : g) CompleteAll(ready[i].requests, Status::Ok());
  }
}

StatusOr<uint64_t> Engine::EnqueueGpu(std::vector<ReadyTensor>& ready, const FusionGroup& g) {
  const Request& f = ready[g.front()].first();
  const Collective* kind = FindCollective(f.kind);
  if (kind == nullptr) return InvalidArgument(std::string(OpKindName(f.kind)) + " has no GPU path");
  return kind->EnqueueGpu(Members(ready, g), OnGpus{gpu_.get(), world_size_, local_size_});
}

void Engine::ExecuteGpu(std::vector<ReadyTensor>& ready, const FusionGroup& g) {
  StatusOr<uint64_t> ticket = EnqueueGpu(ready, g);
  if (!ticket.ok()) {
    for (size_t i : g) {
      const std::string& name = ready[i].first().name;
      CompleteAll(ready[i].requests, Status(ticket.status().code(), "tensor '" + name + "': " + ticket.status().message()));
      ready[i].requests.clear();
    }
    return;
  }
  CountExecuted(ready, g);
  GpuOp op{*ticket, {}};
  for (size_t i : g) op.requests.push_back(std::move(ready[i].requests));
  gpu_ops_.push_back(std::move(op));
}

bool Engine::PollGpu() {
  bool did = false;
  for (size_t i = 0; i < gpu_ops_.size();) {
    Status error;
    const CommState state = gpu_->Test(gpu_ops_[i].ticket, &error);
    if (state == CommState::kPending) {
      ++i;
      continue;
    }
    for (const std::vector<Request>& rs : gpu_ops_[i].requests)
      if (!rs.empty())
        CompleteAll(rs, state == CommState::kDone ? Status::Ok()
                                                : Status(error.code(), "tensor '" + rs.front().name + "': " + error.message()));
    gpu_ops_.erase(gpu_ops_.begin() + i);
    did = true;
  }
  return did;
}

void Engine::CountExecuted(const std::vector<ReadyTensor>& ready, const FusionGroup& g) {
  const Request& f = ready[g.front()].first();
  const Collective* kind = FindCollective(f.kind);
  if (kind == nullptr) return;
  StatusSnapshot::KindCount& count = by_kind_[kind->name()];
  count.ops += g.size();
  for (size_t i : g) count.bytes += kind->ResultBytes(ready[i].requests, 0);
  if (kind->FusionKeyOf(f)) {
    ++fused_ops_;
    fused_tensors_ += g.size();
  }
}

void Engine::CompleteAll(const std::vector<Request>& requests, const Status& status) {
  if (!status.ok()) {
    ++error_ops_;
    spdlog::warn("{}", status.message());
  }
  for (const Request& r : requests) Complete(r, status);
}

void Engine::Complete(const Request& r, const Status& status) {
  if (drain_deadline_ns_.load(std::memory_order_relaxed) != 0) ++(status.ok() ? drain_result_.completed : drain_result_.failed);
  auto it = clients_.find(r.client_id);
  if (it == clients_.end()) return;  // the client is gone; nobody to tell
  ClientState& c = it->second;
  if (status.ok()) {
    ++c.ops;
    c.bytes += r.bytes;
  } else {
    ++c.errors;
  }
  c.info->segment.Complete(r.handle, status.code(), status.message());
}

void Engine::FlushClients() {
  // Completions a full ring held back stay queued in the segment and go out on a later pass.
  for (auto& [id, c] : clients_) c.info->segment.Flush();
}

std::shared_ptr<const StatusSnapshot> Engine::FreshSnapshot(int timeout_ms) const {
  const uint64_t want = snapshot_requested_.fetch_add(1, std::memory_order_relaxed) + 1;
  node_page_->Wake();
  const uint64_t deadline = abi::MonotonicNs() + uint64_t(timeout_ms) * 1'000'000ull;
  while (snapshot_published_.load(std::memory_order_acquire) < want && abi::MonotonicNs() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  return Snapshot();
}

void Engine::PublishSnapshot() {
  const uint64_t requested = snapshot_requested_.load(std::memory_order_relaxed);
  auto s = std::make_shared<StatusSnapshot>();
  s->uptime_s = double(abi::MonotonicNs() - start_ns_) / 1e9;
  s->node_rank = config_.node_rank;
  s->node_count = config_.nodes;
  s->local_size = local_size_;
  for (auto& [id, c] : clients_) {
    ClientSnapshot cs;
    cs.rank = c.info->rank;
    cs.local_rank = c.info->local_rank;
    cs.pid = c.info->pid;
    cs.state = "attached";
    cs.ops = c.ops;
    cs.bytes = c.bytes;
    cs.errors = c.errors;
    cs.submit_depth = c.info->segment.submit_depth();
    cs.completion_depth = c.info->segment.completion_depth();
    s->clients.push_back(cs);
  }
  for (auto& [lr, lost] : lost_ranks_) {
    ClientSnapshot cs;
    cs.rank = config_.node_rank * local_size_ + lr;
    cs.local_rank = lr;
    cs.pid = lost.pid;
    cs.state = "lost";
    s->clients.push_back(cs);
  }
  std::sort(s->clients.begin(), s->clients.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  s->by_kind = by_kind_;
  s->error_ops = error_ops_;
  s->fused_ops = fused_ops_;
  s->fused_tensors = fused_tensors_;
  s->pending_tensors = table_.pending();
  s->engine_busy_ns = busy_ns_;
  s->engine_wakeups = wakeups_;
  // Published from the engine thread (or before it runs), so this thread's clock is the engine's.
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  s->engine_cpu_s = double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  s->daemon_cpu_s = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  s->stalls = Stalls(abi::MonotonicNs(), uint64_t(config_.stall_warning_s) * 1'000'000'000ull);
  if (s->stalls.size() > 32) s->stalls.resize(32);
  if (plan_) {
    s->has_plan = true;
    s->plan_hash = plan_->hash;
    s->plan_tensors = plan_->tensors.size();
    s->plan_groups = plan_->groups();
    s->plan_in_use = topo_ != nullptr;
    if (topo_) {
      s->topo = topo_->stats();
      s->topo_next_group = topo_->next_group();
    }
    s->fallback_tensors = fallback_tensors_;
  }
  if (gpu_) {
    s->has_gpu = true;
    s->gpu = gpu_->stats();
  }
  if (transport_) {
    s->coordinated = true;
    s->coord_mode = CoordName(config_.coord);
    if (negotiator_) {
      s->negotiation = negotiator_->stats();
      s->pending_names = negotiator_->pending();
      if (negotiator_->broken()) s->failure = negotiator_->failure().message();
    }
    for (uint32_t p = 0; p < transport_->size(); ++p)
      if (p != transport_->rank()) s->peers.emplace_back(p, transport_->PeerLost(p) ? "lost" : "connected");
  }
  {
    std::lock_guard lock(snapshot_mu_);
    snapshot_ = std::move(s);
  }
  snapshot_published_.store(requested, std::memory_order_release);
}

}  // namespace syncd
