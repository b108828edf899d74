#include "daemon/obs/status_builder.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "daemon/collectives/collective.h"

namespace syncd {
namespace {

// Why a rank holds the others up (UnresponsiveText's code), or '-'.
char Unresponsive(const ClientSnapshot& c) {
  if (c.process == "stopped") return 'S';
  if (c.process == "zombie") return 'Z';
  if (!c.awaited || c.last_seen_s < double(kUnresponsiveNs) / 1e9) return '-';
  return 'N';
}

// This node's report for the job-wide view: its daemon, each rank's liveness and straggler figures.
NodeHealth LocalHealth(const StatusSnapshot& s, const EngineFacts& f, const JobFiguresSnapshot& figures) {
  const StragglerWindow::NodeWait& wait = figures.node_wait;
  NodeHealth h;
  h.node = s.node_rank;
  h.host = f.host;
  h.daemon_pid = int32_t(getpid());
  h.pending = f.pending;
  h.collectives = wait.collectives;
  h.wait_p50_ms = wait.p50_ms;
  h.wait_p95_ms = wait.p95_ms;
  h.spread_p50_ms = wait.spread_p50_ms;
  for (const ClientSnapshot& c : s.clients) {
    if (c.state == "vacant") continue;  // a slot, not a rank: nothing of it to report
    RankHealth r;
    r.rank = c.rank;
    r.pid = c.pid;
    r.attached = c.state == "attached";
    r.left = c.state == "left";
    r.last_seen_s = c.last_seen_s;
    r.process = c.process;
    r.unresponsive = c.unresponsive_code;
    r.why = c.unresponsive;
    for (const StragglerRank& g : figures.stragglers)
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

JobFiguresSnapshot Summarize(const JobFigures& g) {
  JobFiguresSnapshot out;
  for (const auto& [key, m] : g.metrics) out.collectives[{key.first, OpKindName(abi::OpKind(key.second))}] = m;
  out.stragglers = g.stragglers.Summary();
  out.straggler_window = g.stragglers.window();
  out.straggler_collectives = g.stragglers.collectives();
  out.node_wait = g.stragglers.node_wait();
  return out;
}

}  // namespace

std::string ProcessState(int32_t pid) {
  char path[32];
  snprintf(path, sizeof(path), "/proc/%d/stat", int(pid));
  FILE* f = fopen(path, "r");
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

std::shared_ptr<const StatusSnapshot> StatusBuilder::Build(EngineFacts f, NodeHealth* mine,
                                                           std::vector<std::pair<uint64_t, NodeHealth>>* own) {
  auto out = std::make_shared<StatusSnapshot>(std::move(f.status));
  StatusSnapshot& s = *out;
  for (ClientSnapshot& c : s.clients) {
    if (c.state != "attached") continue;
    c.process = ProcessState(c.pid);
    c.unresponsive_code = Unresponsive(c);
    c.unresponsive = UnresponsiveText(c.unresponsive_code, c.last_seen_s, c.process, c.awaited_tensor);
  }
  for (uint32_t k = 0; k < f.kind_counts.size(); ++k)
    if (const Collective* kind = FindCollective(abi::OpKind(k)); kind != nullptr)
      s.by_kind.emplace_back(kind->name(), f.kind_counts[k]);
  // A daemon of one job: its figures (one job's at most, the latest begun). Jobs side by side:
  // each served job's own.
  JobFiguresSnapshot alone;
  completions_->Fold([&s, &alone](const CompletionFigures& g) {
    s.dropped_completion_events = g.dropped;
    for (const auto& [id, figures] : g.jobs) {
      const uint64_t job = id;  // (clang 14 captures no structured binding)
      const bool served = std::any_of(s.jobs.begin(), s.jobs.end(), [job](const JobUsage& u) { return u.job_id == job; });
      if (!s.side_by_side) {
        alone = Summarize(figures);
      } else if (served) {
        s.job_figures[job] = Summarize(figures);
      }
    }
    return 0;
  });
  s.collectives = std::move(alone.collectives);
  s.stragglers = alone.stragglers;
  s.straggler_window = alone.straggler_window;
  s.straggler_collectives = alone.straggler_collectives;
  if (f.has_job && f.reports_health) {
    NodeHealth local = LocalHealth(s, f, alone);
    if (mine != nullptr) *mine = local;
    s.job_nodes = std::move(f.peer_health);
    s.job_nodes.push_back(std::move(local));
    CompareNodeWaits(&s.job_nodes);
    std::sort(s.job_nodes.begin(), s.job_nodes.end(), [](const NodeHealth& a, const NodeHealth& b) { return a.node < b.node; });
  }
  for (EngineFacts::OwnLinkJob& j : f.own_link_jobs) {
    // Its own ranks, at its own place among its nodes, with its own straggler figures.
    StatusSnapshot its;
    its.node_rank = j.node_rank;
    for (const ClientSnapshot& c : s.clients)
      if (c.job_id == j.job) its.clients.push_back(c);
    EngineFacts facts;
    facts.host = j.host;
    facts.pending = j.pending;
    const auto figures = s.job_figures.find(j.job);
    NodeHealth local = LocalHealth(its, facts, figures != s.job_figures.end() ? figures->second : JobFiguresSnapshot{});
    if (own != nullptr) own->emplace_back(j.job, local);
    std::vector<NodeHealth>& nodes = s.own_link_job_nodes[j.job];
    nodes = std::move(j.peer_health);
    nodes.push_back(std::move(local));
    CompareNodeWaits(&nodes);
    std::sort(nodes.begin(), nodes.end(), [](const NodeHealth& a, const NodeHealth& b) { return a.node < b.node; });
  }
  for (const auto& [node, lost] : f.peers_lost) s.peers.emplace_back(node, lost ? "lost" : "connected");
  std::stable_sort(s.stalls.begin(), s.stalls.end(), [](const auto& a, const auto& b) { return a.waiting_s > b.waiting_s; });
  if (s.stalls.size() > 32) s.stalls.resize(32);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  s.daemon_cpu_s = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  MutexLock lock(&mu_);
  if (f.now_ns >= latest_ns_) {
    latest_ = out;
    latest_ns_ = f.now_ns;
  }
  return out;
}

std::shared_ptr<const StatusSnapshot> StatusBuilder::Latest() const {
  MutexLock lock(&mu_);
  return latest_;
}

}  // namespace syncd
