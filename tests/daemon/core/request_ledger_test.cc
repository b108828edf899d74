// core/request_ledger.h: each request completes once; a second completion is refused and counted;
// in between each request is in one state of one set.
#include "daemon/core/request_ledger.h"

#include <gtest/gtest.h>

namespace syncd {
namespace {

TEST(RequestLedger, EachOpenRequestFinishesOnce) {
  RequestLedger l;
  EXPECT_TRUE(l.Open(1, 10, 1));
  EXPECT_TRUE(l.Open(1, 11, 1));
  EXPECT_TRUE(l.Open(2, 10, 1));  // another client's handle 10 is another request
  EXPECT_EQ(l.open(), 3u);
  EXPECT_TRUE(l.Finish(1, 10));
  EXPECT_TRUE(l.Finish(2, 10));
  EXPECT_TRUE(l.IsOpen(1, 11));
  EXPECT_EQ(l.open(), 1u);
  EXPECT_EQ(l.refused(), 0u);
}

TEST(RequestLedger, AHandleInFlightTwiceIsRefusedAtOpen) {
  RequestLedger l;
  EXPECT_TRUE(l.Open(1, 7, 1));
  EXPECT_FALSE(l.Open(1, 7, 1));
  EXPECT_EQ(l.open(), 1u);
  EXPECT_TRUE(l.Finish(1, 7));
  EXPECT_TRUE(l.Open(1, 7, 1));  // once finished, the client may use the handle again
}

// A second completion is refused and counted (a debug build aborts on it instead).
TEST(RequestLedger, ASecondCompletionIsRefusedAndCounted) {
  RequestLedger l;
  ASSERT_TRUE(l.Open(3, 42, 1));
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

Request Of(uint32_t client, uint64_t handle, int32_t set) {
  Request r;
  r.client_id = client;
  r.handle = handle;
  r.process_set = set;
  return r;
}

// A request moves waiting -> negotiating -> agreed -> executing within its set; the counts and
// the oldest per state are what `syncctl status` shows.
TEST(RequestLedger, EachRequestIsInOneStateOfOneSet) {
  RequestLedger l;
  ASSERT_TRUE(l.Open(1, 1, 100));
  ASSERT_TRUE(l.Open(2, 1, 100));
  ASSERT_TRUE(l.Open(1, 2, 100));
  EXPECT_EQ(l.InSet(0, 0).count, (std::array<uint64_t, 4>{0, 0, 0, 0}));  // read, not yet in a set
  l.Enter(Of(1, 1, 0), RequestState::kWaiting, 110);
  l.Enter(Of(2, 1, 0), RequestState::kWaiting, 120);
  l.Enter(Of(1, 2, 5), RequestState::kWaiting, 130);
  EXPECT_EQ(l.InSet(0, 0).count, (std::array<uint64_t, 4>{2, 0, 0, 0}));
  EXPECT_EQ(l.InSet(0, 0).oldest_since_ns[0], 110u);
  EXPECT_EQ(l.InSet(0, 5).count, (std::array<uint64_t, 4>{1, 0, 0, 0}));

  l.EnterAll({Of(1, 1, 0), Of(2, 1, 0)}, RequestState::kNegotiating, 200);
  l.Enter(Of(1, 1, 0), RequestState::kNegotiating, 250);  // already there: keeps since when
  EXPECT_EQ(l.InSet(0, 0).count, (std::array<uint64_t, 4>{0, 2, 0, 0}));
  EXPECT_EQ(l.InSet(0, 0).oldest_since_ns[1], 200u);
  l.Enter(Of(1, 1, 0), RequestState::kAgreed, 300);
  l.Enter(Of(2, 1, 0), RequestState::kExecuting, 400);
  EXPECT_EQ(l.InSet(0, 0).count, (std::array<uint64_t, 4>{0, 0, 1, 1}));
  ASSERT_NE(l.StateOf(2, 1), nullptr);
  EXPECT_EQ(*l.StateOf(2, 1), RequestState::kExecuting);
  EXPECT_STREQ(RequestStateName(*l.StateOf(1, 1)), "agreed");

  EXPECT_TRUE(l.Finish(2, 1));
  EXPECT_EQ(l.StateOf(2, 1), nullptr);
  EXPECT_EQ(l.InSet(0, 0).count, (std::array<uint64_t, 4>{0, 0, 1, 0}));
  // A stand-in of a joined rank (no client) and a finished handle are not requests in flight.
  l.Enter(Of(kNoClient, 1, 0), RequestState::kExecuting, 500);
  l.Enter(Of(2, 1, 0), RequestState::kExecuting, 500);
  EXPECT_EQ(l.InSet(0, 0).count, (std::array<uint64_t, 4>{0, 0, 1, 0}));
  EXPECT_EQ(l.open(), 2u);
}

TEST(RequestLedger, JobsServedSideBySideCountTheirOwnSetsOnly) {
  RequestLedger l;
  ASSERT_TRUE(l.Open(1, 1, 100, /*job=*/7));
  ASSERT_TRUE(l.Open(2, 1, 100, /*job=*/8));
  ASSERT_TRUE(l.Open(2, 2, 100, /*job=*/8));
  for (const Request& r : {Of(1, 1, 0), Of(2, 1, 0), Of(2, 2, 0)}) l.Enter(r, RequestState::kWaiting, 110);
  // Both jobs have a set 0: each one's status shows its own requests.
  EXPECT_EQ(l.InSet(7, 0).count, (std::array<uint64_t, 4>{1, 0, 0, 0}));
  EXPECT_EQ(l.InSet(8, 0).count, (std::array<uint64_t, 4>{2, 0, 0, 0}));
  EXPECT_EQ(l.InSet(9, 0).count, (std::array<uint64_t, 4>{0, 0, 0, 0}));
}

// What another job waits with decides whether a large run steps aside (engine/tenant.h): each
// job's requests in flight in any state, and its large ones, until each finishes (once).
TEST(RequestLedger, EachJobsRequestsInFlightAndItsLargeOnesAreCountedUntilTheyFinish) {
  RequestLedger l;
  ASSERT_TRUE(l.Open(1, 1, 100, /*job=*/7, /*large=*/true));
  ASSERT_TRUE(l.Open(1, 2, 100, /*job=*/7, /*large=*/false));
  ASSERT_TRUE(l.Open(2, 1, 100, /*job=*/8, /*large=*/true));
  ASSERT_FALSE(l.Open(2, 1, 100, /*job=*/8, /*large=*/true));  // refused: not counted again
  l.Enter(Of(1, 1, 0), RequestState::kExecuting, 110);
  EXPECT_EQ(l.InFlightOf(7).all, 2u);
  EXPECT_EQ(l.InFlightOf(7).large, 1u);
  EXPECT_EQ(l.InFlightOf(8).all, 1u);
  EXPECT_EQ(l.InFlightOf(8).large, 1u);
  EXPECT_EQ(l.InFlightOf(9).all, 0u);
  ASSERT_TRUE(l.Finish(1, 2));
  EXPECT_EQ(l.InFlightOf(7).all, 1u);
  EXPECT_EQ(l.InFlightOf(7).large, 1u);
  ASSERT_TRUE(l.Finish(1, 1));
  ASSERT_TRUE(l.Finish(2, 1));
  EXPECT_EQ(l.InFlightOf(7).all, 0u);
  EXPECT_EQ(l.InFlightOf(8).large, 0u);
}

}  // namespace
}  // namespace syncd
