#include "daemon/coord/job_health.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace syncd {
namespace {

char ProcessLetter(const std::string& process) {
  if (process.empty()) return '-';
  if (process == "running") return 'R';
  if (process == "sleeping") return 'S';
  if (process == "disk wait") return 'D';
  if (process == "stopped") return 'T';
  if (process == "zombie") return 'Z';
  return process.size() == 1 ? process[0] : '?';
}

std::string ProcessWords(char letter) {
  switch (letter) {
    case '-': return "";
    case 'R': return "running";
    case 'S': return "sleeping";
    case 'D': return "disk wait";
    case 'T': return "stopped";
    case 'Z': return "zombie";
    default: return std::string(1, letter);
  }
}

// A host name as one word of the report (it never holds blanks; keep it so).
std::string Word(const std::string& s) {
  std::string out = s.empty() ? "?" : s.substr(0, 64);
  for (char& c : out)
    if (c <= ' ' || c > '~') c = '_';
  return out;
}

Status Malformed(uint32_t from, const std::string& what) {
  return Status(SYNCD_ERR_PROTOCOL, "node " + std::to_string(from) + " sent a health report this node cannot read (" + what + ")");
}

}  // namespace

std::string UnresponsiveText(char code, double last_seen_s, const std::string& process, const std::string& tensor) {
  switch (code) {
    case 'S': return "stopped (SIGSTOP, Ctrl-Z or a debugger)";
    case 'Z': return "exited (zombie)";
    case 'N': {
      char what[64];
      snprintf(what, sizeof(what), "not calling syncd for %.1f s", last_seen_s);
      return std::string(what) + " while " + (tensor.empty() ? "a tensor" : "tensor '" + tensor + "'") +
             " waits for it (process " + (process.empty() ? "gone" : process) + ")";
    }
    default: return "";
  }
}

JobHealth::JobHealth(uint32_t nodes, uint32_t self, uint64_t start_ns)
    : self_(self), start_ns_(start_ns), peers_(nodes) {}

std::vector<ControlMessage> JobHealth::Encode(const NodeHealth& mine, uint64_t job) {
  char head[128];
  snprintf(head, sizeof(head), " %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", mine.daemon_pid,
           mine.pending, mine.collectives, uint64_t(mine.wait_p50_ms * 1e3), uint64_t(mine.wait_p95_ms * 1e3),
           uint64_t(mine.spread_p50_ms * 1e3));
  std::vector<std::string> chunks(1, Word(mine.host) + head);
  for (const RankHealth& r : mine.ranks) {
    char row[160];
    snprintf(row, sizeof(row), "%u %d %d %" PRId64 " %c %c %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %u\n", r.rank,
             r.pid, int(r.attached), r.last_seen_s < 0 ? int64_t(-1) : int64_t(r.last_seen_s * 1e3),
             ProcessLetter(r.process), r.unresponsive == 0 ? '-' : r.unresponsive, r.collectives, r.last,
             uint64_t(r.mean_late_ms * 1e3), uint64_t(r.p95_late_ms * 1e3), unsigned(r.wait_share * 1e6));
    if (chunks.back().size() + strlen(row) > kControlTextBytes) chunks.emplace_back();
    chunks.back() += row;
  }
  const uint64_t seq = ++seq_ & 0xFFFFFFFFFFFull;
  std::vector<ControlMessage> out;
  const uint64_t count = std::min<uint64_t>(chunks.size(), 255);
  for (uint64_t i = 0; i < count; ++i)
    out.push_back(ControlMessage{ControlMessage::Kind::kHealth, job, seq << 16 | i << 8 | count, std::move(chunks[i])});
  return out;
}

Status JobHealth::Receive(uint32_t from, const ControlMessage& m, uint64_t now_ns) {
  if (from >= peers_.size() || from == self_) return Malformed(from, "not a peer of this job");
  Peer& p = peers_[from];
  const uint64_t seq = m.cycle >> 16, index = (m.cycle >> 8) & 0xFF, count = m.cycle & 0xFF;
  if (count == 0 || index >= count) return Malformed(from, "chunk " + std::to_string(index) + " of " + std::to_string(count));
  if (index == 0) {
    p.building_seq = seq;
    p.chunks.clear();
  }
  if (seq != p.building_seq || index != p.chunks.size()) return Status::Ok();  // a report cut off: wait for the next
  p.chunks.push_back(m.text);
  if (p.chunks.size() < count) return Status::Ok();
  NodeHealth h;
  h.node = from;
  std::istringstream in(p.chunks[0]);
  uint64_t wait_p50_us = 0, wait_p95_us = 0, spread_us = 0;
  if (!(in >> h.host >> h.daemon_pid >> h.pending >> h.collectives >> wait_p50_us >> wait_p95_us >> spread_us)) return Malformed(from, "header '" + p.chunks[0].substr(0, 80) + "'");
  h.wait_p50_ms = double(wait_p50_us) / 1e3;
  h.wait_p95_ms = double(wait_p95_us) / 1e3;
  h.spread_p50_ms = double(spread_us) / 1e3;
  for (size_t c = 0; c < p.chunks.size(); ++c) {
    if (c > 0) in = std::istringstream(p.chunks[c]);
    RankHealth r;
    int attached = 0;
    int64_t seen_ms = 0;
    char process = 0, unresponsive = 0;
    uint64_t mean_us = 0, p95_us = 0;
    unsigned share = 0;
    while (in >> r.rank >> r.pid >> attached >> seen_ms >> process >> unresponsive >> r.collectives >> r.last >>
           mean_us >> p95_us >> share) {
      r.attached = attached != 0;
      r.last_seen_s = seen_ms < 0 ? -1.0 : double(seen_ms) / 1e3;
      r.process = ProcessWords(process);
      r.unresponsive = unresponsive;
      r.mean_late_ms = double(mean_us) / 1e3;
      r.p95_late_ms = double(p95_us) / 1e3;
      r.wait_share = double(share) / 1e6;
      h.ranks.push_back(r);
    }
    if (!in.eof()) return Malformed(from, "rank row in '" + p.chunks[c].substr(0, 80) + "'");
  }
  p.latest = std::move(h);
  p.received_ns = now_ns;
  p.chunks.clear();
  p.building_seq = UINT64_MAX;
  return Status::Ok();
}

std::vector<NodeHealth> JobHealth::Peers(uint64_t now_ns, const std::vector<bool>& lost) const {
  std::vector<NodeHealth> out;
  for (uint32_t n = 0; n < peers_.size(); ++n) {
    if (n == self_) continue;
    const Peer& p = peers_[n];
    NodeHealth h = p.latest;
    h.node = n;
    const uint64_t since = p.received_ns ? p.received_ns : start_ns_;
    h.report_age_s = now_ns > since ? double(now_ns - since) / 1e9 : 0.0;
    // What the ranks' times were when it was sent, aged by how long ago that was.
    for (RankHealth& r : h.ranks) {
      if (r.last_seen_s >= 0) r.last_seen_s += h.report_age_s;
      r.why = UnresponsiveText(r.unresponsive, r.last_seen_s, r.process, "");
    }
    char age[48];
    snprintf(age, sizeof(age), "%.1f s", h.report_age_s);
    if (n < lost.size() && lost[n]) {
      h.state = "lost";
      h.why = "its daemon was lost (the transport reported it)";
    } else if (now_ns - since >= kSilentNs) {
      h.state = "unresponsive";
      h.why = std::string(p.received_ns ? "no report from its daemon for " : "no report from its daemon since the job started, ") +
              age + " (stopped, hung, or its network is down)";
    } else if (p.received_ns == 0) {
      h.state = "waiting";
    }
    out.push_back(std::move(h));
  }
  return out;
}

void CompareNodeWaits(std::vector<NodeHealth>* nodes) {
  double longest = -1;
  for (const NodeHealth& n : *nodes)
    if (n.collectives > 0) longest = std::max(longest, n.wait_p50_ms);
  for (NodeHealth& n : *nodes) {
    n.late_ms = n.collectives > 0 ? longest - n.wait_p50_ms : -1.0;
    for (RankHealth& r : n.ranks)
      r.job_late_ms = n.late_ms >= 0 && r.collectives > 0 ? std::max(0.0, n.late_ms - n.spread_p50_ms + r.mean_late_ms) : -1.0;
  }
}

}  // namespace syncd
