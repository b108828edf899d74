// Stalls: tensors some ranks submitted and others did not. Reported after --stall-warning-s,
// and after --stall-shutdown-s the job ends with the tensor and the missing ranks named, so a
// program never waits for ever on ranks that will not come.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "daemon/engine/engine.h"
#include "daemon/engine/job.h"
#include "daemon/engine/engine_timing.h"
#include "daemon/obs/status_builder.h"

namespace syncd {
namespace {

using engine_timing::kStallCheckPeriodNs;
constexpr uint64_t kNsPerS = 1'000'000'000;
constexpr size_t kStallsNamed = 3;  // in the shutdown message
// A tensor waiting this long for ranks that left the job ends it: past the rejoin grace and the
// other nodes' next health report.
constexpr uint64_t kDepartedStallNs = engine_timing::kRejoinGraceNs + 1'500'000'000;

// "rank 3", "ranks 0-63,65": ranges keep a big job's list short.
std::string FormatRanks(std::vector<uint32_t> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (i ? "," : "") + std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string Describe(const StallSnapshot& s) {
  std::string text = s.transfer.empty() ? "tensor '" + s.name + "'"
                                        : s.transfer + " of tensor '" + s.name + "' (tag " + std::to_string(s.tag) + ")";
  text += " has waited " + std::to_string(int64_t(s.waiting_s)) + " s for " +
          (s.missing_ranks.empty() ? std::string("a send from any rank") : FormatRanks(s.missing_ranks));
  if (!s.submitted_ranks.empty()) text += " (submitted by " + FormatRanks(s.submitted_ranks) + ")";
  return text;
}

}  // namespace

std::vector<StallSnapshot> Job::Stalls(uint64_t now_ns, uint64_t min_age_ns, bool transfers) const {
  std::vector<StallSnapshot> out;
  for (const auto& [id, set] : sets_)
    for (StallSnapshot& s : set->Stalls(now_ns, min_age_ns)) out.push_back(std::move(s));
  if (transfers)
    for (StallSnapshot& s : p2p_.Waits(now_ns, min_age_ns)) out.push_back(std::move(s));
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.waiting_s > b.waiting_s; });
  return out;
}

std::string Job::DepartedRanks(const StallSnapshot& s, uint64_t now_ns) const {
  std::vector<NodeHealth> others;
  std::vector<uint32_t> gone;
  for (uint32_t rank : s.missing_ranks) {
    if (rank / local_size_ == config_.node_rank) {
      const auto it = lost_.find(rank % local_size_);
      if (it != lost_.end() && !it->second.continued && it->second.rejoin_deadline_ns == 0) gone.push_back(rank);
      continue;
    }
    if (links_.transport == nullptr) continue;
    if (others.empty()) others = health_.Peers(now_ns, std::vector<bool>(links_.transport->size(), false));
    for (const NodeHealth& n : others)
      for (const RankHealth& r : n.ranks)
        if (r.rank == rank && !r.attached && n.state == "ok") gone.push_back(rank);
  }
  return gone.empty() ? "" : FormatRanks(gone);
}

uint64_t Job::CheckStalls(uint64_t now_ns, const std::vector<RankActivity>& here) {
  // Under --on-loss fail, a tensor that has waited past the rejoin grace for ranks that left the
  // job (they detached, or their processes exited saying goodbye, and did not attach again) will
  // never complete: the job ends now, naming them, not after --stall-shutdown-s. (A node whose
  // every rank left has no one to fail its departed ranks' tensors for; the other nodes do it.)
  if (config_.on_loss == OnLoss::kFail)
    for (const StallSnapshot& s : Stalls(now_ns, kDepartedStallNs, /*transfers=*/false))
      if (const std::string gone = DepartedRanks(s, now_ns); !gone.empty()) {
        const Status why(SYNCD_ERR_RANK_LOST, Describe(s) + ": " + gone + " left the job (detached) and did not " +
                                                  "attach again");
        spdlog::error("{}", why.message());
        End(EndScope::Job(ProcessSet::Reach::kJob), why);
        return 0;
      }
  uint64_t warnings = 0;
  const double period_s = double(config_.stall_warning_s);
  for (const StallSnapshot& s : Stalls(now_ns, uint64_t(config_.stall_warning_s) * kNsPerS)) {
    if (std::fmod(s.waiting_s - period_s, period_s) >= double(kStallCheckPeriodNs) / 1e9) continue;
    spdlog::warn("stall: {}", DescribeStall(s, now_ns, here));
    ++warnings;
  }
  if (config_.stall_shutdown_s == 0) return warnings;
  // Once the oldest stall passes --stall-shutdown-s the job ends, naming every tensor that stalls
  // by then (past the warning time), oldest first: ranks that submit different names wait for
  // each other, and the names one of them waits on may be a moment younger.
  const uint32_t named_s = std::min(config_.stall_warning_s, config_.stall_shutdown_s);
  // Sends and receives are the program's own pattern (a receive may wait for long on purpose):
  // they are warned about, and bounded by the caller's timeout, not by this.
  const std::vector<StallSnapshot> stalled = Stalls(now_ns, uint64_t(named_s) * kNsPerS, /*transfers=*/false);
  if (stalled.empty() || stalled.front().waiting_s < double(config_.stall_shutdown_s)) return warnings;
  // Ranks that submit different names each wait for the other: name a few, not just one.
  std::string what;
  for (size_t i = 0; i < stalled.size() && i < kStallsNamed; ++i)
    what += (i ? "; " : "") + DescribeStall(stalled[i], now_ns, here);
  if (stalled.size() > kStallsNamed) what += "; and " + std::to_string(stalled.size() - kStallsNamed) + " more";
  const Status why(SYNCD_ERR_STALLED, "the job was shut down after a stall of --stall-shutdown-s " +
                                          std::to_string(config_.stall_shutdown_s) + " s: " + what);
  spdlog::error("{}", why.message());
  End(EndScope::Job(ProcessSet::Reach::kJob), why);  // many nodes: tells the others, which fail what they hold
  return warnings;
}

std::string Job::DescribeStall(const StallSnapshot& s, uint64_t now_ns, const std::vector<RankActivity>& here) const {
  std::string text = Describe(s);
  std::vector<NodeHealth> others;  // ranks of other nodes: as their daemons' latest reports say
  for (uint32_t rank : s.missing_ranks) {
    bool local = false;
    for (const RankActivity& a : here)
      if (a.rank == rank) {
        local = true;
        // As the other nodes' reports name it (`rank R on node N: stopped ...`), where the stall
        // is seen on the stopped rank's own node first.
        const std::string state = ProcessState(a.pid);
        const char code = state == "stopped" ? 'S' : state == "zombie" ? 'Z' : '-';
        if (code != '-')
          text += " [rank " + std::to_string(rank) +
                  (links_.transport ? " on node " + std::to_string(links_.transport->rank()) : std::string()) + ": " +
                  UnresponsiveText(code, 0, state, s.name) + "]";
        else
          text += " [rank " + std::to_string(rank) +
                  (a.last_call_ns ? " last called syncd " + std::to_string((now_ns - a.last_call_ns) / kNsPerS) + " s ago]"
                                  : " has not called syncd since it attached]");
      }
    if (local || links_.transport == nullptr) continue;
    if (others.empty()) others = health_.Peers(now_ns, std::vector<bool>(links_.transport->size(), false));
    for (const NodeHealth& n : others)
      for (const RankHealth& r : n.ranks)
        if (r.rank == rank) {
          char what[224];
          if (n.state == "ok" && r.unresponsive != '-')  // stopped, exited, or away from syncd
            snprintf(what, sizeof(what), " [rank %u on node %u: %s]", rank, n.node,
                     UnresponsiveText(r.unresponsive, r.last_seen_s, r.process, s.name).c_str());
          else if (n.state != "ok")
            snprintf(what, sizeof(what), " [rank %u on node %u: its daemon has sent no report for %.0f s]", rank, n.node,
                     n.report_age_s);
          else if (r.last_seen_s >= 0)
            snprintf(what, sizeof(what), " [rank %u on node %u last called syncd %.0f s ago]", rank, n.node, r.last_seen_s);
          else
            snprintf(what, sizeof(what), " [rank %u on node %u has not called syncd since it attached]", rank, n.node);
          text += what;
        }
  }
  return text;
}

void Engine::CheckStalls(uint64_t now_ns) {
  tally_.last_stall_check_ns = now_ns;
  for (const auto& [job, t] : tenants_) {
    std::vector<RankActivity> here;
    for (const auto& [lr, id] : t->client_by_local_rank)
      here.push_back({clients_.at(id).info->rank, clients_.at(id).last_submit_ns, clients_.at(id).info->pid});
    tally_.stall_warnings += t->job->CheckStalls(now_ns, here);
    t->job->ExpireDepartures(now_ns, !t->client_by_local_rank.empty());
  }
  Settle();
}

}  // namespace syncd
