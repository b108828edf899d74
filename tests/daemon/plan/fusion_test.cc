#include "daemon/plan/fusion.h"

#include <gtest/gtest.h>

namespace syncd {
namespace {

FusionCandidate Ar(uint64_t bytes, syncd_dtype dt = SYNCD_FLOAT32, syncd_reduce_op op = SYNCD_SUM) {
  return {FusionKey{abi::OpKind::kAllreduce, dt, op, 1.0, 1.0, false}, bytes};
}

TEST(PlanFusion, GroupsSameDtypeAndOpUpToThreshold) {
  std::vector<FusionCandidate> ready = {Ar(40), Ar(40, SYNCD_FLOAT64), Ar(40), Ar(40), Ar(40, SYNCD_FLOAT64)};
  auto g = PlanFusion(ready, 100);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0], (FusionGroup{0, 2}));
  EXPECT_EQ(g[1], (FusionGroup{1, 4}));
  EXPECT_EQ(g[2], (FusionGroup{3}));
}

// Planning into reused storage gives what a fresh plan gives, whatever the storage held before,
// and allocates nothing once the group count has been seen.
TEST(PlanFusion, IntoReusedStorageMatchesAFreshPlanAndKeepsItsStorage) {
  std::vector<FusionGroup> groups;
  std::vector<bool> taken;
  const std::vector<FusionCandidate> many = {Ar(8), Ar(8, SYNCD_FLOAT64), Ar(8, SYNCD_INT32), Ar(8, SYNCD_INT64)};
  PlanFusionInto(many, 100, &groups, &taken);
  EXPECT_EQ(groups, PlanFusion(many, 100));
  const std::vector<FusionCandidate> few = {Ar(40), Ar(40, SYNCD_FLOAT64), Ar(40), Ar(40), Ar(40, SYNCD_FLOAT64)};
  PlanFusionInto(few, 100, &groups, &taken);
  EXPECT_EQ(groups, PlanFusion(few, 100));
  const FusionGroup* storage = groups.data();
  const size_t* first = groups[0].data();
  PlanFusionInto(few, 100, &groups, &taken);
  EXPECT_EQ(groups, PlanFusion(few, 100));
  EXPECT_EQ(groups.data(), storage);
  EXPECT_EQ(groups[0].data(), first);
}

TEST(PlanFusion, ZeroThresholdDisablesFusion) {
  auto g = PlanFusion({Ar(8), Ar(8), Ar(8)}, 0);
  EXPECT_EQ(g.size(), 3u);
}

TEST(PlanFusion, LargeTensorRunsAloneAndOtherKindsNeverFuse) {
  std::vector<FusionCandidate> ready = {Ar(1000), Ar(10), Ar(10)};
  ready.push_back({std::nullopt, 10});  // a kind that never fuses (broadcast) has no key
  ready.push_back({std::nullopt, 10});
  ready.push_back(Ar(10, SYNCD_FLOAT32, SYNCD_MAX));
  auto g = PlanFusion(ready, 100);
  ASSERT_EQ(g.size(), 5u);
  EXPECT_EQ(g[0], (FusionGroup{0}));
  EXPECT_EQ(g[1], (FusionGroup{1, 2}));
  EXPECT_EQ(g[2], (FusionGroup{3}));
  EXPECT_EQ(g[3], (FusionGroup{4}));
  EXPECT_EQ(g[4], (FusionGroup{5}));
}

TEST(PlanFusion, EveryTensorIsPlacedExactlyOnce) {
  std::vector<FusionCandidate> ready;
  for (int i = 0; i < 200; ++i) ready.push_back(Ar(uint64_t(1 + i * 37 % 500), syncd_dtype(i % 3 == 0 ? 6 : 7)));
  std::vector<int> seen(ready.size(), 0);
  for (const auto& g : PlanFusion(ready, 2048)) {
    uint64_t bytes = 0;
    for (size_t i : g) {
      ++seen[i];
      bytes += ready[i].bytes;
      EXPECT_EQ(ready[i].key, ready[g[0]].key);
    }
    if (g.size() > 1) {
      EXPECT_LE(bytes, 2048u);
    }
  }
  for (int s : seen) EXPECT_EQ(s, 1);
}

}  // namespace
}  // namespace syncd
