#include "daemon/coord/health_tree.h"

#include <algorithm>

#include "daemon/transport/binomial_tree.h"

namespace syncd {
namespace {

bool IsLost(const std::vector<bool>& lost, uint32_t node) { return node < lost.size() && lost[node]; }

}  // namespace

HealthTree::HealthTree(uint32_t nodes, uint32_t self, uint64_t start_ns)
    : nodes_(nodes), self_(self), last_up_(nodes, 0), last_down_(nodes, 0), tried_(nodes, 0),
      last_sent_ns_(start_ns) {
  for (uint32_t p = self; p != 0;) {
    p = Parent(p);
    chain_.push_back(p);
  }
  for (uint32_t p = 1; p < self; ++p)
    if (std::find(chain_.begin(), chain_.end(), p) == chain_.end()) chain_.push_back(p);
  if (!chain_.empty()) tried_[chain_[0]] = start_ns;
  // Its children are waited for from the start (they report within a period).
  for (uint32_t c : Children(self, nodes)) last_up_[c] = start_ns;
}

std::vector<uint32_t> HealthTree::Children(uint32_t node, uint32_t nodes) { return BinomialTree{nodes, 0}.Children(node); }

bool HealthTree::Answers(uint32_t node, uint64_t now_ns, const std::vector<bool>& lost) const {
  return !IsLost(lost, node) && now_ns - std::max(last_down_[node], tried_[node]) < kRerouteNs;
}

uint32_t HealthTree::Above(uint64_t now_ns, const std::vector<bool>& lost) {
  if (chain_.empty()) return self_;
  if (last_call_ns_ != 0 && now_ns - last_call_ns_ > kRerouteNs) {
    // This thread stood still (stopped, descheduled): the silence was its own; trust the parent again.
    moved_ |= above_ != 0;
    above_ = 0;
    tried_[chain_[0]] = now_ns;
  }
  last_call_ns_ = now_ns;
  // Back to a node nearer in the chain that sends down again (the parent, answering once more).
  for (size_t i = 0; i < above_ && i < chain_.size(); ++i)
    if (!IsLost(lost, chain_[i]) && now_ns - last_down_[chain_[i]] < kRerouteNs) {
      above_ = i;
      moved_ = true;
      break;
    }
  // Round one that is lost or silent: the next, given kRerouteNs to answer.
  while (above_ < chain_.size() && !Answers(chain_[above_], now_ns, lost)) {
    ++above_;
    moved_ = true;
    if (above_ < chain_.size()) tried_[chain_[above_]] = now_ns;
  }
  return above_ < chain_.size() ? chain_[above_] : self_;
}

std::vector<uint32_t> HealthTree::Below(uint64_t now_ns, const std::vector<bool>& lost) const {
  std::vector<uint32_t> out;
  const std::vector<uint32_t> children = Children(self_, nodes_);
  for (uint32_t p = 0; p < nodes_; ++p) {
    if (p == self_ || IsLost(lost, p)) continue;
    const bool child = std::find(children.begin(), children.end(), p) != children.end();
    if (child || (last_up_[p] != 0 && now_ns - last_up_[p] < kBelowNs)) out.push_back(p);
  }
  return out;
}

bool HealthTree::Due(uint64_t now_ns, const std::vector<bool>& lost, bool tick) const {
  if (moved_) return true;  // the new node above takes it in at once
  const uint64_t since = now_ns - last_sent_ns_;
  if (tick && since >= kPeriodNs * 9 / 10) return true;
  if (since < kPeriodNs / 4) return false;  // at most about four bundles a period
  for (uint32_t p : Below(now_ns, lost)) {
    if (now_ns - last_up_[p] >= kBelowNs) continue;  // stopped reporting (or went round): not waited for
    if (last_up_[p] <= last_sent_ns_) return false;
  }
  return true;
}

}  // namespace syncd
