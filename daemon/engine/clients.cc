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

void Engine::EndJob(uint64_t next_job) {
  if (!job_) return;
  spdlog::info("job {:#x} starts (previous job {:#x})", next_job, job_->id());
  char why[64];
  snprintf(why, sizeof(why), "its ranks started job %#llx", (unsigned long long)next_job);
  // Whatever the previous job left (requests of ranks that are all gone) ends here,
  End(EndScope::Job(ProcessSet::Reach::kWaiting), Status(SYNCD_ERR_RANK_LOST, "its job ended"));
  // and the other nodes learn that this one is done with it (they may still be in a cycle of it).
  job_->Leave(abi::MonotonicNs() + kLeaveNoticeNs, "the job ended", why);
  Settle();
  // Its plans and coordination too: every node drops them at the same point, before the new
  // job's first request. GPU work already enqueued still completes (to nobody, its ranks are gone).
  job_->Retire(&retired_);
  job_.reset();
  residuals_.Clear();  // the job's sums are over
}

bool Engine::PublishMembership() {
  if (job_->membership().number() == published_membership_) return false;
  published_membership_ = job_->membership().number();
  residuals_.Clear();  // what they left out belongs to sums over another membership
  PublishSetNodes();
  return true;
}

void Engine::PublishSetNodes() const {
  for (const auto& [id, c] : clients_) PublishJobTo(c.info->segment);
}

void Engine::PublishJobTo(const ClientSegment& segment) const {
  segment.PublishJob(published_membership_, transport_ ? transport_->size() : 1, job_->membership().global_nodes());
}

Status Engine::MembershipRefusal(const Request& r) const {
  if (job_->membership().number() == 0) return Status::Ok();
  const auto it = clients_.find(r.client_id);
  if (it == clients_.end() ||
      it->second.info->segment.membership_seen() >= job_->membership().number())
    return Status::Ok();
  return Status(SYNCD_ERR_RANK_LOST, "tensor '" + r.name + "': " + job_->membership().why() +
                                         "; this rank has not acknowledged the new membership yet "
                                         "(hvd.elastic.run does, after the calls in flight; C: "
                                         "syncd_acknowledge_membership)");
}

void Engine::BeginJob(uint64_t job, const JobResume* resume) {
  // The new job's messages are kept apart from anything the old one left.
  if (transport_) transport_->SetEpoch(JobEpoch(job));
  // Stragglers and per-collective metrics are the job's own: its series carry its job_id and
  // start from zero. (Engine CPU, wake-ups and fusion sizes count over the daemon's life.)
  completions_.BeginJob();
  Job::Links links;
  links.transport = transport_.get();
  links.gpu = gpu_.get();
  links.counters = &counters_;
  links.resume = resume;
  ProcessSetHooks& hooks = links.hooks;
  hooks.timeline = timeline_.recorder();
  hooks.pool = &request_pool_;
  hooks.outcomes = &outcomes_;
  hooks.ledger = &ledger_;
  hooks.residuals = &residuals_;
  job_ = std::make_unique<Job>(config_, job, local_size_, std::move(links));
  published_membership_ = 0;
  PublishSetNodes();
  JobTimeline::Links timeline;
  timeline.transport = transport_.get();
  timeline.job = job;
  timeline.tell = [this](int32_t node, ControlMessage m) { return job_ && job_->TellNodes(std::move(m), node); };
  timeline_.BeginJob(std::move(timeline));
  // --timeline: node 0 writes the job's file from its first collective on (the other nodes join
  // in once they have started the job too).
  if (!config_.timeline.empty() && config_.node_rank == 0)
    if (Status st = timeline_.Start(config_.timeline, 0, 0); !st.ok()) spdlog::error("--timeline: {}", st.message());
}

Engine::~Engine() {
  job_.reset();
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
      const bool start = !job_ || resize || (a->client->job_id != job_->id() && clients_.empty());
      if (start) EndJob(a->client->job_id);
      if (resize) {
        local_size_ = a->client->local_size;
        world_size_ = local_size_ * config_.nodes;
      }
      if (start) BeginJob(a->client->job_id);
      // A rank that attaches starts in the job's membership as it is (what it reads once taken in).
      PublishJobTo(a->client->segment);
      a->client->segment.set_membership_seen(job_->membership().number());
      a->client->segment.set_joined_as(job_->Attached(lr) ? abi::kJoinedAsReplacement : abi::kJoinedAsMember);
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
  if (std::optional<Request>& held = it->second.held) {  // never taken: its event never fired
    --held_gpu_;
    Complete(*held, Status(SYNCD_ERR_RANK_LOST, who + " " + reason + " before its stream was ready"));
  }
  clients_.erase(it);  // unmaps the segment: nothing of it is used after this point
  client_by_local_rank_.erase(local_rank);
  if (gpu_) gpu_->ForgetClient(client_id);  // its IPC mappings close once no queued GPU work uses them
  // What needs the rank fails, or waits for it to attach again (Job::RankLeft).
  const bool job_over = job_ && job_->RankLeft(local_rank, rank, pid, who + " " + reason, clean, clients_.size());
  Settle();
  // The job's timeline ends with its ranks: node 0 finishes the file (with the other nodes' last
  // events), so it is complete once the job is.
  if (job_over && config_.node_rank == 0) (void)timeline_.Stop();
}

}  // namespace syncd
