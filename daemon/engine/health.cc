// Health, live: each rank's last call into syncd and its process state (the engine's status and
// metrics), and the job-wide view every daemon keeps of every other (the job's, coord/job_health.h).
// Engine thread only.
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "daemon/engine/engine.h"
#include "daemon/engine/job.h"

namespace syncd {
namespace {

// How long the others must have waited for a rank, and it been away from syncd, before status
// calls it unresponsive (well before the stall warning: a live view, not an alarm).
constexpr uint64_t kUnresponsiveNs = 2'000'000'000;

// The state letter of /proc/PID/stat, in words ("" when the process is gone).
std::string ProcessState(int32_t pid) {
  FILE* f = fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return "";
  char buf[512];
  const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  const char* paren = strrchr(buf, ')');  // the command name may hold spaces and parentheses
  if (paren == nullptr || paren[1] != ' ') return "";
  switch (paren[2]) {
    case 'R': return "running";
    case 'S': case 'I': return "sleeping";
    case 'D': return "disk wait";
    case 'T': case 't': return "stopped";
    case 'Z': case 'X': return "zombie";
    default: return std::string(1, paren[2]);
  }
}

// Why a rank holds the others up (UnresponsiveText's code), or '-'.
char Unresponsive(const ClientSnapshot& c, const StallSnapshot* awaited) {
  if (c.process == "stopped") return 'S';
  if (c.process == "zombie") return 'Z';
  if (awaited == nullptr || c.last_seen_s < double(kUnresponsiveNs) / 1e9) return '-';
  return 'N';
}

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
    cs.process = ProcessState(cs.pid);
    const auto a = awaited.find(cs.rank);
    cs.unresponsive_code = Unresponsive(cs, a == awaited.end() ? nullptr : a->second);
    cs.unresponsive = UnresponsiveText(cs.unresponsive_code, cs.last_seen_s, cs.process,
                                       a == awaited.end() ? "" : a->second->name);
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

NodeHealth Job::LocalHealth(const std::vector<ClientSnapshot>& clients, const std::vector<StragglerRank>& stragglers,
                            const StragglerWindow::NodeWait& wait) const {
  NodeHealth h;
  h.node = config_.node_rank;
  h.host = host_;
  h.daemon_pid = int32_t(getpid());
  for (const auto& [id, set] : sets_) h.pending += set->pending_tensors();
  h.collectives = wait.collectives;
  h.wait_p50_ms = wait.p50_ms;
  h.wait_p95_ms = wait.p95_ms;
  h.spread_p50_ms = wait.spread_p50_ms;
  for (const ClientSnapshot& c : clients) {
    RankHealth r;
    r.rank = c.rank;
    r.pid = c.pid;
    r.attached = c.state == "attached";
    r.last_seen_s = c.last_seen_s;
    r.process = c.process;
    r.unresponsive = c.unresponsive_code;
    r.why = c.unresponsive;
    for (const StragglerRank& g : stragglers)
      if (g.rank == c.rank) {
        r.collectives = g.collectives;
        r.last = g.last;
        r.mean_late_ms = g.mean_late_ms;
        r.p95_late_ms = g.p95_late_ms;
        r.wait_share = g.wait_share;
      }
    h.ranks.push_back(std::move(r));
  }
  return h;
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

bool Job::HealthDue(uint64_t now_ns) { return links_.transport != nullptr && health_.Due(now_ns); }

void Job::SendHealth(const NodeHealth& mine) {
  for (ControlMessage& m : health_.Encode(mine, id_))
    if (!TellNodes(std::move(m), -1)) break;
}

std::vector<NodeHealth> Job::Nodes(uint64_t now_ns, const NodeHealth& mine) const {
  std::vector<NodeHealth> out;
  const Transport* t = links_.transport;
  if (t == nullptr) return out;
  std::vector<bool> lost(t->size());
  for (uint32_t p = 0; p < lost.size(); ++p) lost[p] = p != t->rank() && t->PeerLost(p);
  out = health_.Peers(now_ns, lost);
  out.push_back(mine);
  CompareNodeWaits(&out);
  std::sort(out.begin(), out.end(), [](const NodeHealth& a, const NodeHealth& b) { return a.node < b.node; });
  return out;
}

void Engine::SendHealth(uint64_t now_ns) {
  if (!job_ || !job_->HealthDue(now_ns)) return;
  job_->SendHealth(job_->LocalHealth(SnapshotClients(now_ns), stragglers_.Summary(), stragglers_.node_wait()));
}

}  // namespace syncd
