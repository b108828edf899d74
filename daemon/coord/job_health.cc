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
  if (out[0] == '@') out[0] = '_';  // '@' opens a bundle's entry
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
    : self_(self), start_ns_(start_ns), tree_(nodes, self, start_ns), above_(self), peers_(nodes) {}

std::string JobHealth::EncodeReport(const NodeHealth& mine) {
  char head[128];
  snprintf(head, sizeof(head), " %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", mine.daemon_pid,
           mine.pending, mine.collectives, uint64_t(mine.wait_p50_ms * 1e3), uint64_t(mine.wait_p95_ms * 1e3),
           uint64_t(mine.spread_p50_ms * 1e3));
  std::string out = Word(mine.host) + head;
  for (const RankHealth& r : mine.ranks) {
    char row[160];
    snprintf(row, sizeof(row), "%u %d %d %" PRId64 " %c %c %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %u\n", r.rank,
             r.pid, r.attached ? 1 : r.left ? 2 : 0, r.last_seen_s < 0 ? int64_t(-1) : int64_t(r.last_seen_s * 1e3),
             ProcessLetter(r.process), r.unresponsive == 0 ? '-' : r.unresponsive, r.collectives, r.last,
             uint64_t(r.mean_late_ms * 1e3), uint64_t(r.p95_late_ms * 1e3), unsigned(r.wait_share * 1e6));
    out += row;
  }
  return out;
}

StatusOr<NodeHealth> JobHealth::DecodeReport(uint32_t from, const std::string& text) {
  NodeHealth h;
  h.node = from;
  std::istringstream in(text);
  uint64_t wait_p50_us = 0, wait_p95_us = 0, spread_us = 0;
  if (!(in >> h.host >> h.daemon_pid >> h.pending >> h.collectives >> wait_p50_us >> wait_p95_us >> spread_us))
    return ProtocolError("header '" + text.substr(0, 80) + "'");
  h.wait_p50_ms = double(wait_p50_us) / 1e3;
  h.wait_p95_ms = double(wait_p95_us) / 1e3;
  h.spread_p50_ms = double(spread_us) / 1e3;
  std::string row;
  std::getline(in, row);  // the header's end
  while (std::getline(in, row)) {
    std::istringstream fields(row);
    RankHealth r;
    int attached = 0;
    int64_t seen_ms = 0;
    char process = 0, unresponsive = 0;
    uint64_t mean_us = 0, p95_us = 0;
    unsigned share = 0;
    std::string extra;
    if (!(fields >> r.rank >> r.pid >> attached >> seen_ms >> process >> unresponsive >> r.collectives >> r.last >>
          mean_us >> p95_us >> share) ||
        (fields >> extra) || attached < 0 || attached > 2)
      return ProtocolError("rank row '" + row.substr(0, 80) + "'");
    r.attached = attached == 1;  // 0 lost, 2 left
    r.left = attached == 2;
    r.last_seen_s = seen_ms < 0 ? -1.0 : double(seen_ms) / 1e3;
    r.process = ProcessWords(process);
    r.unresponsive = unresponsive;
    r.mean_late_ms = double(mean_us) / 1e3;
    r.p95_late_ms = double(p95_us) / 1e3;
    r.wait_share = double(share) / 1e6;
    h.ranks.push_back(r);
  }
  return h;
}

std::string JobHealth::Bundle(bool down, uint64_t now_ns) const {
  std::string out;
  auto add = [&](uint32_t node, uint64_t origin_ns, const std::string& text) {
    out += "@" + std::to_string(node) + " " + std::to_string((now_ns > origin_ns ? now_ns - origin_ns : 0) / 1'000'000) + "\n";
    out += text;
  };
  if (mine_ns_ != 0) add(self_, mine_ns_, mine_);
  for (uint32_t n = 0; n < peers_.size(); ++n) {
    const Peer& p = peers_[n];
    // Up: what came from below and is still fresh (the root has the rest); down: everything.
    if (p.origin_ns != 0 && (down || (p.from_below && now_ns - p.origin_ns < kSilentNs))) add(n, p.origin_ns, p.text);
  }
  return out;
}

void JobHealth::Down(uint64_t now_ns, const std::vector<bool>& lost, std::vector<HealthBundle>* out) const {
  const std::vector<uint32_t> below = tree_.Below(now_ns, lost);
  if (below.empty()) return;
  const std::string text = Bundle(true, now_ns);
  for (uint32_t p : below) out->push_back(HealthBundle{p, true, text});
}

void JobHealth::Wave(uint64_t now_ns, const std::vector<bool>& lost, std::vector<HealthBundle>* out) {
  above_ = tree_.Above(now_ns, lost);
  if (above_ == self_) Down(now_ns, lost, out);
  else out->push_back(HealthBundle{above_, false, Bundle(false, now_ns)});
  tree_.Sent(now_ns);
}

std::vector<HealthBundle> JobHealth::Report(const NodeHealth& mine, uint64_t now_ns, const std::vector<bool>& lost) {
  mine_ = EncodeReport(mine);
  mine_ns_ = now_ns;
  std::vector<HealthBundle> out;
  above_ = tree_.Above(now_ns, lost);
  if (tree_.Due(now_ns, lost, true)) Wave(now_ns, lost, &out);
  return out;
}

Status JobHealth::Receive(uint32_t from, bool down, const std::string& text, uint64_t now_ns,
                          const std::vector<bool>& lost, std::vector<HealthBundle>* out) {
  if (from >= peers_.size() || from == self_) return Malformed(from, "not a peer of this job");
  struct Entry {
    uint32_t node;
    uint64_t origin_ns;
    std::string text;
    NodeHealth health;
  };
  std::vector<Entry> entries;
  for (size_t at = 0; at < text.size();) {
    const size_t eol = text.find('\n', at);
    unsigned node = 0;
    unsigned long long age_ms = 0;
    char tail = 0;
    if (text[at] != '@' || eol == std::string::npos ||
        sscanf(text.substr(at, eol - at).c_str(), "@%u %llu%c", &node, &age_ms, &tail) != 2 || node >= peers_.size())
      return Malformed(from, "entry '" + text.substr(at, 40) + "'");
    size_t end = text.find("\n@", eol);
    end = end == std::string::npos ? text.size() : end + 1;
    at = end;
    if (node == self_) continue;  // this node's own, come back down
    Entry e{node, 0, text.substr(eol + 1, end - eol - 1), {}};
    StatusOr<NodeHealth> h = DecodeReport(node, e.text);
    if (!h.ok()) return Malformed(from, "node " + std::to_string(node) + "'s " + h.status().message());
    e.health = std::move(*h);
    const uint64_t age_ns = std::min<uint64_t>(age_ms * 1'000'000, now_ns);
    e.origin_ns = std::max<uint64_t>(now_ns - age_ns, 1);
    entries.push_back(std::move(e));
  }
  for (Entry& e : entries) {
    Peer& p = peers_[e.node];
    if (e.origin_ns <= p.origin_ns) continue;  // it has a fresher one
    p.latest = std::move(e.health);
    p.text = std::move(e.text);
    p.origin_ns = e.origin_ns;
    p.from_below = !down;
  }
  if (down) {
    tree_.HeardDown(from, now_ns);
    above_ = tree_.Above(now_ns, lost);
    if (from == above_) Down(now_ns, lost, out);  // on down at once
    if (tree_.Moved()) Wave(now_ns, lost, out);
  } else {
    tree_.HeardUp(from, now_ns);
    if (tree_.Due(now_ns, lost, false)) Wave(now_ns, lost, out);
  }
  return Status::Ok();
}

std::vector<NodeHealth> JobHealth::Peers(uint64_t now_ns, const std::vector<bool>& lost) const {
  std::vector<NodeHealth> out;
  for (uint32_t n = 0; n < peers_.size(); ++n) {
    if (n == self_) continue;
    const Peer& p = peers_[n];
    NodeHealth h = p.latest;
    h.node = n;
    const uint64_t since = p.origin_ns ? p.origin_ns : start_ns_;
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
      h.why = std::string(p.origin_ns ? "no report from its daemon for " : "no report from its daemon since the job started, ") +
              age + " (stopped, hung, or its network is down)";
    } else if (p.origin_ns == 0) {
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
