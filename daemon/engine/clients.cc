// The engine's clients and jobs: a client attaching or leaving (what waits for a rank that left is
// the job's: Job::RankLeft), a job starting (its coordination afresh on many nodes) and the
// previous one ending. Engine thread only.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/engine/engine.h"
#include "daemon/engine/engine_timing.h"

namespace syncd {
namespace {

using engine_timing::kLeaveNoticeNs;

// The transport epoch of a job: its messages never match another job's (see Transport::SetEpoch).
uint32_t JobEpoch(uint64_t job) { return uint32_t((job * 0x9E3779B97F4A7C15ull) >> 60); }

std::string RankName(uint32_t rank, int32_t pid) {
  return "rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")";
}

}  // namespace

Tenant* Engine::TenantOfJob(uint64_t job) const {
  const auto it = tenants_.find(job);
  return it == tenants_.end() ? nullptr : it->second.get();
}

const Tenant* Engine::TenantOf(const std::vector<Request>& requests) const {
  for (const Request& r : requests)
    if (r.client_id != kNoClient) {
      const auto it = clients_.find(r.client_id);
      return it == clients_.end() ? nullptr : it->second.tenant;
    }
  return nullptr;
}

Tenant& Engine::TenantFor(const AttachedClient& a) {
  Tenant* t = side_by_side_ ? TenantOfJob(a.job_id) : Only();
  // The first client of a new job (none of the previous one attached) starts afresh: the
  // previous job's departed ranks, its failure and its coordination mean nothing to it.
  // Without --local-size, the job's first client says how many ranks this node runs; jobs side
  // by side each run their own (the attach checked it against the job's registration).
  const uint32_t fixed = side_by_side_ ? 0 : local_size_;
  const bool none_left = t == nullptr || t->client_by_local_rank.empty();
  // A node service's job keeps its id from run to run (a second srun of its allocation): after a
  // run that ended with a failure, or whose other node's daemon came back, the next run starts
  // afresh here, as on its other nodes (each when its first rank attaches).
  if (t != nullptr && none_left && (t->fresh_next_run || (side_by_side_ && t->job->Broken()))) {
    DropTenant(*t);
    t = nullptr;
  }
  const bool resize = t != nullptr && none_left && fixed == 0 && a.local_size != t->local_size;
  if (t != nullptr && !resize && !(none_left && a.job_id != t->job->id())) return *t;
  if (t != nullptr) EndJob(*t, a.job_id);
  return BeginJob(a.job_id, fixed != 0 ? fixed : a.local_size);
}

void Engine::EndJob(Tenant& t, uint64_t next_job) {
  spdlog::info("job {:#x} starts (previous job {:#x})", next_job, t.job->id());
  char why[64];
  snprintf(why, sizeof(why), "its ranks started job %#llx", (unsigned long long)next_job);
  // Whatever the previous job left (requests of ranks that are all gone) ends here,
  End(t, EndScope::Job(ProcessSet::Reach::kWaiting), Status(SYNCD_ERR_RANK_LOST, "its job ended"));
  // and the other nodes learn that this one is done with it (they may still be in a cycle of it).
  t.job->Leave(abi::MonotonicNs() + kLeaveNoticeNs, "the job ended", why);
  Settle();
  // Its plans and coordination too: every node drops them at the same point, before the new
  // job's first request. GPU work already enqueued still completes (to nobody, its ranks are gone).
  DropTenant(t);
}

void Engine::DropTenant(Tenant& t) {
  // Its residuals too: the job's sums are over.
  const ResidualStats r = t.residuals.stats();
  residuals_gone_.evicted += r.evicted;
  residuals_gone_.refused += r.refused;
  residuals_gone_.cleared += r.cleared + r.tensors;
  t.job->Retire(&retired_);
  if (side_by_side_) completions_.EndJob(t.slot);  // its series go with it
  pacer_.Forget(t.job->id());
  // The timeline reaches the job's daemons over its links, which may go with it (own links).
  t.timeline->EndJob();
  tenants_.erase(t.job->id());
  ShareEngine();
}

bool Engine::OthersSubmitted(const Tenant* mine) const {
  for (const auto& [cid, c] : clients_)
    if (c.tenant != mine && c.info->segment.HasSubmission()) return true;
  return false;
}

void Engine::ShareEngine() {
  for (const auto& [id, t] : tenants_) {
    // Other jobs with ranks here (registered ones without cost nothing: a job alone runs as a
    // daemon of its own would, unsliced and blocking in its cycles).
    t->share.others = false;
    for (const auto& [other_id, other] : tenants_) t->share.others |= other_id != id && !other->client_by_local_rank.empty();
    t->share.slice_bytes = t->share.others ? kSliceBytes : 0;
    // Another job waits: its ranks submitted, or it has work in flight (a collective some of its
    // ranks are in, its own sliced run): it gets the engine between two slices until it is done.
    // Only sliced runs of its own (large allreduces) wait: the slices may be large (RunSlices).
    t->share.others_waiting = [this, mine = t.get()] {
      if (OthersSubmitted(mine)) return OthersWait::kSmall;
      OthersWait w = OthersWait::kNone;
      for (const auto& [job, other] : tenants_) {
        if (other.get() == mine) continue;
        const size_t in_flight = other->job->InFlight();
        if (in_flight > other->job->SlicedInFlight()) return OthersWait::kSmall;
        if (in_flight > 0) w = OthersWait::kLarge;
      }
      return w;
    };
    t->share.may_post = [this, job = id, share = &t->share](uint64_t bytes) {
      return pacer_.MayPost(job, share->slices_per_poll, bytes, abi::MonotonicNs());
    };
    t->share.others_ready = [this, mine = t.get()] {
      if (OthersSubmitted(mine)) return true;
      for (const auto& [job, other] : tenants_) {
        if (other.get() == mine) continue;
        // Only a job with small work in flight (negotiating, agreed, on other nodes too).
        const RequestLedger::JobInFlight open = ledger_.InFlightOf(job);
        if (open.all == open.large) continue;
        if (other->job->InFlight() > other->job->SlicedInFlight()) return true;
        const uint64_t now = abi::MonotonicNs();
        bool data_waits = false;
        if (other->job->NextPollNs(now, &data_waits) <= now) return true;  // a cycle's time came
        if (Transport* links = other->job->transport(); links != nullptr && links->Progress()) return true;
      }
      return false;
    };
  }
}

bool Engine::PublishMembership(Tenant& t) {
  if (t.job->membership().number() == t.published_membership) return false;
  t.published_membership = t.job->membership().number();
  t.residuals.Clear();  // what they left out belongs to sums over another membership
  PublishSetNodes(t);
  return true;
}

void Engine::PublishSetNodes(const Tenant& t) const {
  for (const auto& [lr, id] : t.client_by_local_rank) PublishJobTo(t, clients_.at(id).info->segment);
}

void Engine::PublishJobTo(const Tenant& t, const ClientSegment& segment) const {
  segment.PublishJob(t.published_membership, t.config.nodes, t.job->membership().global_nodes());
}

Status Engine::MembershipRefusal(const Tenant& t, const Request& r) const {
  const Membership& m = t.job->membership();
  if (m.number() == 0) return Status::Ok();
  const auto it = clients_.find(r.client_id);
  if (it == clients_.end() || it->second.info->segment.membership_seen() >= m.number()) return Status::Ok();
  return Status(SYNCD_ERR_RANK_LOST, "tensor '" + r.name + "': " + m.why() +
                                         "; this rank has not acknowledged the new membership yet "
                                         "(hvd.elastic.run does, after the calls in flight; C: "
                                         "syncd_acknowledge_membership)");
}

Tenant& Engine::BeginJob(uint64_t job, uint32_t local_size, const JobResume* resume) {
  // A node service's job of several nodes runs on its own links, among its own nodes.
  Config job_config = config_;
  if (const auto it = job_settings_.find(job); it != job_settings_.end())
    if (StatusOr<Config> c = JobConfig(job_config, it->second); c.ok()) job_config = *std::move(c);  // checked at registration
  Transport* transport = links_.daemons();
  if (const OwnLinks* own = links_.Of(job)) {
    job_config.nodes = own->nodes;
    job_config.node_rank = own->node_rank;
    transport = own->transport.get();
  }
  // The new job's messages are kept apart from anything the old one left.
  if (transport) transport->SetEpoch(JobEpoch(job));
  // Stragglers and per-collective metrics are the job's own: its series carry its job_id and
  // start from zero. (Engine CPU, wake-ups and fusion sizes count over the daemon's life.) Jobs
  // served side by side each have their own, in the lowest slot none of the others holds.
  const bool first = tenants_.empty();
  uint16_t slot = 0;
  for (bool taken = true; taken; slot += taken) {
    taken = false;
    for (const auto& [id, other] : tenants_) taken |= other->slot == slot;
  }
  completions_.BeginJob(slot, job, !side_by_side_);
  auto owned = std::make_unique<Tenant>(std::move(job_config), local_size);
  Tenant& t = *owned;
  t.slot = slot;
  tenants_[job] = std::move(owned);
  Job::Links links;
  links.transport = transport;
  links.gpu = gpu_.get();
  links.counters = &counters_;
  links.resume = resume;
  ProcessSetHooks& hooks = links.hooks;
  const auto owner = job_owner_.find(job);
  t.timeline = std::make_unique<JobTimeline>(uint64_t(config_.timeline_max_mb) << 20,
                                             owner == job_owner_.end() ? std::nullopt : std::optional(owner->second));
  hooks.timeline = t.timeline->recorder();
  hooks.pool = &request_pool_;
  hooks.outcomes = &outcomes_;
  hooks.ledger = &ledger_;
  hooks.residuals = &t.residuals;
  hooks.share = &t.share;
  if (transport) t.usage.link_bytes_base = transport->bytes_sent();
  t.job = std::make_unique<Job>(t.config, job, local_size, std::move(links));
  ShareEngine();
  PublishSetNodes(t);
  JobTimeline::Links timeline;
  timeline.transport = transport;
  timeline.job = job;
  timeline.tell = [this, job](int32_t node, ControlMessage m) {
    const auto it = tenants_.find(job);
    return it != tenants_.end() && it->second->job->TellNodes(std::move(m), node);
  };
  t.timeline->BeginJob(std::move(timeline));
  // --timeline: node 0 writes the job's file from its first collective on (the other nodes join
  // in once they have started the job too). A node service: the first job that begins while no
  // other runs (the others: their ranks, or syncctl timeline --job).
  if (first && !config_.timeline.empty() && t.config.node_rank == 0)
    if (Status st = t.timeline->Start(config_.timeline, 0, 0); !st.ok()) spdlog::error("--timeline: {}", st.message());
  return t;
}

Engine::~Engine() {
  tenants_.clear();
  retired_.clear();
}

bool Engine::DrainEvents() {
  bool did = false;
  while (auto ev = inbox_.Pop()) {
    did = true;
    if (auto* a = std::get_if<ClientAttachedEvent>(&*ev)) {
      const uint32_t id = a->client->client_id;
      const uint32_t lr = a->client->local_rank;
      Tenant& t = TenantFor(*a->client);
      t.share.slices_per_poll = a->client->weight;
      // A rank that attaches starts in the job's membership as it is (what it reads once taken in).
      PublishJobTo(t, a->client->segment);
      a->client->segment.set_membership_seen(t.job->membership().number());
      a->client->segment.set_joined_as(t.job->Attached(lr) ? abi::kJoinedAsReplacement : abi::kJoinedAsMember);
      t.client_by_local_rank[lr] = id;
      if (t.client_by_local_rank.size() == 1) ShareEngine();  // its first rank: the others share with it
      spdlog::info("{} attached (client {}, local rank {}, job {})", RankName(a->client->rank, a->client->pid), id, lr,
                   t.job->id());
      clients_[id].tenant = &t;
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
  // A goodbye may overtake the rank's last submissions (the socket is read by another thread, the
  // ring here): what it submitted before leaving counts as in flight, and as abandoned.
  bool did = false;
  if (clean) (void)DrainSubmissions(it->second, &did);
  const AttachedClient& info = *it->second.info;
  const std::string who = RankName(info.rank, info.pid);
  if (clean) spdlog::info("{} {}", who, reason);
  else spdlog::warn("{} {}", who, reason);
  const uint32_t local_rank = info.local_rank, rank = info.rank;
  const int32_t pid = info.pid;
  Tenant* t = it->second.tenant;
  if (std::optional<Request>& held = it->second.held) {  // never taken: its event never fired
    --held_gpu_;
    Complete(*held, Status(SYNCD_ERR_RANK_LOST, who + " " + reason + " before its stream was ready"));
  }
  clients_.erase(it);  // unmaps the segment: nothing of it is used after this point
  t->client_by_local_rank.erase(local_rank);
  if (t->client_by_local_rank.empty()) ShareEngine();  // its last rank: the others have the engine
  if (gpu_) gpu_->ForgetClient(client_id);  // its IPC mappings close once no queued GPU work uses them
  // What needs the rank fails, or waits for it to attach again (Job::RankLeft).
  const bool job_over = t->job->RankLeft(local_rank, rank, pid, who + " " + reason, clean, t->client_by_local_rank.size());
  Settle();
  // The job's timeline ends with its ranks: node 0 finishes the file (with the other nodes' last
  // events), so it is complete once the job is.
  if (job_over && t->config.node_rank == 0) (void)t->timeline->Stop();
}

}  // namespace syncd
