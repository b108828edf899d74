// Health, live: each rank's last call into syncd and whether the others wait for it (the engine's
// part of the status; obs/status_builder.h reads process states and words it off the engine
// thread), and the job-wide view every daemon keeps of every other (the job's, coord/job_health.h).
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

}  // namespace

std::vector<ClientSnapshot> Engine::SnapshotClients(uint64_t now_ns) const {
  std::vector<ClientSnapshot> out;
  // Ranks the others have been waiting for past kUnresponsiveNs: global rank -> the oldest such tensor.
  std::map<uint32_t, const StallSnapshot*> awaited;
  const std::vector<StallSnapshot> waits = job_ ? job_->Stalls(now_ns, kUnresponsiveNs) : std::vector<StallSnapshot>{};
  for (const StallSnapshot& w : waits)
    for (uint32_t rank : w.missing_ranks) awaited.emplace(rank, &w);
  for (const auto& [id, c] : clients_) {
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
    cs.last_seen_s = c.last_submit_ns ? double(now_ns - c.last_submit_ns) / 1e9 : -1.0;
    if (const auto a = awaited.find(cs.rank); a != awaited.end()) {
      cs.awaited = true;
      cs.awaited_tensor = a->second->name;
    }
    out.push_back(cs);
  }
  if (job_) for (const auto& [lr, lost] : job_->lost()) {
    ClientSnapshot cs;
    cs.rank = config_.node_rank * local_size_ + lr;
    cs.local_rank = lr;
    cs.pid = lost.pid;
    cs.state = "lost";
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
  const Status st = health_.Receive(from, m, abi::MonotonicNs());
  // Only the view suffers: the job goes on.
  if (!st.ok()) spdlog::warn("job health: {}", st.message());
}

void Job::SendHealth(const NodeHealth& mine) {
  const Transport* t = links_.transport;
  uint64_t peers = 0;
  for (uint32_t p = 0; t != nullptr && p < t->size(); ++p) peers += p != t->rank() && !t->PeerLost(p);
  for (ControlMessage& m : health_.Encode(mine, id_)) {
    if (!TellNodes(std::move(m), -1)) break;
    if (links_.counters == nullptr) continue;
    links_.counters->health_messages += peers;
    links_.counters->health_bytes += peers * kControlMessageBytes;
  }
}

std::vector<NodeHealth> Job::PeerHealth(uint64_t now_ns) const {
  const Transport* t = links_.transport;
  if (t == nullptr) return {};
  std::vector<bool> lost(t->size());
  for (uint32_t p = 0; p < lost.size(); ++p) lost[p] = p != t->rank() && t->PeerLost(p);
  return health_.Peers(now_ns, lost);
}

uint64_t Job::PendingTensors() const {
  uint64_t pending = 0;
  for (const auto& [id, set] : sets_) pending += set->pending_tensors();
  return pending;
}

}  // namespace syncd
