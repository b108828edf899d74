// core/request_ledger.h: each request completes once; a second completion is refused and counted.
#include "daemon/core/request_ledger.h"

#include <gtest/gtest.h>

namespace syncd {
namespace {

TEST(RequestLedger, EachOpenRequestFinishesOnce) {
  RequestLedger l;
  EXPECT_TRUE(l.Open(1, 10));
  EXPECT_TRUE(l.Open(1, 11));
  EXPECT_TRUE(l.Open(2, 10));  // another client's handle 10 is another request
  EXPECT_EQ(l.open(), 3u);
  EXPECT_TRUE(l.Finish(1, 10));
  EXPECT_TRUE(l.Finish(2, 10));
  EXPECT_TRUE(l.IsOpen(1, 11));
  EXPECT_EQ(l.open(), 1u);
  EXPECT_EQ(l.refused(), 0u);
}

TEST(RequestLedger, AHandleInFlightTwiceIsRefusedAtOpen) {
  RequestLedger l;
  EXPECT_TRUE(l.Open(1, 7));
  EXPECT_FALSE(l.Open(1, 7));
  EXPECT_EQ(l.open(), 1u);
  EXPECT_TRUE(l.Finish(1, 7));
  EXPECT_TRUE(l.Open(1, 7));  // once finished, the client may use the handle again
}

// A second completion is refused and counted (a debug build aborts on it instead).
TEST(RequestLedger, ASecondCompletionIsRefusedAndCounted) {
  RequestLedger l;
  ASSERT_TRUE(l.Open(3, 42));
  ASSERT_TRUE(l.Finish(3, 42));
  bool second = true;
  EXPECT_DEBUG_DEATH(second = l.Finish(3, 42), "completed twice");
#ifdef NDEBUG
  EXPECT_FALSE(second);
  EXPECT_EQ(l.refused(), 1u);
  EXPECT_FALSE(l.Finish(9, 1));  // never opened: as refused
  EXPECT_EQ(l.refused(), 2u);
#endif
  EXPECT_EQ(l.open(), 0u);
}

}  // namespace
}  // namespace syncd
