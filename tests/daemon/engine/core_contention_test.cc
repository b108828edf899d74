#include "daemon/engine/core_contention.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace syncd {
namespace {

constexpr uint64_t kMs = 1'000'000;

TEST(CoreContention, IsContendedWhereOtherDaemonsMayRunOnItsCoresOnly) {
  CoreContention c;
  EXPECT_FALSE(c.contended());
  c.SetOtherDaemons(1);
  EXPECT_TRUE(c.contended());
  EXPECT_FALSE(c.crowded());
  c.SetOtherDaemons(3);
  EXPECT_TRUE(c.crowded());
  EXPECT_EQ(c.other_daemons(), 3u);
  c.SetOtherDaemons(0);
  EXPECT_FALSE(c.contended());
  EXPECT_FALSE(c.crowded());
}

// The share of runnable time spent waiting; a window the engine was barely runnable in (an idle
// daemon asleep) keeps the last share.
TEST(CoreContention, TheRunDelayShareOfAWindowAndIdleWindowsLeaveIt) {
  CoreContention c;
  EXPECT_EQ(c.wait_pct(), -1);
  c.Update(992 * kMs, 8 * kMs);
  EXPECT_NEAR(c.wait_pct(), 0.8, 0.01);
  c.Update(36 * kMs, 64 * kMs);
  EXPECT_NEAR(c.wait_pct(), 64, 0.01);
  c.Update(kMs / 2, 0);
  EXPECT_NEAR(c.wait_pct(), 64, 0.01);
}

// Measured for real: a thread that spins on a core a busy thread shares waits for it about half
// its runnable time.
TEST(CoreContention, MeasuresTheRunDelayOfTheCallingThread) {
  CoreContention c;
  if (!c.Open()) GTEST_SKIP() << "no /proc/thread-self/schedstat on this kernel";
  cpu_set_t was, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof(was), &was), 0);
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  std::atomic<bool> stop{false};
  std::thread rival([&] {
    (void)sched_setaffinity(0, sizeof(one), &one);
    while (!stop.load(std::memory_order_relaxed)) {}
  });
  uint64_t now = 0;
  EXPECT_TRUE(c.Sample(now));  // the base
  EXPECT_EQ(c.wait_pct(), -1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < until) {}
  EXPECT_FALSE(c.Sample(now + 1));  // within the window: not read
  now += CoreContention::kWindowNs;
  EXPECT_TRUE(c.Sample(now));
  stop = true;
  rival.join();
  ASSERT_EQ(sched_setaffinity(0, sizeof(was), &was), 0);
  EXPECT_GT(c.wait_pct(), 30);
}

}  // namespace
}  // namespace syncd
