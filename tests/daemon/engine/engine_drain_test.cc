// The engine's drain and its observer thread (engine/engine_drain.h, engine/observer_thread.h).
#include "daemon/engine/engine_drain.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "daemon/engine/observer_thread.h"

namespace syncd {
namespace {

TEST(EngineDrain, TheFirstReasonStaysAndALaterDeadlineOnlyComesSooner) {
  EngineDrain d;
  EXPECT_FALSE(d.on());
  d.Count(true);  // not draining: not counted
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i)
    callers.emplace_back([&d, i] { d.Begin(uint64_t(1000 - i * 100), i == 0 ? "SIGTERM" : "syncctl drain"); });
  for (std::thread& t : callers) t.join();
  EXPECT_TRUE(d.on());
  EXPECT_EQ(d.deadline_ns(), 700u);
  d.Begin(5000, "later");
  EXPECT_EQ(d.deadline_ns(), 700u);
  d.Count(true);
  d.Count(true);
  d.Count(false);
  EXPECT_EQ(d.leave_why(), "");  // the deadline has not passed
  d.DeadlinePassed();
  EXPECT_TRUE(d.leave_why() == "SIGTERM" || d.leave_why() == "syncctl drain");
  EXPECT_FALSE(d.finished());
  d.Finish();
  EXPECT_TRUE(d.finished());
  EXPECT_EQ(d.result().completed, 2u);
  EXPECT_EQ(d.result().failed, 1u);
  EXPECT_TRUE(d.result().deadline_passed);
}

TEST(EngineDrain, ADeadlineOfZeroStillDrains) {
  EngineDrain d;
  d.Begin(0, "now");
  EXPECT_TRUE(d.on());
  EXPECT_EQ(d.deadline_ns(), 1u);
}

TEST(ObserverThread, TicksUntilStoppedAndTheStopperKeepsAnsweringMeanwhile) {
  ObserverThread o;
  std::atomic<int> ticks{0};
  std::atomic<bool> answered{false};
  o.Start("test-observer", std::chrono::milliseconds(1), [&] {
    ++ticks;
    // A tick that waits for the stopping thread's answer, as the engine's observer may.
    if (ticks == 3)
      while (!answered.load()) std::this_thread::yield();
  });
  while (ticks < 3) std::this_thread::yield();
  int meanwhile = 0;
  o.Stop([&] {
    ++meanwhile;
    answered = true;
  });
  EXPECT_GE(meanwhile, 1);
  const int after = ticks.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(ticks.load(), after);  // stopped for good
}

}  // namespace
}  // namespace syncd
