// The engine's facts for the status (CaptureFacts: every job's, taken on the engine thread), and
// health, live: each rank's last call into syncd and whether the others wait for it (the engine's
// part of the status; obs/status_builder.h reads process states and words it off the engine
// thread), and the job-wide view every daemon keeps of every other (the job's, coord/job_health.h),
// its bundles carried here over the job's transport.
// Engine thread only.
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/engine/engine.h"
#include "daemon/engine/job.h"

namespace syncd {
namespace {

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

// A health control message's `cycle`: bit 0 down (from above), bit 1 the bundle follows on
// kHealthTag (else it is the text), bits 8.. its bytes.
constexpr uint64_t kHealthDown = 1, kHealthFollows = 2;
constexpr uint64_t kMaxHealthBundleBytes = uint64_t{64} << 20;

}  // namespace

std::vector<ClientSnapshot> Engine::SnapshotClients(uint64_t now_ns) const {
  std::vector<ClientSnapshot> out;
  // Ranks the others have been waiting for past kUnresponsiveNs: (job, global rank) -> the oldest
  // such tensor.
  std::map<std::pair<uint64_t, uint32_t>, std::string> awaited;
  for (const auto& [job, t] : tenants_)
    for (const StallSnapshot& w : t->job->Stalls(now_ns, kUnresponsiveNs))
      for (uint32_t rank : w.missing_ranks) awaited.emplace(std::make_pair(job, rank), w.name);
  for (const auto& [id, c] : clients_) {
    ClientSnapshot cs;
    cs.job_id = c.tenant->job->id();
    cs.rank = c.info->rank;
    cs.local_rank = c.info->local_rank;
    cs.pid = c.info->pid;
    cs.state = "attached";
    cs.ops = c.ops;
    cs.bytes = c.bytes;
    cs.errors = c.errors;
    cs.submit_depth = c.info->segment.submit_depth();
    cs.completion_depth = c.info->segment.completion_depth();
    cs.last_seen_s = c.last_submit_ns ? double(now_ns - c.last_submit_ns) / 1e9 : -1.0;
    if (const auto a = awaited.find({cs.job_id, cs.rank}); a != awaited.end()) {
      cs.awaited = true;
      cs.awaited_tensor = a->second;
    }
    out.push_back(cs);
  }
  for (const auto& [job, t] : tenants_) for (const auto& [lr, lost] : t->job->lost()) {
    ClientSnapshot cs;
    cs.job_id = job;
    cs.rank = t->config.node_rank * t->local_size + lr;
    cs.local_rank = lr;
    cs.pid = lost.pid;
    cs.state = lost.vacant ? "vacant" : lost.departed || lost.clean ? "left" : "lost";
    cs.lost_why = lost.reason;
    cs.lost_unix_s = lost.lost_unix_s;
    cs.job_went_on = lost.continued;
    if (lost.rejoin_deadline_ns > now_ns) cs.rejoin_grace_left_s = double(lost.rejoin_deadline_ns - now_ns) / 1e9;
    out.push_back(cs);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return out;
}

void Job::StartHealth(uint64_t now_ns) {
  host_ = HostName();
  health_ = JobHealth(links_.transport ? links_.transport->size() : 1, links_.transport ? links_.transport->rank() : 0, now_ns);
}

void Job::ReceiveHealth(uint32_t from, const ControlMessage& m) {
  const bool down = (m.cycle & kHealthDown) != 0;
  if (!(m.cycle & kHealthFollows)) return DeliverHealth(from, down, m.text);
  const uint64_t bytes = m.cycle >> 8;
  Transport* t = links_.transport;
  if (t == nullptr || bytes == 0 || bytes > kMaxHealthBundleBytes) {
    spdlog::warn("job health: node {} announced a health bundle of {} bytes; ignored", from, bytes);
    return;
  }
  HealthTransfer& in = health_in_.emplace_back();
  in.peer = from;
  in.down = down;
  in.bytes = std::make_shared<std::string>(bytes, '\0');
  in.handle = t->Recv(from, kHealthTag, in.bytes->data(), bytes, in.bytes);
}

void Job::DeliverHealth(uint32_t from, bool down, const std::string& text) {
  std::vector<HealthBundle> out;
  const Status st = health_.Receive(from, down, text, abi::MonotonicNs(), LostNodes(), &out);
  // Only the view suffers: the job goes on.
  if (!st.ok()) spdlog::warn("job health: {}", st.message());
  SendHealthBundles(std::move(out));
}

void Job::SendHealth(const NodeHealth& mine) {
  SendHealthBundles(health_.Report(mine, abi::MonotonicNs(), LostNodes()));
}

void Job::SendHealthBundles(std::vector<HealthBundle> bundles) {
  Transport* t = links_.transport;
  for (HealthBundle& b : bundles) {
    if (t == nullptr || t->PeerLost(b.to)) continue;
    const auto busy = [&](const HealthTransfer& o) { return o.peer == b.to; };
    if (std::any_of(health_out_.begin(), health_out_.end(), busy)) continue;  // the next bundle carries it
    uint64_t cycle = b.down ? kHealthDown : 0, sent = kControlMessageBytes;
    std::string inline_text;
    if (b.text.size() <= kControlTextBytes) inline_text = std::move(b.text);
    else cycle |= kHealthFollows | uint64_t(b.text.size()) << 8;
    if (!TellNodes(ControlMessage{ControlMessage::Kind::kHealth, id_, cycle, std::move(inline_text)}, int32_t(b.to))) return;
    if (cycle & kHealthFollows) {
      HealthTransfer& o = health_out_.emplace_back();
      o.peer = b.to;
      o.bytes = std::make_shared<std::string>(std::move(b.text));
      o.handle = t->Send(b.to, kHealthTag, o.bytes->data(), o.bytes->size(), o.bytes);
      sent += o.bytes->size();
    }
    if (links_.counters != nullptr) {
      links_.counters->health_messages += cycle & kHealthFollows ? 2 : 1;
      links_.counters->health_bytes += sent;
    }
  }
}

bool Job::PollHealth() {
  Transport* t = links_.transport;
  bool did = false;
  Status err;  // a failed transfer means a lost peer: the transport reports it
  for (auto it = health_out_.begin(); it != health_out_.end();) {
    if (t->Test(it->handle, &err) == CommState::kPending) {
      ++it;
    } else {
      it = health_out_.erase(it);
      did = true;
    }
  }
  // In order of arrival, each peer's in the order sent.
  for (size_t i = 0; i < health_in_.size();) {
    const CommState s = t->Test(health_in_[i].handle, &err);
    if (s == CommState::kPending) {
      ++i;
      continue;
    }
    HealthTransfer in = std::move(health_in_[i]);
    health_in_.erase(health_in_.begin() + ptrdiff_t(i));
    did = true;
    if (s == CommState::kDone) DeliverHealth(in.peer, in.down, *in.bytes);
  }
  return did;
}

void Job::CancelHealth() {
  Transport* t = links_.transport;
  for (const HealthTransfer& h : health_in_) t->Cancel(h.handle);
  for (const HealthTransfer& h : health_out_) t->Cancel(h.handle);
  health_in_.clear();
  health_out_.clear();
}

std::vector<bool> Job::LostNodes() const {
  const Transport* t = links_.transport;
  std::vector<bool> lost(t ? t->size() : 0);
  for (uint32_t p = 0; p < lost.size(); ++p) lost[p] = p != t->rank() && t->PeerLost(p);
  return lost;
}

std::vector<NodeHealth> Job::PeerHealth(uint64_t now_ns) const {
  return links_.transport ? health_.Peers(now_ns, LostNodes()) : std::vector<NodeHealth>{};
}

bool Job::PeersAttached(uint64_t now_ns) const {
  for (const NodeHealth& n : PeerHealth(now_ns))
    if (n.state == "ok")
      for (const RankHealth& r : n.ranks)
        if (r.attached) return true;
  return false;
}

uint64_t Job::PendingTensors() const {
  uint64_t pending = 0;
  for (const auto& [id, set] : sets_) pending += set->pending_tensors();
  return pending;
}

void Engine::CaptureJobs(uint64_t now_ns, EngineFacts* f) const {
  for (const auto& [id, t] : tenants_) {
    f->has_job = true;
    f->pending += t->job->PendingTensors();
    JobUsage& u = f->status.jobs.emplace_back();
    u.job_id = id;
    u.ranks = uint32_t(t->client_by_local_rank.size());
    u.requests = t->usage.requests;
    u.bytes = t->usage.bytes;
    u.errors = t->usage.errors;
    u.engine_s = double(t->usage.engine_ns) / 1e9;
    u.waited_s = double(t->usage.waited_ns) / 1e9;
    u.link_turns_waited = pacer_.held(id);
    u.on_loss = OnLossName(t->config.on_loss);
    u.node_rank = t->config.node_rank;
    u.nodes = t->config.nodes;
    u.local_size = t->local_size;
    const OwnLinks* own = links_.Of(id);
    if (Transport* transport = own ? own->transport.get() : links_.daemons())
      u.link_bytes = transport->bytes_sent() - t->usage.link_bytes_base;
    if (own == nullptr) continue;
    // A job on links of its own reports its health to its own nodes.
    EngineFacts::OwnLinkJob& j = f->own_link_jobs.emplace_back();
    j.job = id;
    j.node_rank = own->node_rank;
    j.host = t->job->host();
    j.pending = t->job->PendingTensors();
    j.peer_health = t->job->PeerHealth(now_ns);
  }
}

std::shared_ptr<EngineFacts> Engine::CaptureFacts() const {
  auto f = std::make_shared<EngineFacts>();
  StatusSnapshot* s = &f->status;
  const uint64_t now_ns = abi::MonotonicNs();
  f->now_ns = now_ns;
  s->uptime_s = double(now_ns - tally_.start_ns) / 1e9;
  s->node_rank = config_.node_rank;
  s->node_count = config_.nodes;
  const Tenant* only = Only();
  s->local_size = only != nullptr ? only->local_size : local_size_;
  s->clients = SnapshotClients(now_ns);
  f->kind_counts.assign(counters_.by_kind.begin(), counters_.by_kind.end());
  s->error_ops = tally_.error_ops;
  s->fused_ops = counters_.fused_ops;
  s->health_messages = counters_.health_messages;
  s->health_bytes = counters_.health_bytes;
  s->fused_tensors = counters_.fused_tensors;
  s->fusion_sizes = counters_.fusion_sizes;
  s->compressed = counters_.compressed;
  s->residuals = residuals_gone_;
  for (const auto& [id, t] : tenants_) s->residuals += t->residuals.stats();
  s->stall_warnings = tally_.stall_warnings;
  s->open_requests = ledger_.open();
  s->requests_finished_twice = ledger_.refused();
  // Jobs side by side: the status names none (StatusRequest.job picks one's view).
  s->job_id = only != nullptr && !side_by_side_ ? only->job->id() : 0;
  s->side_by_side = side_by_side_;
  CaptureJobs(now_ns, f.get());
  s->on_loss = OnLossName(config_.on_loss);
  if (only != nullptr) {
    f->reports_health = links_.daemons() != nullptr;
    f->host = only->job->host();
    s->membership_changes = only->job->membership().changes();
    if (f->reports_health) f->peer_health = only->job->PeerHealth(now_ns);
  }
  if (tenants_.size() == 1) s->timeline = only->timeline->State();
  for (const auto& [id, t] : tenants_) s->job_timelines[id] = t->timeline->State();
  s->engine_busy_ns = tally_.busy_ns;
  s->engine_wakeups = tally_.wakeups;
  s->engine_work_turns = tally_.work_turns;
  s->collectives_completed = tally_.collectives;
  s->client_wakes = tally_.client_wakes;
  s->engine_messages = links_.messages_sent();
  s->engine_wait = EngineWait();
  s->engine_core_sharers = contention_.other_daemons();
  s->engine_core_wait_pct = contention_.measured() ? contention_.wait_pct() : -1;
  // Captured on the engine thread (or before it runs), so this thread's clock is the engine's.
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  s->engine_cpu_s = double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
  for (const auto& [id, t] : tenants_)
    t->job->SnapshotSets(now_ns, ledger_, uint64_t(config_.stall_warning_s) * 1'000'000'000ull, &s->process_sets, &s->stalls);
  if (gpu_) {
    s->has_gpu = true;
    s->gpu = gpu_->stats();
  }
  if (const Transport* transport = links_.daemons()) {
    s->coordinated = true;
    s->coord_mode = CoordName(config_.coord);
    for (uint32_t p = 0; p < transport->size(); ++p)
      if (p != transport->rank()) f->peers_lost.emplace_back(p, transport->PeerLost(p));
  }
  return f;
}

}  // namespace syncd
