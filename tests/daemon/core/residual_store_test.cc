#include "daemon/core/residual_store.h"

#include <gtest/gtest.h>

#include <cstring>

namespace syncd {
namespace {

double& At(const ResidualStore::Pin& p, size_t i) { return reinterpret_cast<double*>(p.data())[i]; }

TEST(ResidualStore, AResidualStartsAtZeroAndIsKeptPerSetAndName) {
  ResidualStore store(1 << 20);
  {
    ResidualStore::Pin a = store.Acquire(0, "grad.w", 64);
    ASSERT_TRUE(a);
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(At(a, i), 0.0);
    At(a, 3) = 1.5;
  }
  ResidualStore::Pin again = store.Acquire(0, "grad.w", 64), other_set = store.Acquire(1, "grad.w", 64);
  EXPECT_EQ(At(again, 3), 1.5);
  EXPECT_EQ(At(other_set, 3), 0.0);
  EXPECT_EQ(store.stats().tensors, 2u);
  EXPECT_EQ(store.stats().bytes, 128u);
}

TEST(ResidualStore, ANewSizeStartsAgainAtZero) {
  ResidualStore store(1 << 20);
  At(store.Acquire(0, "g", 16), 0) = 2.0;
  ResidualStore::Pin p = store.Acquire(0, "g", 32);
  EXPECT_EQ(At(p, 0), 0.0);
  EXPECT_EQ(store.stats().bytes, 32u);
}

// The bound: the least recently used unpinned residual goes first; a pinned one never; what
// cannot fit is refused, counted.
TEST(ResidualStore, TheBoundEvictsTheLeastRecentlyUsedAndNeverAPinnedOne) {
  ResidualStore store(300);
  At(store.Acquire(0, "a", 100), 0) = 1;
  At(store.Acquire(0, "b", 100), 0) = 2;
  At(store.Acquire(0, "c", 100), 0) = 3;
  store.Acquire(0, "a", 100);  // a used again: b is now the oldest
  EXPECT_TRUE(store.Acquire(0, "d", 100));
  EXPECT_EQ(store.stats().evicted, 1u);
  EXPECT_EQ(At(store.Acquire(0, "a", 100), 0), 1.0);
  EXPECT_EQ(At(store.Acquire(0, "c", 100), 0), 3.0);
  EXPECT_EQ(At(store.Acquire(0, "b", 100), 0), 0.0);  // b was evicted; now d is
  EXPECT_EQ(store.stats().evicted, 2u);
  EXPECT_EQ(store.stats().bytes, 300u);
  // Everything pinned: nothing can make room.
  ResidualStore::Pin p1 = store.Acquire(0, "x", 150), p2 = store.Acquire(0, "y", 150);
  ASSERT_TRUE(p1);
  ASSERT_TRUE(p2);
  EXPECT_FALSE(store.Acquire(0, "z", 8));
  EXPECT_FALSE(store.Acquire(0, "huge", 301));
  EXPECT_EQ(store.stats().refused, 2u);
}

TEST(ResidualStore, ClearDropsEveryResidualAndAPinnedOneWhenItsPinGoes) {
  ResidualStore store(1 << 20);
  At(store.Acquire(0, "a", 8), 0) = 1;
  {
    ResidualStore::Pin held = store.Acquire(0, "b", 8);
    At(held, 0) = 2;
    store.Clear();
    EXPECT_EQ(At(held, 0), 2.0);  // still the holder's to use
    EXPECT_EQ(store.stats().tensors, 0u);
    EXPECT_EQ(store.stats().cleared, 2u);
  }
  EXPECT_EQ(store.stats().bytes, 0u);
  EXPECT_EQ(At(store.Acquire(0, "a", 8), 0), 0.0);
  EXPECT_EQ(At(store.Acquire(0, "b", 8), 0), 0.0);
}

}  // namespace
}  // namespace syncd
