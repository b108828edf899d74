// The binomial tree over a job's nodes that the tree-shaped exchanges share (health reports, a
// partial round's run message; TreeCombine and TreeAllreduce walk the same shape rooted at node
// 0). Rooted at `root`: counted from the root (v = (node - root) mod N), node v's parent is v less
// its lowest set bit, its children v + 1, v + 2, v + 4, ... below that bit. The root has up to
// log2 N children, every other node fewer; a message from the root reaches every node in at most
// log2 N hops, each node receiving it once.
#ifndef SYNCD_DAEMON_TRANSPORT_BINOMIAL_TREE_H_
#define SYNCD_DAEMON_TRANSPORT_BINOMIAL_TREE_H_

#include <cstdint>
#include <vector>

namespace syncd {

struct BinomialTree {
  uint32_t nodes = 1;
  uint32_t root = 0;

  // The root: itself.
  uint32_t Parent(uint32_t node) const {
    const uint32_t v = From(node);
    return To(v & (v - 1));
  }
  // Calls f(child) for each child, nearest first (v + 1, v + 2, v + 4, ...).
  template <typename F>
  void ForEachChild(uint32_t node, F f) const {
    const uint32_t v = From(node);
    const uint64_t low = v == 0 ? uint64_t{1} << 32 : (v & (~v + 1));
    for (uint64_t step = 1; step < low && v + step < nodes; step <<= 1) f(To(uint32_t(v + step)));
  }
  std::vector<uint32_t> Children(uint32_t node) const {
    std::vector<uint32_t> out;
    ForEachChild(node, [&](uint32_t c) { out.push_back(c); });
    return out;
  }

 private:
  uint32_t From(uint32_t node) const { return (node + nodes - root % nodes) % nodes; }
  uint32_t To(uint32_t v) const { return uint32_t((uint64_t(v) + root) % nodes); }
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_TRANSPORT_BINOMIAL_TREE_H_
