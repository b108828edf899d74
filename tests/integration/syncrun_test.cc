// syncrun as a user runs it: environment, exit codes, teardown on failure and on Ctrl-C.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/integration/harness.h"

namespace syncd::testing {
namespace {

namespace fs = std::filesystem;

double NowS() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

class SyncrunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/syncrun-test-XXXXXX";
    dir_ = mkdtemp(templ);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Starts syncrun with `args` in the background; stdout goes to dir_/out (and with `err`,
  // syncrun's own messages too: its stderr).
  pid_t Start(const std::vector<std::string>& args, bool err = false) {
    return Spawn([&] {
      std::vector<std::string> argv = {BinDir() + "/syncrun", "--syncd-arg=--log-level=warn"};
      argv.insert(argv.end(), args.begin(), args.end());
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      freopen((dir_ + "/out").c_str(), "w", stdout);
      if (err) dup2(fileno(stdout), fileno(stderr));
      execv(a[0], a.data());
      return 127;
    });
  }
  std::string Out() {
    std::ifstream f(dir_ + "/out");
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  static bool Alive(pid_t p) { return kill(p, 0) == 0; }
  std::vector<pid_t> Pids(const std::string& file) {
    std::vector<pid_t> pids;
    std::ifstream f(file);
    for (pid_t p; f >> p;) pids.push_back(p);
    return pids;
  }
  // Processes whose command line mentions `needle` (e.g. a daemon still serving a run dir).
  static std::vector<pid_t> ProcessesMentioning(const std::string& needle) {
    std::vector<pid_t> found;
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream f(e.path() / "cmdline");
      std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      if (cmd.find(needle) != std::string::npos) found.push_back(pid_t(std::stoi(name)));
    }
    return found;
  }
  std::string dir_;
};

TEST_F(SyncrunTest, EveryRankGetsItsEnvironmentAndTheDaemonIsReachable) {
  const pid_t p = Start({"-n", "3", "--", "sh", "-c",
                         "echo rank=$SYNCD_RANK size=$SYNCD_SIZE local=$SYNCD_LOCAL_RANK/$SYNCD_LOCAL_SIZE "
                         "cross=$SYNCD_CROSS_RANK/$SYNCD_CROSS_SIZE sock=$(test -S $SYNCD_RUN_DIR/attach.sock && echo yes)"});
  const int st = WaitChild(p, 30'000);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << Out();
  const std::string out = Out();
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(Contains(out, "rank=" + std::to_string(r) + " size=3 local=" + std::to_string(r) +
                                  "/3 cross=0/1 sock=yes"))
        << out;
}

TEST_F(SyncrunTest, ReturnsTheFirstFailureAndStopsTheOtherRanks) {
  const std::string pids = dir_ + "/pids";
  const double t0 = NowS();
  const pid_t p = Start({"-n", "3", "--", "sh", "-c",
                         "echo $$ >> " + pids + "; echo $SYNCD_RUN_DIR > " + dir_ + "/rundir; "
                         "if [ $SYNCD_RANK = 1 ]; then sleep 0.3; exit 7; fi; exec sleep 60"});
  const int st = WaitChild(p, 30'000);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 7) << "status " << st;
  EXPECT_LT(NowS() - t0, 10.0);
  for (pid_t w : Pids(pids)) EXPECT_FALSE(Alive(w)) << "worker " << w << " left behind";
  std::ifstream rd(dir_ + "/rundir");
  std::string run_dir;
  rd >> run_dir;
  ASSERT_FALSE(run_dir.empty());
  EXPECT_FALSE(fs::exists(run_dir)) << "run directory left behind: " << run_dir;
  EXPECT_TRUE(ProcessesMentioning(run_dir).empty()) << "a syncd for " << run_dir << " is still running";
}

TEST_F(SyncrunTest, SignalledRankReportsSignalExitCode) {
  const pid_t p = Start({"-n", "2", "--", "sh", "-c", "if [ $SYNCD_RANK = 0 ]; then kill -9 $$; fi; sleep 60"});
  const int st = WaitChild(p, 30'000);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGKILL) << "status " << st;
}

// --elastic (--on-loss restore): a rank that dies does not stop the others, and syncrun exits 0
// when they finish well; once fewer than --min-np ranks are left, the job stops as without it.
TEST_F(SyncrunTest, ElasticGoesOnWithoutALostRankUntilFewerThanMinNpAreLeft) {
  const std::string body = "if [ $SYNCD_RANK = 1 ]; then kill -9 $$; fi; sleep ";
  const pid_t ok = Start({"--elastic", "-n", "3", "--", "sh", "-c", body + "1"});
  const int st = WaitChild(ok, 30'000);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st << "\n" << Out();
  const double t0 = NowS();
  const pid_t stop = Start({"--elastic", "--min-np", "3", "-n", "3", "--", "sh", "-c", body + "60"});
  const int st2 = WaitChild(stop, 30'000);
  EXPECT_TRUE(WIFEXITED(st2) && WEXITSTATUS(st2) == 128 + SIGKILL) << "status " << st2;
  EXPECT_LT(NowS() - t0, 10.0);
  const pid_t refused = Start({"--min-np", "2", "-n", "3", "--", "true"});
  const int st3 = WaitChild(refused, 30'000);
  EXPECT_TRUE(WIFEXITED(st3) && WEXITSTATUS(st3) == 2) << "status " << st3;
}

// One loss policy for syncrun and its daemons, in one option: syncrun's --on-loss (--elastic:
// restore), else SYNCD_ON_LOSS; a policy in --syncd-arg is refused naming the option to use. What
// syncrun says of a lost rank and what syncctl says of the job name the same policy.
TEST_F(SyncrunTest, TheLossPolicyIsOneOptionSyncrunItsDaemonsAndSyncctlShare) {
  const pid_t refused = Start({"--elastic", "--syncd-arg=--on-loss=continue", "-n", "2", "--", "true"}, true);
  const int st = WaitChild(refused, 30'000);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << "status " << st;
  EXPECT_TRUE(Contains(Out(), "use --on-loss continue")) << Out();
  const std::string status = BinDir() + "/syncctl --run-dir $SYNCD_RUN_DIR status";
  const std::string body = "if [ $SYNCD_RANK = 1 ]; then kill -9 $$; fi; sleep 1; " + status;
  for (const char* policy : {"continue", "restore"}) {
    std::vector<std::string> args = {"--elastic", "-n", "2", "--", "sh", "-c", body};
    if (std::string(policy) == "continue") {
      setenv("SYNCD_ON_LOSS", policy, 1);  // as the daemons would read it
    } else {
      args.insert(args.begin(), {"--on-loss", policy});
    }
    const pid_t p = Start(args, true);
    const int s = WaitChild(p, 30'000);
    unsetenv("SYNCD_ON_LOSS");
    const std::string out = Out();
    EXPECT_TRUE(WIFEXITED(s) && WEXITSTATUS(s) == 0) << policy << ": status " << s << "\n" << out;
    EXPECT_TRUE(Contains(out, std::string("the job goes on without it (--on-loss ") + policy + ")")) << out;
    EXPECT_TRUE(Contains(out, std::string("elastic    --on-loss ") + policy + ":")) << out;
  }
}

// --reset-limit (horovodrun's): each rank lost (and each replacement started) changes the job's
// ranks once; past the limit the job stops as without --elastic. Without --elastic it is refused.
TEST_F(SyncrunTest, ElasticStopsOnceItsRanksChangedMoreThanTheResetLimit) {
  const std::string body = "if [ $SYNCD_RANK = 1 ]; then kill -9 $$; fi; sleep ";
  const pid_t ok = Start({"--elastic", "--reset-limit", "1", "-n", "3", "--", "sh", "-c", body + "1"});
  const int st = WaitChild(ok, 30'000);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st << "\n" << Out();
  const double t0 = NowS();
  const pid_t stop = Start({"--elastic", "--reset-limit", "0", "-n", "3", "--", "sh", "-c", body + "60"}, true);
  const int st2 = WaitChild(stop, 30'000);
  EXPECT_TRUE(WIFEXITED(st2) && WEXITSTATUS(st2) == 128 + SIGKILL) << "status " << st2;
  EXPECT_LT(NowS() - t0, 10.0);
  EXPECT_NE(Out().find("1 changes of the job's ranks, more than --reset-limit 0 allows; stopping the job"),
            std::string::npos) << Out();
  const pid_t refused = Start({"--reset-limit", "2", "-n", "3", "--", "true"});
  const int st3 = WaitChild(refused, 30'000);
  EXPECT_TRUE(WIFEXITED(st3) && WEXITSTATUS(st3) == 2) << "status " << st3;
}

TEST_F(SyncrunTest, CtrlCStopsEverything) {
  const std::string pids = dir_ + "/pids";
  const pid_t p = Start({"-n", "2", "--run-dir", dir_ + "/ctrl-c-run", "--", "sh", "-c", "echo $$ >> " + pids + "; exec sleep 60"});
  for (double end = NowS() + 10; NowS() < end && Pids(pids).size() < 2;) usleep(10'000);
  ASSERT_EQ(Pids(pids).size(), 2u);
  const std::string run_dir = dir_ + "/ctrl-c-run";
  kill(p, SIGINT);
  const int st = WaitChild(p, 10'000);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 130) << "status " << st;
  for (pid_t w : Pids(pids)) EXPECT_FALSE(Alive(w)) << "worker " << w << " left behind";
  EXPECT_TRUE(ProcessesMentioning(run_dir).empty()) << "syncd left behind after Ctrl-C";
}

TEST_F(SyncrunTest, OptionsMayComeInAnyOrderAndTheCommandKeepsItsOwn) {
  // Options of syncrun before "--" in any order; the command's own options pass through untouched.
  const std::string run_dir = dir_ + "/fresh/run";  // does not exist yet: syncrun creates it
  const pid_t p = Start({"-n", "2", "--run-dir", run_dir, "--no-bind", "--", "sh", "-c", "echo got $0 $1", "--sizes",
                         "--seconds"});
  const int st = WaitChild(p, 30'000);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << Out();
  EXPECT_TRUE(Contains(Out(), "got --sizes --seconds")) << Out();
  // Without "--", the first word that is not a syncrun option starts the command.
  const pid_t q = Start({"-n", "1", "sh", "-c", "echo plain $0", "-n"});
  const int st2 = WaitChild(q, 30'000);
  ASSERT_TRUE(WIFEXITED(st2) && WEXITSTATUS(st2) == 0) << Out();
  EXPECT_TRUE(Contains(Out(), "plain -n")) << Out();
}

TEST_F(SyncrunTest, MissingCommandFailsClearly) {
  const pid_t p = Start({"-n", "1", "--", "/nonexistent/program"});
  const int st = WaitChild(p, 30'000);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 127) << "status " << st;
}

TEST_F(SyncrunTest, RunsTheBenchmarkEndToEnd) {
  const pid_t p = Start({"-n", "2", "--", BinDir() + "/syncd-bench", "allreduce", "--sizes", "8,64K", "--json",
                         "--seconds", "0.05"});
  const int st = WaitChild(p, 60'000);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << Out();
  const std::string out = Out();
  for (const char* key : {"\"op\":\"allreduce\"", "\"bytes\":8,", "\"bytes\":65536,", "\"ranks\":2", "\"time_us\"",
                          "\"lat_p50_us\"", "\"algbw_GBps\"", "\"busbw_GBps\"", "\"wrong\":0", "\"ns_per_request\""})
    EXPECT_TRUE(Contains(out, key)) << key << " missing from\n" << out;
}

// Sixteen simulated nodes, one rank each, on this machine's cores (8 daemons and more share a
// core): every coordination mode agrees and sums right, and no mode hangs. The scaling figures
// are bench/compare.sh's, not this test's.
TEST_F(SyncrunTest, SixteenDaemonsWithOneRankEachAllreduceInEveryMode) {
  for (const char* mode : {"negotiate", "gs", "nbcs", "topo"}) {
    const pid_t p = Start({"-N", "16", "-n", "16", std::string("--syncd-arg=--coord=") + mode, "--",
                           BinDir() + "/syncd-bench", "allreduce", "--sizes", "8,4K", "--json", "--iters", "20",
                           "--warmup", "2", "--seconds", "0.05"});
    const int st = WaitChild(p, 120'000);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << mode << ": " << Out();
    const std::string out = Out();
    for (const char* key : {"\"bytes\":8,", "\"bytes\":4096,", "\"ranks\":16"})
      EXPECT_TRUE(Contains(out, key)) << mode << ": " << key << " missing from\n" << out;
    size_t at = 0, right = 0;
    while ((at = out.find("\"wrong\":0", at)) != std::string::npos) ++right, ++at;
    EXPECT_EQ(right, 2u) << mode << ": both sizes exact\n" << out;
  }
}

// --netns needs root and iproute2; elsewhere these tests skip.
bool CanMakeNamespaces() { return geteuid() == 0 && system("ip netns list > /dev/null 2>&1") == 0; }

// The network namespaces syncrun `pid` made (syncrun-PID-n<i>, syncrun-PID-sw) that still exist.
std::vector<std::string> NamespacesOf(pid_t pid) {
  std::vector<std::string> out;
  std::error_code ec;
  const std::string prefix = "syncrun-" + std::to_string(pid) + "-";
  for (const auto& e : fs::directory_iterator("/run/netns", ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().filename());
  return out;
}

// A number field of syncd-bench's JSON line (-1 when absent).
double JsonField(const std::string& out, const std::string& key) {
  const size_t at = out.find("\"" + key + "\":");
  return at == std::string::npos ? -1 : std::stod(out.substr(at + key.size() + 3));
}

TEST_F(SyncrunTest, NetnsNodesTalkOverLinksOfTheChosenRateAndNothingIsLeft) {
  if (!CanMakeNamespaces()) GTEST_SKIP() << "needs root and ip netns";
  // 16 MiB across two nodes behind 1 Gbit/s links: each node sends and receives about the tensor's
  // size, so the link (0.125 GB/s each way) bounds the allreduce's algbw, and busbw = 1.5 algbw on
  // 4 ranks. Over loopback the same run reaches several times that.
  const pid_t p = Start({"--netns", "--link-gbit", "1", "-N", "2", "-n", "4", "--", BinDir() + "/syncd-bench",
                         "allreduce", "--sizes", "16M", "--json", "--seconds", "0.5"});
  const int st = WaitChild(p, 120'000);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << Out();
  const std::string out = Out();
  EXPECT_EQ(JsonField(out, "wrong"), 0) << out;
  const double busbw = JsonField(out, "busbw_GBps");
  EXPECT_GT(busbw, 0.0) << out;
  EXPECT_LT(busbw, 1.5 * 0.125 * 1.1) << "the 1 Gbit/s links bound it: " << out;
  EXPECT_TRUE(NamespacesOf(p).empty()) << "namespaces left behind";
}

TEST_F(SyncrunTest, NetnsRanksRunInTheirNodesNamespaceAndCtrlCOrSigkillLeaveNothing) {
  if (!CanMakeNamespaces()) GTEST_SKIP() << "needs root and ip netns";
  for (int sig : {SIGINT, SIGKILL}) {
    const std::string pids = dir_ + "/pids" + std::to_string(sig);
    const pid_t p = Start({"--netns", "-N", "2", "-n", "2", "--", "sh", "-c",
                           "grep -q link0 /proc/net/dev && echo $$ >> " + pids + "; exec sleep 60"});
    for (double end = NowS() + 20; NowS() < end && Pids(pids).size() < 2;) usleep(10'000);
    ASSERT_EQ(Pids(pids).size(), 2u) << "each rank sees its node's link0: " << Out();
    EXPECT_EQ(NamespacesOf(p).size(), 3u) << "two nodes and the switch";
    kill(p, sig);
    const int st = WaitChild(p, 10'000);
    if (sig == SIGINT) {
      EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 130) << "status " << st;
    }
    // After SIGKILL syncrun's reaper removes them once syncrun's end of its pipe closes.
    for (double end = NowS() + 5; NowS() < end && !NamespacesOf(p).empty();) usleep(20'000);
    EXPECT_TRUE(NamespacesOf(p).empty()) << "namespaces left behind after signal " << sig;
    for (double end = NowS() + 5; NowS() < end;) {
      bool any = false;
      for (pid_t w : Pids(pids)) any |= Alive(w);
      if (!any) break;
      usleep(20'000);
    }
    for (pid_t w : Pids(pids)) EXPECT_FALSE(Alive(w)) << "rank " << w << " left behind after signal " << sig;
  }
}

TEST_F(SyncrunTest, LinkRateWithoutNetnsIsRefused) {
  for (const char* flag : {"--link-gbit=10", "--network-only"}) {
    const pid_t p = Start({flag, "-n", "1", "--", "true"});
    const int st = WaitChild(p, 30'000);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << flag << ": status " << st;
  }
}

// --network-only: no daemon, no rank; the command runs once, in syncrun's own namespace, and
// reaches every node through the namespaces and addresses it is given (as bench/peers/on_links.sh
// does for MPI and gloo); its exit code is syncrun's, and nothing is left.
TEST_F(SyncrunTest, NetworkOnlyRunsOneCommandThatReachesEveryNodeOverTheLinks) {
  if (!CanMakeNamespaces()) GTEST_SKIP() << "needs root and ip netns";
  const std::string script =
      "set -e; set -- $SYNCRUN_NETNS; n0=$1; n2=$3; set -- $SYNCRUN_NODE_ADDRS; echo \"addrs $*\"; "
      "ip netns exec $n2 /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind((\"\", 7777)); "
      "s.listen(); c, _ = s.accept(); c.send(b\"hi\")' & sleep 0.5; "
      "ip netns exec $n0 /usr/bin/python3 -c 'import socket, sys; s = socket.create_connection((sys.argv[1], 7777), 5); "
      "print(\"reached\" if s.recv(2) == b\"hi\" else \"not\")' $3; wait; "
      "ip netns exec $n2 cat /proc/net/dev | grep -q $SYNCRUN_DEVICE && echo device; "
      "pgrep -P $PPID -x syncd > /dev/null && echo daemon || true; exit 7";
  const pid_t p = Start({"--netns", "-N", "3", "--network-only", "--", "sh", "-c", script});
  const int st = WaitChild(p, 60'000);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 7) << "the command's exit code: status " << st << "\n" << Out();
  const std::string out = Out();
  EXPECT_TRUE(Contains(out, "addrs 10.77.0.1 10.77.0.2 10.77.0.3")) << out;
  EXPECT_TRUE(Contains(out, "reached")) << "node 0 reaches node 2 over the links: " << out;
  EXPECT_TRUE(Contains(out, "device")) << out;
  EXPECT_FALSE(Contains(out, "daemon")) << "no syncd is started: " << out;
  EXPECT_TRUE(NamespacesOf(p).empty()) << "namespaces left behind";
}

}  // namespace
}  // namespace syncd::testing
