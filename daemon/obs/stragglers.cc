#include "daemon/obs/stragglers.h"

#include <algorithm>
#include <map>

namespace syncd {

void StragglerWindow::Record(const std::vector<std::pair<uint32_t, uint64_t>>& arrivals) {
  if (arrivals.size() < 2 || window_ == 0) return;
  if (records_.size() < window_) records_.resize(window_);
  Record_& r = records_[next_];
  next_ = (next_ + 1) % window_;
  count_ = std::min(count_ + 1, window_);
  r.late_ns.clear();
  r.wait_ns = 0;
  uint64_t first = UINT64_MAX, last_ns = 0;
  for (const auto& [rank, ns] : arrivals) {
    first = std::min(first, ns);
    if (ns >= last_ns) {  // ties: the later in the list (no rank is singled out by order alone)
      last_ns = ns;
      r.last = rank;
    }
  }
  for (const auto& [rank, ns] : arrivals) {
    r.late_ns.emplace_back(rank, ns - first);
    r.wait_ns += last_ns - ns;
  }
}

std::vector<StragglerRank> StragglerWindow::Summary() const {
  std::map<uint32_t, std::vector<uint64_t>> late;
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> caused;  // rank -> (times last, wait caused)
  uint64_t total_wait = 0;
  for (size_t i = 0; i < count_; ++i) {
    const Record_& r = records_[(next_ + window_ - count_ + i) % window_];
    for (const auto& [rank, ns] : r.late_ns) {
      std::vector<uint64_t>& v = late[rank];
      if (v.empty()) v.reserve(count_);  // one allocation per rank, not one per doubling
      v.push_back(ns);
    }
    ++caused[r.last].first;
    caused[r.last].second += r.wait_ns;
    total_wait += r.wait_ns;
  }
  std::vector<StragglerRank> out;
  out.reserve(late.size());
  for (auto& [rank, ns] : late) {
    StragglerRank s;
    s.rank = rank;
    s.collectives = ns.size();
    s.last = caused[rank].first;
    double sum = 0;
    for (uint64_t v : ns) sum += double(v);
    s.mean_late_ms = sum / double(ns.size()) / 1e6;
    std::sort(ns.begin(), ns.end());
    s.p95_late_ms = double(ns[std::min(ns.size() - 1, (ns.size() * 95 + 99) / 100 - 1)]) / 1e6;  // nearest rank
    s.wait_share = total_wait ? double(caused[rank].second) / double(total_wait) : 0.0;
    out.push_back(s);
  }
  std::stable_sort(out.begin(), out.end(), [](const StragglerRank& a, const StragglerRank& b) {
    return a.wait_share != b.wait_share ? a.wait_share > b.wait_share : a.mean_late_ms > b.mean_late_ms;
  });
  return out;
}

void StragglerWindow::RecordNodeWait(uint64_t wait_ns, uint64_t spread_ns) {
  if (window_ == 0) return;
  if (node_waits_.size() < window_) {
    node_waits_.emplace_back(wait_ns, spread_ns);
    return;
  }
  node_waits_[node_next_] = {wait_ns, spread_ns};
  node_next_ = (node_next_ + 1) % window_;
}

StragglerWindow::NodeWait StragglerWindow::node_wait() const {
  NodeWait w;
  if (node_waits_.empty()) return w;
  std::vector<uint64_t> v, spreads;
  v.reserve(node_waits_.size());
  spreads.reserve(node_waits_.size());
  double sum = 0;
  for (const auto& [ns, spread_ns] : node_waits_) {
    v.push_back(ns);
    spreads.push_back(spread_ns);
    sum += double(ns);
  }
  w.collectives = v.size();
  w.mean_ms = sum / double(v.size()) / 1e6;
  std::sort(spreads.begin(), spreads.end());
  w.spread_p50_ms = double(spreads[spreads.size() / 2]) / 1e6;
  std::sort(v.begin(), v.end());
  w.p50_ms = double(v[v.size() / 2]) / 1e6;
  w.p95_ms = double(v[std::min(v.size() - 1, (v.size() * 95 + 99) / 100 - 1)]) / 1e6;
  return w;
}

}  // namespace syncd
