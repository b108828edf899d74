#include "daemon/launch/discovery.h"

#include <gtest/gtest.h>

namespace syncd {
namespace {

TEST(PlanSlots, MaxNpSpreadsTheSlotsAndTheFirstRanksOverTheNodes) {
  auto l = PlanSlots(2, 3, 6);
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(l->world, 6);
  EXPECT_EQ(l->slots_per_node, 3);
  EXPECT_EQ(l->launched, (std::vector<int>{0, 1, 3}));  // node 0 takes the odd one
  EXPECT_EQ(l->vacant, (std::vector<int>{2, 4, 5}));
  auto full = PlanSlots(2, 4, 0);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->launched, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(full->vacant.empty());
  // Fewer ranks than nodes: the last nodes start without one (they join when offered).
  auto few = PlanSlots(3, 2, 6);
  ASSERT_TRUE(few.ok()) << few.status().message();
  EXPECT_EQ(few->launched, (std::vector<int>{0, 2}));
  EXPECT_EQ(few->vacant, (std::vector<int>{1, 3, 4, 5}));
}

TEST(PlanSlots, LayoutsTheDaemonsCannotNumberAreRefusedSayingWhatToChange) {
  EXPECT_NE(PlanSlots(2, 2, 5).status().message().find("make it a multiple of the nodes"), std::string::npos);
  EXPECT_NE(PlanSlots(2, 4, 2).status().message().find("--max-np 2 is below -n 4"), std::string::npos);
  EXPECT_NE(PlanSlots(3, 2, 0).status().message().find("every node needs a rank (or give --max-np"),
            std::string::npos);
  EXPECT_NE(PlanSlots(2, 0, 4).status().message().find("every node needs a rank"), std::string::npos);
  EXPECT_NE(PlanSlots(2, 3, 0).status().message().find("ranks must be a multiple of nodes"), std::string::npos);
}

TEST(FormatRanks, RunsBecomeRanges) {
  EXPECT_EQ(FormatRanks({1, 3, 4, 5, 7}), "1,3-5,7");
  EXPECT_EQ(FormatRanks({}), "");
}

TEST(ParseDiscoveredHosts, NodesByNameOrNumberWithOrWithoutSlots) {
  auto s = ParseDiscoveredHosts("# hosts\nnode0:2\n\n 2 \nnode1:9\n", 3, 3);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(*s, (std::vector<int>{2, 3, 3}));  // no count: every slot; more than a node has: its slots
  auto none = ParseDiscoveredHosts("node1:1\n", 3, 3);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, (std::vector<int>{0, 1, 0}));
}

TEST(ParseDiscoveredHosts, UnknownHostsAndBadCountsNameTheLine) {
  EXPECT_NE(ParseDiscoveredHosts("node3\n", 3, 2).status().message().find("'node3' names no node of this job"),
            std::string::npos);
  EXPECT_NE(ParseDiscoveredHosts("gpu-host-7:4\n", 3, 2).status().message().find("names no node"), std::string::npos);
  EXPECT_NE(ParseDiscoveredHosts("node1:two\n", 3, 2).status().message().find("'node1:two': bad slot count"),
            std::string::npos);
}

TEST(SlotsToFill, TheLowestFreeSlotsOfEachNodeUpToWhatItOffers) {
  // Two nodes of three slots; node 0 holds slot 0, node 1 slots 3 and 5.
  const std::vector<bool> held = {true, false, false, true, false, true};
  EXPECT_EQ(SlotsToFill({3, 3}, held, 3), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(SlotsToFill({2, 1}, held, 3), (std::vector<int>{1}));  // node 1 runs more than offered: kept
  EXPECT_TRUE(SlotsToFill({0, 0}, held, 3).empty());
}

TEST(RunDiscoveryScript, ReturnsItsOutputOrSaysWhyNot) {
  auto out = RunDiscoveryScript("printf 'node0:1\\nnode1:2\\n'", 5'000);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(*out, "node0:1\nnode1:2\n");
  auto failed = RunDiscoveryScript("echo node0; exit 3", 5'000);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("exited with code 3"), std::string::npos) << failed.status().message();
  auto slow = RunDiscoveryScript("sleep 30", 300);
  ASSERT_FALSE(slow.ok());
  EXPECT_NE(slow.status().message().find("took longer than"), std::string::npos) << slow.status().message();
}

}  // namespace
}  // namespace syncd
