#include "proto/arena_allocator.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace syncd {
namespace {

TEST(ArenaAllocator, AlignsAndRefusesWhenFull) {
  ArenaAllocator a(1024, 64);
  auto x = a.Allocate(1);
  auto y = a.Allocate(100);
  ASSERT_TRUE(x && y);
  EXPECT_EQ(*x % 64, 0u);
  EXPECT_EQ(*y % 64, 0u);
  EXPECT_EQ(a.bytes_in_use(), 64u + 128u);
  EXPECT_FALSE(a.Allocate(1024).has_value());
  EXPECT_TRUE(a.Free(*x));
  EXPECT_FALSE(a.Free(*x)) << "double free must be refused";
  EXPECT_FALSE(a.Free(3)) << "an offset that is not a block start must be refused";
}

TEST(ArenaAllocator, CoalescesSoTheWholeArenaIsUsableAgain) {
  ArenaAllocator a(64 * 100, 64);
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 100; ++i) blocks.push_back(*a.Allocate(64));
  EXPECT_FALSE(a.Allocate(64).has_value());
  std::mt19937 rng(7);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (uint64_t b : blocks) ASSERT_TRUE(a.Free(b));
  EXPECT_EQ(a.bytes_in_use(), 0u);
  auto all = a.Allocate(64 * 100);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(*all, 0u);
}

// Blocks of random sizes allocated and freed in random order (the allocator reuses its bookkeeping
// nodes): live blocks never overlap, what is in use adds up, and once all are freed the arena is
// whole again.
TEST(ArenaAllocator, RandomAllocationsAndFreesNeverOverlapAndLeaveTheArenaWhole) {
  constexpr uint64_t kBytes = 64 * 1024;
  ArenaAllocator a(kBytes, 64);
  std::mt19937 rng(11);
  std::map<uint64_t, uint64_t> live;  // offset -> bytes asked for, rounded up to 64
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 2 == 0) {
      const uint64_t bytes = 1 + rng() % 3000;
      const std::optional<uint64_t> at = a.Allocate(bytes);
      if (!at) continue;  // full for this size
      const uint64_t size = (bytes + 63) / 64 * 64;
      ASSERT_LE(*at + size, kBytes);
      auto next = live.lower_bound(*at);
      ASSERT_TRUE(next == live.end() || *at + size <= next->first) << "step " << step << ": overlaps the next block";
      if (next != live.begin()) {
        const auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, *at) << "step " << step << ": overlaps the previous block";
      }
      live.emplace(*at, size);
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      ASSERT_TRUE(a.Free(it->first));
      live.erase(it);
    }
    uint64_t in_use = 0;
    for (const auto& [at, size] : live) in_use += size;
    ASSERT_EQ(a.bytes_in_use(), in_use) << "step " << step;
  }
  for (const auto& [at, size] : live) ASSERT_TRUE(a.Free(at));
  const std::optional<uint64_t> all = a.Allocate(kBytes);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(*all, 0u);
}

TEST(ArenaAllocator, ZeroBytesStillGetsADistinctBlock) {
  ArenaAllocator a(256, 64);
  auto x = a.Allocate(0), y = a.Allocate(0);
  ASSERT_TRUE(x && y);
  EXPECT_NE(*x, *y);
}

}  // namespace
}  // namespace syncd
