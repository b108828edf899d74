// Graceful drain and the systemd contract: SIGTERM or `syncctl drain` takes no new clients, lets
// what is in flight finish, fails what cannot finish by the deadline with a clear error, and exits
// 0; under systemd the daemon says READY=1, feeds the watchdog while the engine is healthy and
// says STOPPING=1 when told to stop.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "daemon/control/notify.h"
#include "tests/integration/harness.h"

namespace syncd::testing {
namespace {


// Flags the test process and its forked ranks share.
struct Shared {
  std::atomic<int> submitted{0};   // ranks that submitted before the drain began
  std::atomic<int> attached{0};    // straddling ranks attached (a drain refuses new clients)
  std::atomic<int> draining{0};    // the test saw the daemon draining
};

Shared* MapShared() {
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return new (p) Shared();
}

bool WaitFor(const std::function<bool()>& cond, int timeout_ms) {
  for (const double end = NowS() + timeout_ms / 1e3; NowS() < end; std::this_thread::sleep_for(std::chrono::milliseconds(5)))
    if (cond()) return true;
  return cond();
}

bool IsDraining(const std::string& run_dir) { return Contains(SyncctlStatusJson(run_dir), "\"draining\":true"); }

int SubmitSum(syncd_client* c, const char* name, int32_t* v, syncd_handle* h) {
  static int64_t shape = 1;
  syncd_tensor t{name, v, SYNCD_INT32, 1, &shape, 0};
  return syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, h);
}

// A rank of a 2-rank job whose collective straddles the drain: rank 0 submits before it (and says
// so), rank 1 only once the test saw the daemon draining. Both must get `expect`.
pid_t SpawnStraddlingRank(Shared* sh, const std::string& run_dir, int r, int local_rank, int local_size,
                          const char* name, int32_t value, int32_t expect) {
  return Spawn([=] {
    syncd_client* c = AttachAs(run_dir, r, 2, local_rank, local_size);
    CHILD_CHECK(c != nullptr, "attach");
    ++sh->attached;
    int32_t v = value;
    syncd_handle h;
    if (r == 1) CHILD_CHECK(WaitFor([&] { return sh->draining.load() == 1; }, 10'000), "no drain");
    CHILD_CHECK(SubmitSum(c, name, &v, &h) == SYNCD_OK, "%s", syncd_last_error());
    if (r == 0) sh->submitted = 1;
    CHILD_CHECK(syncd_wait(c, h, 10'000) == SYNCD_OK, "rank %d: %s", r, syncd_last_error());
    CHILD_CHECK(v == expect, "rank %d got %d", r, v);
    syncd_shutdown(c);
    return 0;
  });
}

std::string Shell(const std::string& command, int* rc) {
  FILE* f = popen(command.c_str(), "r");
  std::string out;
  char buf[512];
  while (f != nullptr && fgets(buf, sizeof(buf), f) != nullptr) out += buf;
  *rc = f == nullptr ? -1 : pclose(f);
  return out;
}

// One node: rank 0 submits, the daemon gets SIGTERM, rank 1 submits its half afterwards: the
// collective finishes exactly, a new client is refused, and the daemon exits 0 at once.
TEST(Drain, SigtermLetsTheCollectiveInFlightFinishAndRefusesNewClients) {
  Daemon d(2);
  Shared* sh = MapShared();
  const std::string dir = d.run_dir();
  const pid_t r0 = SpawnStraddlingRank(sh, dir, 0, 0, 2, "in.flight", 10, 30);
  const pid_t r1 = SpawnStraddlingRank(sh, dir, 1, 1, 2, "in.flight", 20, 30);
  ASSERT_TRUE(WaitFor([&] { return sh->submitted.load() == 1 && sh->attached.load() == 2; }, 10'000));
  const double t0 = NowS();
  d.Kill(SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return IsDraining(dir); }, 5'000)) << "syncctl status never said draining";
  // A newcomer is refused with a message that says why.
  const pid_t newcomer = Spawn([&] {
    syncd_init_options o{};
    o.run_dir = dir.c_str();
    o.rank = 0;
    o.size = 1;
    o.local_rank = 0;
    o.local_size = 1;
    o.attach_timeout_ms = 2'000;
    o.job_id = 0;
    syncd_client* c = nullptr;
    const int rc = syncd_init(&o, &c);
    CHILD_CHECK(rc == SYNCD_ERR_REFUSED, "attach during drain: %s %s", syncd_status_name(rc), syncd_last_error());
    CHILD_CHECK(Contains(syncd_last_error(), "draining"), "%s", syncd_last_error());
    return 0;
  });
  const int ns = WaitChild(newcomer, 10'000);
  EXPECT_TRUE(WIFEXITED(ns) && WEXITSTATUS(ns) == 0) << ns;
  sh->draining = 1;
  for (pid_t p : {r0, r1}) {
    const int s = WaitChild(p, 15'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s;
  }
  const int s = d.Wait(10'000);
  EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "daemon status " << s;
  EXPECT_LT(NowS() - t0, 10.0) << "the drain waited for its deadline although nothing was left";
  EXPECT_TRUE(Contains(d.Log(), "1 failed") == false) << d.Log();
}

// `syncctl drain --timeout 1` while a collective waits for a rank that never submits: the waiting
// rank gets an error naming the tensor and the drain, syncctl reports it, the daemon exits 0.
TEST(Drain, TheDeadlineFailsWhatCannotFinishWithAClearError) {
  Daemon d(2, {"--drain-timeout", "60"});
  Shared* sh = MapShared();
  const std::string dir = d.run_dir();
  const pid_t waiting = Spawn([&] {
    syncd_client* c = AttachAs(dir, 0, 2, 0, 2);
    CHILD_CHECK(c != nullptr, "attach");
    int32_t v = 1;
    syncd_handle h;
    CHILD_CHECK(SubmitSum(c, "orphan.grad", &v, &h) == SYNCD_OK, "%s", syncd_last_error());
    sh->submitted = 1;
    const int rc = syncd_wait(c, h, 20'000);
    CHILD_CHECK(rc == SYNCD_ERR_DAEMON_LOST, "%s: %s", syncd_status_name(rc), syncd_last_error());
    const std::string e = syncd_last_error();
    CHILD_CHECK(Contains(e, "orphan.grad") && Contains(e, "syncctl drain") && Contains(e, "drain timeout 1 s"), "%s",
                e.c_str());
    // The daemon is gone now: the next call says so instead of hanging.
    int after = SubmitSum(c, "after", &v, &h);
    if (after == SYNCD_OK) after = syncd_wait(c, h, 10'000);
    CHILD_CHECK(after == SYNCD_ERR_DAEMON_LOST, "%s: %s", syncd_status_name(after), syncd_last_error());
    syncd_shutdown(c);
    return 0;
  });
  const pid_t silent = Spawn([&] {
    syncd_client* c = AttachAs(dir, 1, 2, 1, 2);
    CHILD_CHECK(c != nullptr, "attach");
    WaitFor([&] { return false; }, 3'000);  // attached, never submits
    syncd_shutdown(c);
    return 0;
  });
  ASSERT_TRUE(WaitFor([&] { return sh->submitted.load() == 1; }, 10'000));
  const double t0 = NowS();
  int rc = 0;
  const std::string out = Shell(BinDir() + "/syncctl --run-dir " + dir + " drain --timeout 1", &rc);
  const double took = NowS() - t0;
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Contains(out, "1 failed") && Contains(out, "the timeout passed")) << out;
  EXPECT_GT(took, 0.9);
  EXPECT_LT(took, 5.0);
  const int s = d.Wait(10'000);
  EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "daemon status " << s;
  for (pid_t p : {waiting, silent}) {
    const int cs = WaitChild(p, 15'000);
    EXPECT_TRUE(cs != -1 && WIFEXITED(cs) && WEXITSTATUS(cs) == 0) << "status " << cs;
  }
}

// Two nodes, both told to stop (what a Slurm epilog does) while a collective is half submitted:
// the daemons keep coordinating until it finishes, then both exit 0. Every coordination mode.
class DrainModes : public ::testing::TestWithParam<const char*> {};

TEST_P(DrainModes, EveryNodeOfAJobDrainsTheCollectiveInFlight) {
  Cluster cluster(2, 1, {"--log-level", "error", "--coord", GetParam()});
  Shared* sh = MapShared();
  std::vector<pid_t> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(SpawnStraddlingRank(sh, cluster.node(r).run_dir(), r, 0, 1, "across.nodes", r + 1, 3));
  ASSERT_TRUE(WaitFor([&] { return sh->submitted.load() == 1 && sh->attached.load() == 2; }, 10'000));
  for (int n = 0; n < 2; ++n) cluster.node(n).Kill(SIGTERM);
  for (int n = 0; n < 2; ++n)
    ASSERT_TRUE(WaitFor([&] { return IsDraining(cluster.node(n).run_dir()); }, 5'000)) << "node " << n;
  sh->draining = 1;
  for (pid_t p : ranks) {
    const int s = WaitChild(p, 15'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s;
  }
  for (int n = 0; n < 2; ++n) {
    const int s = cluster.node(n).Wait(10'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "node " << n << " status " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Drain, DrainModes, ::testing::Values("negotiate", "gs", "nbcs", "topo"));

// The systemd contract (Type=notify, WatchdogSec=): READY=1 once serving, WATCHDOG=1 at least
// twice per interval while the engine is healthy, STOPPING=1 on SIGTERM, exit 0.
TEST(Systemd, NotifySocketGetsReadyWatchdogPingsAndStopping) {
  char templ[] = "/tmp/syncd-notify-XXXXXX";
  const std::string dir = mkdtemp(templ);
  const std::string sock_path = dir + "/notify.sock";
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock_path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("NOTIFY_SOCKET", sock_path.c_str(), 1);
    setenv("WATCHDOG_USEC", "400000", 1);  // systemd sets WATCHDOG_PID too; without it any pid may ping
    execl((BinDir() + "/syncd").c_str(), "syncd", "--run-dir", (dir + "/run").c_str(), "--cores", "none",
          "--log-level", "warn", nullptr);
    _exit(127);
  }
  auto receive = [&](double until) {
    std::vector<std::string> got;
    while (NowS() < until) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      char buf[1024] = {};
      if (recv(fd, buf, sizeof(buf) - 1, 0) > 0) got.emplace_back(buf);
    }
    return got;
  };
  auto count = [](const std::vector<std::string>& msgs, const std::string& what) {
    int n = 0;
    for (const std::string& m : msgs) n += Contains(m, what);
    return n;
  };
  std::vector<std::string> first = receive(NowS() + 1.2);
  EXPECT_EQ(count(first, "READY=1"), 1);
  EXPECT_TRUE(count(first, "MAINPID=" + std::to_string(pid)) == 1);
  // 1.2 s with a 0.4 s interval: systemd needs a ping per interval; the daemon sends one per 0.1 s.
  EXPECT_GE(count(first, "WATCHDOG=1"), 6);
  kill(pid, SIGTERM);
  std::vector<std::string> last = receive(NowS() + 1.0);
  EXPECT_EQ(count(last, "STOPPING=1"), 1);
  int status = WaitChild(pid, 10'000);
  EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  close(fd);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// The watchdog interval is systemd's, and only for the process it names.
TEST(Systemd, WatchdogIntervalIsReadFromTheEnvironmentForThisProcessOnly) {
  // Run in a child so the test process's environment stays untouched.
  const pid_t p = Spawn([] {
    unsetenv("WATCHDOG_USEC");
    CHILD_CHECK(WatchdogIntervalUs() == 0, "no variable");
    setenv("WATCHDOG_USEC", "30000000", 1);
    CHILD_CHECK(WatchdogIntervalUs() == 30'000'000, "plain");
    setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
    CHILD_CHECK(WatchdogIntervalUs() == 30'000'000, "own pid");
    setenv("WATCHDOG_PID", std::to_string(getpid() + 1).c_str(), 1);
    CHILD_CHECK(WatchdogIntervalUs() == 0, "another pid");
    // Healthy: a heartbeat younger than half the interval; a stuck engine is not.
    CHILD_CHECK(EngineHealthy(1'000'000'000, 1'000'000'000 + 14'000'000'000ull, 30'000'000), "fresh");
    CHILD_CHECK(!EngineHealthy(1'000'000'000, 1'000'000'000 + 16'000'000'000ull, 30'000'000), "stale");
    return 0;
  });
  const int s = WaitChild(p, 5'000);
  EXPECT_TRUE(WIFEXITED(s) && WEXITSTATUS(s) == 0) << s;
}

}  // namespace
}  // namespace syncd::testing
