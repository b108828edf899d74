#include "daemon/launch/launcher.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace syncd {
namespace {

TEST(PlanSimulatedNodes, EachNodeGetsItsOwnCoresWhenThereAreEnough) {
  const auto plan = PlanSimulatedNodes({0, 1, 2, 3, 4, 5, 6, 7}, 2);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].daemon, (CoreSet{3}));
  EXPECT_EQ(plan[0].workers, (CoreSet{0, 1, 2}));
  EXPECT_EQ(plan[1].daemon, (CoreSet{7}));
  EXPECT_EQ(plan[1].workers, (CoreSet{4, 5, 6}));
}

TEST(PlanSimulatedNodes, ANodeWithOneCoreSharesItWithItsRanks) {
  const auto plan = PlanSimulatedNodes({0, 1}, 2);
  EXPECT_EQ(plan[0].daemon, (CoreSet{0}));
  EXPECT_EQ(plan[0].workers, (CoreSet{0}));
  EXPECT_EQ(plan[1].daemon, (CoreSet{1}));
  EXPECT_EQ(plan[1].workers, (CoreSet{1}));
}

TEST(PlanSimulatedNodes, MoreNodesThanCoresWrapAround) {
  const auto plan = PlanSimulatedNodes({2, 5}, 3);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].daemon, (CoreSet{2}));
  EXPECT_EQ(plan[1].daemon, (CoreSet{5}));
  EXPECT_EQ(plan[2].daemon, (CoreSet{2}));
  EXPECT_EQ(plan[2].workers, (CoreSet{2}));
}

TEST(PlanSimulatedNodes, UnevenSplitCoversEveryCoreOnce) {
  const auto plan = PlanSimulatedNodes({0, 1, 2, 3, 4}, 3);
  CoreSet all;
  for (const auto& p : plan) {
    ASSERT_EQ(p.daemon.size(), 1u);
    all.insert(all.end(), p.workers.begin(), p.workers.end());
    if (p.workers != p.daemon) all.push_back(p.daemon[0]);
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (CoreSet{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace syncd
