// transport/comm_task.h's reuse of coroutine frames and host_collectives.h's scratch blocks: what is
// reused is never handed out while something still holds it, and tasks run the same whether their
// frames are new or reused.
#include "daemon/transport/comm_task.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include "daemon/base/sanitizers.h"
#include "daemon/transport/host_collectives.h"

namespace syncd {
namespace {

// A task that waits until `*go`, then returns `value` in its status message.
CommTask Waiter(const bool* go, int value) {
  WaitUntil ready;
  ready.ready = [go] { return *go; };
  co_await ready;
  co_return Status(SYNCD_OK, std::to_string(value));
}

TEST(CommTask, TasksInFlightTogetherHaveTheirOwnFramesAndFinishedOnesAreReused) {
  bool go = false;
  std::vector<CommTask> tasks;
  for (int i = 0; i < 50; ++i) tasks.push_back(Waiter(&go, i));  // more than a size class keeps
  go = true;
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(tasks[size_t(i)].Poll());
    EXPECT_EQ(tasks[size_t(i)].status().message(), std::to_string(i));  // no frame shared by two
  }
  tasks.clear();
  // Again, on frames that were reused (or new under ASan): the same results.
  go = false;
  for (int i = 0; i < 50; ++i) tasks.push_back(Waiter(&go, 100 + i));
  go = true;
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(tasks[size_t(i)].Poll());
    EXPECT_EQ(tasks[size_t(i)].status().message(), std::to_string(100 + i));
  }
}

// Three pieces of work with a step aside after each of the first two: each Poll runs one piece
// and hands the thread back (the engine serves other jobs between them), the last ends the task.
CommTask Pieces(const bool* go, int* done) {
  WaitUntil ready;
  ready.ready = [go] { return *go; };
  co_await ready;
  for (int i = 0; i < 3; ++i) {
    ++*done;
    if (i < 2) co_await StepAside{};
  }
  co_return Status::Ok();
}

TEST(CommTask, ATaskThatStepsAsideResumesAtTheNextPollNotThisOne) {
  bool go = false;
  int done = 0;
  CommTask t = Pieces(&go, &done);
  go = true;
  EXPECT_FALSE(t.Poll());
  EXPECT_EQ(done, 1);
  EXPECT_FALSE(t.Poll());
  EXPECT_EQ(done, 2);
  EXPECT_TRUE(t.Poll());
  EXPECT_EQ(done, 3);
  EXPECT_TRUE(t.status().ok());
}

TEST(FramePool, AFrameOfTheSameSizeClassIsReusedOutsideAsan) {
  // A size no task here has (its class is not full of other frames).
  void* a = FramePool::Get(4000);
  FramePool::Put(a, 4000);
  void* b = FramePool::Get(3990);  // the same 64-byte class
  if (!kAddressSanitizer) {
    EXPECT_EQ(a, b);
  }
  void* c = FramePool::Get(4000);  // b is in use: another
  EXPECT_NE(b, c);
  FramePool::Put(b, 3990);
  FramePool::Put(c, 4000);
  void* big = FramePool::Get(1 << 20);  // not pooled
  FramePool::Put(big, 1 << 20);
}

TEST(ScratchFor, ABlockIsNeverHandedOutWhileHeldAndIsReusedOnceLetGo) {
  std::vector<std::shared_ptr<char[]>> held;
  std::set<char*> seen;
  for (int i = 0; i < 40; ++i) {  // more than the blocks kept
    held.push_back(ScratchFor(64));
    EXPECT_TRUE(seen.insert(held.back().get()).second) << "block " << i << " handed out twice";
  }
  char* first = held.front().get();
  held.clear();
  std::shared_ptr<char[]> again = ScratchFor(100);
  if (!kAddressSanitizer) {
    EXPECT_EQ(again.get(), first);
  }
  std::shared_ptr<char[]> large = ScratchFor(1 << 20);  // over a block: its own
  EXPECT_NE(large.get(), again.get());
  large[(1 << 20) - 1] = 1;
}

}  // namespace
}  // namespace syncd
