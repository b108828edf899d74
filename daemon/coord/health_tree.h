// Where a node's health reports go (coord/job_health.h): a binomial tree over the job's nodes,
// node 0 at the root, so that each daemon sends O(log N) messages per report period instead of
// one to every other node.
//
// Reports go up the tree bundled (a node sends its own report and those its subtree sent it, in
// one bundle, once everything below it has reported or a report period has passed), and the root
// sends the whole job's view down in one bundle per child, which every node forwards to its own
// children at once. Every node so sees every other's report at most about a period after it was
// built, and a report's age travels with it (no clocks are compared).
//
// A node that hears nothing from the node above it for kRerouteNs goes round it: its bundles go
// to the next node of its chain (its parent's parent, up to node 0; then, node 0 being silent,
// nodes 1, 2, ... below its own number), and that node takes it in below itself and sends it the
// view down. A node whose whole chain is silent acts as the root. Every chain goes to lower
// numbers only, so no bundle ever goes round in a circle. A node above that answers again (its
// down bundles come) is taken back at once; a node whose own thread stood still (SIGSTOP, a
// long pause) trusts its parent again first.
//
// Threads: engine thread only.
#ifndef SYNCD_DAEMON_COORD_HEALTH_TREE_H_
#define SYNCD_DAEMON_COORD_HEALTH_TREE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace syncd {

class HealthTree {
 public:
  static constexpr uint64_t kPeriodNs = 500'000'000;     // a node builds its report this often
  static constexpr uint64_t kRerouteNs = 1'000'000'000;  // nothing down from above for this long: go round it
  static constexpr uint64_t kBelowNs = 3'000'000'000;    // a node that sent up within this long is below

  HealthTree() = default;
  HealthTree(uint32_t nodes, uint32_t self, uint64_t start_ns);

  static uint32_t Parent(uint32_t node) { return node & (node - 1); }  // BinomialTree{n, 0}; node 0: itself
  static std::vector<uint32_t> Children(uint32_t node, uint32_t nodes);

  // Where this node's bundles go up now: the first node of its chain that answers, or itself
  // (it is the root, or acts as one). `lost[p]`: the transport lost node p. May move on along
  // the chain (or back) as nodes stop or start answering; Moved() says it did since the last Sent().
  uint32_t Above(uint64_t now_ns, const std::vector<bool>& lost);
  bool Moved() const { return moved_; }
  // Where its down bundles go: its children and every node that sent it a bundle up lately.
  std::vector<uint32_t> Below(uint64_t now_ns, const std::vector<bool>& lost) const;

  void HeardUp(uint32_t from, uint64_t now_ns) { last_up_[from] = now_ns; }
  void HeardDown(uint32_t from, uint64_t now_ns) { last_down_[from] = now_ns; }
  // Whether this node's bundle is due: a period since its last one (`tick`: its own report is
  // new), or everything below it that still reports sent a bundle since its last one.
  bool Due(uint64_t now_ns, const std::vector<bool>& lost, bool tick) const;
  void Sent(uint64_t now_ns) {
    last_sent_ns_ = now_ns;
    moved_ = false;
  }

 private:
  bool Answers(uint32_t node, uint64_t now_ns, const std::vector<bool>& lost) const;

  uint32_t nodes_ = 1, self_ = 0;
  std::vector<uint32_t> chain_;  // ancestors up to node 0, then 1, 2, ... below self_
  std::vector<uint64_t> last_up_, last_down_, tried_;  // by node; tried_: since when it has been sent to
  size_t above_ = 0;  // index into chain_; chain_.size(): this node is the root
  bool moved_ = true;
  uint64_t last_sent_ns_ = 0, last_call_ns_ = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_HEALTH_TREE_H_
