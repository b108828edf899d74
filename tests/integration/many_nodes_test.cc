// Several daemons on this machine standing in for nodes: results across nodes, negotiation with
// the response cache, and the failures the many-nodes issue names.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "daemon/base/version.h"
#include "daemon/control/rendezvous.h"
#include "tests/integration/harness.h"
#include "tests/integration/values.h"

namespace syncd::testing {
namespace {



int Allreduce(syncd_client* c, const std::string& name, void* buf, syncd_dtype dt, int64_t count, syncd_reduce_op op) {
  syncd_tensor t{name.c_str(), buf, dt, 1, &count, 0};
  syncd_handle h;
  if (int rc = syncd_allreduce_async(c, &t, op, 1, 1, &h); rc != SYNCD_OK) return rc;
  return syncd_wait(c, h, 60'000);
}

int CheckedAllreduce(syncd_client* c, int rank, int n, syncd_dtype dt, syncd_reduce_op op, size_t count,
                     const std::string& name) {
  const size_t bytes = count * syncd_dtype_size(dt);
  void* buf = syncd_alloc(c, bytes);
  CHILD_CHECK(buf != nullptr, "alloc");
  for (size_t i = 0; i < count; ++i) SetValue(buf, dt, i, InputFor(dt, rank, i));
  const int rc = Allreduce(c, name, buf, dt, int64_t(count), op);
  CHILD_CHECK(rc == SYNCD_OK, "%s: %s", name.c_str(), syncd_last_error());
  for (size_t i = 0; i < count; ++i) {
    const double want = Expected(dt, op, n, i), got = GetValue(buf, dt, i);
    CHILD_CHECK(got == want, "%s rank %d element %zu: got %g want %g", name.c_str(), rank, i, got, want);
  }
  syncd_free(c, buf);
  return 0;
}

struct Shape {
  int nodes, local;
};
void PrintTo(const Shape& s, std::ostream* os) { *os << s.nodes << "x" << s.local; }

class ManyNodes : public ::testing::TestWithParam<Shape> {};

TEST_P(ManyNodes, EveryOpAndDtypeIsExactAcrossNodes) {
  Cluster cluster(GetParam().nodes, GetParam().local, {"--cores", "none", "--log-level", "warn"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    CHILD_CHECK(syncd_size(c) == n && syncd_rank(c) == rank, "identity");
    for (size_t count : {size_t(1), size_t(4099)})
      for (int dt = 0; dt < SYNCD_DTYPE_COUNT; ++dt)
        for (int op = 0; op <= SYNCD_PRODUCT; ++op) {
          if (!Allreducible(syncd_dtype(dt), syncd_reduce_op(op))) continue;
          const std::string name = "t." + std::to_string(count) + "." + std::to_string(dt) + "." + std::to_string(op);
          if (CheckedAllreduce(c, rank, n, syncd_dtype(dt), syncd_reduce_op(op), count, name)) return 1;
        }
    // Large enough for the ring path between the daemons.
    if (CheckedAllreduce(c, rank, n, SYNCD_INT32, SYNCD_SUM, (1u << 20) + 3, "ring")) return 1;
    for (int root = 0; root < n; ++root) {
      std::vector<int64_t> v(1000, rank * 1000 + 7);
      int64_t count = 1000;
      const std::string name = "bcast." + std::to_string(root);
      syncd_tensor t{name.c_str(), v.data(), SYNCD_INT64, 1, &count, 0};
      syncd_handle h;
      CHILD_CHECK(syncd_broadcast_async(c, &t, root, &h) == SYNCD_OK, "%s", syncd_last_error());
      CHILD_CHECK(syncd_wait(c, h, 60'000) == SYNCD_OK, "%s: %s", name.c_str(), syncd_last_error());
      for (int64_t x : v) CHILD_CHECK(x == root * 1000 + 7, "%s: got %ld", name.c_str(), (long)x);
    }
    syncd_handle h;
    CHILD_CHECK(syncd_barrier_async(c, &h) == SYNCD_OK && syncd_wait(c, h, 60'000) == SYNCD_OK, "barrier: %s",
                syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ManyNodes,
                         ::testing::Values(Shape{2, 1}, Shape{2, 2}, Shape{3, 1}, Shape{3, 2}, Shape{4, 1}, Shape{4, 2}),
                         [](const auto& info) {
                           return std::to_string(info.param.nodes) + "nodes_x" + std::to_string(info.param.local) + "clients";
                         });


TEST(ManyNodesNegotiation, ThreeHundredNamesPerStepForFiftyStepsUseTheCache) {
  Cluster cluster(2, 2, {"--cores", "none", "--log-level", "warn"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    // ResNet-101-like: 314 gradients from 64 elements to 2.4 M, submitted in reverse layer order.
    constexpr int kNames = 314;
    std::vector<int64_t> counts;
    for (int i = 0; i < kNames; ++i) counts.push_back(i % 3 == 0 ? 64 : i % 3 == 1 ? 4096 : (i % 7 == 0 ? 262144 : 16384));
    std::vector<float*> bufs;
    std::vector<std::string> names;
    for (int i = 0; i < kNames; ++i) {
      bufs.push_back(static_cast<float*>(syncd_alloc(c, size_t(counts[i]) * 4)));
      names.push_back("grad.layer" + std::to_string(kNames - i));
    }
    std::vector<syncd_handle> hs(kNames);
    for (int step = 0; step < 50; ++step) {
      for (int i = 0; i < kNames; ++i) {
        for (int64_t k = 0; k < counts[i]; k += 997) bufs[i][k] = float(rank + step);
        syncd_tensor t{names[i].c_str(), bufs[i], SYNCD_FLOAT32, 1, &counts[i], 0};
        CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &hs[i]) == SYNCD_OK, "%s", syncd_last_error());
      }
      for (int i = 0; i < kNames; ++i) {
        CHILD_CHECK(syncd_wait(c, hs[i], 60'000) == SYNCD_OK, "step %d %s: %s", step, names[i].c_str(), syncd_last_error());
        const float want = float(n * step + n * (n - 1) / 2);
        for (int64_t k = 0; k < counts[i]; k += 997)
          CHILD_CHECK(bufs[i][k] == want, "step %d %s[%ld] = %g, want %g", step, names[i].c_str(), (long)k, bufs[i][k], want);
      }
    }
    return 0;
  }, 300'000);
  ExpectAllSucceeded(st);
  const std::string json = cluster.node(1).StatusJson();
  ASSERT_FALSE(json.empty());
  const uint64_t hits = JsonNumber(json, "cache_hits"), misses = JsonNumber(json, "cache_misses");
  EXPECT_EQ(misses, 314u) << "each name goes through the coordinator once: " << json;
  EXPECT_EQ(hits, 314u * 49) << "every later step is agreed through the response cache: " << json;
  EXPECT_LT(JsonNumber(json, "fused_ops"), 314u * 50) << "ready tensors are fused: " << json;
}

// Exact results for fused, pipelined, many-name steps under a given daemon configuration.
void RunSteps(Cluster& cluster, int steps) {
  auto st = RunClusterRanks(cluster, [steps](syncd_client* c, int rank, int n) {
    const std::vector<int64_t> counts = {3, 100000, 7, 1 << 20, 4099, 300000};  // spans several 1 MiB segments
    std::vector<int32_t*> bufs;
    for (int64_t k : counts) bufs.push_back(static_cast<int32_t*>(syncd_alloc(c, size_t(k) * 4)));
    std::vector<syncd_handle> hs(counts.size());
    for (int step = 0; step < steps; ++step) {
      for (size_t i = 0; i < counts.size(); ++i) {
        for (int64_t k = 0; k < counts[i]; ++k) bufs[i][k] = int32_t(rank * 3 + step + k % 11);
        const std::string name = "w" + std::to_string(i);
        syncd_tensor t{name.c_str(), bufs[i], SYNCD_INT32, 1, &counts[i], 0};
        CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &hs[i]) == SYNCD_OK, "%s", syncd_last_error());
      }
      for (size_t i = 0; i < counts.size(); ++i) {
        CHILD_CHECK(syncd_wait(c, hs[i], 60'000) == SYNCD_OK, "step %d w%zu: %s", step, i, syncd_last_error());
        for (int64_t k = 0; k < counts[i]; ++k) {
          const int32_t want = int32_t(3 * n * (n - 1) / 2 + n * (step + k % 11));
          CHILD_CHECK(bufs[i][k] == want, "step %d w%zu[%ld] = %d, want %d", step, i, (long)k, bufs[i][k], want);
        }
      }
    }
    return 0;
  });
  ExpectAllSucceeded(st);
}

struct CoordCase {
  const char* coord;
  const char* cycle_start;
};
void PrintTo(const CoordCase& c, std::ostream* os) { *os << c.coord << "_" << c.cycle_start; }

class CoordModes : public ::testing::TestWithParam<CoordCase> {};

// Every coordination mode, with cycles on the timer and on work: exact results on 3 nodes, and
// the status shows what distinguishes the mode.
TEST_P(CoordModes, ExactResultsAndTheModeShowsInStatus) {
  const std::string coord = GetParam().coord;
  Cluster cluster(3, 2, {"--cores", "none", "--log-level", "warn", "--coord", coord, "--cycle-start",
                         GetParam().cycle_start, "--gs-period", "2"});
  RunSteps(cluster, 8);
  for (int node = 0; node < 3; ++node) {
    const std::string json = cluster.node(node).StatusJson();
    ASSERT_FALSE(json.empty());
    EXPECT_TRUE(Contains(json, "\"mode\":\"" + coord + "\"")) << json;
    EXPECT_GT(JsonNumber(json, "cycles"), 0u) << json;
    EXPECT_EQ(JsonNumber(json, "completion_events_dropped"), 0u) << "every completion counted: " << json;
    EXPECT_GT(JsonNumber(json, "straggler_collectives"), 0u) << "folded from the completion events: " << json;
    // The engine's cost per collective: what it completed here and the messages it sent for it.
    EXPECT_GT(JsonNumber(json, "collectives_completed"), 0u) << json;
    EXPECT_GT(JsonNumber(json, "engine_messages"), 0u) << json;
    const double blocked = JsonDouble(json, "blocked_ms_total");
    if (coord == "nbcs") EXPECT_EQ(blocked, 0.0) << "nbcs never blocks the engine: " << json;
    else EXPECT_GT(blocked, 0.0) << coord << " blocks in its collectives: " << json;
    if (coord == "gs") {
      const uint64_t agreements = JsonNumber(json, "sleep_agreements"), cycles = JsonNumber(json, "cycles");
      EXPECT_GT(agreements, 0u) << json;
      EXPECT_LE(agreements, cycles / 2 + 1) << "--gs-period 2 agrees every other cycle: " << json;
    } else {
      EXPECT_EQ(JsonNumber(json, "sleep_agreements"), 0u) << json;
    }
  }
}

// A quiet 2 x 2 job's steady loop of 8-byte allreduces costs each daemon at most two wake-ups
// per collective (issue 64's goal; today 0.1 spinning, 1.4 sleeping at once), exact each time;
// the status says how the engine waits and why: daemons that share every core (--cores none)
// see each other and sleep on the network.
TEST(EngineCost, AQuiet2x2LoopOf8ByteAllreducesWakesEachEngineAtMostTwicePerCollective) {
  Cluster cluster(2, 2, {"--cores", "none", "--log-level", "warn"});
  constexpr int kSteps = 2000;
  auto st = RunClusterRanks(cluster, [&](syncd_client* c, int rank, int n) {
    float v[2];
    auto step = [&](const char* name, int i) -> int {
      v[0] = float(rank + i);
      v[1] = 1;
      const int64_t count = 2;
      syncd_tensor t{name, v, SYNCD_FLOAT32, 1, &count, 0};
      syncd_handle h;
      CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
      CHILD_CHECK(syncd_wait(c, h, 60'000) == SYNCD_OK, "%s %d: %s", name, i, syncd_last_error());
      CHILD_CHECK(v[0] == float(n * i + n * (n - 1) / 2) && v[1] == float(n), "%s %d: %g %g", name, i, v[0], v[1]);
      return 0;
    };
    for (int i = 0; i < 100; ++i)
      if (step("warm", i) != 0) return 1;
    for (int i = 0; i < kSteps; ++i)
      if (step("steady", i) != 0) return 1;
    return 0;
  });
  ExpectAllSucceeded(st);
  // Over each daemon's whole life (its start, the warm-up and the idle time since count too).
  for (int node = 0; node < 2; ++node) {
    const std::string json = cluster.node(node).StatusJson();
    ASSERT_FALSE(json.empty());
    const double done = double(JsonNumber(json, "collectives_completed"));
    EXPECT_GE(done, kSteps + 100) << json;
    EXPECT_LE(double(JsonNumber(json, "engine_wakeups")) / done, 2.0) << "node " << node << ": " << json;
    EXPECT_TRUE(Contains(json, "\"engine_wait\":\"auto: sleeps")) << json;
    EXPECT_TRUE(Contains(json, "other daemon")) << json;
  }
}

// Whether a status reply shows a request of process set 0 executing.
bool Executing(const std::string& json) {
  const std::string key = "\"state\":\"executing\",\"count\":\"";
  const size_t at = json.find(key);
  return at != std::string::npos && json.compare(at + key.size(), 2, "0\"") != 0;
}

// Cycle N+1 is agreed while N's agreement runs: an allreduce submitted while a large one runs
// across the nodes is agreed meanwhile (the status counts such cycles), and both are exact.
TEST_P(CoordModes, AnAllreduceSubmittedWhileALargeOneRunsIsAgreedMeanwhile) {
  const std::string coord = GetParam().coord;
  Cluster cluster(2, 1, {"--cores", "none", "--log-level", "warn", "--coord", coord, "--cycle-start",
                         GetParam().cycle_start});
  auto st = RunClusterRanks(cluster, [&cluster](syncd_client* c, int rank, int n) {
    constexpr int64_t kLarge = 32 << 20, kSmall = 4;  // 128 MiB of int32: tens of ms across two daemons
    auto* large = static_cast<int32_t*>(syncd_alloc(c, size_t(kLarge) * 4));
    auto* small = static_cast<int32_t*>(syncd_alloc(c, size_t(kSmall) * 4));
    int32_t done = 0;
    constexpr int64_t kOne = 1;
    CHILD_CHECK(large != nullptr && small != nullptr, "alloc");
    const std::string run_dir = cluster.node(rank).run_dir();
    // A loaded machine can stretch how long the status takes to show the large one running until
    // little of its run is left, so up to four rounds, until both nodes have counted an overlap.
    for (int round = 0; round < 4; ++round) {
      for (int64_t k = 0; k < kLarge; ++k) large[k] = int32_t(rank + k % 7);
      for (int64_t k = 0; k < kSmall; ++k) small[k] = int32_t(10 * rank + k);
      syncd_handle hl, hs, hd;
      syncd_tensor l{"overlap.large", large, SYNCD_INT32, 1, &kLarge, 0};
      CHILD_CHECK(syncd_allreduce_async(c, &l, SYNCD_SUM, 1, 1, &hl) == SYNCD_OK, "%s", syncd_last_error());
      // The small one is submitted once the large one runs here (its cycle has ended), however
      // slow this machine is: a fixed sleep lost that race under a loaded CI.
      const double deadline = NowS() + 30;
      while (!Executing(SyncctlStatusJson(run_dir))) CHILD_CHECK(NowS() < deadline, "the large allreduce never ran");
      syncd_tensor s{"overlap.small", small, SYNCD_INT32, 1, &kSmall, 0};
      CHILD_CHECK(syncd_allreduce_async(c, &s, SYNCD_SUM, 1, 1, &hs) == SYNCD_OK, "%s", syncd_last_error());
      CHILD_CHECK(syncd_wait(c, hs, 60'000) == SYNCD_OK, "small: %s", syncd_last_error());
      CHILD_CHECK(syncd_wait(c, hl, 60'000) == SYNCD_OK, "large: %s", syncd_last_error());
      for (int64_t k = 0; k < kSmall; ++k)
        CHILD_CHECK(small[k] == int32_t(10 * n * (n - 1) / 2 + n * k), "small[%ld] = %d", (long)k, small[k]);
      for (int64_t k = 0; k < kLarge; ++k)
        CHILD_CHECK(large[k] == int32_t(n * (n - 1) / 2 + n * (k % 7)), "large[%ld] = %d", (long)k, large[k]);
      const uint64_t overlapped = JsonNumber(SyncctlStatusJson(run_dir), "overlapped_cycles");
      done = overlapped != UINT64_MAX && overlapped >= 1 ? 1 : 0;
      syncd_tensor d{"overlap.done", &done, SYNCD_INT32, 1, &kOne, 0};
      CHILD_CHECK(syncd_allreduce_async(c, &d, SYNCD_SUM, 1, 1, &hd) == SYNCD_OK && syncd_wait(c, hd, 60'000) == SYNCD_OK,
                  "done: %s", syncd_last_error());
      if (done == n) break;
    }
    return 0;
  });
  ExpectAllSucceeded(st);
  for (int node = 0; node < 2; ++node) {
    const std::string json = cluster.node(node).StatusJson();
    EXPECT_GE(JsonNumber(json, "overlapped_cycles"), 1u) << json;
  }
}

INSTANTIATE_TEST_SUITE_P(ManyNodesModes, CoordModes,
                         ::testing::Values(CoordCase{"negotiate", "timer"}, CoordCase{"negotiate", "work"},
                                           CoordCase{"gs", "timer"}, CoordCase{"gs", "work"},
                                           CoordCase{"nbcs", "timer"}, CoordCase{"nbcs", "work"}),
                         [](const auto& info) {
                           return std::string(info.param.coord) + "_" + info.param.cycle_start;
                         });

TEST(ManyNodesModes, UcxOverSharedMemoryGivesExactResults) {
  setenv("UCX_TLS", "shm,self", 1);  // read by the daemons at start
  Cluster cluster(3, 1, {"--cores", "none", "--log-level", "warn", "--ucx-peer-errors", "off"});
  unsetenv("UCX_TLS");
  RunSteps(cluster, 5);
}

// Also: the process set is the unit of coordination, and `syncctl status` has a section per set
// (only the global one for now) with the set's ranks, coordination and stragglers.
TEST(ManyNodesErrors, TheCoordinatorReportsWhichRanksOfWhichNodesAreLate) {
  Cluster cluster(2, 2, {"--cores", "none", "--log-level", "error", "--stall-warning-s", "1"});
  const std::string dir = cluster.node(0).run_dir();
  // Node 1 lags as a whole until rank 0 has read the status (a fixed lag raced slow syncctl runs
  // under TSan: node 1 had caught up before the second status was read).
  SharedFlag checked;
  auto st = RunClusterRanks(cluster, [&](syncd_client* c, int rank, int) {
    if (rank >= 2) checked.Wait(30'000);
    int32_t v = 1;
    int64_t count = 1;
    syncd_tensor t{"late.grad", &v, SYNCD_INT32, 1, &count, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
    if (rank == 0) {
      usleep(1'700'000);
      const std::string json = SyncctlStatusJson(dir);
      CHILD_CHECK(Contains(json, "\"name\":\"late.grad\"") && Contains(json, "\"missing_ranks\":[2,3]"),
                  "node 0's status while node 1 lags: %s", json.c_str());
      CHILD_CHECK(Contains(json, "\"process_sets\":[{\"id\":0,\"size\":4,"), "%s", json.c_str());
      const std::string text = SyncctlStatus(dir);
      const size_t section = text.find("\nprocess set 0 (global)   4 ranks on 2 nodes   pending tensors 0\n");
      CHILD_CHECK(section != std::string::npos, "no section for the global set:\n%s", text.c_str());
      const std::string body = text.substr(section);
      // Ranks 0 and 1's requests have left this node's table: the nodes have not agreed yet.
      CHILD_CHECK(Contains(body, "\n  requests 2 in flight   negotiating 2 (oldest "), "%s", text.c_str());
      CHILD_CHECK(Contains(body, "\n  STALLED  tensor 'late.grad' waiting ") &&
                      Contains(body, " s for ranks 2,3 (submitted by ranks 0,1)\n") &&
                      Contains(body, "\n  coord    negotiate") && Contains(body, "\n  cache    hits"),
                  "the global set's section lacks its stall or coordination:\n%s", text.c_str());
      checked.Set();
    }
    CHILD_CHECK(syncd_wait(c, h, 20'000) == SYNCD_OK && v == 4, "%s", syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST(ManyNodesErrors, MismatchAcrossNodesFailsEveryRankWithTheSameMessage) {
  Cluster cluster(2, 2, {"--cores", "none", "--log-level", "error"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int) {
    float buf[8] = {};
    const int64_t count = rank >= 2 ? 8 : 4;  // node 1 disagrees with node 0
    const int rc = Allreduce(c, "grad.w", buf, SYNCD_FLOAT32, count, SYNCD_SUM);
    const std::string msg = syncd_last_error();
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH, "rank %d: %s: %s", rank, syncd_status_name(rc), msg.c_str());
    CHILD_CHECK(msg == "tensor 'grad.w': mismatched shape across ranks: [4] on ranks 0,1; [8] on ranks 2,3",
                "rank %d: %s", rank, msg.c_str());
    // The job goes on: a good collective afterwards works.
    int32_t v = 1;
    CHILD_CHECK(Allreduce(c, "after", &v, SYNCD_INT32, 1, SYNCD_SUM) == SYNCD_OK && v == 4, "after: %s", syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST(ManyNodesErrors, DisagreementInsideOneNodeReachesEveryNode) {
  Cluster cluster(2, 2, {"--cores", "none", "--log-level", "error"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int) {
    float buf[4] = {};
    const int rc = Allreduce(c, "grad.b", buf, rank == 1 ? SYNCD_FLOAT64 : SYNCD_FLOAT32, rank == 1 ? 2 : 4, SYNCD_SUM);
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH, "rank %d: %s: %s", rank, syncd_status_name(rc), syncd_last_error());
    CHILD_CHECK(Contains(syncd_last_error(), "'grad.b'") && Contains(syncd_last_error(), "mismatched dtype") &&
                    Contains(syncd_last_error(), "rank 1"),
                "rank %d: %s", rank, syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

// The victim is the coordinator (node 0, which also served the rendezvous) or another node; the
// loss is noticed through pidfds (same host, the default) or UCX's endpoint error handling.
struct KillCase {
  int victim;
  const char* detection;  // --ucx-peer-errors
};
void PrintTo(const KillCase& k, std::ostream* os) { *os << "node" << k.victim << "_" << k.detection; }
class KilledPeer : public ::testing::TestWithParam<KillCase> {};

TEST_P(KilledPeer, EveryClientFailsNamingTheNodeWithinFiveSeconds) {
  const int victim = GetParam().victim;
  Cluster cluster(3, 1, {"--cores", "none", "--log-level", "error", "--ucx-peer-errors", GetParam().detection});
  auto* t_kill = static_cast<std::atomic<double>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  t_kill->store(0);
  NextJob();
  std::vector<int> survivors_nodes;
  for (int node = 0; node < 3; ++node)
    if (node != victim) survivors_nodes.push_back(node);
  std::vector<pid_t> survivors;
  for (int node : survivors_nodes) {
    const std::string dir = cluster.node(node).run_dir();
    survivors.push_back(Spawn([&, node, dir] {
      syncd_client* c = AttachAs(dir, node, 3, 0, 1);
      CHILD_CHECK(c != nullptr, "attach");
      int32_t v = 1;
      const int rc = Allreduce(c, "never", &v, SYNCD_INT32, 1, SYNCD_SUM);  // the victim's rank never submits
      const double delay = NowS() - t_kill->load();
      CHILD_CHECK(rc == SYNCD_ERR_RANK_LOST, "rank %d: %s: %s", node, syncd_status_name(rc), syncd_last_error());
      CHILD_CHECK(Contains(syncd_last_error(), "node " + std::to_string(victim)), "rank %d: %s", node, syncd_last_error());
      CHILD_CHECK(delay < 5.0, "rank %d: error %.2f s after the kill", node, delay);
      syncd_shutdown(c);
      return 0;
    }));
  }
  usleep(500'000);
  t_kill->store(NowS());
  cluster.node(victim).Kill(SIGKILL);
  for (pid_t p : survivors) {
    const int s = WaitChild(p, 20'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s;
  }
  // The survivors stay inspectable and say what happened, then exit cleanly when told.
  for (int node : survivors_nodes) {
    const std::string json = cluster.node(node).StatusJson();
    EXPECT_TRUE(Contains(json, "node " + std::to_string(victim))) << json;
    cluster.node(node).Kill(SIGTERM);
    const int s = cluster.node(node).Wait(10'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "node " << node << " status " << s;
  }
  munmap(t_kill, 4096);
}

INSTANTIATE_TEST_SUITE_P(ManyNodesErrors, KilledPeer,
                         ::testing::Values(KillCase{0, "auto"}, KillCase{2, "auto"}, KillCase{2, "on"}),
                         [](const auto& info) {
                           return "node" + std::to_string(info.param.victim) + "_" + info.param.detection;
                         });

// Killed while the daemons move data (not while they negotiate): the tensors in execution fail too.
TEST(ManyNodesErrors, PeerKilledMidExecutionFailsTheTensorsInFlight) {
  Cluster cluster(3, 1, {"--cores", "none", "--log-level", "error"});
  auto* t_kill = static_cast<std::atomic<double>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  t_kill->store(0);
  NextJob();
  std::vector<pid_t> ranks;
  for (int node = 0; node < 3; ++node) {
    const std::string dir = cluster.node(node).run_dir();
    ranks.push_back(Spawn([&, node, dir] {
      syncd_client* c = AttachAs(dir, node, 3, 0, 1);
      CHILD_CHECK(c != nullptr, "attach");
      const int64_t count = 8 << 20;  // 32 MiB: tens of milliseconds on the wire
      auto* buf = static_cast<int32_t*>(syncd_alloc(c, size_t(count) * 4));
      CHILD_CHECK(buf != nullptr, "alloc");
      for (int step = 0;; ++step) {
        const int rc = Allreduce(c, "big", buf, SYNCD_INT32, count, SYNCD_SUM);
        if (rc == SYNCD_OK) continue;
        if (node == 2) return 0;  // its own daemon is gone
        const double delay = NowS() - t_kill->load();
        CHILD_CHECK(rc == SYNCD_ERR_RANK_LOST, "rank %d step %d: %s: %s", node, step, syncd_status_name(rc),
                    syncd_last_error());
        CHILD_CHECK(Contains(syncd_last_error(), "node 2"), "rank %d: %s", node, syncd_last_error());
        CHILD_CHECK(t_kill->load() > 0 && delay < 5.0, "rank %d: error %.2f s after the kill", node, delay);
        return 0;
      }
    }));
  }
  usleep(1'500'000);
  // The next execution: both survivors are then past negotiation and moving data.
  const std::string before = cluster.node(0).StatusJson();
  t_kill->store(NowS());
  cluster.node(2).Kill(SIGKILL);
  for (pid_t p : ranks) {
    const int s = WaitChild(p, 20'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s;
  }
  EXPECT_GT(JsonNumber(before, "allreduce_ops"), 0u) << "the ranks were allreducing before the kill: " << before;
  munmap(t_kill, 4096);
}

// The normal end of a job: ranks detach, then every daemon is stopped at once (syncrun, a Slurm
// epilog). Nobody reports a lost node or an aborted job.
TEST(ManyNodes, StoppingEveryDaemonAfterTheJobIsNotAFailure) {
  Cluster cluster(3, 1, {"--cores", "none", "--log-level", "info"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    return CheckedAllreduce(c, rank, n, SYNCD_FLOAT32, SYNCD_SUM, 1000, "last");
  });
  ExpectAllSucceeded(st);
  // Epilogs on different nodes do not run in step: one daemon is gone well before the others.
  cluster.node(2).Kill(SIGTERM);
  EXPECT_NE(cluster.node(2).Wait(10'000), -1);
  usleep(300'000);
  EXPECT_TRUE(Contains(cluster.node(0).StatusJson(), "node 2 left the job")) << cluster.node(0).StatusJson();
  for (int node = 0; node < 2; ++node) cluster.node(node).Kill(SIGTERM);
  for (int node = 0; node < 3; ++node) {
    const int s = node == 2 ? 0 : cluster.node(node).Wait(10'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "node " << node << " status " << s;
    const std::string log = cluster.node(node).Log();
    EXPECT_FALSE(Contains(log, "[error]")) << "node " << node << ":\n" << log;
    EXPECT_FALSE(Contains(log, "aborted")) << "node " << node << ":\n" << log;
  }
}

// negotiate blocks the engine in each cycle's collectives; a peer that stops answering (here
// SIGSTOP) must not keep a daemon from shutting down when told (once the drain timeout passed).
TEST(ManyNodes, ABlockedDaemonStillStopsWhenTold) {
  Cluster cluster(2, 1, {"--cores", "none", "--log-level", "warn", "--coord", "negotiate", "--drain-timeout", "1"});
  cluster.node(1).Kill(SIGSTOP);
  usleep(300'000);  // node 0 is now blocked in a cycle that node 1 never joins
  cluster.node(0).Kill(SIGTERM);
  const int s = cluster.node(0).Wait(5'000);
  cluster.node(1).Kill(SIGCONT);
  EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s;
}

TEST(ManyNodesRendezvous, WrongTokenDuplicateRankAndMissingNodesAreNamed) {
  const std::string rv = "127.0.0.1:" + std::to_string(FreePort());
  auto args = [&](int rank, const std::string& token, const char* timeout) {
    return std::vector<std::string>{"--nodes", "3", "--node-rank", std::to_string(rank), "--rendezvous", rv,
                                    "--job-token", token, "--join-timeout", timeout, "--cores", "none",
                                    "--log-level", "error"};
  };
  Daemon node0(1, args(0, "right", "3"), false);
  usleep(200'000);
  Daemon intruder(1, args(1, "wrong", "3"), false);
  Daemon node1(1, args(1, "right", "3"), false);
  usleep(300'000);
  Daemon duplicate(1, args(1, "right", "3"), false);
  // Node 2 never comes: node 0 and node 1 give up after the deadline, naming it.
  for (Daemon* d : {&intruder, &duplicate, &node0, &node1}) {
    const int s = d->Wait(15'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) != 0) << "daemon " << d->run_dir() << " status " << s;
  }
}

// A daemon of another syncd (another daemon protocol) is refused at the rendezvous with both
// versions named, to it and in node 0's log; node 0 then gives up on the node that never joined.
TEST(ManyNodesRendezvous, ADaemonOfAnotherProtocolIsRefusedNamingBothVersions) {
  const std::string rv = "127.0.0.1:" + std::to_string(FreePort());
  Daemon node0(1, {"--nodes", "2", "--node-rank", "0", "--rendezvous", rv, "--join-timeout", "3", "--cores", "none",
                   "--log-level", "info"},
               false);
  control::JoinRequest old;
  old.set_node_rank(1);
  old.set_nodes(2);
  old.set_local_size(1);
  old.set_ucx_address("not used");
  old.set_hostname("old-host");
  old.set_pid(4242);
  old.set_wire_version(kWireVersion - 1);
  old.set_daemon_version("0.0.9");
  StatusOr<JobTable> joined = JoinJob(rv, old, std::chrono::milliseconds(3000));
  ASSERT_FALSE(joined.ok());
  const std::string want = "node 1 (old-host, pid 4242, from ";
  const std::string versions = "runs syncd 0.0.9 (daemon protocol " + std::to_string(kWireVersion - 1) +
                               "); node 0 runs syncd " + kVersionString + " (daemon protocol " +
                               std::to_string(kWireVersion) + "): every daemon of a job must speak the same protocol";
  EXPECT_TRUE(Contains(joined.status().message(), want)) << joined.status().ToString();
  EXPECT_TRUE(Contains(joined.status().message(), versions)) << joined.status().ToString();
  const int s = node0.Wait(15'000);
  EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) != 0) << "status " << s;
  EXPECT_TRUE(Contains(node0.Log(), versions)) << node0.Log();
  EXPECT_TRUE(Contains(node0.Log(), "nodes 1 of 2 did not join in time")) << node0.Log();
}

}  // namespace
}  // namespace syncd::testing
