// Straggler attribution over a sliding window of collectives.
#include "daemon/obs/stragglers.h"

#include <gtest/gtest.h>

namespace syncd {
namespace {

constexpr uint64_t kMs = 1'000'000;

TEST(StragglerWindowTest, TheRankThatComesLastCausesTheWaitingAndItsLatenessIsMeasured) {
  StragglerWindow w(100);
  for (uint64_t i = 0; i < 20; ++i) {
    const uint64_t t = i * 1000 * kMs;
    // Rank 5 is 40 ms behind rank 4 (10 ms behind on the 20th); rank 6 comes 1 ms after rank 4.
    w.Record({{4, t}, {5, t + (i == 19 ? 10 : 40) * kMs}, {6, t + 1 * kMs}});
  }
  const std::vector<StragglerRank> s = w.Summary();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].rank, 5u);
  EXPECT_EQ(s[0].collectives, 20u);
  EXPECT_EQ(s[0].last, 20u);
  EXPECT_NEAR(s[0].mean_late_ms, (19 * 40 + 10) / 20.0, 1e-9);
  EXPECT_NEAR(s[0].p95_late_ms, 40.0, 1e-9);  // nearest rank: the 19th of 20 sorted
  EXPECT_DOUBLE_EQ(s[0].wait_share, 1.0);
  EXPECT_EQ(s[1].rank, 6u);  // no waiting caused; later than rank 4
  EXPECT_NEAR(s[1].mean_late_ms, 1.0, 1e-9);
  EXPECT_DOUBLE_EQ(s[1].wait_share, 0.0);
  EXPECT_EQ(s[2].rank, 4u);
}

TEST(StragglerWindowTest, OnlyTheLastWindowCollectivesCount) {
  StragglerWindow w(10);
  for (uint64_t i = 0; i < 10; ++i) w.Record({{0, 100 * kMs}, {1, 0}});  // rank 0 late
  for (uint64_t i = 0; i < 10; ++i) w.Record({{0, 0}, {1, 30 * kMs}});   // then rank 1
  const std::vector<StragglerRank> s = w.Summary();
  EXPECT_EQ(w.collectives(), 10u);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].rank, 1u);
  EXPECT_NEAR(s[0].mean_late_ms, 30.0, 1e-9);
  EXPECT_EQ(s[1].last, 0u);
  EXPECT_NEAR(s[1].mean_late_ms, 0.0, 1e-9);
}

TEST(StragglerWindowTest, SharesSplitTheWaitingBetweenTheRanksThatCausedIt) {
  StragglerWindow w;
  w.Record({{0, 0}, {1, 30 * kMs}});            // 30 ms of waiting, rank 1's
  w.Record({{0, 10 * kMs}, {1, 0}, {2, 0}});    // 20 ms (two ranks waited 10 ms), rank 0's
  w.Record({{0, 0}});                           // one rank: says nothing
  const std::vector<StragglerRank> s = w.Summary();
  EXPECT_EQ(w.collectives(), 2u);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].rank, 1u);
  EXPECT_NEAR(s[0].wait_share, 0.6, 1e-12);
  EXPECT_EQ(s[1].rank, 0u);
  EXPECT_NEAR(s[1].wait_share, 0.4, 1e-12);
}

TEST(StragglerWindowTest, NodeWaitsKeepTheLastWindowWithMeanP95AndSpread) {
  StragglerWindow w(4);
  EXPECT_EQ(w.node_wait().collectives, 0u);
  w.RecordNodeWait(1000 * kMs, 0);  // pushed out by the four below
  for (uint64_t ms : {10, 20, 30, 40}) w.RecordNodeWait(ms * kMs, 2 * kMs);
  const StragglerWindow::NodeWait n = w.node_wait();
  EXPECT_EQ(n.collectives, 4u);
  EXPECT_NEAR(n.mean_ms, 25.0, 1e-9);
  EXPECT_NEAR(n.p95_ms, 40.0, 1e-9);
  EXPECT_NEAR(n.p50_ms, 30.0, 1e-9) << "the upper median of 10, 20, 30, 40";
  EXPECT_NEAR(n.spread_p50_ms, 2.0, 1e-9);
}

}  // namespace
}  // namespace syncd
