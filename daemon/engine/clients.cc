// The engine's clients and jobs: a client attaching or leaving, a job starting (its coordination
// afresh on many nodes), ranks that left and what waits for them. Engine thread only.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/engine/engine.h"
#include "daemon/engine/engine_timing.h"

namespace syncd {
namespace {

using engine_timing::kLeaveNoticeNs;
using engine_timing::kStallCheckPeriodNs;
// How long requests wait for a rank that detached cleanly between collectives to attach again.
constexpr uint64_t kRejoinGraceNs = 2'000'000'000;

// The transport epoch of a job: its messages never match another job's (see Transport::SetEpoch).
uint32_t JobEpoch(uint64_t job) { return uint32_t((job * 0x9E3779B97F4A7C15ull) >> 60); }

std::string RankName(uint32_t rank, int32_t pid) {
  return "rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")";
}

}  // namespace

std::unique_ptr<Negotiator> Engine::MakeNegotiator(uint64_t job) {
  NegotiatorOptions opts;
  opts.job = job;
  opts.cycle_ns = uint64_t(config_.cycle_time_us) * 1000;
  opts.start_on_work = config_.cycle_start == "work";
  opts.cache_capacity = config_.cache_capacity;
  opts.stall_ns = uint64_t(config_.stall_shutdown_s ? std::min(config_.stall_warning_s, config_.stall_shutdown_s)
                                                    : config_.stall_warning_s) * 1'000'000'000ull;
  opts.local_size = local_size_;
  opts.blocking = config_.coord == abi::CoordMode::kNegotiate || config_.coord == abi::CoordMode::kGs;
  opts.on_demand = config_.coord == abi::CoordMode::kTopo;
  opts.gs_period = config_.coord == abi::CoordMode::kGs ? config_.gs_period : 0;
  if (config_.coord == abi::CoordMode::kTopo) opts.gpu_order = &gpu_order_;
  // Blocking in a cycle as Horovod does must not make the daemon blind: a client attaching or
  // dying, a stall to report, the daemon stopping all end the blocking (the cycle goes on).
  opts.while_blocked = [this](uint64_t blocked_ns) {
    node_page_->Heartbeat();
    const uint64_t drain = drain_deadline_ns_.load(std::memory_order_acquire);
    return !stop_.load(std::memory_order_acquire) && (drain == 0 || abi::MonotonicNs() < drain) &&
           inbox_.Empty() && blocked_ns < kStallCheckPeriodNs;
  };
  return std::make_unique<Negotiator>(
      transport_.get(), opts,
      [this](std::vector<ReadyTensor>* ready, uint64_t tag) {
        return ExecuteAgreed(ready, tag, &fusion_buffer_, negotiator_->agreed_gpu_position());
      },
      [this](const std::vector<Request>& requests, const Status& st) { CompleteAll(requests, st); });
}

void Engine::StartJob(uint64_t job) {
  if (job_started_) spdlog::info("job {:#x} starts (previous job {:#x})", job, job_id_);
  // Whatever the previous job left (requests of ranks that are all gone) ends here.
  std::vector<FailedTensor> failed;
  table_.FailAll(Status(SYNCD_ERR_RANK_LOST, "its job ended"), &failed);
  for (FailedTensor& f : failed) CompleteAll(f.requests, f.error);
  lost_ranks_.clear();
  // Its plan too: every node drops it at the same point, before the new job's first request.
  topo_.reset();
  plan_.reset();
  gpu_order_.Reset();
  fallback_tensors_ = 0;
  job_failure_ = Status::Ok();
  deferred_failure_ = Status::Ok();
  if (transport_) {
    // The other nodes learn that this one is done with the old job (they may still be in a cycle
    // of it), then the new job's messages are kept apart from anything the old one left.
    if (negotiator_) {
      char why[64];
      snprintf(why, sizeof(why), "its ranks started job %#llx", (unsigned long long)job);
      negotiator_->Leave(abi::MonotonicNs() + kLeaveNoticeNs, "the job ended", why);
      negotiator_.reset();
    }
    transport_->SetEpoch(JobEpoch(job));
    negotiator_ = MakeNegotiator(job);
  }
  job_id_ = job;
  job_started_ = true;
}

Engine::~Engine() { negotiator_.reset(); }

bool Engine::DrainEvents() {
  bool did = false;
  while (auto ev = inbox_.Pop()) {
    did = true;
    if (auto* a = std::get_if<ClientAttachedEvent>(&*ev)) {
      const uint32_t id = a->client->client_id;
      const uint32_t lr = a->client->local_rank;
      // The first client of a new job (none of the previous one attached) starts afresh: the
      // previous job's departed ranks, its failure and its coordination mean nothing to it.
      // Without --local-size, the job's first client says how many ranks this node runs.
      const bool resize = clients_.empty() && config_.local_size == 0 && a->client->local_size != local_size_;
      if (!job_started_ || resize || (a->client->job_id != job_id_ && clients_.empty())) StartJob(a->client->job_id);
      if (resize) {
        local_size_ = a->client->local_size;
        world_size_ = local_size_ * config_.nodes;
        table_ = TensorTable(local_size_, CheckAgreement);
        executor_ = HostExecutor(world_size_);
      }
      lost_ranks_.erase(lr);
      client_by_local_rank_[lr] = id;
      spdlog::info("{} attached (client {}, local rank {})", RankName(a->client->rank, a->client->pid), id, lr);
      clients_[id].info = std::move(a->client);
    } else {
      auto& lost = std::get<ClientLostEvent>(*ev);
      Disconnect(lost.client_id, lost.reason, lost.clean);
    }
  }
  return did;
}

void Engine::Disconnect(uint32_t client_id, const std::string& reason, bool clean) {
  auto it = clients_.find(client_id);
  if (it == clients_.end()) return;
  const AttachedClient& info = *it->second.info;
  const std::string who = RankName(info.rank, info.pid);
  if (clean) spdlog::info("{} {}", who, reason);
  else spdlog::warn("{} {}", who, reason);
  const uint32_t local_rank = info.local_rank;
  const bool topo_in_flight = topo_ && topo_->in_flight() > 0;
  // Requests of this rank still in flight were abandoned: what needs them cannot complete.
  const bool abandoned = table_.HasRequestsOf(local_rank) || topo_in_flight ||
                         (negotiator_ && negotiator_->pending() > 0);
  lost_ranks_[local_rank] = LostRank{info.pid, who + " " + reason, true, ++loss_seq_};
  client_by_local_rank_.erase(local_rank);
  clients_.erase(it);  // unmaps the segment: nothing of it is used after this point
  if (gpu_) gpu_->ForgetClient(client_id);  // its IPC mappings close once no queued GPU work uses them
  // Once every local rank has come and gone the job is over: the next job's ranks may attach in
  // any order, so departed ranks stop failing new requests (they stay listed as lost until their
  // slots are reused). A rank that left before a slower one even attached still blocks.
  const bool job_over = clients_.empty() && lost_ranks_.size() == local_size_;
  if (job_over)
    for (auto& [lr, lost] : lost_ranks_) lost.blocking = false;
  // A clean detach between collectives (Horovod's shutdown() then init() again, on every rank):
  // requests that need this rank wait for it to attach again, for a grace period.
  if (clean && !abandoned && !job_over) {
    LostRank& lost = lost_ranks_[local_rank];
    lost.blocking = false;
    lost.rejoin_deadline_ns = abi::MonotonicNs() + kRejoinGraceNs;
    return;
  }
  std::vector<FailedTensor> failed;
  const Status lost(SYNCD_ERR_RANK_LOST, who + " " + reason + " while the collective was in flight");
  table_.FailAll(lost, &failed);
  for (const FailedTensor& f : failed) CompleteAll(f.requests, f.error);
  if (topo_in_flight) topo_->FailAll(lost);
  // Other nodes may have ranks waiting on this one: unless it left cleanly with nothing in
  // flight (the normal end of a job), the job cannot go on.
  // This holds even when it was this node's last rank: the other nodes' ranks still wait for it.
  if (negotiator_ && (!clean || abandoned)) negotiator_->Abort(Status(SYNCD_ERR_RANK_LOST, who + " " + reason));
}

void Engine::ExpireDepartures(uint64_t now_ns) {
  std::string expired;
  for (auto& [lr, lost] : lost_ranks_) {
    if (lost.rejoin_deadline_ns == 0 || now_ns < lost.rejoin_deadline_ns) continue;
    lost.rejoin_deadline_ns = 0;
    lost.blocking = true;
    lost.reason += " and did not attach again within " + std::to_string(kRejoinGraceNs / 1'000'000'000) + " s";
    expired += (expired.empty() ? "" : "; ") + lost.reason;
  }
  if (expired.empty() || clients_.empty()) return;
  std::vector<FailedTensor> failed;
  table_.FailAll(Status(SYNCD_ERR_RANK_LOST, expired), &failed);
  for (const FailedTensor& f : failed) CompleteAll(f.requests, f.error);
  if (negotiator_ && !failed.empty()) negotiator_->Abort(Status(SYNCD_ERR_RANK_LOST, expired));
}

std::string Engine::BlockingLosses() const {
  std::vector<const LostRank*> losses;
  for (const auto& [lr, lost] : lost_ranks_)
    if (lost.blocking) losses.push_back(&lost);
  std::sort(losses.begin(), losses.end(), [](auto* a, auto* b) { return a->seq < b->seq; });
  std::string out;
  for (const LostRank* l : losses) out += (out.empty() ? "" : "; ") + l->reason;
  return out;
}

}  // namespace syncd
