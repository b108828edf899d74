#include "daemon/core/link_pacer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>

namespace syncd {
namespace {

constexpr uint64_t kSegment = 128 << 10;

// Two jobs that always have a segment to post, asking in turn: what each got onto the network.
std::map<uint64_t, uint64_t> Stream(LinkPacer& pacer, uint32_t weight_a, uint32_t weight_b, int tries) {
  std::map<uint64_t, uint64_t> posted;
  uint64_t now = 1'000'000'000;
  for (int i = 0; i < tries; ++i, now += 10'000) {
    for (const auto& [job, weight] : {std::pair{uint64_t{1}, weight_a}, std::pair{uint64_t{2}, weight_b}})
      if (pacer.MayPost(job, weight, kSegment, now)) posted[job] += kSegment;
  }
  return posted;
}

TEST(LinkPacer, TwoStreamingJobsGetTheLinksByTheirWeights) {
  LinkPacer equal;
  auto posted = Stream(equal, 1, 1, 3000);
  EXPECT_NEAR(double(posted[1]) / double(posted[1] + posted[2]), 0.5, 0.01);
  LinkPacer weighted;
  posted = Stream(weighted, 2, 1, 3000);
  EXPECT_NEAR(double(posted[1]) / double(posted[1] + posted[2]), 2.0 / 3.0, 0.01);
  EXPECT_GT(weighted.held(2), 0u);
  EXPECT_EQ(weighted.held(1) + weighted.held(2), weighted.held());
}

TEST(LinkPacer, AJobAloneIsNeverHeldAndAJobThatStopsAskingHoldsNobodyPastTheActiveTime) {
  LinkPacer pacer;
  uint64_t now = 1'000'000'000;
  for (int i = 0; i < 100; ++i, now += 10'000) EXPECT_TRUE(pacer.MayPost(1, 1, kSegment, now));
  EXPECT_EQ(pacer.held(), 0u);
  // Job 2 comes, posts once and stops asking (its run waits on another node): job 1 gets a
  // segment ahead, then waits for it, at most kActiveNs after job 2's last try.
  ASSERT_TRUE(pacer.MayPost(2, 1, kSegment, now));
  int ahead = 0;
  while (pacer.MayPost(1, 1, kSegment, now)) ++ahead, now += 1'000;
  EXPECT_LE(ahead, 2);
  const uint64_t held_at = now;
  while (!pacer.MayPost(1, 1, kSegment, now)) now += 100'000;
  EXPECT_LE(now - held_at, LinkPacer::kActiveNs);
  EXPECT_GT(pacer.held(), 0u);
}

TEST(LinkPacer, AJobBackFromIdleStartsLevelWithTheOthersNotAheadOfThem) {
  LinkPacer pacer;
  uint64_t now = 1'000'000'000;
  ASSERT_TRUE(pacer.MayPost(2, 1, kSegment, now));
  now += 2 * LinkPacer::kActiveNs;  // job 2 idle; job 1 streams alone a while
  for (int i = 0; i < 50; ++i, now += 10'000) ASSERT_TRUE(pacer.MayPost(1, 1, kSegment, now));
  // Job 2 comes back: it has no 49 segments of credit, the two alternate from here.
  int in_a_row = 0;
  while (pacer.MayPost(2, 1, kSegment, now)) ++in_a_row, now += 1'000;
  EXPECT_LE(in_a_row, 2);
  EXPECT_TRUE(pacer.MayPost(1, 1, kSegment, now));
}

TEST(LinkPacer, TheJobFurthestBehindMayAlwaysPostSoTheyNeverHoldEachOther) {
  LinkPacer pacer;
  uint64_t now = 1'000'000'000;
  for (int i = 0; i < 1000; ++i, now += 7'000) {
    const bool a = pacer.MayPost(1, 3, kSegment + uint64_t(i % 5) * 4096, now);
    const bool b = pacer.MayPost(2, 1, kSegment, now);
    ASSERT_TRUE(a || b) << "both held at try " << i;
  }
  pacer.Forget(2);
  EXPECT_TRUE(pacer.MayPost(1, 3, kSegment, now));
}

TEST(LinkPacer, SmallSegmentsGoAtOnceAndNeverHoldALargeOne) {
  LinkPacer pacer;
  uint64_t now = 1'000'000'000;
  // Job 2 runs 8-byte allreduces back to back while job 1 streams: neither is held.
  for (int i = 0; i < 1000; ++i, now += 1'000) {
    ASSERT_TRUE(pacer.MayPost(2, 1, 8, now));
    if (i % 10 == 0) {
      ASSERT_TRUE(pacer.MayPost(1, 1, kSegment, now)) << "try " << i;
    }
  }
  EXPECT_EQ(pacer.held(), 0u);
}

}  // namespace
}  // namespace syncd
