#include "daemon/base/affinity.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

namespace syncd {
namespace {

TEST(CoreList, ParsesRangesAndFormatsThemBack) {
  auto c = ParseCoreList("3,1,4-6,1");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (CoreSet{1, 3, 4, 5, 6}));
  EXPECT_EQ(FormatCoreList(*c), "1,3-6");
  EXPECT_FALSE(ParseCoreList("1,,2").ok());
  EXPECT_FALSE(ParseCoreList("5-2").ok());
  EXPECT_FALSE(ParseCoreList("x").ok());
}

TEST(ResolveCores, AutoTakesTheLastCoreAndLeavesTheRestToWorkers) {
  const CoreSet allowed = AllowedCores();
  auto p = ResolveCores("auto");
  ASSERT_TRUE(p.ok());
  ASSERT_FALSE(p->daemon.empty());
  EXPECT_EQ(p->daemon.back(), allowed.back());
  if (allowed.size() > p->daemon.size()) {
    for (uint32_t c : p->daemon) EXPECT_EQ(std::count(p->workers.begin(), p->workers.end(), c), 0);
    EXPECT_EQ(p->workers.size() + p->daemon.size(), allowed.size());
  }
}

TEST(ResolveCores, NoneAndUnavailableCores) {
  auto none = ResolveCores("none");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->daemon.empty());
  EXPECT_EQ(none->workers, AllowedCores());
  auto bad = ResolveCores("4000");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("4000"), std::string::npos);
}

}  // namespace
}  // namespace syncd

namespace syncd {
namespace {

// A process of a given name pinned to core 0 counts for core 0 only; this process itself never.
TEST(ProcessesSharingCores, CountsOtherProcessesOfTheNameThatMayRunOnTheCores) {
  const CoreSet mine = AllowedCores();
  if (mine.size() < 2 || mine[0] != 0) GTEST_SKIP() << "needs cores 0 and another";
  char name[16];
  snprintf(name, sizeof(name), "share%d", int(getpid() % 100000));
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    cpu_set_t zero;
    CPU_ZERO(&zero);
    CPU_SET(0, &zero);
    sched_setaffinity(0, sizeof(zero), &zero);
    prctl(PR_SET_NAME, name);
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  char x;
  ASSERT_EQ(read(ready[0], &x, 1), 1);
  EXPECT_EQ(ProcessesSharingCores(name, {0}), 1u);
  EXPECT_EQ(ProcessesSharingCores(name, mine), 1u);
  EXPECT_EQ(ProcessesSharingCores(name, {mine[1]}), 0u) << "pinned to core 0 only";
  char was[16] = {};
  prctl(PR_GET_NAME, was);
  prctl(PR_SET_NAME, name);  // this process under the same name: not counted
  EXPECT_EQ(ProcessesSharingCores(name, {0}), 1u);
  prctl(PR_SET_NAME, was);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(ProcessesSharingCores(name, {0}), 0u);
  close(ready[0]);
  close(ready[1]);
}

}  // namespace
}  // namespace syncd
