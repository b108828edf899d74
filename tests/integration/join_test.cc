// Join (Horovod's hvd.join) through real daemons: ranks with uneven amounts of work finish
// without a hang, joined ranks stand in with nothing of their own (zeros, no rows), the last rank
// to join is reported to every rank, on one node and across nodes (a node whose ranks all joined
// stands in through the coordinator and through the response cache).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/integration/model_graph.h"

namespace syncd::testing {
namespace {

struct Shape {
  int nodes, local;
};

class Join : public ::testing::TestWithParam<Shape> {};

int Steps(int rank) { return 2 * (rank + 1); }  // rank 3 works longest

TEST_P(Join, UnevenWorkFinishesAndJoinedRanksStandIn) {
  Cluster cluster(GetParam().nodes, GetParam().local, {"--cores", "none", "--log-level", "warn"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    for (int k = 0; k < Steps(rank); ++k) {
      int active = 0;
      for (int r = 0; r < n; ++r) active += Steps(r) > k;
      // The same name every step (cached after the first) and a new one.
      for (const std::string& name : {std::string("grad"), "step." + std::to_string(k)}) {
        float v[3] = {1, 1, 1};
        int64_t three = 3;
        syncd_tensor t{name.c_str(), v, SYNCD_FLOAT32, 1, &three, 0};
        syncd_handle h;
        CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK && syncd_wait(c, h, 60'000) == SYNCD_OK,
                    "%s at step %d: %s", name.c_str(), k, syncd_last_error());
        CHILD_CHECK(v[0] == float(active), "%s at step %d: %g, %d ranks still working", name.c_str(), k, v[0], active);
      }
      // An allgather: joined ranks add no rows.
      const std::string ag = "rows." + std::to_string(k);
      int32_t mine = rank;
      int64_t one = 1;
      syncd_tensor tg{ag.c_str(), &mine, SYNCD_INT32, 1, &one, 0};
      syncd_result res{};
      syncd_handle h;
      CHILD_CHECK(syncd_allgather_async(c, &tg, &res, &h) == SYNCD_OK && syncd_wait(c, h, 60'000) == SYNCD_OK, "%s: %s",
                  ag.c_str(), syncd_last_error());
      CHILD_CHECK(res.bytes == sizeof(int32_t) * size_t(active), "%s: %lu bytes for %d ranks", ag.c_str(),
                  (unsigned long)res.bytes, active);
      for (int r = 0, at = 0; r < n; ++r) {
        CHILD_CHECK(res.rows[r] == (Steps(r) > k ? 1 : 0), "%s: rank %d's rows", ag.c_str(), r);
        if (Steps(r) > k) CHILD_CHECK(static_cast<const int32_t*>(res.data)[at++] == r, "%s: row of rank %d", ag.c_str(), r);
      }
      syncd_release_result(c, &res);
    }
    // A broadcast from a rank that has joined fails on the ranks still working.
    if (rank == n - 1) {
      int64_t one = 1;
      double x = 0;
      syncd_tensor t{"from.joined", &x, SYNCD_FLOAT64, 1, &one, 0};
      syncd_handle h;
      CHILD_CHECK(syncd_broadcast_async(c, &t, 0, &h) == SYNCD_OK, "%s", syncd_last_error());
      const int rc = syncd_wait(c, h, 60'000);
      CHILD_CHECK(rc == SYNCD_ERR_INVALID && strstr(syncd_last_error(), "has joined") != nullptr,
                  "broadcast from a joined root: %s (%s)", syncd_status_name(rc), syncd_last_error());
    }
    int last = -1;
    CHILD_CHECK(syncd_join(c, 60'000, &last) == SYNCD_OK, "join: %s", syncd_last_error());
    CHILD_CHECK(last == n - 1, "last rank to join: %d", last);
    // After the join every rank is back: a second round of the same, and a second join.
    float v = 1;
    int64_t one = 1;
    syncd_tensor t{"after", &v, SYNCD_FLOAT32, 1, &one, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK && syncd_wait(c, h, 60'000) == SYNCD_OK &&
                    v == float(n),
                "after the join: %s", syncd_last_error());
    if (rank == 0) usleep(100'000);  // rank 0 joins last this time
    CHILD_CHECK(syncd_join(c, 60'000, &last) == SYNCD_OK && last == 0, "second join: %d %s", last, syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Join, ::testing::Values(Shape{1, 4}, Shape{2, 2}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return std::to_string(i.param.nodes) + "x" + std::to_string(i.param.local);
                         });

// Under --coord topo: the plan's groups run with no negotiation, so a node whose ranks all joined
// must still take part in each group the others run, standing in for the plan's tensors (it
// waited for ranks of its own before: the others hung). Node 1's ranks stop after 2 steps, node
// 0's after 5, then after none and 3; every sum counts exactly the ranks still working; each join
// reports a rank of node 0 last.
class TopoJoin : public ::testing::TestWithParam<Shape> {};

// One rank's rounds of TOPO steps (`steps(rank, round)` each), each round ending with a join.
int TrainUnevenlyUnderTopo(syncd_client* c, int rank, int n, const std::function<int(int, int)>& steps) {
  const std::vector<int64_t> layers = {3, 1000, 20000};
  ModelGraph model(layers);
  CHILD_CHECK(syncd_register_graph(c, &model.graph, 30'000, nullptr) == SYNCD_OK, "rank %d: %s", rank,
              syncd_last_error());
  std::vector<int32_t*> grads;
  for (int64_t count : layers) grads.push_back(static_cast<int32_t*>(syncd_alloc(c, uint64_t(count) * 4)));
  const int64_t avg_count = 5;
  auto* avg = static_cast<float*>(syncd_alloc(c, avg_count * 4));
  for (int round = 0; round < 2; ++round) {
    for (int step = 0; step < steps(rank, round); ++step) {
      int32_t active = 0;
      for (int r = 0; r < n; ++r)
        if (steps(r, round) > step) active += 1 << r;
      std::vector<syncd_handle> hs;
      CHILD_CHECK(SubmitPowerOfTwoStep(c, rank, layers, grads, avg, avg_count, &hs) == SYNCD_OK, "rank %d: %s", rank,
                  syncd_last_error());
      for (syncd_handle h : hs)
        CHILD_CHECK(syncd_wait(c, h, 20'000) == SYNCD_OK, "rank %d step %d: %s", rank, step, syncd_last_error());
      for (size_t l = 0; l < layers.size(); ++l)
        CHILD_CHECK(grads[l][0] == active && grads[l][layers[l] - 1] == active, "rank %d step %d grad.%zu: %d, the "
                    "ranks working sum to %d", rank, step, l, grads[l][0], active);
      // A joined rank adds zeros and counts (Horovod's rule: AVERAGE divides by the job's size).
      const double expected = double(active) / n;
      CHILD_CHECK(std::fabs(avg[0] - expected) < 1e-5 * expected, "rank %d step %d: average %g, expected %g", rank,
                  step, double(avg[0]), expected);
    }
    int last = -1;
    CHILD_CHECK(syncd_join(c, 30'000, &last) == SYNCD_OK, "rank %d: join %d: %s", rank, round, syncd_last_error());
    CHILD_CHECK(steps(last, round) == steps(0, round), "rank %d: join %d: rank %d joined last", rank, round, last);
  }
  return 0;
}

TEST_P(TopoJoin, ANodeWhoseRanksAllJoinedStandsInForThePlansGroups) {
  const Shape k = GetParam();
  Cluster cluster(k.nodes, k.local, {"--coord", "topo", "--log-level", "warn"});
  // Node 0's ranks take 5 steps, then 3; the others' 2, then none.
  auto st = RunClusterRanks(cluster, [k](syncd_client* c, int rank, int n) {
    return TrainUnevenlyUnderTopo(c, rank, n, [k](int r, int round) {
      return r / k.local == 0 ? 5 - 2 * round : 2 - 2 * round;
    });
  }, 60'000);
  ExpectAllSucceeded(st);
}

INSTANTIATE_TEST_SUITE_P(Shapes, TopoJoin, ::testing::Values(Shape{2, 1}, Shape{2, 2}, Shape{3, 1}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return std::to_string(i.param.nodes) + "x" + std::to_string(i.param.local);
                         });

}  // namespace
}  // namespace syncd::testing
