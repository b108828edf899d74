#include "daemon/engine/engine.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "daemon/plan/fusion.h"
#include "daemon/engine/engine_timing.h"
#include "daemon/engine/submission.h"

namespace syncd {
namespace {

// The observer folds the completion events this often (CompletionLog::kCapacity holds more), and
// waits this long for the engine's facts (inside a long collective it skips that report).
constexpr auto kFoldPeriod = std::chrono::milliseconds(50);
constexpr int kObserverAskMs = 200;
constexpr uint64_t kLatestStatusPeriodNs = 1'000'000'000;
constexpr uint64_t kHeartbeatPeriodNs = 1'000'000;
using engine_timing::kLeaveNoticeNs;
using engine_timing::kStallCheckPeriodNs;

}  // namespace

Engine::Engine(const Config& config, const NodePage* node_page, uint32_t local_size,
               std::function<void(uint32_t)> kick_client, std::unique_ptr<Transport> transport)
    : config_(config),
      node_page_(node_page),
      local_size_(local_size),
      side_by_side_(config.node_service && config.nodes == 1),
      kick_client_(std::move(kick_client)),
      links_(std::move(transport)) {
  tally_.start_ns = abi::MonotonicNs();
  builder_.Build(std::move(*CaptureFacts()));
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
  drain_.Begin(deadline_ns, why);
  node_page_->Wake();
}

bool Engine::Drained() {
  bool idle_here = !HasWork() && held_gpu_ == 0;
  for (const auto& [id, t] : tenants_) idle_here = idle_here && t->job->InFlight() == 0;
  bool drained = idle_here;
  for (const auto& [id, t] : tenants_) drained = t->job->Drained(idle_here) && drained;
  return drained;
}

void Engine::End(const EndScope& scope, const Status& why) {
  if (scope.kind == EndScope::Kind::kRequest) Complete(*scope.request, why);
  else for (const auto& [id, t] : tenants_) t->job->End(scope, why);
  Settle();
}

void Engine::End(Tenant& t, const EndScope& scope, const Status& why) {
  t.job->End(scope, why);
  Settle();
}

bool Engine::HasWork() {
  if (!inbox_.Empty()) return true;
  for (auto& [id, c] : clients_)
    if (c.info->segment.HasSubmission()) return true;
  return false;
}

void Engine::Run() {
  node_page_->SetState(abi::DaemonState::kRunning);
  const uint64_t configured_spin_ns = uint64_t(config_.spin_us) * 1000;
  // --network-wait auto: the other daemons on its cores, now and (the observer) every second for
  // 10 s, every 10 s after; this thread's run delay.
  const bool automatic = config_.network_wait == NetworkWait::kAuto;
  if (automatic) CountOtherDaemons();
  contention_.Open();
  uint32_t others = contention_.other_daemons();
  if (others > 0) SayContention();
  uint64_t last_work = abi::MonotonicNs(), last_beat = 0;
  pthread_setname_np(pthread_self(), "syncd-engine");  // as `top -H`, perf and gdb show it
  observer_.Start("syncd-observer", kFoldPeriod, [this, automatic, next_report = uint64_t{0},
                                                 next_count = uint64_t{0}]() mutable {
    if (const uint64_t now = abi::MonotonicNs(); automatic && now >= next_count) {
      next_count = now + (now - tally_.start_ns < CoreContention::kEarlyNs ? CoreContention::kWindowNs
                                                                          : CoreContention::kRecountNs);
      CountOtherDaemons();
    }
    Observe(&next_report);
  });
  while (!stop_.load(std::memory_order_acquire)) {
    const uint64_t t0 = abi::MonotonicNs();
    const bool did = Poll();
    const uint64_t t1 = abi::MonotonicNs();
    if (did) {
      ++tally_.work_turns;
      tally_.busy_ns += t1 - t0;
      if (tenants_.size() == 1) Only()->usage.engine_ns += t1 - t0;  // side by side: Poll shares it out
      last_work = t1;
    }
    if (t1 - last_beat > kHeartbeatPeriodNs) {
      node_page_->Heartbeat();
      last_beat = t1;
    }
    if (commands_.pending()) RunCommands();
    for (const auto& [id, t] : tenants_) t->timeline->Poll(t1);
    if (t1 - tally_.last_stall_check_ns > kStallCheckPeriodNs) CheckStalls(t1);
    contention_.Sample(t1);
    if (contention_.other_daemons() != others) {
      others = contention_.other_daemons();
      SayContention();
    }
    if (!did) Idle(t1, t1 - last_work, configured_spin_ns);
    if (const uint64_t deadline = drain_.deadline_ns(); deadline != 0) {
      const bool drained = Drained();
      if (!outcomes_.empty()) Settle();
      if (drained) break;
      if (abi::MonotonicNs() >= deadline) {
        drain_.DeadlinePassed();
        break;
      }
    }
  }
  if (drain_.on() && drain_.result().deadline_passed)
    End(EndScope::Job(ProcessSet::Reach::kHeld), Status(SYNCD_ERR_DAEMON_LOST, drain_.leave_why()));
  // Tell the other nodes this one is leaving, so that a job that ends normally (every daemon
  // stopped) is not reported as a lost node.
  for (const auto& [id, t] : tenants_)
    t->job->Leave(abi::MonotonicNs() + kLeaveNoticeNs,
                  drain_.leave_why().empty() ? "the daemon is shutting down" : drain_.leave_why(), "its daemon was stopped");
  Settle();
  StopObserver();
  builder_.Build(std::move(*CaptureFacts()));  // what is left once the engine stopped
  drain_.Finish();
}

bool Engine::Poll() {
  bool did = DrainEvents();
  // Jobs side by side: what each costs the engine is timed (one job has the whole pass: Run).
  const bool shared = tenants_.size() > 1;
  std::vector<uint32_t> broken;
  for (auto& [id, c] : clients_) {
    const uint64_t t0 = shared ? abi::MonotonicNs() : 0;
    if (!DrainSubmissions(c, &did)) broken.push_back(id);
    if (shared) Charge(*c.tenant, abi::MonotonicNs() - t0);
  }
  for (uint32_t id : broken) {
    const std::string why = clients_.at(id).broke;
    clients_.at(id).info->segment.LetGo();
    Disconnect(id, "broke the shared-memory protocol (" + (why.empty() ? "corrupt ring indices" : why) + ")");
    kick_client_(id);
    did = true;
  }
  for (const auto& [id, t] : tenants_) {
    const uint64_t t0 = abi::MonotonicNs();
    did |= t->job->Poll(t0);
    did |= PublishMembership(*t);  // after the poll: a node lost in it changes the membership
    if (shared) {
      // What it completed reaches its ranks before the next job's turn: that turn may run a
      // large allreduce to its end while this job has nothing in flight (its ranks, not yet
      // told, could not submit again), and the two jobs went in lockstep (weights 2:1 shared
      // the engine 1:1, bench/tenants.sh).
      if (!outcomes_.empty()) Settle();
      Charge(*t, abi::MonotonicNs() - t0);
    }
  }
  if (shared) SettleShares();
  for (size_t i = 0; i < retired_.size();) {
    did |= retired_[i]->PollGpu();
    if (retired_[i]->gpu_busy()) ++i;
    else retired_.erase(retired_.begin() + i);
  }
  Settle();
  return did;
}

void Engine::SettleShares() {
  uint64_t pass_ns = 0;
  for (const auto& [id, t] : tenants_) pass_ns += t->pass_ns;
  for (const auto& [id, t] : tenants_) {
    t->usage.engine_ns += t->pass_ns;
    if (t->job->InFlight() > 0) t->usage.waited_ns += pass_ns - t->pass_ns;
    t->pass_ns = 0;
  }
}

bool Engine::DrainSubmissions(ClientState& c, bool* did) {
  ClientSegment& seg = c.info->segment;
  if (c.held) {
    if (!gpu_->Signalled(c.held->gpu_ready)) return true;
    Request r = std::move(*c.held);
    c.held.reset();
    --held_gpu_;
    *did = true;
    Take(*c.tenant, std::move(r));
  }
  for (;;) {
    bool corrupt = false;
    std::optional<abi::SubmitEntry> e = seg.PopSubmission(&corrupt);
    if (corrupt) return false;
    if (!e) return true;
    *did = true;
    c.last_submit_ns = abi::MonotonicNs();
    if (!ledger_.Open(c.info->client_id, e->handle, c.last_submit_ns, c.tenant->job->id(),
                      e->bytes > kNodeServiceSegmentBytes)) {
      c.broke = "submitted handle " + std::to_string(e->handle) + " while it was still in flight";
      return false;
    }
    std::optional<Request> r = Validate(c, *e);
    if (!r) continue;  // refused, completed with its error, and nothing for the other ranks
    if (r->gpu && !gpu_->Signalled(r->gpu_ready)) {
      c.held = std::move(*r);
      ++held_gpu_;
      return true;
    }
    Take(*c.tenant, std::move(*r));
  }
}

void Engine::Take(Tenant& t, Request r) {
  if (r.kind == abi::OpKind::kTimeline) {  // not a collective: this daemon answers at once
    Complete(r, r.text.empty() ? t.timeline->Stop() : t.timeline->Start(r.text, 0, 0));
    return;
  }
  // What a refusal needs to complete the request (not its name, shape or memory: a full copy
  // was three heap allocations per request).
  Request refused;
  refused.client_id = r.client_id;
  refused.rank = r.rank;
  refused.handle = r.handle;
  refused.bytes = r.bytes;
  Status st = MembershipRefusal(t, r);
  if (st.ok()) st = t.job->Take(std::move(r));
  if (!st.ok()) End(EndScope::OneRequest(refused), st);
}

std::optional<Request> Engine::Validate(ClientState& c, const abi::SubmitEntry& e) {
  const Submitter who{c.info->client_id,
                      c.info->rank,
                      c.info->local_rank,
                      &c.info->segment,
                      c.tenant->world_size,
                      config_.fusion_threshold,
                      c.tenant->job->SetRanksOf(e.process_set),
                      uint32_t(config_.compression),
                      config_.compression_min_bytes,
                      config_.compression_ppm,
                      config_.compression_rank};
  std::optional<abi::GpuDescriptor> gpu;
  StatusOr<Request> r = ParseSubmission(e, who, &gpu, request_pool_.Take());
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
      r->gpu_ready = m->ready;
    }
  }
  if (error.ok()) {
    r->received_ns = abi::MonotonicNs();
    return std::move(r.value());
  }
  spdlog::warn("refused request from rank {}: {}", c.info->rank, error.message());
  Request failed;
  failed.client_id = c.info->client_id;
  failed.handle = e.handle;
  End(EndScope::OneRequest(failed), error);
  return RefusalNotice(c, e, error);
}

std::optional<Request> Engine::RefusalNotice(const ClientState& c, const abi::SubmitEntry& e, const Status& why) {
  // The other ranks of a collective this rank's request was refused from would wait for it until
  // the stall shutdown: tell them, as syncd_fail_async does (a malformed entry is the client's
  // bug; the name may not even be readable).
  if (why.code() == SYNCD_ERR_PROTOCOL || e.kind < uint32_t(abi::OpKind::kAllreduce) || e.kind > abi::kOpKindLast)
    return std::nullopt;
  const Collective* kind = FindCollective(abi::OpKind(e.kind));
  const size_t name_len = strnlen(e.name, abi::kNameBytes);
  if (kind == nullptr || kind->partial() || name_len == 0 || name_len == abi::kNameBytes) return std::nullopt;
  Request notice;
  notice.client_id = kNoClient;  // its rank got the refusal itself
  notice.rank = c.info->rank;
  notice.local_rank = c.info->local_rank;
  notice.kind = abi::OpKind::kFail;
  notice.process_set = e.process_set;
  notice.name.assign(e.name, name_len);
  notice.failure = why.message();
  notice.received_ns = abi::MonotonicNs();
  return notice;
}

void Engine::Settle() {
  for (Outcome& o : outcomes_) ApplyOutcome(o.requests, o.status);
  outcomes_.Clear(&request_pool_);
  FlushClients();
  for (const auto& [id, t] : tenants_)
    for (const ControlNotice& n : t->job->TakeNotices()) t->timeline->Receive(n.from, n.message);
}

void Engine::ApplyOutcome(const std::vector<Request>& requests, const Status& status) {
  // A tensor completed a second time is not counted again (each request's second completion is
  // refused in Complete); its first request with a client says which (one lookup per tensor).
  const auto first = std::find_if(requests.begin(), requests.end(), [](const Request& r) { return r.client_id != kNoClient; });
  if (first != requests.end() && !ledger_.IsOpen(first->client_id, first->handle)) {
    for (const Request& r : requests) Complete(r, status);
    return;
  }
  // Only stand-ins (a lost or vacant rank's join): no rank waits for them, nothing to report.
  if (!status.ok() && first != requests.end()) {
    ++tally_.error_ops;
    spdlog::warn("{}", status.message());
  }
  if (first != requests.end() && FindCollective(requests.front().kind) != nullptr) ++tally_.collectives;
  if (!requests.empty() && (FindCollective(requests.front().kind) != nullptr || abi::IsPointToPoint(requests.front().kind)))
    Count(requests, status);
  for (const Request& r : requests) Complete(r, status);
}

void Engine::Trace(Timeline* tl, const std::vector<Request>& requests, const Status& status) {
  const Request& f = requests.front();
  TraceEvent tensor;
  tensor.kind = TraceKind::kTensor;
  tensor.name = tl->Name(f.name);
  tensor.t0 = UINT64_MAX;
  tensor.t1 = abi::MonotonicNs();
  tensor.set = f.process_set;
  tensor.op_kind = uint8_t(f.kind);
  tensor.dtype = uint8_t(f.dtype);
  tensor.failed = !status.ok();
  tensor.bytes = f.bytes;
  for (const Request& r : requests) {
    if (r.client_id == kNoClient || r.received_ns == 0) continue;
    TraceEvent submit;
    submit.kind = TraceKind::kSubmit;
    submit.t0 = submit.t1 = r.received_ns;
    submit.name = tensor.name;
    submit.rank = int32_t(r.rank);
    submit.set = r.process_set;
    submit.bytes = r.bytes;
    submit.op_kind = tensor.op_kind;
    tl->Record(submit);
    tensor.t0 = std::min(tensor.t0, r.received_ns);
    tensor.t2 = std::max(tensor.t2, r.received_ns);
    tensor.t3 = std::max(tensor.t3, r.agreed_ns);
    tensor.t4 = std::max(tensor.t4, r.exec_ns);
    tensor.group = r.group;
    ++tensor.count;
  }
  if (tensor.count == 0) return;
  tl->Record(tensor);
}

void Engine::Count(const std::vector<Request>& requests, const Status& status) {
  const Request& f = requests.front();
  // A stand-in's tensor alone names no rank: it is the job's when the daemon serves one.
  const Tenant* tenant = TenantOf(requests);
  if (tenant == nullptr && tenants_.size() == 1) tenant = Only();
  if (tenant == nullptr) return;
  if (tenant->timeline->recorder()->on()) Trace(tenant->timeline->recorder(), requests, status);
  CompletionEvent t;
  t.job = tenant->slot;
  t.t_ns = abi::MonotonicNs();
  t.set = f.process_set;
  t.kind = uint8_t(f.kind);
  t.code = uint8_t(status.code());
  if (!status.ok()) {
    completions_.Append(t);
    return;
  }
  uint64_t first_ns = UINT64_MAX;
  for (const Request& r : requests) {
    t.bytes += r.bytes;
    if (r.received_ns != 0) first_ns = std::min(first_ns, r.received_ns);
    if (r.client_id != kNoClient && r.received_ns != 0) ++t.rank;
  }
  t.first_ns = first_ns == UINT64_MAX ? 0 : first_ns;
  // Stragglers: a partial round completes whoever came; the others are the point of it. A send
  // or receive is one rank's.
  const Collective* kind = FindCollective(f.kind);
  t.stragglers = !abi::IsPointToPoint(f.kind) && !(kind != nullptr && kind->partial());
  t.spans_nodes = t.stragglers && tenant->job->NodesOf(f.process_set) > 1;
  if (!t.stragglers) t.rank = 0;
  completions_.Append(t);
  if (!t.stragglers) return;
  CompletionEvent arrival;
  arrival.type = CompletionEvent::kArrival;
  for (const Request& r : requests)
    if (r.client_id != kNoClient && r.received_ns != 0) {
      arrival.rank = r.rank;
      arrival.t_ns = r.received_ns;
      completions_.Append(arrival);
    }
}

void Engine::Complete(const Request& r, const Status& status) {
  if (r.client_id != kNoClient && !ledger_.Finish(r.client_id, r.handle)) {
    spdlog::error("tensor '{}' (handle {}) of rank {} completed a second time ({}): refused, its client got the first",
                  r.name, r.handle, r.rank, status.ok() ? "OK" : status.message());
    return;
  }
  drain_.Count(status.ok());
  // A result block only reaches the client with a successful completion; otherwise it is free.
  const bool has_result = r.result_offset != abi::kNoResult;
  if (has_result && (!status.ok() || !clients_.count(r.client_id))) r.results->Free(r.result_offset);
  auto it = clients_.find(r.client_id);
  if (it == clients_.end()) return;  // the client is gone; nobody to tell
  ClientState& c = it->second;
  Tenant::Usage& job = c.tenant->usage;
  if (status.ok()) {
    ++c.ops;
    c.bytes += r.bytes;
    ++job.requests;
    job.bytes += r.bytes;
  } else {
    ++c.errors;
    ++job.errors;
  }
  c.info->segment.Complete(r.handle, status.code(), status.message(), status.ok() ? r.result_offset : abi::kNoResult);
}

void Engine::FlushClients() {
  // Completions a full ring held back stay queued in the segment and go out on a later pass.
  for (auto& [id, c] : clients_) tally_.client_wakes += c.info->segment.Flush();
}

StatusOr<EngineReply> Engine::Ask(EngineCommand command, int timeout_ms) const {
  std::future<EngineReply> reply = commands_.Post(std::move(command));
  node_page_->Wake();
  if (reply.wait_for(std::chrono::milliseconds(timeout_ms)) != std::future_status::ready)
    return Status(SYNCD_ERR_TIMEOUT, "the engine did not answer within " + std::to_string(timeout_ms) + " ms");
  return reply.get();
}

Status Engine::CommandTimeline(const TimelineCommand& command, int timeout_ms) {
  StatusOr<EngineReply> reply = Ask(command, timeout_ms);
  if (!reply.ok()) return Status(reply.status().code(), "timeline: " + reply.status().message());
  return std::get<Status>(*reply);
}

std::shared_ptr<const StatusSnapshot> Engine::FreshSnapshot(int timeout_ms) const {
  if (finished()) return builder_.Latest();
  StatusOr<EngineReply> reply = Ask(FactsCommand{}, timeout_ms);
  if (!reply.ok()) return builder_.Latest();  // the engine is busy or not running
  return builder_.Build(std::move(*std::get<std::shared_ptr<EngineFacts>>(*reply)));
}

void Engine::Observe(uint64_t* next_report) {
  completions_.Fold([](const CompletionFigures&) { return 0; });
  const uint64_t now = abi::MonotonicNs();
  if (now < *next_report) return;
  // Many nodes: a health report every report period. One node: only the status an asker gets
  // when the engine cannot answer in time (inside a long collective), once a second.
  *next_report = now + (links_.any() ? JobHealth::kReportPeriodNs : kLatestStatusPeriodNs);
  StatusOr<EngineReply> reply = Ask(FactsCommand{}, kObserverAskMs);
  if (!reply.ok()) return;
  std::shared_ptr<EngineFacts> facts = std::get<std::shared_ptr<EngineFacts>>(std::move(*reply));
  const bool report = facts->has_job && facts->reports_health;
  const uint64_t job = facts->status.job_id;
  NodeHealth mine;
  std::vector<std::pair<uint64_t, NodeHealth>> own;  // of each job on links of its own
  builder_.Build(std::move(*facts), &mine, &own);
  if (report) commands_.Post(SendHealthCommand{job, std::move(mine)});
  for (auto& [id, health] : own) commands_.Post(SendHealthCommand{id, std::move(health)});
  if (report || !own.empty()) node_page_->Wake();
}

void Engine::StopObserver() {
  // It may be waiting for the engine's facts: answer until it is gone.
  observer_.Stop([this] {
    if (commands_.pending()) RunCommands();
  });
}


}  // namespace syncd
