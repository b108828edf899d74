#include "proto/arena_allocator.h"

#include <gtest/gtest.h>

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

TEST(ArenaAllocator, ZeroBytesStillGetsADistinctBlock) {
  ArenaAllocator a(256, 64);
  auto x = a.Allocate(0), y = a.Allocate(0);
  ASSERT_TRUE(x && y);
  EXPECT_NE(*x, *y);
}

}  // namespace
}  // namespace syncd
