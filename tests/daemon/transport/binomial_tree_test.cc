#include "daemon/transport/binomial_tree.h"

#include <gtest/gtest.h>

#include <vector>

namespace syncd {
namespace {

// From any root, a message passed from parent to children reaches every node exactly once, within
// ceil(log2 N) hops, the root sending to at most ceil(log2 N) children; Parent inverts Children.
TEST(BinomialTree, FromAnyRootEveryNodeOnceWithinLog2NHops) {
  for (uint32_t n = 1; n <= 33; ++n) {
    uint32_t log2n = 0;
    while ((1u << log2n) < n) ++log2n;
    for (uint32_t root = 0; root < n; ++root) {
      const BinomialTree tree{n, root};
      std::vector<int> reached(n, 0), depth(n, -1);
      std::vector<uint32_t> frontier{root};
      reached[root] = 1;
      depth[root] = 0;
      EXPECT_EQ(tree.Parent(root), root);
      EXPECT_LE(tree.Children(root).size(), log2n) << n << " nodes, root " << root;
      while (!frontier.empty()) {
        const uint32_t at = frontier.back();
        frontier.pop_back();
        for (uint32_t c : tree.Children(at)) {
          ASSERT_LT(c, n);
          ++reached[c];
          depth[c] = depth[at] + 1;
          EXPECT_EQ(tree.Parent(c), at) << n << " nodes, root " << root << ", node " << c;
          frontier.push_back(c);
        }
      }
      for (uint32_t v = 0; v < n; ++v) {
        EXPECT_EQ(reached[v], 1) << n << " nodes, root " << root << ", node " << v;
        EXPECT_LE(depth[v], int(log2n)) << n << " nodes, root " << root << ", node " << v;
      }
    }
  }
}

TEST(BinomialTree, RootedAtZeroItIsTheHealthAndCombineTree) {
  const BinomialTree tree{8, 0};
  EXPECT_EQ(tree.Children(0), (std::vector<uint32_t>{1, 2, 4}));
  EXPECT_EQ(tree.Children(4), (std::vector<uint32_t>{5, 6}));
  EXPECT_EQ(tree.Parent(6), 4u);
  EXPECT_EQ(tree.Parent(5), 4u);
  EXPECT_TRUE(tree.Children(7).empty());
  const BinomialTree shifted{8, 3};
  EXPECT_EQ(shifted.Children(3), (std::vector<uint32_t>{4, 5, 7}));
  EXPECT_EQ(shifted.Parent(2), 1u);  // 7 from the root: its parent is 6 from the root
}

}  // namespace
}  // namespace syncd
