// Ranks that die: whatever point of a training loop a rank is killed at, every surviving rank
// gets an error naming it within the documented time, the daemons survive, and they serve the
// next job. Real daemons (two or three nodes on loopback) and real client processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <regex>
#include <sstream>
#include <string>

#include "tests/integration/harness.h"

namespace syncd::testing {
namespace {

int Allreduce(syncd_client* c, const char* name, int32_t* v, int64_t count, int timeout_ms = 20'000) {
  syncd_tensor t{name, v, SYNCD_INT32, 1, &count, 0};
  syncd_handle h;
  if (int rc = syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h); rc != SYNCD_OK) return rc;
  return syncd_wait(c, h, timeout_ms);
}

// Whether `message` names `rank`: "rank 3", or a list such as "ranks 0,2-3".
bool NamesRank(const std::string& message, int rank) {
  static const std::regex kRanks("ranks? ([0-9][0-9,-]*)");
  for (std::sregex_iterator it(message.begin(), message.end(), kRanks), end; it != end; ++it) {
    std::stringstream list((*it)[1].str());
    for (std::string item; std::getline(list, item, ',');) {
      if (item.empty()) continue;
      const size_t dash = item.find('-');
      const int lo = std::stoi(item.substr(0, dash)), hi = dash == std::string::npos ? lo : std::stoi(item.substr(dash + 1));
      if (lo <= rank && rank <= hi) return true;
    }
  }
  return false;
}

// State shared between the test and its forked ranks.
struct Shared {
  std::atomic<double> t_kill{0};  // when the test injected the fault
  std::atomic<int> steps[8];      // each rank's current step
};

Shared* MapShared() {
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return new (p) Shared();
}

// Whether the daemon process is still running (not exited, not a zombie).
bool DaemonAlive(Daemon& d) {
  int status;
  return d.pid() > 0 && waitpid(d.pid(), &status, WNOHANG) == 0;
}

// A job on every node whose allreduce of each rank's (rank + 1) must be exact.
void ExpectClusterServesANewJob(Cluster& cluster) {
  const int n = cluster.nodes() * cluster.local_size();
  auto st = RunClusterRanks(cluster, [n](syncd_client* c, int rank, int) {
    for (int step = 0; step < 5; ++step) {
      int32_t v = rank + 1;
      const int rc = Allreduce(c, "after.the.loss", &v, 1, 10'000);
      CHILD_CHECK(rc == SYNCD_OK, "rank %d step %d: %s: %s", rank, step, syncd_status_name(rc), syncd_last_error());
      CHILD_CHECK(v == n * (n + 1) / 2, "rank %d: %d", rank, v);
    }
    return 0;
  }, 30'000);
  ExpectAllSucceeded(st);
}

// Issue 17, bug 1: with one rank per node, the dead rank's request kept pointing into its unmapped
// segment and the next execution read it (SIGSEGV in the host reduction).
TEST(Faults, ARankKilledWithARequestInFlightFailsThePeerAndNoDaemonCrashes) {
  Cluster cluster(2, 1, {"--log-level", "warn"});
  Shared* shared = MapShared();
  NextJob();
  const std::string dir0 = cluster.node(0).run_dir(), dir1 = cluster.node(1).run_dir();
  pid_t victim = Spawn([&] {
    syncd_client* c = AttachAs(dir1, 1, 2, 0, 1);
    CHILD_CHECK(c != nullptr, "attach: %s", syncd_last_error());
    const int64_t count = 1 << 16;
    auto* buf = static_cast<int32_t*>(syncd_alloc(c, count * 4));
    syncd_tensor t{"grad", buf, SYNCD_INT32, 1, &count, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
    usleep(200'000);
    shared->t_kill.store(NowS());
    raise(SIGKILL);
    return 1;
  });
  pid_t survivor = Spawn([&] {
    syncd_client* c = AttachAs(dir0, 0, 2, 0, 1);
    CHILD_CHECK(c != nullptr, "attach: %s", syncd_last_error());
    const int64_t count = 1 << 16;
    auto* buf = static_cast<int32_t*>(syncd_alloc(c, count * 4));
    usleep(1'500'000);
    const int rc = Allreduce(c, "grad", buf, count);
    CHILD_CHECK(rc == SYNCD_ERR_RANK_LOST, "%s: %s", syncd_status_name(rc), syncd_last_error());
    CHILD_CHECK(Contains(syncd_last_error(), "rank 1") && Contains(syncd_last_error(), "'grad'"), "%s",
                syncd_last_error());
    syncd_shutdown(c);
    return 0;
  });
  EXPECT_TRUE(WIFSIGNALED(WaitChild(victim, 10'000)));
  const int s = WaitChild(survivor, 20'000);
  EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s;
  for (int n = 0; n < 2; ++n) ASSERT_TRUE(DaemonAlive(cluster.node(n))) << "node " << n << ":\n" << cluster.node(n).Log();
  ExpectClusterServesANewJob(cluster);
}

// One job of a training loop on every rank of `cluster` (allreduces of three layers, a little
// "compute" between steps). Each rank records its step in `shared`; when a collective fails
// the rank checks the error names `victim` and came within `within_s` of shared->t_kill, with
// `code`, then exits 0. The victim's pid is returned in pids[victim] like every other.
std::vector<pid_t> SpawnTrainingLoop(Cluster& cluster, Shared* shared, int victim, int code, double within_s) {
  NextJob();
  const int n = cluster.nodes() * cluster.local_size(), ls = cluster.local_size();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const std::string dir = cluster.node(r / ls).run_dir();
    pids.push_back(Spawn([=] {
      syncd_client* c = AttachAs(dir, r, n, r % ls, ls);
      CHILD_CHECK(c != nullptr, "attach: %s", syncd_last_error());
      const int64_t count = 1 << 14;
      auto* buf = static_cast<int32_t*>(syncd_alloc(c, count * 4));
      static const char* const kLayers[] = {"layer.0", "layer.1", "layer.2"};
      for (int step = 0;; ++step) {
        shared->steps[r].store(step);
        const int rc = Allreduce(c, kLayers[step % 3], buf, count, 30'000);
        if (rc == SYNCD_OK) {
          usleep(step % 2 ? 500 : 0);
          continue;
        }
        const double delay = NowS() - shared->t_kill.load();
        CHILD_CHECK(rc == code, "rank %d step %d: %s: %s", r, step, syncd_status_name(rc), syncd_last_error());
        CHILD_CHECK(NamesRank(syncd_last_error(), victim), "rank %d step %d: %s", r, step, syncd_last_error());
        CHILD_CHECK(shared->t_kill.load() > 0 && delay < within_s, "rank %d: error %.2f s after the fault", r, delay);
        syncd_shutdown(c);
        return 0;
      }
    }));
  }
  return pids;
}

// Waits until every rank has run a few steps (at most 20 s: a job that cannot train is a
// failure, not a hang), then a random while longer.
void LetItTrain(Shared* shared, int ranks, std::mt19937& rng) {
  const double deadline = NowS() + 20;
  for (bool ready = false; !ready; usleep(1000)) {
    ready = true;
    for (int r = 0; r < ranks; ++r) ready &= shared->steps[r].load() >= 3;
    if (!ready && NowS() > deadline) {
      ADD_FAILURE() << "the job did not run 3 steps in 20 s";
      return;
    }
  }
  usleep(int(rng() % 400'000));
}

void ExpectSurvivorsReportIt(const std::vector<pid_t>& pids, int victim) {
  for (size_t r = 0; r < pids.size(); ++r) {
    if (int(r) == victim) continue;
    const int s = WaitChild(pids[r], 30'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "rank " << r << " status " << s;
  }
}

struct Topology {
  int nodes, local_size;
};
std::string TopologyName(const ::testing::TestParamInfo<Topology>& info) {
  return std::to_string(info.param.nodes) + "nodes_x" + std::to_string(info.param.local_size) + "ranks";
}
class KilledRank : public ::testing::TestWithParam<Topology> {};

// Issue 17, bug 2: a rank killed between or inside allreduces of a training loop, at random
// points. Every survivor's error names the lost rank within 2 s of the kill, and the same daemons
// serve the next job each time (2 x 1 ranks: 20 kills; the larger jobs: 6 each).
TEST_P(KilledRank, EverySurvivorGetsAnErrorNamingItWithin2sAndTheDaemonsServeTheNextJob) {
  const Topology topo = GetParam();
  Cluster cluster(topo.nodes, topo.local_size, {"--log-level", "error"});
  Shared* shared = MapShared();
  std::mt19937 rng(17 + topo.nodes * 10 + topo.local_size);
  const int n = topo.nodes * topo.local_size;
  const int rounds = n == 2 ? 20 : 6;
  for (int round = 0; round < rounds && !HasFailure(); ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int victim = int(rng() % n);
    shared->t_kill.store(0);
    for (int r = 0; r < n; ++r) shared->steps[r].store(0);
    std::vector<pid_t> pids = SpawnTrainingLoop(cluster, shared, victim, SYNCD_ERR_RANK_LOST, 2.0);
    LetItTrain(shared, n, rng);
    shared->t_kill.store(NowS());
    kill(pids[size_t(victim)], SIGKILL);
    EXPECT_TRUE(WIFSIGNALED(WaitChild(pids[size_t(victim)], 10'000)));
    ExpectSurvivorsReportIt(pids, victim);
    for (int node = 0; node < topo.nodes; ++node)
      ASSERT_TRUE(DaemonAlive(cluster.node(node))) << "node " << node << ":\n" << cluster.node(node).Log();
  }
  ExpectClusterServesANewJob(cluster);
}

INSTANTIATE_TEST_SUITE_P(Faults, KilledRank,
                         ::testing::Values(Topology{2, 1}, Topology{2, 2}, Topology{3, 1}, Topology{3, 2}), TopologyName);

// A rank stopped (SIGSTOP) at a random point never submits again: after --stall-shutdown-s
// every other rank fails as a stall naming it. Then the stopped rank is killed and the daemons
// serve the next job.
class StoppedRank : public ::testing::TestWithParam<Topology> {};

TEST_P(StoppedRank, EveryOtherRankFailsAsAStallNamingItAndTheDaemonsServeTheNextJob) {
  const Topology topo = GetParam();
  Cluster cluster(topo.nodes, topo.local_size, {"--log-level", "error", "--stall-shutdown-s", "2"});
  Shared* shared = MapShared();
  std::mt19937 rng(23 + topo.nodes * 10 + topo.local_size);
  const int n = topo.nodes * topo.local_size, victim = int(rng() % n);
  shared->t_kill.store(0);
  std::vector<pid_t> pids = SpawnTrainingLoop(cluster, shared, victim, SYNCD_ERR_STALLED, 2 + 2.0);
  LetItTrain(shared, n, rng);
  shared->t_kill.store(NowS());
  kill(pids[size_t(victim)], SIGSTOP);
  ExpectSurvivorsReportIt(pids, victim);
  kill(pids[size_t(victim)], SIGKILL);
  WaitChild(pids[size_t(victim)], 10'000);
  for (int node = 0; node < topo.nodes; ++node) ASSERT_TRUE(DaemonAlive(cluster.node(node))) << "node " << node;
  ExpectClusterServesANewJob(cluster);
}

INSTANTIATE_TEST_SUITE_P(Faults, StoppedRank,
                         ::testing::Values(Topology{2, 1}, Topology{2, 2}, Topology{3, 1}, Topology{3, 2}), TopologyName);

// A process that returns from main without syncd_shutdown (a Python script without hvd.shutdown
// that crashes in its exit handlers, say): its peers learn it at once, named.
TEST(Faults, AClientThatExitsWithoutDetachingFailsItsPeersAtOnce) {
  Cluster cluster(2, 1, {"--log-level", "error"});
  Shared* shared = MapShared();
  NextJob();
  pid_t leaver = Spawn([&] {
    syncd_client* c = AttachAs(cluster.node(1).run_dir(), 1, 2, 0, 1);
    CHILD_CHECK(c != nullptr, "attach: %s", syncd_last_error());
    int32_t v = 1;
    CHILD_CHECK(Allreduce(c, "step.0", &v, 1) == SYNCD_OK, "%s", syncd_last_error());
    shared->t_kill.store(NowS());
    _exit(0);  // no syncd_shutdown
  });
  pid_t waiter = Spawn([&] {
    syncd_client* c = AttachAs(cluster.node(0).run_dir(), 0, 2, 0, 1);
    CHILD_CHECK(c != nullptr, "attach: %s", syncd_last_error());
    int32_t v = 1;
    CHILD_CHECK(Allreduce(c, "step.0", &v, 1) == SYNCD_OK, "%s", syncd_last_error());
    const int rc = Allreduce(c, "step.1", &v, 1);
    CHILD_CHECK(rc == SYNCD_ERR_RANK_LOST, "%s: %s", syncd_status_name(rc), syncd_last_error());
    CHILD_CHECK(Contains(syncd_last_error(), "rank 1") && Contains(syncd_last_error(), "without detaching"), "%s",
                syncd_last_error());
    CHILD_CHECK(NowS() - shared->t_kill.load() < 2.0, "error %.2f s after the exit", NowS() - shared->t_kill.load());
    syncd_shutdown(c);
    return 0;
  });
  EXPECT_EQ(WaitChild(leaver, 10'000), 0);
  const int s = WaitChild(waiter, 20'000);
  EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s;
  ExpectClusterServesANewJob(cluster);
}

// Rank `rank` of a 2 x 1 job (node `rank`), attached and through the job's first allreduce
// ("step.0"); nullptr (syncd_last_error says why) if either failed.
syncd_client* AttachedPastTheFirstStep(Cluster& cluster, int rank) {
  syncd_client* c = AttachAs(cluster.node(rank).run_dir(), rank, 2, 0, 1);
  int32_t v = 1;
  if (c != nullptr && Allreduce(c, "step.0", &v, 1) != SYNCD_OK) {
    fprintf(stderr, "[child %d] step.0: %s\n", getpid(), syncd_last_error());
    return nullptr;
  }
  return c;
}

// syncd_leave (syncd.torch's atexit) with a request in flight: the daemon lets the rank go as a
// detach, not a death, but what it abandoned fails on its peers, named; its own later calls say it
// left; syncd_shutdown then frees it; the daemons serve the next job.
TEST(Faults, AClientThatLeavesWithARequestInFlightFailsItsPeersAndItsLaterCallsSayItLeft) {
  Cluster cluster(2, 1, {"--log-level", "info"});
  Shared* shared = MapShared();
  NextJob();
  pid_t leaver = Spawn([&] {
    syncd_client* c = AttachedPastTheFirstStep(cluster, 1);
    CHILD_CHECK(c != nullptr, "attach: %s", syncd_last_error());
    int32_t v = 1;
    int64_t shape = 1;
    syncd_tensor t{"step.1", &v, SYNCD_INT32, 1, &shape, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
    syncd_leave(c);
    shared->t_kill.store(NowS());
    int rc = syncd_wait(c, h, 5'000);
    CHILD_CHECK(rc == SYNCD_ERR_INVALID && Contains(syncd_last_error(), "rank 1 has left the job"), "wait: %s: %s",
                syncd_status_name(rc), syncd_last_error());
    rc = Allreduce(c, "step.2", &v, 1);
    CHILD_CHECK(rc == SYNCD_ERR_INVALID && Contains(syncd_last_error(), "has left the job"), "submit: %s: %s",
                syncd_status_name(rc), syncd_last_error());
    syncd_shutdown(c);
    return 0;
  });
  pid_t waiter = Spawn([&] {
    syncd_client* c = AttachedPastTheFirstStep(cluster, 0);
    CHILD_CHECK(c != nullptr, "attach: %s", syncd_last_error());
    int32_t v = 1;
    while (shared->steps[0].load() == 0) usleep(1000);  // node 1 has let rank 1 go
    const int rc = Allreduce(c, "step.1", &v, 1);
    CHILD_CHECK(rc == SYNCD_ERR_RANK_LOST && Contains(syncd_last_error(), "rank 1"), "%s: %s", syncd_status_name(rc),
                syncd_last_error());
    CHILD_CHECK(NowS() - shared->t_kill.load() < 2.0, "error %.2f s after the leave", NowS() - shared->t_kill.load());
    syncd_shutdown(c);
    return 0;
  });
  // Rank 0 submits its part only once node 1 has seen the goodbye: otherwise the collective may
  // complete first, as it may for any rank that leaves with requests in flight.
  for (int i = 0; i < 10'000 && !Contains(cluster.node(1).Log(), ") detached"); ++i) usleep(1000);
  shared->steps[0].store(1);
  const int l = WaitChild(leaver, 10'000);
  EXPECT_TRUE(l != -1 && WIFEXITED(l) && WEXITSTATUS(l) == 0) << "status " << l;
  const int s = WaitChild(waiter, 20'000);
  EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s;
  const std::string log = cluster.node(1).Log();
  EXPECT_TRUE(Contains(log, "rank 1 (pid " + std::to_string(leaver) + ") detached")) << log;
  EXPECT_FALSE(Contains(log, "without detaching")) << log;
  ExpectClusterServesANewJob(cluster);
}

// Under --on-loss fail a node whose every rank detached (hvd.shutdown(), or an exit that said
// goodbye) has no one to fail what the other nodes submit for them: the others see the ranks gone
// in the job's health reports, and a tensor waiting past the rejoin grace for them fails, naming
// them, within seconds (it waited for --stall-shutdown-s, 300 s, before).
TEST(Faults, ATensorWaitingForANodeWhoseRanksAllDetachedFailsWithinSeconds) {
  Cluster cluster(2, 1, {"--log-level", "info"});
  Shared* shared = MapShared();
  NextJob();
  pid_t leaver = Spawn([&] {
    syncd_client* c = AttachedPastTheFirstStep(cluster, 1);
    CHILD_CHECK(c != nullptr, "attach: %s", syncd_last_error());
    syncd_shutdown(c);
    shared->t_kill.store(NowS());
    return 0;
  });
  pid_t waiter = Spawn([&] {
    syncd_client* c = AttachedPastTheFirstStep(cluster, 0);
    CHILD_CHECK(c != nullptr, "attach: %s", syncd_last_error());
    int32_t v = 1;
    while (shared->t_kill.load() == 0) usleep(1000);
    const int rc = Allreduce(c, "step.1", &v, 1);
    CHILD_CHECK(rc == SYNCD_ERR_RANK_LOST && Contains(syncd_last_error(), "step.1") &&
                    Contains(syncd_last_error(), "rank 1 left the job"),
                "%s: %s", syncd_status_name(rc), syncd_last_error());
    CHILD_CHECK(NowS() - shared->t_kill.load() < 8.0, "error %.2f s after the detach", NowS() - shared->t_kill.load());
    syncd_shutdown(c);
    return 0;
  });
  const int l = WaitChild(leaver, 10'000);
  EXPECT_TRUE(l != -1 && WIFEXITED(l) && WEXITSTATUS(l) == 0) << "status " << l;
  const int s = WaitChild(waiter, 30'000);
  EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s << "\n" << cluster.node(0).Log();
  ExpectClusterServesANewJob(cluster);
}

// A client that submits and never reads its completions (its completion ring fills): the daemon
// keeps the rest for it (none lost, in order), serves the other ranks meanwhile, and answers
// syncctl; when the client reads at last, every completion is there.
TEST(Faults, AClientThatStopsReadingCompletionsLosesNoneAndDelaysNoOne) {
  Daemon d(2, {"--ring-entries", "16"});
  const std::string dir = d.run_dir();
  Shared* shared = MapShared();
  auto st = RunRanks(dir, 2, [&](syncd_client* c, int rank, int) {
    constexpr int kSteps = 48;  // three times the ring
    std::vector<int32_t> v(kSteps);
    if (rank == 1) {
      std::vector<syncd_handle> handles;
      for (int i = 0; i < kSteps; ++i) {
        v[size_t(i)] = i;
        int64_t shape = 1;
        const std::string name = "unread." + std::to_string(i);
        syncd_tensor t{name.c_str(), &v[size_t(i)], SYNCD_INT32, 1, &shape, 0};
        syncd_handle h;
        int rc;
        while ((rc = syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h)) == SYNCD_ERR_NO_MEMORY) usleep(1000);
        CHILD_CHECK(rc == SYNCD_OK, "submit %d: %s", i, syncd_last_error());
        handles.push_back(h);
        if (handles.size() == 16) break;  // the client's slots are full: it stops here for a while
      }
      shared->steps[1].store(1);
      while (shared->steps[0].load() < 1) usleep(1000);  // rank 0 finished its 16; we never looked
      for (size_t i = 0; i < handles.size(); ++i) {
        CHILD_CHECK(syncd_wait(c, handles[i], 5'000) == SYNCD_OK, "completion %zu: %s", i, syncd_last_error());
        CHILD_CHECK(v[i] == 2 * int32_t(i), "result %zu: %d", i, v[i]);
      }
      return 0;
    }
    for (int i = 0; i < 16; ++i) {
      v[size_t(i)] = i;
      const std::string name = "unread." + std::to_string(i);
      CHILD_CHECK(Allreduce(c, name.c_str(), &v[size_t(i)], 1, 10'000) == SYNCD_OK, "%d: %s", i, syncd_last_error());
      CHILD_CHECK(v[size_t(i)] == 2 * i, "result %d: %d", i, v[size_t(i)]);
    }
    CHILD_CHECK(Contains(SyncctlStatusJson(dir), "\"clients\""), "syncctl status while a client reads nothing");
    shared->steps[0].store(1);
    return 0;
  });
  ExpectAllSucceeded(st);
}

// A daemon killed under a job: the ranks of the other nodes fail naming the node (KilledPeer in
// many_nodes_test.cc covers node 0 and a non-root node mid-collective); a new job on the
// survivors fails at once naming it too, instead of waiting for a node that is gone.
TEST(Faults, ANewJobOnTheSurvivorsOfALostDaemonFailsAtOnceNamingIt) {
  Cluster cluster(3, 1, {"--log-level", "error"});
  ExpectClusterServesANewJob(cluster);
  cluster.node(2).Kill(SIGKILL);
  EXPECT_NE(cluster.node(2).Wait(10'000), -1);
  NextJob();
  std::vector<pid_t> survivors;
  for (int node = 0; node < 2; ++node) {
    const std::string dir = cluster.node(node).run_dir();
    survivors.push_back(Spawn([=] {
      syncd_client* c = AttachAs(dir, node, 3, 0, 1);
      CHILD_CHECK(c != nullptr, "attach: %s", syncd_last_error());
      int32_t v = 1;
      const double t0 = NowS();
      const int rc = Allreduce(c, "after.the.loss", &v, 1, 20'000);
      CHILD_CHECK(rc == SYNCD_ERR_RANK_LOST, "rank %d: %s: %s", node, syncd_status_name(rc), syncd_last_error());
      CHILD_CHECK(Contains(syncd_last_error(), "node 2"), "rank %d: %s", node, syncd_last_error());
      CHILD_CHECK(NowS() - t0 < 2.0, "rank %d: %.2f s", node, NowS() - t0);
      syncd_shutdown(c);
      return 0;
    }));
  }
  for (pid_t p : survivors) {
    const int s = WaitChild(p, 30'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s;
  }
  for (int node = 0; node < 2; ++node) {
    cluster.node(node).Kill(SIGTERM);
    const int s = cluster.node(node).Wait(10'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "node " << node << " status " << s;
  }
}

}  // namespace
}  // namespace syncd::testing
