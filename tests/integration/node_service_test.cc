// A node's daemon serving registered jobs of several users (--node-service on): registration with
// syncctl job add/remove, admission by the client's SO_PEERCRED against its job's registration,
// refusals that name the job and the user, and control.sock closed to everybody but its
// administrators. Other users are played by `nobody` (uid 65534): these tests need root.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

namespace syncd::testing {
namespace {

constexpr uint32_t kNobody = 65534;

// Runs `cmd` (a shell line), returns its exit status and what it printed (stdout and stderr).
std::pair<int, std::string> Shell(const std::string& cmd) {
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (f == nullptr) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const int st = pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

std::string Syncctl(const Daemon& d, const std::string& args) { return BinDir() + "/syncctl --run-dir " + d.run_dir() + " " + args; }

bool BecomeUser(uint32_t uid) { return uid == 0 || (setgid(uid) == 0 && setuid(uid) == 0); }

// Every rank of job `job` on this node, as user `uid`: an allreduce of rank + 1, checked exact.
std::vector<int> RunJob(const Daemon& d, uint64_t job, uint32_t uid, int size) {
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r)
    pids.push_back(Spawn([&, r] {
      CHILD_CHECK(BecomeUser(uid), "cannot become uid %u", uid);
      syncd_client* c = AttachToJob(d.run_dir(), job, r, size, r, size);
      CHILD_CHECK(c != nullptr, "rank %d of job %lu did not attach: %s", r, (unsigned long)job, syncd_last_error());
      for (int step = 0; step < 20; ++step) {
        double v = r + 1 + step;
        int64_t count = 1;
        syncd_tensor t{"grad", &v, SYNCD_FLOAT64, 1, &count, 0};
        syncd_handle h;
        CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h) == SYNCD_OK && syncd_wait(c, h, 10'000) == SYNCD_OK,
                    "rank %d step %d: %s", r, step, syncd_last_error());
        const double want = size * (size + 1) / 2.0 + size * step;
        CHILD_CHECK(v == want, "rank %d step %d: sum %g, want %g", r, step, v, want);
      }
      syncd_shutdown(c);
      return 0;
    }));
  std::vector<int> st;
  for (pid_t p : pids) st.push_back(WaitChild(p, 60'000));
  return st;
}

// A client that tries to attach to `job` as `uid` and must be refused; its error text is returned.
std::string RefusedAttach(const Daemon& d, uint64_t job, uint32_t uid) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  pid_t p = Spawn([&] {
    close(fds[0]);
    CHILD_CHECK(BecomeUser(uid), "cannot become uid %u", uid);
    syncd_client* c = AttachToJob(d.run_dir(), job, 0, 2, 0, 2);
    const std::string why = c == nullptr ? syncd_last_error() : "ATTACHED";
    (void)!write(fds[1], why.data(), why.size());
    close(fds[1]);
    return c == nullptr ? 0 : 1;
  });
  close(fds[1]);
  std::string out;
  char buf[1024];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, size_t(n));
  close(fds[0]);
  EXPECT_EQ(WaitChild(p, 20'000), 0) << out;
  return out;
}

class NodeService : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to run ranks as other users";
  }
};

TEST_F(NodeService, RegisteredJobsOfTheirOwnUsersRunAndEveryOtherAttachIsRefusedByName) {
  Daemon d(2, {"--node-service", "on"});
  struct stat st {};
  ASSERT_EQ(stat(d.run_dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u) << "every user's ranks must reach attach.sock";
  ASSERT_EQ(stat((d.run_dir() + "/attach.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  ASSERT_EQ(stat((d.run_dir() + "/control.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "control.sock is root's alone without --admin-group";

  const uint64_t alice = 7001, bob = 7002;
  // Not registered yet.
  EXPECT_TRUE(Contains(RefusedAttach(d, alice, 0), "belongs to job 7001, which is not registered with this node's daemon"));
  // Naming no job.
  EXPECT_TRUE(Contains(RefusedAttach(d, 0, 0), "names no job"));

  auto [rc, out] = Shell(Syncctl(d, "job add --job 7001 --uid 0"));
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "job add --job 7002 --uid nobody --weight 2"));
  ASSERT_EQ(rc, 0) << out;
  // Registered again for another user: refused, the first registration stands.
  std::tie(rc, out) = Shell(Syncctl(d, "job add --job 7001 --uid nobody"));
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Contains(out, "job 7001 is registered already, for uid 0")) << out;

  // Another user's job: refused naming both uids, both ways.
  EXPECT_TRUE(Contains(RefusedAttach(d, alice, kNobody), "runs as uid 65534, but job 7001 is registered for uid 0"));
  EXPECT_TRUE(Contains(RefusedAttach(d, bob, 0), "runs as uid 0, but job 7002 is registered for uid 65534"));

  // Each job of its own user trains, with exact sums; the daemon runs as root, bob as nobody.
  ExpectAllSucceeded(RunJob(d, alice, 0, 2));
  ExpectAllSucceeded(RunJob(d, bob, kNobody, 2));

  // The registrations, as an administrator sees them.
  std::tie(rc, out) = Shell(Syncctl(d, "job list --json"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(Contains(out, "\"job\":\"7001\"") && Contains(out, "\"job\":\"7002\"")) << out;
  EXPECT_TRUE(Contains(out, "\"user\":\"nobody\"") && Contains(out, "\"weight\":2")) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "status"));
  EXPECT_TRUE(Contains(out, "jobs       2 registered (node service)")) << out;
  // One job's view: the last one to run (bob's), and why not for the others.
  std::tie(rc, out) = Shell(Syncctl(d, "status --json --job 7002"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Contains(out, "\"job_id\":\"7002\"")) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "status --job 7001"));
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Contains(out, "job 7001 is registered here but not running")) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "status --job 7009"));
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Contains(out, "job 7009 is not registered with this node's daemon")) << out;

  // Removed: its ranks attach no more.
  std::tie(rc, out) = Shell(Syncctl(d, "job remove 7002"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(Contains(RefusedAttach(d, bob, kNobody), "job 7002, which is not registered"));
  std::tie(rc, out) = Shell(Syncctl(d, "job remove 7002"));
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Contains(out, "job 7002 is not registered with this daemon")) << out;
  // The daemon serves the next job.
  std::tie(rc, out) = Shell(Syncctl(d, "job add --job 7005 --uid nobody"));
  ASSERT_EQ(rc, 0) << out;
  ExpectAllSucceeded(RunJob(d, 7005, kNobody, 2));
}

TEST_F(NodeService, RemovingARunningJobFailsWhatItHasInFlightNamingWhyAndDisconnectsItsRanks) {
  Daemon d(2, {"--node-service", "on"});
  auto [rc, out] = Shell(Syncctl(d, "job add --job 7003 --uid nobody"));
  ASSERT_EQ(rc, 0) << out;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  // Rank 0 submits and waits; rank 1 attaches and never submits, so the allreduce stays in flight.
  pid_t waiter = Spawn([&] {
    close(ready[0]);
    CHILD_CHECK(BecomeUser(kNobody), "setuid");
    syncd_client* c = AttachToJob(d.run_dir(), 7003, 0, 2, 0, 2);
    CHILD_CHECK(c != nullptr, "%s", syncd_last_error());
    double v = 1;
    int64_t count = 1;
    syncd_tensor t{"grad", &v, SYNCD_FLOAT64, 1, &count, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h) == SYNCD_OK, "%s", syncd_last_error());
    (void)!write(ready[1], "x", 1);
    const int rc = syncd_wait(c, h, 30'000);
    CHILD_CHECK(rc == SYNCD_ERR_REFUSED, "%s: %s", syncd_status_name(rc), syncd_last_error());
    CHILD_CHECK(Contains(syncd_last_error(), "tensor 'grad'") &&
                    Contains(syncd_last_error(), "job 7003 was removed from this node's daemon (syncctl job remove)"),
                "%s", syncd_last_error());
    return 0;
  });
  pid_t idle = Spawn([&] {
    close(ready[0]);
    close(ready[1]);
    CHILD_CHECK(BecomeUser(kNobody), "setuid");
    syncd_client* c = AttachToJob(d.run_dir(), 7003, 1, 2, 1, 2);
    CHILD_CHECK(c != nullptr, "%s", syncd_last_error());
    pause();  // until the daemon disconnects it, then the test kills it
    return 0;
  });
  close(ready[1]);
  char x;
  ASSERT_EQ(read(ready[0], &x, 1), 1);
  close(ready[0]);
  usleep(200'000);  // the request reaches the engine
  std::tie(rc, out) = Shell(Syncctl(d, "job remove 7003"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(Contains(out, "2 of its ranks were attached")) << out;
  EXPECT_EQ(WaitChild(waiter, 20'000), 0);
  kill(idle, SIGKILL);
  WaitChild(idle, 10'000);
  // The daemon goes on serving the next registered job.
  std::tie(rc, out) = Shell(Syncctl(d, "job add --job 7004 --uid 0"));
  ASSERT_EQ(rc, 0) << out;
  ExpectAllSucceeded(RunJob(d, 7004, 0, 2));
}

TEST_F(NodeService, ControlSocketIsTheAdministratorsAlone) {
  // --admin-group: root and the group's members; anyone else cannot even connect.
  Daemon d(1, {"--node-service", "on", "--admin-group", "root"});
  struct stat st {};
  ASSERT_EQ(stat((d.run_dir() + "/control.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, 0u);
  auto [rc, out] = Shell("setpriv --reuid=65534 --regid=65534 --clear-groups " + Syncctl(d, "job add --job 9 --uid 65534"));
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(Contains(out, "no syncd answers")) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "job list --json"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_FALSE(Contains(out, "\"job\":\"9\"")) << out;
  // A group that does not exist stops the daemon at its start, naming it.
  Daemon bad(1, {"--node-service", "on", "--admin-group", "no-such-group-syncd"}, /*wait_ready=*/false);
  EXPECT_NE(bad.Wait(20'000), 0);
  EXPECT_TRUE(Contains(bad.Log(), "--admin-group no-such-group-syncd: no such group")) << bad.Log();
}

TEST(NodeServiceOff, JobRegistrationIsRefusedSayingHowToGetANodeService) {
  Daemon d(1);
  auto [rc, out] = Shell(Syncctl(d, "job add --job 5 --uid 0"));
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Contains(out, "--node-service on")) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "job list"));
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Contains(out, "--node-service off")) << out;
}

}  // namespace
}  // namespace syncd::testing
