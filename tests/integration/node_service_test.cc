// A node's daemon serving registered jobs of several users (--node-service on): registration with
// syncctl job add/remove, admission by the client's SO_PEERCRED against its job's registration,
// refusals that name the job and the user, and control.sock closed to everybody but its
// administrators. Other users are played by `nobody` (uid 65534): these tests need root.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <cstdio>
#include <fstream>
#include <string>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/integration/model_graph.h"

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

// Every rank of job `job` on this node, as user `uid`: `steps` allreduces of `scale` x (rank + 1
// + step), all named "grad" (as every job's are), checked exact. With `pause`, rank 0 writes a
// byte to pause->first before step pause->step and waits for one on pause->second (its job's other
// ranks wait in that step's collective). StartJob returns the ranks' pids, RunJob their exit statuses.
struct Pause {
  int step, tell_fd, wait_fd;
};
std::vector<pid_t> StartJob(const Daemon& d, uint64_t job, uint32_t uid, int size, double scale = 1, int steps = 20,
                            std::optional<Pause> pause = std::nullopt) {
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r)
    pids.push_back(Spawn([&, r] {
      CHILD_CHECK(BecomeUser(uid), "cannot become uid %u", uid);
      syncd_client* c = AttachToJob(d.run_dir(), job, r, size, r, size);
      CHILD_CHECK(c != nullptr, "rank %d of job %lu did not attach: %s", r, (unsigned long)job, syncd_last_error());
      for (int step = 0; step < steps; ++step) {
        if (pause && r == 0 && step == pause->step) {
          char x = 'x';
          CHILD_CHECK(write(pause->tell_fd, &x, 1) == 1 && read(pause->wait_fd, &x, 1) == 1, "pause");
        }
        double v = scale * (r + 1 + step);
        int64_t count = 1;
        syncd_tensor t{"grad", &v, SYNCD_FLOAT64, 1, &count, 0};
        syncd_handle h;
        CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h) == SYNCD_OK && syncd_wait(c, h, 10'000) == SYNCD_OK,
                    "job %lu rank %d step %d: %s", (unsigned long)job, r, step, syncd_last_error());
        const double want = scale * (size * (size + 1) / 2.0 + size * step);
        CHILD_CHECK(v == want, "job %lu rank %d step %d: sum %g, want %g", (unsigned long)job, r, step, v, want);
      }
      syncd_shutdown(c);
      return 0;
    }));
  return pids;
}

std::vector<int> Finish(const std::vector<pid_t>& pids) {
  std::vector<int> st;
  for (pid_t p : pids) st.push_back(WaitChild(p, 120'000));
  return st;
}

std::vector<int> RunJob(const Daemon& d, uint64_t job, uint32_t uid, int size) { return Finish(StartJob(d, job, uid, size)); }

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

// One allreduce of 1.0 named "grad": its status once complete (or refused). With `tell_fd`, a
// byte is written there once it is submitted.
int OneAllreduce(syncd_client* c, int tell_fd = -1) {
  double v = 1;
  int64_t count = 1;
  syncd_tensor t{"grad", &v, SYNCD_FLOAT64, 1, &count, 0};
  syncd_handle h;
  if (const int st = syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h); st != SYNCD_OK) return st;
  if (tell_fd >= 0) (void)!write(tell_fd, "x", 1);
  return syncd_wait(c, h, 30'000);
}

// One allreduce (sum) of `*v` named "grad", waited for up to `timeout_ms`: its status.
int GradStep(syncd_client* c, double* v, int timeout_ms) {
  int64_t count = 1;
  syncd_tensor t{"grad", v, SYNCD_FLOAT64, 1, &count, 0};
  syncd_handle h;
  const int st = syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h);
  return st == SYNCD_OK ? syncd_wait(c, h, timeout_ms) : st;
}

// Until `syncctl status` shows `ranks` ranks of `job` attached (a few seconds at most).
bool WaitForRanks(const Daemon& d, uint64_t job, int ranks) {
  const std::string want = "\"job\":\"" + std::to_string(job) + "\"";
  for (int i = 0; i < 200; ++i) {
    const std::string out = Shell(Syncctl(d, "job list --json")).second;
    const size_t at = out.find(want);
    if (at != std::string::npos && out.find("\"ranks_attached\":" + std::to_string(ranks), at) != std::string::npos)
      return true;
    usleep(50'000);
  }
  return false;
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
  // One job's view each (both are served, side by side), and why not for the others.
  std::tie(rc, out) = Shell(Syncctl(d, "status --json --job 7002"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Contains(out, "\"job_id\":\"7002\"")) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "status --json --job 7001"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Contains(out, "\"job_id\":\"7001\"")) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "job add --job 7006 --uid 0"));
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "status --job 7006"));
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Contains(out, "job 7006 is registered here but not running")) << out;
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
    const int rc = OneAllreduce(c, ready[1]);
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

size_t Occurrences(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// Blocks until `fd` has a byte (the test's go-ahead), for a rank waiting on its test.
bool Await(int fd) {
  char x;
  return read(fd, &x, 1) == 1;
}

TEST_F(NodeService, TwoJobsOfTwoUsersRunSideBySideEachWithItsOwnSumsAndItsOwnView) {
  Daemon d(2, {"--node-service", "on", "--metrics-port", "0"});
  auto [rc, out] = Shell(Syncctl(d, "job add --job 7101 --uid 0"));
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "job add --job 7102 --uid nobody"));
  ASSERT_EQ(rc, 0) << out;
  // Both jobs' ranks attach, wait for each other (go), run 200 allreduces of one name at once,
  // each job's sums its own (scaled 1 and 1000: a single value of the other job's in a sum shows),
  // then wait to be let go (hold) while the test reads the status.
  int go[2], hold[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(hold), 0);
  std::vector<pid_t> pids;
  for (const auto& [job, uid, scale] : {std::tuple{7101ul, 0u, 1.0}, std::tuple{7102ul, kNobody, 1000.0}})
    for (int r = 0; r < 2; ++r)
      pids.push_back(Spawn([&, job = job, uid = uid, scale = scale, r] {
        close(go[1]);
        close(hold[1]);
        CHILD_CHECK(BecomeUser(uid), "cannot become uid %u", uid);
        syncd_client* c = AttachToJob(d.run_dir(), job, r, 2, r, 2);
        CHILD_CHECK(c != nullptr, "job %lu rank %d did not attach: %s", job, r, syncd_last_error());
        CHILD_CHECK(Await(go[0]), "no go");
        for (int step = 0; step < 200; ++step) {
          if (job == 7102 && r == 1) usleep(2000);  // its job's straggler
          double v = scale * (r + 1 + step);
          int64_t count = 1;
          syncd_tensor t{"grad", &v, SYNCD_FLOAT64, 1, &count, 0};
          syncd_handle h;
          CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h) == SYNCD_OK && syncd_wait(c, h, 10'000) == SYNCD_OK,
                      "job %lu rank %d step %d: %s", job, r, step, syncd_last_error());
          CHILD_CHECK(v == scale * (3 + 2 * step), "job %lu rank %d step %d: sum %g, want %g", job, r, step, v,
                      scale * (3 + 2 * step));
        }
        CHILD_CHECK(Await(hold[0]), "no hold");
        syncd_shutdown(c);
        return 0;
      }));
  close(go[0]);
  close(hold[0]);
  // Every rank of both jobs attached at once: each job has its own local ranks 0 and 1.
  for (int i = 0; i < 200; ++i) {
    std::tie(rc, out) = Shell(Syncctl(d, "status --json"));
    if (Occurrences(out, "\"running\":true,\"ranks_attached\":2") == 2) break;
    usleep(50'000);
  }
  EXPECT_EQ(Occurrences(out, "\"running\":true,\"ranks_attached\":2"), 2u) << out;
  ASSERT_EQ(write(go[1], "xxxx", 4), 4);
  close(go[1]);
  // One job's view: its own two ranks only.
  std::tie(rc, out) = Shell(Syncctl(d, "status --json --job 7102"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Contains(out, "\"job_id\":\"7102\"")) << out;
  EXPECT_EQ(Occurrences(out, "\"pid\":"), 2u) << out;
  EXPECT_EQ(Occurrences(out, "\"job\":\"7101\""), 1u) << "7101 only in the registrations: " << out;
  // The node's own view names each rank's job (both have a rank 0) and each process set's.
  std::tie(rc, out) = Shell(Syncctl(d, "status"));
  EXPECT_TRUE(Contains(out, "   node service   ") && Contains(out, "job 7101: process set 0 (global)") &&
              Contains(out, "job 7102: process set 0 (global)"))
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\n  7101 +  +0 +0 +[0-9]+ attached")) &&
              std::regex_search(out, std::regex("\n  7102 +  +0 +0 +[0-9]+ attached")))
      << out;
  ASSERT_EQ(write(hold[1], "xxxx", 4), 4);
  close(hold[1]);
  ExpectAllSucceeded(Finish(pids));
  // Each job's share: its own 2 x 200 requests of 8 bytes, none failed, and engine time of its own.
  std::tie(rc, out) = Shell(Syncctl(d, "status --json"));
  EXPECT_EQ(Occurrences(out, "\"requests\":\"400\",\"bytes\":\"3200\",\"errors\":\"0\",\"engine_s\":"), 2u) << out;
  EXPECT_EQ(Occurrences(out, "\"engine_s\":0,"), 0u) << out;
  // Each job's collectives and stragglers its own: in its view, and in the metrics under its
  // job_id, each series once (both jobs have a process set 0 and a rank 0).
  // Job 7102's rank 1 came 2 ms late to every step: the last of its job's collectives (of both
  // jobs' it would be in about half).
  std::tie(rc, out) = Shell(Syncctl(d, "status --json --job 7102"));
  std::smatch late;
  ASSERT_TRUE(std::regex_search(out, late, std::regex("\"rank\":1,\"collectives\":\"100\",\"last\":\"(\\d+)\""))) << out;
  EXPECT_GE(std::stoi(late[1]), 95) << out;
  const std::string page = MetricsPage(d.run_dir());
  for (const char* job : {"7101", "7102"})
    EXPECT_TRUE(Contains(page, std::string("syncd_collectives_total{node=\"0\",process_set=\"0\",kind=\"allreduce\",job_id=\"") +
                                   job + "\"} 200\n"))
        << page;
  std::set<std::string> series;
  std::istringstream lines(page);
  for (std::string l; std::getline(lines, l);)
    if (!l.empty() && l[0] != '#') {
      EXPECT_TRUE(series.insert(l.substr(0, l.rfind(' '))).second) << "twice: " << l;
    }
}

std::string ReadText(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The file a timeline wrote, once complete (its writer closes it a moment after the stop).
std::string CompleteTimeline(const std::string& path) {
  std::string text;
  for (int i = 0; i < 100; ++i) {
    text = ReadText(path);
    if (text.size() > 3 && text.substr(text.size() - 3) == "\n]\n") break;
    usleep(50'000);
  }
  return text;
}

// Each job of a node service has a timeline of its own: one started by the administrator for
// that job (syncctl timeline --job), one by a rank of the other job (hvd.start_timeline); each
// file holds its own job's tensors and none of the other's, and a start that names no job is
// refused while two run, naming both. The daemon (root) writes a job's file only as its user
// could: into a directory of the user's, never through a symbolic link, the file the user's.
TEST_F(NodeService, EachJobsTimelineIsItsOwnStartedByItsRanksOrForItByTheAdministrator) {
  Daemon d(2, {"--node-service", "on", "--log-level", "error"});
  for (const char* add : {"job add --job 7301 --uid 0", "job add --job 7302 --uid nobody"}) {
    auto [rc, out] = Shell(Syncctl(d, add));
    ASSERT_EQ(rc, 0) << out;
  }
  const std::string stem = ::testing::TempDir() + "syncd_tl_" + std::to_string(getpid());
  const std::string dir_b = stem + "_nobody";  // job 7302's user's own directory
  const std::string file_a = stem + "_a.json", file_b = dir_b + "/b.json";
  const std::string roots = stem + "_roots", link = dir_b + "/link.json";  // a file nobody must not touch
  ASSERT_EQ(system(("rm -rf " + dir_b + " && mkdir -m 755 " + dir_b + " && chown 65534 " + dir_b + " && echo keep > " +
                    roots + " && ln -s " + roots + " " + link + " && rm -f " + file_a)
                       .c_str()),
            0);
  int go[2], hold[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(hold), 0);
  std::vector<pid_t> pids;
  for (const auto& [job, uid, name] : {std::tuple{7301ul, 0u, "a.grad"}, std::tuple{7302ul, kNobody, "b.grad"}})
    for (int r = 0; r < 2; ++r)
      pids.push_back(Spawn([&, job = job, uid = uid, name = name, r] {
        close(go[1]);
        close(hold[1]);
        CHILD_CHECK(BecomeUser(uid), "cannot become uid %u", uid);
        syncd_client* c = AttachToJob(d.run_dir(), job, r, 2, r, 2);
        CHILD_CHECK(c != nullptr, "job %lu rank %d did not attach: %s", job, r, syncd_last_error());
        CHILD_CHECK(Await(go[0]), "no go");
        if (job == 7302 && r == 0) {
          for (const std::string& bad : {roots, link, stem + "_b.json"}) {
            CHILD_CHECK(syncd_start_timeline(c, bad.c_str()) == SYNCD_ERR_INVALID, "%s: %s", bad.c_str(),
                        syncd_last_error());
            CHILD_CHECK(Contains(syncd_last_error(), bad) && (Contains(syncd_last_error(), "directory of the job's user") ||
                                                              Contains(syncd_last_error(), "symbolic link")),
                        "%s", syncd_last_error());
          }
          CHILD_CHECK(syncd_start_timeline(c, file_b.c_str()) == SYNCD_OK, "%s", syncd_last_error());
        }
        syncd_handle h;
        CHILD_CHECK(syncd_barrier_async(c, &h) == SYNCD_OK && syncd_wait(c, h, 10'000) == SYNCD_OK, "%s",
                    syncd_last_error());
        for (int step = 0; step < 10; ++step) {
          double v = r + 1;
          int64_t count = 1;
          syncd_tensor t{name, &v, SYNCD_FLOAT64, 1, &count, 0};
          CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h) == SYNCD_OK &&
                          syncd_wait(c, h, 10'000) == SYNCD_OK && v == 3,
                      "job %lu rank %d step %d: %s (%g)", job, r, step, syncd_last_error(), v);
        }
        CHILD_CHECK(Await(hold[0]), "no hold");
        syncd_shutdown(c);
        return 0;
      }));
  close(go[0]);
  close(hold[0]);
  ASSERT_TRUE(WaitForRanks(d, 7301, 2) && WaitForRanks(d, 7302, 2));
  auto [rc, out] = Shell(Syncctl(d, "timeline start " + file_a + " 2>&1"));
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(Contains(out, "7301, 7302") && Contains(out, "--job")) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "timeline start --job 7309 " + file_a + " 2>&1"));
  EXPECT_TRUE(rc != 0 && Contains(out, "job 7309")) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "timeline start --job 7301 " + file_a + " 2>&1"));
  ASSERT_EQ(rc, 0) << out;
  ASSERT_EQ(write(go[1], "xxxx", 4), 4);
  close(go[1]);
  // Both jobs ran their steps (each rank waits on `hold`): the administrator stops job 7301's.
  const auto requests_of_7301 = [&d] {
    const std::string json = Shell(Syncctl(d, "job list --json")).second;
    const size_t at = json.find("\"job\":\"7301\"");
    return at == std::string::npos ? std::string() : json.substr(at, json.find('}', at) - at);
  };
  for (int i = 0; i < 200 && !Contains(requests_of_7301(), "\"requests\":\"22\""); ++i) usleep(50'000);
  EXPECT_TRUE(Contains(requests_of_7301(), "\"requests\":\"22\"")) << requests_of_7301();
  std::tie(rc, out) = Shell(Syncctl(d, "timeline stop --job 7301 2>&1"));
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "status --job 7302"));
  EXPECT_TRUE(Contains(out, "timeline   RECORDING " + file_b)) << out;
  ASSERT_EQ(write(hold[1], "xxxx", 4), 4);
  close(hold[1]);
  ExpectAllSucceeded(Finish(pids));
  // Job 7302's file is finished with its job (its ranks left).
  for (const auto& [file, mine, other] : {std::tuple{file_a, "a.grad", "b.grad"}, std::tuple{file_b, "b.grad", "a.grad"}}) {
    const std::string text = CompleteTimeline(file);
    ASSERT_TRUE(text.size() > 3 && text.substr(text.size() - 3) == "\n]\n") << file << " is not complete: " << text;
    EXPECT_EQ(Occurrences(text, std::string("\"name\":\"submit ") + mine + "\""), 20u) << file;
    EXPECT_EQ(Occurrences(text, other), 0u) << file;
  }
  struct stat st {};
  ASSERT_EQ(stat(file_b.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kNobody) << "job 7302's timeline is its user's";
  EXPECT_EQ(ReadText(roots), "keep\n") << "a file of root's, through a link of nobody's";
  EXPECT_EQ(system(("rm -rf " + dir_b + " " + roots + " " + file_a).c_str()), 0);
}

TEST_F(NodeService, LargeAllreducesOfOneJobRunInSlicesAndStayExactWhileAnotherJobsSmallOnesGoOn) {
  Daemon d(2, {"--node-service", "on"});
  auto [rc, out] = Shell(Syncctl(d, "job add --job 7401 --uid 0"));
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "job add --job 7402 --uid 0 --weight 2"));
  ASSERT_EQ(rc, 0) << out;
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  // Job 7402 runs small allreduces until job 7401 is done: the daemon serves two jobs throughout.
  std::vector<pid_t> small;
  for (int r = 0; r < 2; ++r)
    small.push_back(Spawn([&, r] {
      close(done[1]);
      syncd_client* c = AttachToJob(d.run_dir(), 7402, r, 2, r, 2);
      CHILD_CHECK(c != nullptr, "%s", syncd_last_error());
      CHILD_CHECK(fcntl(done[0], F_SETFL, O_NONBLOCK) == 0, "fcntl");
      for (int step = 0;; ++step) {
        char stop = 0;
        // Both ranks decide together: rank 0 reads the pipe, and the sum tells rank 1.
        const bool over = r == 0 && read(done[0], &stop, 1) == 1;
        double v = over ? 1000 : 1;
        int64_t count = 1;
        syncd_tensor t{"small", &v, SYNCD_FLOAT64, 1, &count, 0};
        syncd_handle h;
        CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h) == SYNCD_OK && syncd_wait(c, h, 30'000) == SYNCD_OK,
                    "step %d: %s", step, syncd_last_error());
        if (v >= 1000) break;
        CHILD_CHECK(v == 2, "step %d: sum %g", step, v);
      }
      syncd_shutdown(c);
      return 0;
    }));
  ASSERT_TRUE(WaitForRanks(d, 7402, 2));
  // Job 7401: three tensors of odd lengths fused into one group of 0.8 MB (slices of 256 KiB
  // cross their boundaries), summed, averaged and maxed, every element checked.
  std::vector<pid_t> large;
  for (int r = 0; r < 2; ++r)
    large.push_back(Spawn([&, r] {
      close(done[0]);
      close(done[1]);
      syncd_client* c = AttachToJob(d.run_dir(), 7401, r, 2, r, 2);
      CHILD_CHECK(c != nullptr, "%s", syncd_last_error());
      const int64_t lengths[3] = {100'003, 70'001, 33'333};
      for (syncd_reduce_op op : {SYNCD_SUM, SYNCD_AVERAGE, SYNCD_MAX}) {
        std::vector<std::vector<float>> data;
        syncd_handle h[3];
        for (int i = 0; i < 3; ++i) {
          data.emplace_back(size_t(lengths[i]));
          for (int64_t e = 0; e < lengths[i]; ++e) data[i][size_t(e)] = float((e % 1000) * (r + 1) + i);
          const std::string name = "big." + std::to_string(i);
          syncd_tensor t{name.c_str(), data[i].data(), SYNCD_FLOAT32, 1, &lengths[i], 0};
          CHILD_CHECK(syncd_allreduce_async(c, &t, op, 1.0, 1.0, &h[i]) == SYNCD_OK, "%s", syncd_last_error());
        }
        for (int i = 0; i < 3; ++i) {
          CHILD_CHECK(syncd_wait(c, h[i], 30'000) == SYNCD_OK, "%s", syncd_last_error());
          for (int64_t e = 0; e < lengths[i]; ++e) {
            const float a = float((e % 1000) * 1 + i), b = float((e % 1000) * 2 + i);
            const float want = op == SYNCD_SUM ? a + b : op == SYNCD_AVERAGE ? (a + b) / 2 : std::max(a, b);
            CHILD_CHECK(data[i][size_t(e)] == want, "op %d tensor %d element %ld: %g, want %g", int(op), i, long(e),
                        double(data[i][size_t(e)]), double(want));
          }
        }
      }
      syncd_shutdown(c);
      return 0;
    }));
  ExpectAllSucceeded(Finish(large));
  ASSERT_EQ(write(done[1], "x", 1), 1);
  close(done[0]);
  close(done[1]);
  ExpectAllSucceeded(Finish(small));
}

TEST_F(NodeService, AJobRemovedMidRunLeavesTheOtherJobTrainingWithNoError) {
  Daemon d(2, {"--node-service", "on"});
  auto [rc, out] = Shell(Syncctl(d, "job add --job 7201 --uid nobody"));
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "job add --job 7202 --uid 0"));
  ASSERT_EQ(rc, 0) << out;
  int progress[2];
  ASSERT_EQ(pipe(progress), 0);
  // Job 7201 allreduces until the daemon stops serving it; every sum it got is exact.
  std::vector<pid_t> removed;
  for (int r = 0; r < 2; ++r)
    removed.push_back(Spawn([&, r] {
      close(progress[0]);
      CHILD_CHECK(BecomeUser(kNobody), "setuid");
      syncd_client* c = AttachToJob(d.run_dir(), 7201, r, 2, r, 2);
      CHILD_CHECK(c != nullptr, "%s", syncd_last_error());
      for (int step = 0;; ++step) {
        double v = r + 1 + step;
        const int st = GradStep(c, &v, 10'000);
        if (st != SYNCD_OK) {  // removed: in flight, refused; between two calls, let go
          const std::string why = syncd_last_error();
          CHILD_CHECK((st == SYNCD_ERR_REFUSED && Contains(why, "job 7201 was removed from this node's daemon")) ||
                          (st == SYNCD_ERR_DAEMON_LOST && Contains(why, "disconnected rank " + std::to_string(r))),
                      "%s: %s", syncd_status_name(st), why.c_str());
          return 0;
        }
        CHILD_CHECK(v == 3 + 2 * step, "step %d: sum %g", step, v);
        if (step == 50 && r == 0) (void)!write(progress[1], "x", 1);
      }
    }));
  close(progress[1]);
  ASSERT_TRUE(Await(progress[0]));
  close(progress[0]);
  // Job 7202 runs 100 steps, waits while 7201 is removed, then runs 200 more.
  int paused[2], resume[2];
  ASSERT_EQ(pipe(paused), 0);
  ASSERT_EQ(pipe(resume), 0);
  std::vector<pid_t> other = StartJob(d, 7202, 0, 2, 1000, 300, Pause{100, paused[1], resume[0]});
  ASSERT_TRUE(Await(paused[0]));
  std::tie(rc, out) = Shell(Syncctl(d, "job remove 7201"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(Contains(out, "2 of its ranks were attached")) << out;
  ASSERT_EQ(write(resume[1], "x", 1), 1);
  for (int fd : {paused[0], paused[1], resume[0], resume[1]}) close(fd);
  ExpectAllSucceeded(Finish(removed));
  ExpectAllSucceeded(Finish(other));
  std::tie(rc, out) = Shell(Syncctl(d, "status --json --job 7202"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Contains(out, "\"job_id\":\"7202\"")) << out;
  std::tie(rc, out) = Shell(Syncctl(d, "status --job 7201"));
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Contains(out, "job 7201 is not registered")) << out;
}

// Ranks of a job, two on each of `nodes`, that allreduce "grad" until the daemons fail them:
// every sum before that exact, then each rank but the last (which the test kills or stops) must
// fail with `want` saying `naming`; rank 0 writes a byte to `progress` after 20 steps.
std::vector<pid_t> StartFailingJob(const std::vector<const Daemon*>& nodes, uint64_t job, uint32_t uid, int progress,
                                   int want, const std::string& naming) {
  std::vector<pid_t> pids;
  const int size = 2 * int(nodes.size());
  for (int r = 0; r < size; ++r)
    pids.push_back(Spawn([&, r] {
      CHILD_CHECK(BecomeUser(uid), "cannot become uid %u", uid);
      syncd_client* c = AttachToJob(nodes[r / 2]->run_dir(), job, r, size, r % 2, 2);
      CHILD_CHECK(c != nullptr, "%s", syncd_last_error());
      for (int step = 0;; ++step) {
        double v = r + 1 + step;
        const int st = GradStep(c, &v, 30'000);
        if (st != SYNCD_OK) {
          const std::string why = syncd_last_error();
          CHILD_CHECK(r != size - 1 && st == want && Contains(why, naming), "job %lu rank %d: %s: %s",
                      (unsigned long)job, r, syncd_status_name(st), why.c_str());
          return 0;
        }
        CHILD_CHECK(v == size * (size + 1) / 2 + size * step, "job %lu rank %d step %d: sum %g", (unsigned long)job, r,
                    step, v);
        if (step == 20 && r == 0) (void)!write(progress, "x", 1);
        usleep(1'000);
      }
    }));
  return pids;
}

// Three jobs on one node: one loses a rank (SIGKILL), one stalls (a rank stopped until the
// stall shutdown ends that job), and the third trains on through both with every sum exact and
// no error; the first two fail naming their own rank and nothing else.
TEST_F(NodeService, OfThreeJobsOneLosesARankOneStallsAndTheThirdTrainsOnExact) {
  Daemon d(2, {"--node-service", "on", "--stall-warning-s", "1", "--stall-shutdown-s", "2"});
  for (const char* add : {"job add --job 8101 --uid 0", "job add --job 8102 --uid nobody", "job add --job 8103 --uid 0"}) {
    auto [rc, out] = Shell(Syncctl(d, add));
    ASSERT_EQ(rc, 0) << out;
  }
  int progress[2], paused[2], resume[2];
  ASSERT_EQ(pipe(progress), 0);
  ASSERT_EQ(pipe(paused), 0);
  ASSERT_EQ(pipe(resume), 0);
  // The third job: 2,500 steps of 1 ms or more, paused at step 100 until the others fail.
  std::vector<pid_t> third = StartJob(d, 8103, 0, 2, 1000, 2'500, Pause{100, paused[1], resume[0]});
  std::vector<pid_t> lost = StartFailingJob({&d}, 8101, 0, progress[1], SYNCD_ERR_RANK_LOST, "rank 1");
  // The stalled rank is named as the daemon sees its process: stopped.
  std::vector<pid_t> stalled =
      StartFailingJob({&d}, 8102, kNobody, progress[1], SYNCD_ERR_STALLED, "[rank 1: stopped (SIGSTOP");
  ASSERT_TRUE(Await(progress[0]) && Await(progress[0]));
  ASSERT_TRUE(Await(paused[0]));
  ASSERT_EQ(kill(lost[1], SIGKILL), 0);
  ASSERT_EQ(kill(stalled[1], SIGSTOP), 0);
  ASSERT_EQ(write(resume[1], "x", 1), 1);
  for (int fd : {progress[0], progress[1], paused[0], paused[1], resume[0], resume[1]}) close(fd);
  // The lost job's rank 0 fails at once; the stalled one's within the stall shutdown.
  EXPECT_EQ(WaitChild(lost[0], 20'000), 0) << d.Log();
  EXPECT_EQ(WaitChild(stalled[0], 20'000), 0) << d.Log();
  (void)WaitChild(lost[1], 5'000);
  kill(stalled[1], SIGKILL);
  (void)WaitChild(stalled[1], 5'000);
  ExpectAllSucceeded(Finish(third));
  auto [rc, out] = Shell(Syncctl(d, "job list --json"));
  EXPECT_EQ(rc, 0) << out;
  // The third job's count of errors is none.
  const size_t at = out.find("\"job\":\"8103\"");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_TRUE(Contains(out.substr(at, out.find('}', at) - at), "\"errors\":\"0\"")) << out;
}

TEST_F(NodeService, ADrainedJobGoesOnceNothingIsInFlightOrAtItsTimeoutFailingWhatIsLeft) {
  Daemon d(2, {"--node-service", "on"});
  auto [rc, out] = Shell(Syncctl(d, "job add --job 7301 --uid 0"));
  ASSERT_EQ(rc, 0) << out;
  // Ranks attached with nothing in flight: drained at once; their next call says they were let go.
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<pid_t> idle;
  for (int r = 0; r < 2; ++r)
    idle.push_back(Spawn([&, r] {
      close(go[1]);
      syncd_client* c = AttachToJob(d.run_dir(), 7301, r, 2, r, 2);
      CHILD_CHECK(c != nullptr, "%s", syncd_last_error());
      CHILD_CHECK(Await(go[0]), "no go");
      const int st = OneAllreduce(c);
      CHILD_CHECK(st == SYNCD_ERR_DAEMON_LOST && Contains(syncd_last_error(), "disconnected rank " + std::to_string(r)),
                  "%s: %s", syncd_status_name(st), syncd_last_error());
      return 0;
    }));
  close(go[0]);
  ASSERT_TRUE(WaitForRanks(d, 7301, 2));
  std::tie(rc, out) = Shell(Syncctl(d, "job drain 7301 --timeout 5"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Contains(out, "job 7301 drained in") && Contains(out, "2 of its ranks were attached")) << out;
  EXPECT_FALSE(Contains(out, "timeout passed")) << out;
  ASSERT_EQ(write(go[1], "xx", 2), 2);
  close(go[1]);
  ExpectAllSucceeded(Finish(idle));

  // An allreduce in flight that cannot complete (rank 0 never submits its part): at the timeout it
  // fails naming the drain.
  std::tie(rc, out) = Shell(Syncctl(d, "job add --job 7302 --uid 0"));
  ASSERT_EQ(rc, 0) << out;
  int submitted[2];
  ASSERT_EQ(pipe(submitted), 0);
  pid_t silent = Spawn([&] {
    close(submitted[0]);
    close(submitted[1]);
    CHILD_CHECK(AttachToJob(d.run_dir(), 7302, 0, 2, 0, 2) != nullptr, "%s", syncd_last_error());
    pause();
    return 0;
  });
  pid_t waiting = Spawn([&] {
    close(submitted[0]);
    syncd_client* c = AttachToJob(d.run_dir(), 7302, 1, 2, 1, 2);
    CHILD_CHECK(c != nullptr, "%s", syncd_last_error());
    const int st = OneAllreduce(c, submitted[1]);
    CHILD_CHECK(st == SYNCD_ERR_REFUSED &&
                    Contains(syncd_last_error(), "job 7302 was drained from this node's daemon (syncctl job drain): it "
                                                 "still had work in flight after 0.5 s"),
                "%s: %s", syncd_status_name(st), syncd_last_error());
    return 0;
  });
  close(submitted[1]);
  ASSERT_TRUE(Await(submitted[0]));
  close(submitted[0]);
  ASSERT_TRUE(WaitForRanks(d, 7302, 2));
  std::tie(rc, out) = Shell(Syncctl(d, "job drain 7302 --timeout 0.5"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Contains(out, "the timeout passed, what it had in flight failed")) << out;
  EXPECT_EQ(WaitChild(waiting, 20'000), 0);
  kill(silent, SIGKILL);
  WaitChild(silent, 10'000);
  std::tie(rc, out) = Shell(Syncctl(d, "job list --json"));
  EXPECT_FALSE(Contains(out, "7301") || Contains(out, "7302")) << "drained jobs are removed: " << out;
}

// Registers job `job` on every node of `nodes` (each its node rank in order, the first serving
// the rendezvous at 127.0.0.1:`port`): the calls run at once, as the nodes' prologs do, and each
// returns once its node is linked to the others. Their exit statuses and what they printed.
std::vector<std::pair<int, std::string>> AddOnNodes(const std::vector<const Daemon*>& nodes, uint64_t job,
                                                    const std::string& user, int port, const std::string& token,
                                                    const std::string& extra = "") {
  std::vector<FILE*> calls;
  for (size_t n = 0; n < nodes.size(); ++n) {
    const std::string cmd = "SYNCD_JOB_TOKEN=" + token + " " +
                            Syncctl(*nodes[n], "job add --job " + std::to_string(job) + " --uid " + user + " --nodes " +
                                                   std::to_string(nodes.size()) + " --node-rank " + std::to_string(n) +
                                                   " --rendezvous 127.0.0.1:" + std::to_string(port) + extra) +
                            " 2>&1";
    calls.push_back(popen(cmd.c_str(), "r"));
  }
  std::vector<std::pair<int, std::string>> out;
  for (FILE* f : calls) {
    std::string text;
    char buf[4096];
    size_t n;
    while (f != nullptr && (n = fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
    const int st = f != nullptr ? pclose(f) : -1;
    out.emplace_back(WIFEXITED(st) ? WEXITSTATUS(st) : -1, text);
  }
  return out;
}

// Job `job`'s 4 ranks as `uid`, two on each of two nodes, each attached and running body(c, r)
// (0, or a failed CHILD_CHECK's 1);
// returns their pids.
std::vector<pid_t> SpawnTwoNodeRanks(const Daemon& a, const Daemon& b, uint64_t job, uint32_t uid,
                                     const std::function<int(syncd_client*, int)>& body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < 4; ++r)
    pids.push_back(Spawn([&, r] {
      CHILD_CHECK(BecomeUser(uid), "cannot become uid %u", uid);
      syncd_client* c = AttachToJob((r < 2 ? a : b).run_dir(), job, r, 4, r % 2, 2);
      CHILD_CHECK(c != nullptr, "rank %d of job %lu did not attach: %s", r, (unsigned long)job, syncd_last_error());
      if (const int rc = body(c, r); rc != 0) return rc;  // a CHILD_CHECK failed
      syncd_shutdown(c);
      return 0;
    }));
  return pids;
}

// Job `job`'s ranks on two nodes, two each, as `uid`: `steps` allreduces of `scale` x (rank + 1 +
// step) named "grad", each sum checked exact; returns their pids.
std::vector<pid_t> StartTwoNodeJob(const Daemon& a, const Daemon& b, uint64_t job, uint32_t uid, double scale,
                                   int steps) {
  return SpawnTwoNodeRanks(a, b, job, uid, [&](syncd_client* c, int r) {
    for (int step = 0; step < steps; ++step) {
      double v = scale * (r + 1 + step);
      int64_t count = 1;
      syncd_tensor t{"grad", &v, SYNCD_FLOAT64, 1, &count, 0};
      syncd_handle h;
      CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h) == SYNCD_OK && syncd_wait(c, h, 20'000) == SYNCD_OK,
                  "job %lu rank %d step %d: %s", (unsigned long)job, r, step, syncd_last_error());
      const double want = scale * (10 + 4 * step);
      CHILD_CHECK(v == want, "job %lu rank %d step %d: sum %g, want %g", (unsigned long)job, r, step, v, want);
    }
    return 0;
  });
}

// Two node daemons (each serving its node alone, as systemd starts them) and two jobs of two
// users on both nodes, each registered on both and linked to the other node by links of its own:
// both train at once, every sum exact and its own; a job given no token, one whose node rank is
// past its nodes, and one whose other node never registers are refused naming why.
TEST_F(NodeService, TwoJobsOfTwoUsersOnTheSameTwoNodesEachWithLinksOfItsOwn) {
  Daemon a(2, {"--node-service", "on"}), b(2, {"--node-service", "on"});
  const int port_a = FreePort(), port_b = FreePort();
  for (const auto& [rc, out] : AddOnNodes({&a, &b}, 9101, "0", port_a, "tok-9101")) ASSERT_EQ(rc, 0) << out;
  for (const auto& [rc, out] : AddOnNodes({&a, &b}, 9102, "nobody", port_b, "tok-9102")) ASSERT_EQ(rc, 0) << out;
  auto [rc, out] = Shell(Syncctl(a, "job list"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Contains(out, "0/2")) << out;
  std::tie(rc, out) = Shell(Syncctl(b, "job list --json"));
  EXPECT_TRUE(Contains(out, "\"links\":\"connected\"") && !Contains(out, "tok-")) << out;
  // Both jobs at once, 300 steps each: scaled 1 and 1000, so one value of the other's shows.
  std::vector<pid_t> first = StartTwoNodeJob(a, b, 9101, 0, 1, 300);
  std::vector<pid_t> second = StartTwoNodeJob(a, b, 9102, kNobody, 1000, 300);
  ExpectAllSucceeded(Finish(first));
  ExpectAllSucceeded(Finish(second));
  // Each job's share shows the bytes it sent over its own links: at least its 300 sums' 8 bytes.
  std::tie(rc, out) = Shell(Syncctl(a, "job list --json"));
  for (uint64_t job : {9101, 9102}) {
    const size_t at = out.find("\"job\":\"" + std::to_string(job) + "\"");
    ASSERT_NE(at, std::string::npos) << out;
    const uint64_t sent = JsonNumber(out.substr(at), "link_bytes");  // the job's own (its first after it)
    EXPECT_TRUE(sent != UINT64_MAX && sent >= 300u * 8) << out;
  }
  std::tie(rc, out) = Shell(Syncctl(a, "job list"));
  EXPECT_TRUE(Contains(out, "LINK_BYTES")) << out;
  std::tie(rc, out) = Shell(Syncctl(a, "status"));
  EXPECT_TRUE(Contains(out, "attached, of 2 jobs (syncctl status --job ID: one job's)")) << out;
  // A second run of a job (another step of its allocation) on the links it has.
  ExpectAllSucceeded(Finish(StartTwoNodeJob(a, b, 9101, 0, 2, 50)));
  // Refusals.
  std::tie(rc, out) = Shell(Syncctl(a, "job add --job 9103 --uid 0 --nodes 2 --node-rank 0 --rendezvous 127.0.0.1:1"));
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Contains(out, "job 9103 runs on 2 nodes: give its token")) << out;
  std::tie(rc, out) = Shell("SYNCD_JOB_TOKEN=t " + Syncctl(a, "job add --job 9103 --uid 0 --nodes 2 --node-rank 2 --rendezvous 127.0.0.1:1"));
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Contains(out, "node rank 2 is not one of its 2 nodes")) << out;
  // A node that waits for the other, which never registers: refused at the join timeout, and not
  // registered.
  Daemon c(2, {"--node-service", "on", "--join-timeout", "2"});
  std::tie(rc, out) = Shell("SYNCD_JOB_TOKEN=t " + Syncctl(c, "job add --job 9104 --uid 0 --nodes 2 --node-rank 0 --rendezvous 127.0.0.1:" +
                                                              std::to_string(FreePort())));
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Contains(out, "job 9104: cannot link node 0 of its 2 nodes")) << out;
  std::tie(rc, out) = Shell(Syncctl(c, "job list"));
  EXPECT_FALSE(Contains(out, "9104")) << out;
  // Removing a job lets its links go; the other job runs on.
  std::tie(rc, out) = Shell(Syncctl(a, "job remove 9101"));
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = Shell(Syncctl(b, "job remove 9101"));
  EXPECT_EQ(rc, 0) << out;
  ExpectAllSucceeded(Finish(StartTwoNodeJob(a, b, 9102, kNobody, 3, 50)));
}

// Job `job` as `uid`, 2 ranks on each of two nodes, streaming `steps` allreduces of 4 MiB (int32,
// every value checked: `salt` differs per job).
std::vector<pid_t> StartStreamingJob(const Daemon& a, const Daemon& b, uint64_t job, uint32_t uid, int salt, int steps) {
  return SpawnTwoNodeRanks(a, b, job, uid, [&](syncd_client* c, int r) {
    int64_t count = 1 << 20;
    auto* v = static_cast<int32_t*>(syncd_alloc(c, size_t(count) * 4));
    for (int step = 0; step < steps; ++step) {
      for (int64_t k = 0; k < count; ++k) v[k] = int32_t(salt + r + step + k % 1009);
      syncd_tensor t{"grad", v, SYNCD_INT32, 1, &count, 0};
      syncd_handle h;
      CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h) == SYNCD_OK && syncd_wait(c, h, 30'000) == SYNCD_OK,
                  "job %lu rank %d step %d: %s", (unsigned long)job, r, step, syncd_last_error());
      for (int64_t k = 0; k < count; ++k)
        CHILD_CHECK(v[k] == 4 * (salt + step + k % 1009) + 6, "job %lu rank %d step %d: [%ld] = %d, want %d",
                    (unsigned long)job, r, step, (long)k, v[k], 4 * (salt + step + int(k % 1009)) + 6);
    }
    return 0;
  });
}

// Two jobs of two nodes registered at weights 2 and 1, both streaming 4 MiB allreduces at once:
// the links are shared by weight (the lighter job's segments wait their turns, syncctl job list's
// LINK_WAITS) and every value of both is exact. (The shares themselves: bench/tenants.sh.)
TEST_F(NodeService, TwoJobsStreamingOnTwoNodesShareTheLinksByWeightAndStayExact) {
  Daemon a(2, {"--node-service", "on"}), b(2, {"--node-service", "on"});
  for (const auto& [rc, out] : AddOnNodes({&a, &b}, 9111, "0", FreePort(), "tok-9111", " --weight 2"))
    ASSERT_EQ(rc, 0) << out;
  for (const auto& [rc, out] : AddOnNodes({&a, &b}, 9112, "nobody", FreePort(), "tok-9112")) ASSERT_EQ(rc, 0) << out;
  std::vector<pid_t> heavy = StartStreamingJob(a, b, 9111, 0, 1, 30);
  std::vector<pid_t> light = StartStreamingJob(a, b, 9112, kNobody, 1000, 30);
  ExpectAllSucceeded(Finish(heavy));
  ExpectAllSucceeded(Finish(light));
  for (const Daemon* d : {&a, &b}) {
    auto [rc, out] = Shell(Syncctl(*d, "job list --json"));
    ASSERT_EQ(rc, 0) << out;
    const size_t at = out.find("\"job\":\"9112\"");
    ASSERT_NE(at, std::string::npos) << out;
    const uint64_t waits = JsonNumber(out.substr(at), "link_turns_waited");
    EXPECT_TRUE(waits != UINT64_MAX && waits > 0) << out;
    std::tie(rc, out) = Shell(Syncctl(*d, "job list"));
    EXPECT_TRUE(Contains(out, "LINK_WAITS")) << out;
  }
}

// One rank of a job in the coordination-mode matrix: its training graph registered (its own
// layers: every job's plan is its own), then `steps` steps of its gradients allreduced in backward
// order, an allgather of one row per rank and a broadcast from a rank that moves with the step,
// every value checked exact. `salt` differs per job, so that a value of another job's shows.
int MatrixRank(syncd_client* c, int rank, int size, int salt, const std::vector<int64_t>& layers, int steps,
               const std::string& mode) {
  CHILD_CHECK(syncd_coord_mode(c) == mode, "salt %d rank %d: coordinates by %s, want %s", salt, rank, syncd_coord_mode(c),
              mode.c_str());
  ModelGraph model(layers);
  uint64_t hash = 0;
  CHILD_CHECK(syncd_register_graph(c, &model.graph, 30'000, &hash) == SYNCD_OK, "rank %d (salt %d): %s", rank, salt,
              syncd_last_error());
  std::vector<int32_t*> grads;
  for (int64_t n : layers) grads.push_back(static_cast<int32_t*>(syncd_alloc(c, size_t(n) * 4)));
  for (int step = 0; step < steps; ++step) {
    std::vector<syncd_handle> hs(layers.size());
    for (size_t l = layers.size(); l-- > 0;) {
      for (int64_t k = 0; k < layers[l]; ++k) grads[l][k] = int32_t(salt + rank * 7 + step + int(l) + k % 13);
      const std::string name = "grad." + std::to_string(l);
      syncd_tensor t{name.c_str(), grads[l], SYNCD_INT32, 1, &layers[l], 0};
      CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &hs[l]) == SYNCD_OK, "%s", syncd_last_error());
    }
    for (size_t l = layers.size(); l-- > 0;) {
      CHILD_CHECK(syncd_wait(c, hs[l], 30'000) == SYNCD_OK, "salt %d rank %d step %d grad.%zu: %s", salt, rank, step, l,
                  syncd_last_error());
      for (int64_t k = 0; k < layers[l]; k += (k < 64 ? 1 : 61)) {
        const int32_t want = int32_t(size * salt + 7 * size * (size - 1) / 2 + size * (step + int(l) + k % 13));
        CHILD_CHECK(grads[l][k] == want, "salt %d rank %d step %d grad.%zu[%ld] = %d, want %d", salt, rank, step, l,
                    (long)k, grads[l][k], want);
      }
    }
    int64_t row = salt + rank * 100 + step, one = 1;
    syncd_tensor seen{"seen", &row, SYNCD_INT64, 1, &one, 0};
    syncd_result res{};
    syncd_handle h;
    CHILD_CHECK(syncd_allgather_async(c, &seen, &res, &h) == SYNCD_OK && syncd_wait(c, h, 30'000) == SYNCD_OK,
                "salt %d rank %d step %d allgather: %s", salt, rank, step, syncd_last_error());
    CHILD_CHECK(res.nranks == size && res.bytes == uint64_t(size) * 8, "salt %d: %d ranks, %lu bytes", salt, res.nranks,
                (unsigned long)res.bytes);
    for (int r = 0; r < size; ++r)
      CHILD_CHECK(static_cast<const int64_t*>(res.data)[r] == salt + r * 100 + step, "salt %d rank %d step %d: row %d is %ld",
                  salt, rank, step, r, (long)static_cast<const int64_t*>(res.data)[r]);
    syncd_release_result(c, &res);
    const int root = step % size;
    double b = rank == root ? salt + step * 0.5 : -1;
    int64_t count = 1;
    syncd_tensor bt{"weights", &b, SYNCD_FLOAT64, 1, &count, 0};
    CHILD_CHECK(syncd_broadcast_async(c, &bt, root, &h) == SYNCD_OK && syncd_wait(c, h, 30'000) == SYNCD_OK,
                "salt %d rank %d step %d broadcast: %s", salt, rank, step, syncd_last_error());
    CHILD_CHECK(b == salt + step * 0.5, "salt %d rank %d step %d: broadcast from %d gave %g", salt, rank, step, root, b);
  }
  syncd_shutdown(c);
  return 0;
}

// The ranks of job `job` as `uid`, `per_node` on each of `nodes` (rank r on nodes[r / per_node]).
std::vector<pid_t> StartMatrixJob(const std::vector<const Daemon*>& nodes, uint64_t job, uint32_t uid, int per_node,
                                  int salt, const std::vector<int64_t>& layers, int steps, const std::string& mode) {
  std::vector<pid_t> pids;
  const int size = int(nodes.size()) * per_node;
  for (int r = 0; r < size; ++r)
    pids.push_back(Spawn([&, r] {
      CHILD_CHECK(BecomeUser(uid), "cannot become uid %u", uid);
      syncd_client* c = AttachToJob(nodes[r / per_node]->run_dir(), job, r, size, r % per_node, per_node);
      CHILD_CHECK(c != nullptr, "rank %d of job %lu did not attach: %s", r, (unsigned long)job, syncd_last_error());
      return MatrixRank(c, r, size, salt, layers, steps, mode);
    }));
  return pids;
}

// Every coordination mode, three jobs at once on two node daemons: two jobs of two users on both
// nodes (2 x 2, each on links of its own, coordinating as the daemons do) and a third on one node
// alone (1 x 4, registered with --coord topo: its own mode), each with its own graph (under topo,
// its own plan), allreduces, allgathers and broadcasts: every value exact.
class NodeServiceModes : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to run ranks as other users";
  }
};

TEST_P(NodeServiceModes, TwoJobsOnTwoNodesAndAThirdOnOneEachExactInItsOwnPlan) {
  const std::vector<std::string> flags = {"--node-service", "on", "--coord", GetParam(), "--log-level", "error"};
  Daemon a(2, flags), b(2, flags);
  const int port_x = FreePort(), port_y = FreePort();
  for (const auto& [rc, out] : AddOnNodes({&a, &b}, 9201, "0", port_x, "tok-9201")) ASSERT_EQ(rc, 0) << out;
  for (const auto& [rc, out] : AddOnNodes({&a, &b}, 9202, "nobody", port_y, "tok-9202")) ASSERT_EQ(rc, 0) << out;
  auto [rc, out] = Shell(Syncctl(a, "job add --job 9203 --uid nobody --coord topo"));
  ASSERT_EQ(rc, 0) << out;
  constexpr int kSteps = 12;
  std::vector<pid_t> x = StartMatrixJob({&a, &b}, 9201, 0, 2, 1000, {3, 1000, 70000}, kSteps, GetParam());
  std::vector<pid_t> y = StartMatrixJob({&a, &b}, 9202, kNobody, 2, 2000, {17, 4096, 30000, 5}, kSteps, GetParam());
  std::vector<pid_t> z = StartMatrixJob({&a}, 9203, kNobody, 4, 3000, {640, 100, 9000}, kSteps, "topo");
  ExpectAllSucceeded(Finish(x));
  ExpectAllSucceeded(Finish(y));
  ExpectAllSucceeded(Finish(z));
  // Each job's share shows its own requests and no error.
  for (uint64_t job : {9201, 9202, 9203}) {
    std::tie(rc, out) = Shell(Syncctl(a, "job list --json"));
    const size_t at = out.find("\"job\":\"" + std::to_string(job) + "\"");
    ASSERT_NE(at, std::string::npos) << out;
    const std::string entry = out.substr(at, out.find('}', at) - at);
    EXPECT_TRUE(Contains(entry, "\"errors\":\"0\"") && !Contains(entry, "\"requests\":\"0\"")) << entry;
  }
  // Under topo each job ran every step on a plan of its own (its graph's), the allgathers and
  // broadcasts outside it negotiated; the third job, registered with --coord topo, under every mode.
  const bool topo = std::string(GetParam()) == "topo";
  std::vector<std::string> hashes;
  for (uint64_t job : {9201, 9202, 9203}) {
    if (!topo && job != 9203) continue;
    const std::string json = Shell(Syncctl(a, "status --json --job " + std::to_string(job))).second;
    EXPECT_TRUE(Contains(json, "\"in_use\":true")) << json;
    EXPECT_EQ(JsonNumber(json, "steps"), uint64_t(kSteps)) << json;
    const size_t at = json.find("\"plan_hash\":\"");
    ASSERT_NE(at, std::string::npos) << json;
    hashes.push_back(json.substr(at + 13, 16));
  }
  if (topo) {
    EXPECT_TRUE(hashes[0] != hashes[1] && hashes[1] != hashes[2] && hashes[0] != hashes[2])
        << hashes[0] << " " << hashes[1] << " " << hashes[2];
  }
}

// A job of two nodes whose ranks were all killed mid-run (a step cancelled, an OOM kill) runs its
// next run under the same id (the allocation's next srun) exact on every rank, at once and again
// after a while: nothing of the killed run reaches it. Every coordination mode.
TEST_P(NodeServiceModes, AJobOfTwoNodesWhoseRanksWereAllKilledRunsItsNextRunExact) {
  const std::vector<std::string> flags = {"--node-service", "on", "--coord", GetParam(), "--log-level", "error"};
  Daemon a(2, flags), b(2, flags);
  for (const auto& [rc, out] : AddOnNodes({&a, &b}, 9601, "0", FreePort(), "tok-9601")) ASSERT_EQ(rc, 0) << out;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<pid_t> doomed = StartTwoNodeJob(a, b, 9601, 0, 1, 1'000'000);
    ASSERT_TRUE(WaitForRanks(a, 9601, 2) && WaitForRanks(b, 9601, 2));
    usleep(100'000);
    for (pid_t p : doomed) kill(p, SIGKILL);
    for (pid_t p : doomed) (void)WaitChild(p, 10'000);
    if (round == 1) usleep(2'500'000);  // past the rejoin grace
    ExpectAllSucceeded(Finish(StartTwoNodeJob(a, b, 9601, 0, 2, 50)));
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, NodeServiceModes, ::testing::Values("negotiate", "gs", "nbcs", "topo"));

// Ranks of a job registered with --on-loss continue, two on each of two nodes, allreducing
// "grad" (rank r gives 1 << r) until the test kills rank 3: the survivors go on, each sum every
// rank's until then and the survivors' alone from some step on (acknowledging the new membership
// where they are told to), 200 steps in all; rank 0 writes a byte to `progress` after 20 steps.
std::vector<pid_t> StartContinuingJob(const Daemon& a, const Daemon& b, uint64_t job, int progress) {
  std::vector<pid_t> pids;
  for (int r = 0; r < 4; ++r)
    pids.push_back(Spawn([&, r] {
      syncd_client* c = AttachToJob((r < 2 ? a : b).run_dir(), job, r, 4, r % 2, 2);
      CHILD_CHECK(c != nullptr, "%s", syncd_last_error());
      bool lost = false;
      for (int step = 0; step < 200;) {
        double v = double(1 << r);
        const int st = GradStep(c, &v, 30'000);
        if (st == SYNCD_ERR_RANK_LOST && Contains(syncd_last_error(), "acknowledged")) {
          CHILD_CHECK(syncd_acknowledge_membership(c, nullptr) == SYNCD_OK, "%s", syncd_last_error());
          continue;
        }
        CHILD_CHECK(st == SYNCD_OK, "job %lu rank %d step %d: %s: %s", (unsigned long)job, r, step,
                    syncd_status_name(st), syncd_last_error());
        CHILD_CHECK(v == (lost ? 7 : 15) || (!lost && v == 7), "job %lu rank %d step %d: sum %g", (unsigned long)job, r,
                    step, v);
        lost = lost || v == 7;
        if (step == 20 && r == 0) (void)!write(progress, "x", 1);
        ++step;
        usleep(1'000);
      }
      CHILD_CHECK(lost, "job %lu rank %d: rank 3's loss never showed", (unsigned long)job, r);
      syncd_shutdown(c);
      return 0;
    }));
  return pids;
}

// Four jobs on the same two node daemons, each on both nodes on links of its own: one loses a
// rank of its second node (SIGKILL), one stalls there (a rank stopped until the stall shutdown
// ends that job), one registered with --on-loss continue loses a rank there too and goes on, and
// the fourth trains on through all of it, every sum exact and no error; every other rank of the
// first two fails naming the rank, on both nodes.
TEST_F(NodeService, OnTwoNodesOneJobLosesARankOneStallsOneGoesOnAndTheFourthTrainsOnExact) {
  const std::vector<std::string> flags = {"--node-service", "on", "--stall-warning-s", "1", "--stall-shutdown-s", "2",
                                          "--log-level", "error"};
  Daemon a(2, flags), b(2, flags);
  const int ports[3] = {FreePort(), FreePort(), FreePort()};
  for (int j = 0; j < 3; ++j)
    for (const auto& [rc, out] : AddOnNodes({&a, &b}, 9301 + j, j == 1 ? "nobody" : "0", ports[j],
                                            "tok-" + std::to_string(9301 + j)))
      ASSERT_EQ(rc, 0) << out;
  const int port_d = FreePort();
  for (const auto& [rc, out] : AddOnNodes({&a, &b}, 9304, "0 --on-loss continue", port_d, "tok-9304"))
    ASSERT_EQ(rc, 0) << out;
  int progress[2];
  ASSERT_EQ(pipe(progress), 0);
  std::vector<pid_t> third = StartTwoNodeJob(a, b, 9303, 0, 1000, 1'500);
  std::vector<pid_t> going_on = StartContinuingJob(a, b, 9304, progress[1]);
  std::vector<pid_t> lost = StartFailingJob({&a, &b}, 9301, 0, progress[1], SYNCD_ERR_RANK_LOST,
                                                   "rank 3 (pid ");
  // The stalled rank is named by the job's own health reports, node 1 to node 0, on its links
  // (where node 0 ends the job) or by node 1 itself (where it sees the stall first), alike.
  std::vector<pid_t> stalled = StartFailingJob({&a, &b}, 9302, kNobody, progress[1], SYNCD_ERR_STALLED,
                                                      "[rank 3 on node 1: stopped (SIGSTOP");
  ASSERT_TRUE(Await(progress[0]) && Await(progress[0]) && Await(progress[0]));
  ASSERT_EQ(kill(lost[3], SIGKILL), 0);
  ASSERT_EQ(kill(stalled[3], SIGSTOP), 0);
  ASSERT_EQ(kill(going_on[3], SIGKILL), 0);
  close(progress[0]);
  close(progress[1]);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(WaitChild(lost[r], 20'000), 0) << "job 9301 rank " << r;
    EXPECT_EQ(WaitChild(stalled[r], 20'000), 0) << "job 9302 rank " << r;
  }
  (void)WaitChild(lost[3], 5'000);
  kill(stalled[3], SIGKILL);
  (void)WaitChild(stalled[3], 5'000);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(WaitChild(going_on[r], 60'000), 0) << "job 9304 rank " << r;
  (void)WaitChild(going_on[3], 5'000);
  ExpectAllSucceeded(Finish(third));
  for (const Daemon* d : {&a, &b}) {
    auto [rc, out] = Shell(Syncctl(*d, "job list --json"));
    const size_t at = out.find("\"job\":\"9303\"");
    ASSERT_NE(at, std::string::npos) << out;
    EXPECT_TRUE(Contains(out.substr(at, out.find('}', at) - at), "\"errors\":\"0\"")) << out;
  }
  // Its own view: its place among its own nodes, and its other node's ranks as that node reports them.
  auto [rc, out] = Shell(Syncctl(a, "status --job 9303"));
  EXPECT_TRUE(Contains(out, "node 0 of 2")) << out;
  std::tie(rc, out) = Shell(Syncctl(a, "status --json --job 9303"));
  EXPECT_TRUE(Contains(out, "\"node\":1,") && Contains(out, "\"rank\":3,")) << out;
}

// Until node `d`'s job list shows `jobs` registered, those of several nodes linked (30 s at most).
bool WaitForJobs(const Daemon& d, const std::vector<uint64_t>& jobs) {
  for (int i = 0; i < 600; ++i) {
    const std::string out = Shell(Syncctl(d, "job list --json")).second;
    bool all = true;
    for (uint64_t job : jobs) {
      const size_t at = out.find("\"job\":\"" + std::to_string(job) + "\"");
      const std::string entry = at == std::string::npos ? "" : out.substr(at, out.find('}', at) - at);
      all = all && !entry.empty() && (!Contains(entry, "\"nodes\":2") || Contains(entry, "\"links\":\"connected\""));
    }
    if (all) return true;
    usleep(50'000);
  }
  return false;
}

// Ranks of a job registered with --on-loss continue on two nodes, two each, training through a
// restart of node b's daemon (*killed is set before it is killed): rank r gives 1 << r; node a's
// ranks go on without node b's (what they had in flight with it fails naming the node; then the
// sums of the ranks there, 3 and up), node b's attach again once their daemon is back, as
// replacements, and the job goes on with every rank. Each rank ends after
// 20 sums of all four submitted after the kill: the same collectives on every rank.
std::vector<pid_t> StartJobThroughARestart(const Daemon& a, const Daemon& b, uint64_t job, std::atomic<int>* killed) {
  std::vector<pid_t> pids;
  for (int r = 0; r < 4; ++r)
    pids.push_back(Spawn([&, r] {
      const std::string dir = (r < 2 ? a : b).run_dir();
      syncd_client* c = AttachToJob(dir, job, r, 4, r % 2, 2);
      CHILD_CHECK(c != nullptr, "%s", syncd_last_error());
      int together = 0, fewer = 0, attaches = 1;
      for (int step = 0; together < 20 && step < 100'000; ++step) {
        const bool after_kill = killed->load() != 0;
        double v = double(1 << r);
        const int st = GradStep(c, &v, 30'000);
        // What was in flight when node b's daemon went, and when it came back, fails naming node 1;
        // the rank acknowledges the job's new membership (as hvd.elastic.run does) and goes on.
        if (st == SYNCD_ERR_RANK_LOST && killed->load() != 0 && Contains(syncd_last_error(), "node 1")) {
          CHILD_CHECK(syncd_acknowledge_membership(c, nullptr) == SYNCD_OK, "%s", syncd_last_error());
          ++fewer;
          continue;
        }
        if (st == SYNCD_ERR_RANK_LOST && Contains(syncd_last_error(), "acknowledged")) {
          CHILD_CHECK(syncd_acknowledge_membership(c, nullptr) == SYNCD_OK, "%s", syncd_last_error());
          continue;
        }
        if (st == SYNCD_ERR_DAEMON_LOST && r >= 2) {  // attach again, to the restarted daemon
          syncd_shutdown(c);
          c = nullptr;
          for (int i = 0; i < 30'000 && c == nullptr; ++i)
            if ((c = AttachToJob(dir, job, r, 4, r % 2, 2)) == nullptr) usleep(1000);
          CHILD_CHECK(c != nullptr, "rank %d: attach again: %s", r, syncd_last_error());
          int replaces = -1;
          CHILD_CHECK(syncd_replaces_lost_rank(c, &replaces) == SYNCD_OK && replaces == 1, "rank %d: replaces %d", r,
                      replaces);
          ++attaches;
          continue;
        }
        CHILD_CHECK(st == SYNCD_OK, "job %lu rank %d step %d: %s: %s", (unsigned long)job, r, step,
                    syncd_status_name(st), syncd_last_error());
        const int64_t sum = int64_t(v);
        CHILD_CHECK((sum & 3) == 3 && (sum & ~15) == 0, "job %lu rank %d step %d: sum %g", (unsigned long)job, r, step, v);
        fewer += sum != 15;
        together += sum == 15 && after_kill;
        usleep(1'000);
      }
      CHILD_CHECK(together == 20, "job %lu rank %d: %d sums of every rank after the restart", (unsigned long)job, r,
                  together);
      CHILD_CHECK(r >= 2 ? attaches == 2 : fewer > 0, "job %lu rank %d: attached %d times, %d sums without node b",
                  (unsigned long)job, r, attaches, fewer);
      syncd_shutdown(c);
      return 0;
    }));
  return pids;
}

// A node daemon killed and started again under its jobs (as systemd's Restart= does) takes every
// one back: a job of this node alone and jobs of two nodes whose other node served the rendezvous
// are registered again and linked again; one registered with --on-loss continue trains through
// the restart, its ranks on the node attaching again as replacements; the others' next runs are
// exact on every rank; a job whose rendezvous it served itself cannot be, and it says so.
TEST_F(NodeService, ARestartedNodeDaemonTakesBackEveryJobItServed) {
  const std::vector<std::string> flags = {"--node-service", "on", "--log-level", "info"};
  Daemon a(2, flags), b(2, flags);
  for (const auto& [rc, out] : AddOnNodes({&a, &b}, 9501, "0", FreePort(), "tok-9501")) ASSERT_EQ(rc, 0) << out;
  for (const auto& [rc, out] : AddOnNodes({&a, &b}, 9502, "nobody", FreePort(), "tok-9502")) ASSERT_EQ(rc, 0) << out;
  for (const auto& [rc, out] : AddOnNodes({&b, &a}, 9504, "0", FreePort(), "tok-9504")) ASSERT_EQ(rc, 0) << out;
  for (const auto& [rc, out] : AddOnNodes({&a, &b}, 9505, "0 --on-loss continue", FreePort(), "tok-9505"))
    ASSERT_EQ(rc, 0) << out;
  auto [rc, out] = Shell(Syncctl(b, "job add --job 9503 --uid nobody --coord topo"));
  ASSERT_EQ(rc, 0) << out;
  ExpectAllSucceeded(Finish(StartTwoNodeJob(a, b, 9501, 0, 1, 20)));
  ExpectAllSucceeded(Finish(StartTwoNodeJob(a, b, 9502, kNobody, 1, 20)));
  ExpectAllSucceeded(RunJob(b, 9503, kNobody, 2));
  struct stat st {};
  ASSERT_EQ(stat((b.run_dir() + "/jobs").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "the jobs' tokens are the daemon's alone";
  auto* killed = static_cast<std::atomic<int>*>(
      mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(killed, MAP_FAILED);
  new (killed) std::atomic<int>(0);
  std::vector<pid_t> through = StartJobThroughARestart(a, b, 9505, killed);
  ASSERT_TRUE(WaitForRanks(a, 9505, 2) && WaitForRanks(b, 9505, 2));
  usleep(200'000);
  killed->store(1);
  ASSERT_TRUE(b.Restart()) << b.Log();
  ASSERT_TRUE(WaitForJobs(b, {9501, 9502, 9503, 9505})) << Shell(Syncctl(b, "job list")).second << b.Log();
  ExpectAllSucceeded(Finish(through));
  munmap(killed, sizeof(std::atomic<int>));
  std::tie(rc, out) = Shell(Syncctl(b, "job list"));
  EXPECT_FALSE(Contains(out, "9504")) << out;
  EXPECT_TRUE(Contains(b.Log(), "job 9504: not taken back after this daemon's restart: this node served its rendezvous"))
      << b.Log();
  // Each job's next run, on both nodes, every sum exact; the one-node job in its own mode still.
  std::vector<pid_t> first = StartTwoNodeJob(a, b, 9501, 0, 2, 50);
  std::vector<pid_t> second = StartTwoNodeJob(a, b, 9502, kNobody, 3, 50);
  ExpectAllSucceeded(Finish(first));
  ExpectAllSucceeded(Finish(second));
  ExpectAllSucceeded(RunJob(b, 9503, kNobody, 2));
  std::tie(rc, out) = Shell(Syncctl(b, "job list --json"));
  EXPECT_TRUE(Contains(out, "\"settings\":{\"coord\":\"topo\"}")) << out;
  // Removed, it is not taken back by a later restart.
  std::tie(rc, out) = Shell(Syncctl(b, "job remove 9503"));
  ASSERT_EQ(rc, 0) << out;
  ASSERT_TRUE(b.Restart()) << b.Log();
  ASSERT_TRUE(WaitForJobs(b, {9501, 9502})) << b.Log();
  std::tie(rc, out) = Shell(Syncctl(b, "job list"));
  EXPECT_FALSE(Contains(out, "9503")) << out;
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
