// The engine's clients and jobs: a client attaching or leaving, a job starting (its coordination
// afresh on many nodes), ranks that left and what waits for them. Engine thread only.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/engine/engine.h"
#include "daemon/engine/engine_timing.h"
#include "daemon/transport/set_transport.h"

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

void Engine::EndJob(uint64_t next_job) {
  if (job_started_) spdlog::info("job {:#x} starts (previous job {:#x})", next_job, job_id_);
  char why[64];
  snprintf(why, sizeof(why), "its ranks started job %#llx", (unsigned long long)next_job);
  // Whatever the previous job left (requests of ranks that are all gone) ends here,
  End(EndScope::Job(ProcessSet::Reach::kWaiting), Status(SYNCD_ERR_RANK_LOST, "its job ended"));
  // and the other nodes learn that this one is done with it (they may still be in a cycle of it).
  for (auto& [id, set] : sets_) set->Leave(abi::MonotonicNs() + kLeaveNoticeNs, "the job ended", why);
  // Its plans and coordination too: every node drops them at the same point, before the new
  // job's first request. GPU work already enqueued still completes (to nobody, its ranks are gone).
  for (auto& [id, set] : sets_)
    if (set->gpu_busy()) retired_.push_back(std::move(set));
  sets_.clear();
  set_info_.clear();
  set_changes_.clear();
  lost_ranks_.clear();
}

void Engine::BeginJob(uint64_t job) {
  // The new job's messages are kept apart from anything the old one left.
  if (transport_) transport_->SetEpoch(JobEpoch(job));
  // Stragglers and per-collective metrics are the job's own: its series carry its job_id and
  // start from zero. (Engine CPU, wake-ups and fusion sizes count over the daemon's life.)
  stragglers_ = StragglerWindow();
  metrics_.clear();
  StartJobHealth(abi::MonotonicNs());
  ProcessSetHooks hooks;
  hooks.complete = [this](const std::vector<Request>& requests, const Status& st) { CompleteAll(requests, st); };
  hooks.flush = [this] { FlushClients(); };
  // Blocking in a cycle as Horovod does must not make the daemon blind: a client attaching or
  // dying, a stall to report, the daemon stopping all end the blocking (the cycle goes on).
  hooks.keep_blocking = [this](uint64_t blocked_ns) {
    node_page_->Heartbeat();
    const uint64_t drain = drain_deadline_ns_.load(std::memory_order_acquire);
    return !stop_.load(std::memory_order_acquire) && (drain == 0 || abi::MonotonicNs() < drain) &&
           inbox_.Empty() && blocked_ns < kStallCheckPeriodNs;
  };
  hooks.change_sets = [this](ReadyTensor t) { set_changes_.push_back(std::move(t)); };
  hooks.on_notice = [this](uint32_t from, const ControlMessage& m) {
    if (m.kind == ControlMessage::Kind::kHealth) ReceiveHealth(from, m);
    else timeline_.Receive(from, m);
  };
  hooks.timeline = timeline_.recorder();
  hooks.pool = &request_pool_;
  hooks.ledger = &ledger_;
  set_hooks_ = hooks;
  JobTimeline::Links links;
  links.transport = transport_.get();
  links.job = job;
  links.tell = [this](int32_t node, ControlMessage m) {
    const auto it = sets_.find(0);
    return it != sets_.end() && it->second->TellNodes(std::move(m), node);
  };
  timeline_.BeginJob(std::move(links));
  PointToPoint::Links p2p;
  p2p.transport = transport_.get();
  p2p.job = job;
  p2p.node_rank = config_.node_rank;
  p2p.local_size = local_size_;
  p2p.ledger = &ledger_;
  p2p.started = [this] {
    const auto it = sets_.find(0);
    return it != sets_.end() && it->second->Started();
  };
  p2p_.BeginJob(std::move(p2p));
  ProcessSetPlace global =
      ProcessSetPlace::Global(job, local_size_, config_.nodes, config_.node_rank, transport_.get(), gpu_.get());
  set_info_[0] = SetInfo{global.ranks, 0, nullptr};
  last_set_id_ = 0;
  sets_[0] = std::make_unique<ProcessSet>(config_, std::move(global), &counters_, std::move(hooks));
  job_id_ = job;
  job_started_ = true;
  // --timeline: node 0 writes the job's file from its first collective on (the other nodes join
  // in once they have started the job too).
  if (!config_.timeline.empty() && config_.node_rank == 0)
    if (Status st = timeline_.Start(config_.timeline, 0, 0); !st.ok()) spdlog::error("--timeline: {}", st.message());
}

Engine::~Engine() {
  sets_.clear();
  retired_.clear();
}

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
      const bool start = !job_started_ || resize || (a->client->job_id != job_id_ && clients_.empty());
      if (start) EndJob(a->client->job_id);
      if (resize) {
        local_size_ = a->client->local_size;
        world_size_ = local_size_ * config_.nodes;
      }
      if (start) BeginJob(a->client->job_id);
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
  // Requests of this rank still in flight were abandoned: what needs them cannot complete.
  bool abandoned = false;
  for (const auto& [id, set] : sets_) abandoned = abandoned || set->Abandons(local_rank);
  abandoned = abandoned || p2p_.Holds(info.rank);
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
  // The job's timeline ends with its ranks: node 0 finishes the file (with the other nodes' last
  // events), so it is complete once the job is.
  if (job_over && config_.node_rank == 0) (void)timeline_.Stop();
  // A clean detach between collectives (Horovod's shutdown() then init() again, on every rank):
  // requests that need this rank wait for it to attach again, for a grace period.
  if (clean && !abandoned && !job_over) {
    LostRank& lost = lost_ranks_[local_rank];
    lost.blocking = false;
    lost.rejoin_deadline_ns = abi::MonotonicNs() + kRejoinGraceNs;
    return;
  }
  const Status lost(SYNCD_ERR_RANK_LOST, who + " " + reason + " while the collective was in flight");
  // Other nodes may have ranks waiting on this one: unless it left cleanly with nothing in
  // flight (the normal end of a job), the job cannot go on.
  // This holds even when it was this node's last rank: the other nodes' ranks still wait for it.
  const Status peers = !clean || abandoned ? Status(SYNCD_ERR_RANK_LOST, who + " " + reason) : Status::Ok();
  End(EndScope::Client(local_rank, peers), lost);
}

void Engine::ExpireDepartures(uint64_t now_ns) {
  std::string expired;
  std::vector<uint32_t> expired_ranks;  // local
  for (auto& [lr, lost] : lost_ranks_) {
    if (lost.rejoin_deadline_ns == 0 || now_ns < lost.rejoin_deadline_ns) continue;
    expired_ranks.push_back(lr);
    lost.rejoin_deadline_ns = 0;
    lost.blocking = true;
    lost.reason += " and did not attach again within " + std::to_string(kRejoinGraceNs / 1'000'000'000) + " s";
    expired += (expired.empty() ? "" : "; ") + lost.reason;
  }
  if (expired.empty() || clients_.empty()) return;
  // They will not come: what waits for them fails, and when anything did, the job ends on every
  // node (other nodes' ranks wait for them too).
  const Status why(SYNCD_ERR_RANK_LOST, expired);
  bool waiting = false;
  for (const auto& [id, set] : sets_) waiting = waiting || set->InFlight() > 0;
  // Receives here from each of them fail (End does the first's, with every set's requests).
  for (size_t i = 1; i < expired_ranks.size(); ++i)
    p2p_.EndRank(expired_ranks[i], config_.node_rank * local_size_ + expired_ranks[i], why);
  End(EndScope::Client(expired_ranks.front(), waiting ? why : Status::Ok()), why);
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

void Engine::ApplySetChanges() {
  std::vector<ReadyTensor> changes = std::exchange(set_changes_, {});
  for (ReadyTensor& t : changes) {
    const Request& f = t.first();
    const Status result = f.kind == abi::OpKind::kAddProcessSet ? AddSet(f.splits) : RemoveSet(f.root);
    CompleteAll(t.requests, result);
  }
}

Status Engine::AddSet(const std::vector<int64_t>& ranks) {
  if (set_info_.size() >= size_t(abi::kMaxProcessSets))
    return InvalidArgument("at most " + std::to_string(abi::kMaxProcessSets) +
                           " process sets (the global one included) may exist at once; remove one first");
  const int32_t id = ++last_set_id_;
  // A tag slot no live set uses, the least recently freed first (a removed set's late messages
  // then meet no new set for a long while).
  uint32_t slot = last_slot_;
  auto used = [this](uint32_t s) {
    for (const auto& [sid, info] : set_info_)
      if (info.slot == s) return true;
    return false;
  };
  do slot = slot % uint32_t(abi::kMaxProcessSets) + 1;
  while (used(slot));
  last_slot_ = slot;
  ProcessSetPlace place;
  place.id = id;
  place.job = job_id_;
  std::vector<uint32_t> nodes;  // the set's nodes, in order
  for (int64_t r : ranks) {
    const uint32_t node = uint32_t(r) / local_size_;
    if (nodes.empty() || nodes.back() != node) {
      nodes.push_back(node);
      place.offsets.push_back(uint32_t(place.ranks.size()));
    }
    place.ranks.push_back(uint32_t(r));
    if (node == config_.node_rank) place.local_ranks.push_back(uint32_t(r) % local_size_);
  }
  place.offsets.push_back(uint32_t(place.ranks.size()));
  SetInfo info{place.ranks, slot, nullptr};
  if (!place.local_ranks.empty()) {
    place.node_rank = uint32_t(std::find(nodes.begin(), nodes.end(), config_.node_rank) - nodes.begin());
    if (nodes.size() > 1) info.comm = std::make_unique<SetTransport>(transport_.get(), nodes, slot);
    place.comm = info.comm.get();
    spdlog::info("process set {}: {} ranks on {} nodes, {} here", id, place.ranks.size(), nodes.size(),
                 place.local_ranks.size());
    set_info_[id] = std::move(info);
    sets_[id] = std::make_unique<ProcessSet>(config_, std::move(place), &counters_, set_hooks_);
  } else {
    set_info_[id] = std::move(info);
  }
  return Status(SYNCD_OK, "process set " + std::to_string(id));
}

Status Engine::RemoveSet(int32_t id) {
  if (id == 0) return InvalidArgument("the global process set cannot be removed");
  auto info = set_info_.find(id);
  if (info == set_info_.end()) return InvalidArgument("process set " + std::to_string(id) + " is not one of this job's");
  if (auto it = sets_.find(id); it != sets_.end()) {
    // Every node removes it at this point of the global set's order: what it still holds fails.
    End(EndScope::Set(id, ProcessSet::Reach::kRemoved),
        InvalidArgument("process set " + std::to_string(id) + " was removed while it ran"));
    sets_.erase(it);
  }
  set_info_.erase(info);
  return Status(SYNCD_OK, "process set " + std::to_string(id));
}

const std::vector<uint32_t>* Engine::SetRanksOf(int32_t id) const {
  auto it = set_info_.find(id);
  return it == set_info_.end() ? nullptr : &it->second.ranks;
}

}  // namespace syncd
