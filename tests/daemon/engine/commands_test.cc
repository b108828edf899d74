// engine/commands.h: commands from many threads, each answered once through its own future.
#include "daemon/engine/commands.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace syncd {
namespace {

TEST(CommandQueue, EveryCommandFromManyThreadsGetsItsOwnReply) {
  CommandQueue q;
  EXPECT_FALSE(q.pending());
  constexpr int kThreads = 4, kEach = 50;
  std::vector<std::thread> askers;
  std::atomic<int> answered{0};
  for (int t = 0; t < kThreads; ++t)
    askers.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        TimelineCommand c;
        c.path = std::to_string(t) + "." + std::to_string(i);
        std::future<EngineReply> reply = q.Post(c);
        const Status st = std::get<Status>(reply.get());
        EXPECT_EQ(st.message(), c.path);  // its own command's reply, not another's
        ++answered;
      }
    });
  // The "engine": answers whatever is queued with the command's own path.
  int served = 0;
  while (served < kThreads * kEach) {
    if (!q.pending()) {
      std::this_thread::yield();
      continue;
    }
    for (CommandQueue::Entry& e : q.TakeAll()) {
      e.reply.set_value(Status(SYNCD_ERR_INVALID, std::get<TimelineCommand>(e.command).path));
      ++served;
    }
  }
  for (std::thread& a : askers) a.join();
  EXPECT_EQ(answered.load(), kThreads * kEach);
  EXPECT_FALSE(q.pending());
  EXPECT_TRUE(q.TakeAll().empty());
}

}  // namespace
}  // namespace syncd
