// When negotiation cycles run (coord/cycle_clock.h): the timer, work, on demand, the idle
// back-off, the global sleep and the drain, with made-up clock readings.
#include "daemon/coord/cycle_clock.h"

#include <gtest/gtest.h>

namespace syncd {
namespace {

constexpr uint64_t kMs = 1'000'000;

TEST(CycleClock, HorovodsTimerStartsACycleOneCycleTimeAfterTheLastStarted) {
  CycleClock c({kMs, 0, false, false});
  c.Joined(100 * kMs);
  EXPECT_FALSE(c.Due(100 * kMs + kMs / 2, true));
  EXPECT_TRUE(c.Due(101 * kMs, true));
  c.Start(101 * kMs, true);
  EXPECT_EQ(c.NextSeq(), 1u);
  EXPECT_TRUE(c.running());
  EXPECT_EQ(c.NextNs(101 * kMs, false), 0u);  // a cycle runs: poll it at once
  const CycleClock::Ended e = c.End(101 * kMs + 200'000);
  EXPECT_EQ(e.start_ns, 101 * kMs);
  EXPECT_EQ(e.end_ns - e.start_ns, 200'000u);
  EXPECT_EQ(c.NextNs(101 * kMs + 300'000, true), 102 * kMs);
  // Fresh work does not start a cycle early under Horovod's rules.
  c.Fresh();
  EXPECT_FALSE(c.Due(101 * kMs + 300'000, false));
}

TEST(CycleClock, StartOnWorkStartsAtOnceAndAnIdleJobSlowsToTenThenFiftyMilliseconds) {
  CycleClock c({kMs, 0, true, false});
  c.Joined(0);
  c.Fresh();
  EXPECT_TRUE(c.Due(1, false));
  EXPECT_EQ(c.NextNs(1, false), 0u);
  c.Start(1, false);
  c.Agreed(3);
  EXPECT_EQ(c.End(2).agreed, 3u);
  // Idle cycles from now on: after a second of them the timer slows to 10 ms.
  uint64_t t = 2;
  for (int i = 0; i < 3; ++i) {
    t += kMs;
    c.Start(t, true);
    c.End(t + 1);
  }
  EXPECT_EQ(c.NextNs(t + 2, true), t + kMs);
  t += 1'100 * kMs;
  c.Start(t, true);
  c.End(t + 1);
  EXPECT_EQ(c.NextNs(t + 2, true), t + 10 * kMs);
  // Five seconds of quiet (from the end of the first idle cycle, at 2 + kMs + 1): 50 ms.
  const uint64_t quiet_from = 2 + kMs + 1;
  t = quiet_from + 4'900 * kMs;
  c.Start(t, true);
  c.End(t + 1);
  EXPECT_EQ(c.NextNs(t + 2, true), t + 10 * kMs);
  t = quiet_from + 5'000 * kMs;
  c.Start(t, true);
  c.End(t + 1);
  EXPECT_EQ(c.NextNs(t + 2, true), t + 50 * kMs);
  // The first tensor after the quiet spell starts its node's cycle at once and ends the back-off.
  c.Fresh();
  EXPECT_TRUE(c.Due(t + 2, false));
  c.Start(t + 2, false);
  c.Agreed(1);
  c.End(t + 3);
  EXPECT_EQ(c.NextNs(t + 4, true), t + 2 + kMs);
}

TEST(CycleClock, OnDemandRunsOnlyWhenANodeAsksAndAsksForTheNextCycleItself) {
  CycleClock c({kMs, 0, false, true});
  c.Joined(0);
  EXPECT_FALSE(c.Due(10 * kMs, true));  // an idle job runs no cycles at all
  EXPECT_EQ(c.NextNs(10 * kMs, true), UINT64_MAX) << "nor wakes for them: work or another node's request wakes it";
  c.Wanted(1);                          // another node asked for cycle 1
  EXPECT_TRUE(c.Due(10 * kMs, true));
  EXPECT_FALSE(c.MustAsk());            // it was asked for: nobody needs asking
  c.Start(10 * kMs, true);
  c.NextSeq();
  c.End(10 * kMs + 1);
  EXPECT_FALSE(c.Due(20 * kMs, true));
  c.Fresh();                            // work here: this node asks for cycle 2
  EXPECT_TRUE(c.Due(20 * kMs, false));
  EXPECT_TRUE(c.MustAsk());
}

TEST(CycleClock, TheGlobalSleepStartsTheNextCycleWhenTheAgreedSleepEnds) {
  CycleClock c({kMs, 4, false, false});
  c.Joined(0);
  c.Start(0, true);
  EXPECT_EQ(c.LocalSleep(300'000, true), 700'000u);  // Horovod sleeps what is left of the cycle time
  EXPECT_EQ(c.LocalSleep(2 * kMs, true), 0u);
  c.SleepUntil(5 * kMs);
  c.End(300'000);
  EXPECT_FALSE(c.Due(4 * kMs, true));
  EXPECT_TRUE(c.Due(5 * kMs, true));
  EXPECT_EQ(c.NextNs(4 * kMs, true), 5 * kMs);
}

TEST(CycleClock, ADrainIsQuietOnlyOnceACycleFilledWhollyAfterItFoundNoWork) {
  CycleClock c({kMs, 0, false, false});
  c.Joined(0);
  auto cycle = [&](uint64_t t, bool quiet) {
    c.Start(t, true);
    const uint64_t seq = c.NextSeq();
    if (quiet) c.Quiet(seq);
    c.End(t + 1);
  };
  cycle(kMs, true);
  c.Drain(false);
  EXPECT_FALSE(c.QuietSinceDrain(false));
  cycle(2 * kMs, true);  // its other parts may have been filled before the drain began
  EXPECT_FALSE(c.QuietSinceDrain(false));
  cycle(3 * kMs, false);  // some node held work
  EXPECT_FALSE(c.QuietSinceDrain(false));
  cycle(4 * kMs, true);
  EXPECT_TRUE(c.QuietSinceDrain(false));
  EXPECT_FALSE(c.QuietSinceDrain(true));  // work came here since
}

}  // namespace
}  // namespace syncd
