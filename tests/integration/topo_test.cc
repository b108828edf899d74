// TOPO end to end: graph registration from the C client, the plan hash agreed across nodes,
// plan-driven steps without a single coordination message, fallback negotiation for names
// outside the plan, and the errors: a graph the planner refuses, plans that differ between ranks
// or nodes, a tensor that breaks the plan. Then the deadlock-freedom test of every mode.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <string>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/integration/model_graph.h"

namespace syncd::testing {
namespace {

const std::vector<int64_t> kCounts = {3, 1000, 70000, 17, 300000, 5, 4096, 250000};
const std::vector<int64_t> kSmall = {3, 100, 1000, 17, 5, 640};

// One step: every gradient submitted (in `order`, with `delay_us` before each), then waited for
// and checked. Values depend on rank, step and element so that a mixed-up buffer shows.
int Step(syncd_client* c, int rank, int n, int step, const std::vector<int32_t*>& bufs, const std::vector<int>& order,
         const std::vector<int>& delay_us) {
  std::vector<syncd_handle> hs(kCounts.size());
  for (size_t j = 0; j < order.size(); ++j) {
    const int i = order[j];
    if (!delay_us.empty() && delay_us[j] > 0) usleep(useconds_t(delay_us[j]));
    for (int64_t k = 0; k < kCounts[i]; ++k) bufs[i][k] = int32_t(rank * 7 + step + i + k % 13);
    const std::string name = "grad." + std::to_string(i);
    syncd_tensor t{name.c_str(), bufs[i], SYNCD_INT32, 1, &kCounts[i], 0};
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &hs[i]) == SYNCD_OK, "%s", syncd_last_error());
  }
  for (int i : order) {
    CHILD_CHECK(syncd_wait(c, hs[i], 60'000) == SYNCD_OK, "rank %d step %d grad.%d: %s", rank, step, i,
                syncd_last_error());
    for (int64_t k = 0; k < kCounts[i]; k += (k < 64 ? 1 : 61)) {
      const int32_t want = int32_t(7 * n * (n - 1) / 2 + n * (step + i + k % 13));
      CHILD_CHECK(bufs[i][k] == want, "rank %d step %d grad.%d[%ld] = %d, want %d", rank, step, i, (long)k, bufs[i][k],
                  want);
    }
  }
  return 0;
}

std::vector<int32_t*> Buffers(syncd_client* c) {
  std::vector<int32_t*> bufs;
  for (int64_t k : kCounts) bufs.push_back(static_cast<int32_t*>(syncd_alloc(c, size_t(k) * 4)));
  return bufs;
}

std::vector<int> InOrder() {
  std::vector<int> order(kCounts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(order.size() - 1 - i);  // backward: last layer first
  return order;
}

// Shared by the test and its forked ranks.
struct Shared {
  std::atomic<int> arrived{0};
  std::atomic<int> go{0};
  uint64_t messages[8] = {};
  uint64_t steps[8] = {};
};

Shared* MapShared() {
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return new (p) Shared();
}

TEST(Topo, PlanDrivenStepsAreExactAndSendNoCoordinationMessages) {
  Cluster cluster(3, 2, {"--cores", "none", "--log-level", "warn", "--coord", "topo", "--fusion-threshold", "1M"});
  std::vector<std::string> dirs;
  for (int i = 0; i < 3; ++i) dirs.push_back(cluster.node(i).run_dir());
  Shared* shared = MapShared();
  constexpr int kWarmup = 3, kSteps = 50;
  auto st = RunClusterRanks(cluster, [&](syncd_client* c, int rank, int n) {
    ModelGraph model(kCounts);
    uint64_t hash = 0;
    CHILD_CHECK(syncd_register_graph(c, &model.graph, 30'000, &hash) == SYNCD_OK, "rank %d: %s", rank,
                syncd_last_error());
    CHILD_CHECK(hash != 0, "no plan hash");
    const std::vector<int32_t*> bufs = Buffers(c);
    for (int step = 0; step < kWarmup; ++step)
      if (Step(c, rank, n, step, bufs, InOrder(), {}) != 0) return 1;
    // Everyone is past the warm-up: rank 0 reads every node's counters, then lets all go on.
    shared->arrived.fetch_add(1);
    if (rank == 0) {
      while (shared->arrived.load() < n) usleep(1000);
      usleep(100'000);
      for (size_t i = 0; i < dirs.size(); ++i) {
        const std::string json = SyncctlStatusJson(dirs[i]);
        shared->messages[i] = JsonNumber(json, "coordination_messages");
        shared->steps[i] = JsonNumber(json, "steps");
      }
      shared->go.store(1);
    }
    while (shared->go.load() == 0) usleep(1000);
    for (int step = kWarmup; step < kWarmup + kSteps; ++step)
      if (Step(c, rank, n, step, bufs, InOrder(), {}) != 0) return 1;
    return 0;
  });
  ExpectAllSucceeded(st);
  std::string hash;
  for (int i = 0; i < 3; ++i) {
    const std::string json = cluster.node(i).StatusJson();
    ASSERT_FALSE(json.empty());
    EXPECT_EQ(JsonNumber(json, "coordination_messages"), shared->messages[i])
        << "node " << i << ": steps after the warm-up sent coordination messages: " << json;
    EXPECT_EQ(JsonNumber(json, "steps") - shared->steps[i], uint64_t(kSteps)) << json;
    EXPECT_EQ(JsonNumber(json, "fallback_tensors"), 0u) << json;
    EXPECT_TRUE(Contains(json, "\"in_use\":true")) << json;
    const size_t at = json.find("\"plan_hash\":\"");
    ASSERT_NE(at, std::string::npos) << json;
    const std::string h = json.substr(at + 13, 16);
    if (i == 0) hash = h;
    EXPECT_EQ(h, hash) << "every node holds the same plan";
    EXPECT_GT(JsonNumber(json, "plan_groups"), 1u) << "1 MiB threshold: several groups: " << json;
    EXPECT_LT(JsonNumber(json, "plan_groups"), kCounts.size()) << "small gradients are fused: " << json;
  }
  munmap(shared, sizeof(Shared));
}

TEST(Topo, NamesOutsideThePlanAreNegotiatedAndCounted) {
  Cluster cluster(2, 2, {"--cores", "none", "--log-level", "warn", "--coord", "topo"});
  auto st = RunClusterRanks(cluster, [&](syncd_client* c, int rank, int n) {
    ModelGraph model(kCounts);
    CHILD_CHECK(syncd_register_graph(c, &model.graph, 30'000, nullptr) == SYNCD_OK, "%s", syncd_last_error());
    const std::vector<int32_t*> bufs = Buffers(c);
    for (int step = 0; step < 3; ++step) {
      if (Step(c, rank, n, step, bufs, InOrder(), {}) != 0) return 1;
      int64_t one = 1;
      int32_t v = rank;
      syncd_tensor t{"loss.metric", &v, SYNCD_INT32, 1, &one, 0};
      syncd_handle h;
      CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
      CHILD_CHECK(syncd_wait(c, h, 30'000) == SYNCD_OK && v == n * (n - 1) / 2, "loss.metric: %d %s", v,
                  syncd_last_error());
    }
    return 0;
  });
  ExpectAllSucceeded(st);
  for (int i = 0; i < 2; ++i) {
    const std::string json = cluster.node(i).StatusJson();
    EXPECT_EQ(JsonNumber(json, "fallback_tensors"), 3u) << json;
    EXPECT_EQ(JsonNumber(json, "steps"), 3u) << json;
    EXPECT_GT(JsonNumber(json, "coordination_messages"), 0u) << json;
  }
}

TEST(Topo, OneNodeRunsThePlanToo) {
  Daemon d(2, {"--cores", "none", "--log-level", "warn", "--coord", "topo"});
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) {
    ModelGraph model(kCounts);
    CHILD_CHECK(syncd_register_graph(c, &model.graph, 30'000, nullptr) == SYNCD_OK, "%s", syncd_last_error());
    const std::vector<int32_t*> bufs = Buffers(c);
    for (int step = 0; step < 5; ++step)
      if (Step(c, rank, n, step, bufs, InOrder(), {}) != 0) return 1;
    return 0;
  });
  ExpectAllSucceeded(st);
  EXPECT_EQ(JsonNumber(d.StatusJson(), "steps"), 5u) << d.StatusJson();
}

// Registers the model with `counts`; the registration must fail with a mismatch whose message
// holds every one of `needles`.
int RegisterExpectingMismatch(syncd_client* c, int rank, const std::vector<int64_t>& counts,
                              std::initializer_list<const char*> needles, int gpu_tensor = -1) {
  ModelGraph model(counts, SYNCD_INT32, gpu_tensor);
  const int rc = syncd_register_graph(c, &model.graph, 30'000, nullptr);
  const std::string msg = syncd_last_error();
  CHILD_CHECK(rc == SYNCD_ERR_MISMATCH, "rank %d: %s: %s", rank, syncd_status_name(rc), msg.c_str());
  for (const char* n : needles) CHILD_CHECK(Contains(msg, n), "rank %d: '%s' not in: %s", rank, n, msg.c_str());
  return 0;
}

TEST(TopoErrors, AGraphThePlannerRefusesFailsWithTheOperationNamed) {
  Daemon d(1, {"--cores", "none", "--log-level", "error", "--coord", "topo"});
  auto st = RunRanks(d.run_dir(), 1, [](syncd_client* c, int, int) {
    const syncd_compression d = SYNCD_COMPRESSION_DEFAULT;
    syncd_graph_op ops[2] = {{"matmul", nullptr, SYNCD_FLOAT32, 0, SYNCD_SUM, SYNCD_MEMORY_HOST, d, 0},
                             {"relu", nullptr, SYNCD_FLOAT32, 0, SYNCD_SUM, SYNCD_MEMORY_HOST, d, 0}};
    const uint32_t edges[4] = {0, 1, 1, 0};
    const uint32_t fetch = 1;
    syncd_graph g{ops, 2, edges, 2, &fetch, 1};
    const int rc = syncd_register_graph(c, &g, 10'000, nullptr);
    CHILD_CHECK(rc == SYNCD_ERR_INVALID, "%s", syncd_status_name(rc));
    CHILD_CHECK(Contains(syncd_last_error(), "dependency cycle") && Contains(syncd_last_error(), "'matmul'"), "%s",
                syncd_last_error());
    const uint32_t bad_edge[2] = {0, 7};
    syncd_graph g2{ops, 2, bad_edge, 1, &fetch, 1};
    CHILD_CHECK(syncd_register_graph(c, &g2, 10'000, nullptr) == SYNCD_ERR_INVALID, "edge");
    CHILD_CHECK(Contains(syncd_last_error(), "edge 0 -> 7"), "%s", syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST(TopoErrors, PlansThatDifferAcrossNodesFailTheJobNamingTheNodes) {
  Cluster cluster(3, 1, {"--cores", "none", "--log-level", "error", "--coord", "topo"});
  auto st = RunClusterRanks(cluster, [&](syncd_client* c, int rank, int) {
    std::vector<int64_t> counts = kCounts;
    if (rank == 1) counts[2] += 1;  // node 1 built its model differently
    if (RegisterExpectingMismatch(c, rank, counts, {"TOPO plans differ across nodes", "on node 0 2", "on node 1"}))
      return 1;
    // The job is over: later collectives fail at once, naming why.
    int32_t v = 1;
    int64_t one = 1;
    syncd_tensor t{"after", &v, SYNCD_INT32, 1, &one, 0};
    syncd_handle h;
    int rc2 = syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h);
    if (rc2 == SYNCD_OK) rc2 = syncd_wait(c, h, 10'000);
    CHILD_CHECK(rc2 != SYNCD_OK && Contains(syncd_last_error(), "TOPO plans differ"), "rank %d after: %s", rank,
                syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST(TopoErrors, PlansThatDifferBetweenRanksOfANodeAreNamedOnEveryRank) {
  Cluster cluster(2, 2, {"--cores", "none", "--log-level", "error", "--coord", "topo"});
  auto st = RunClusterRanks(cluster, [&](syncd_client* c, int rank, int) {
    std::vector<int64_t> counts = kCounts;
    if (rank == 3) counts.pop_back();
    return RegisterExpectingMismatch(c, rank, counts, {"mismatched TOPO plan", "on rank 2", "on rank 3"});
  });
  ExpectAllSucceeded(st);
}

// A model whose gradient is on the GPU on one node and in host memory on the others: without the
// memory in the plan, the nodes would agree on the plan and then wait for each other forever.
TEST(TopoErrors, ATensorOnTheGpuOnOneNodeAndInHostMemoryOnAnotherIsRefusedAtRegistration) {
  Cluster cluster(2, 1, {"--cores", "none", "--log-level", "error", "--coord", "topo"});
  auto st = RunClusterRanks(cluster, [&](syncd_client* c, int rank, int) {
    return RegisterExpectingMismatch(
        c, rank, kCounts, {"TOPO plans differ across nodes", "1 in GPU memory) on node 1", "(8 tensors, 1 group) on node 0"},
        rank == 1 ? 2 : -1);
  });
  ExpectAllSucceeded(st);
}

TEST(TopoErrors, ATensorOnTheGpuOnOneRankOfANodeIsNamedOnEveryRank) {
  Cluster cluster(1, 2, {"--cores", "none", "--log-level", "error", "--coord", "topo"});
  auto st = RunClusterRanks(cluster, [&](syncd_client* c, int rank, int) {
    return RegisterExpectingMismatch(c, rank, kCounts, {"mismatched TOPO plan", "1 in GPU memory) on rank 1"},
                                     rank == 1 ? 0 : -1);
  });
  ExpectAllSucceeded(st);
}

// Every rank says grad.0 is on the GPU, and rank 1 submits it from host memory: the job fails
// naming the tensor and both memories instead of running a host tensor in a GPU group.
TEST(TopoErrors, ATensorSubmittedFromTheOtherMemoryFailsEveryRank) {
  Cluster cluster(2, 1, {"--cores", "none", "--log-level", "error", "--coord", "topo"});
  auto st = RunClusterRanks(cluster, [&](syncd_client* c, int rank, int) {
    ModelGraph model(kCounts, SYNCD_INT32, /*gpu_tensor=*/0);
    int rc = syncd_register_graph(c, &model.graph, 30'000, nullptr);
    if (rc == SYNCD_OK && rank == 1) {
      std::vector<int32_t> buf(64);
      const int64_t count = kCounts[0];
      syncd_tensor t{"grad.0", buf.data(), SYNCD_INT32, 1, &count, 0};
      syncd_handle h;
      rc = syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h);
      if (rc == SYNCD_OK) rc = syncd_wait(c, h, 20'000);
      CHILD_CHECK(rc != SYNCD_OK, "a host tensor ran in the GPU tensor's place");
      CHILD_CHECK(Contains(syncd_last_error(), "'grad.0'") &&
                      Contains(syncd_last_error(), "host memory, the plan says GPU memory"),
                  "%s", syncd_last_error());
      return 0;
    }
    if (rc == SYNCD_OK) {  // rank 0: the job ends; anything it submits fails, naming rank 1's tensor
      int32_t v = 1;
      int64_t one = 1;
      syncd_tensor t{"after", &v, SYNCD_INT32, 1, &one, 0};
      syncd_handle h;
      rc = syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h);
      if (rc == SYNCD_OK) rc = syncd_wait(c, h, 20'000);
    }
    CHILD_CHECK(rc != SYNCD_OK && Contains(syncd_last_error(), "grad.0"), "rank %d: %s", rank, syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST(TopoErrors, ATensorThatBreaksThePlanFailsEveryRank) {
  Cluster cluster(2, 1, {"--cores", "none", "--log-level", "error", "--coord", "topo"});
  auto st = RunClusterRanks(cluster, [&](syncd_client* c, int rank, int) {
    ModelGraph model(kCounts);
    int rc = syncd_register_graph(c, &model.graph, 30'000, nullptr);
    // Node 1 may finish the registration cycle, take rank 1's bad tensor and abort the job before
    // node 0 has finished that cycle: then rank 0's registration is what fails.
    if (rc == SYNCD_OK) {
      std::vector<int32_t> buf(64);
      const int64_t count = rank == 1 ? 4 : 3;  // the plan says grad.0 has 3 elements
      syncd_tensor t{"grad.0", buf.data(), SYNCD_INT32, 1, &count, 0};
      syncd_handle h;
      rc = syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h);
      if (rc == SYNCD_OK) rc = syncd_wait(c, h, 20'000);
    }
    CHILD_CHECK(rc != SYNCD_OK, "rank %d: a tensor against the plan ran", rank);
    CHILD_CHECK(Contains(syncd_last_error(), "grad.0") && Contains(syncd_last_error(), "TOPO plan"), "rank %d: %s",
                rank, syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

// Deadlock freedom: 4 daemons x 2 clients; every rank submits the (logically concurrent)
// gradients in its own random order with random delays, 1,000 steps; results exact, no hang.
class EveryMode : public ::testing::TestWithParam<const char*> {};

TEST_P(EveryMode, RandomOrdersAndDelaysNeverHang) {
  Cluster cluster(4, 2, {"--cores", "none", "--log-level", "warn", "--coord", GetParam(), "--fusion-threshold", "1M"});
  constexpr int kSteps = 1000;
  auto st = RunClusterRanks(cluster, [&](syncd_client* c, int rank, int n) {
    ModelGraph model(kSmall);
    CHILD_CHECK(syncd_register_graph(c, &model.graph, 60'000, nullptr) == SYNCD_OK, "%s", syncd_last_error());
    std::vector<int32_t*> bufs;
    for (int64_t k : kSmall) bufs.push_back(static_cast<int32_t*>(syncd_alloc(c, size_t(k) * 4)));
    std::mt19937 rng(uint32_t(rank * 7919 + 17));
    std::vector<int> order(kSmall.size());
    std::vector<int> delay(kSmall.size());
    std::vector<syncd_handle> hs(kSmall.size());
    for (int step = 0; step < kSteps; ++step) {
      for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
      std::shuffle(order.begin(), order.end(), rng);
      for (int i : order) {
        if (rng() % 8 == 0) usleep(rng() % 300);
        for (int64_t k = 0; k < kSmall[i]; ++k) bufs[i][k] = int32_t(rank + step * 3 + i + k);
        const std::string name = "grad." + std::to_string(i);
        syncd_tensor t{name.c_str(), bufs[i], SYNCD_INT32, 1, &kSmall[i], 0};
        CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &hs[i]) == SYNCD_OK, "%s", syncd_last_error());
      }
      std::shuffle(order.begin(), order.end(), rng);
      for (int i : order) {
        CHILD_CHECK(syncd_wait(c, hs[i], 30'000) == SYNCD_OK, "rank %d step %d grad.%d: %s", rank, step, i,
                    syncd_last_error());
        for (int64_t k = 0; k < kSmall[i]; ++k) {
          const int32_t want = int32_t(n * (n - 1) / 2 + n * (step * 3 + i + k));
          CHILD_CHECK(bufs[i][k] == want, "rank %d step %d grad.%d[%ld] = %d, want %d", rank, step, i, (long)k,
                      bufs[i][k], want);
        }
      }
    }
    return 0;
  }, 110'000);
  ExpectAllSucceeded(st);
  if (std::string(GetParam()) == "topo") {
    const std::string json = cluster.node(3).StatusJson();
    EXPECT_EQ(JsonNumber(json, "steps"), uint64_t(kSteps)) << json;
    EXPECT_EQ(JsonNumber(json, "fallback_tensors"), 0u) << json;
  }
}

INSTANTIATE_TEST_SUITE_P(Deadlock, EveryMode, ::testing::Values("negotiate", "gs", "nbcs", "topo"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace syncd::testing
