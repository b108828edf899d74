#include "daemon/transport/process_watch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>

namespace syncd {
namespace {

// Two same-host peer daemons die: both must be reported. Exited() used to return the first
// exited process on every call, so the transport never learned of the second (a daemon kept a
// send to it in flight at exit, and a job's failure named only the first).
TEST(ProcessWatch, EveryExitedProcessIsReportedOnce) {
  pid_t kids[2];
  for (pid_t& k : kids) {
    k = fork();
    ASSERT_GE(k, 0);
    if (k == 0) {
      pause();  // until killed
      _exit(0);
    }
  }
  ProcessWatch watch;
  ASSERT_TRUE(watch.Watch(3, kids[0]));
  ASSERT_TRUE(watch.Watch(5, kids[1]));
  EXPECT_FALSE(watch.Exited().has_value());
  for (pid_t k : kids) {
    kill(k, SIGKILL);
    waitpid(k, nullptr, 0);
  }
  std::set<uint32_t> reported;
  for (int i = 0; i < 10; ++i) {
    if (std::optional<uint32_t> node = watch.Exited()) {
      EXPECT_TRUE(reported.insert(*node).second) << "node " << *node << " twice";
    }
  }
  EXPECT_EQ(reported, (std::set<uint32_t>{3, 5}));
  EXPECT_EQ(watch.pid_of(5), kids[1]);
}

}  // namespace
}  // namespace syncd
