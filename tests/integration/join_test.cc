// Join (Horovod's hvd.join) through real daemons: ranks with uneven amounts of work finish
// without a hang, joined ranks stand in with nothing of their own (zeros, no rows), the last rank
// to join is reported to every rank, on one node and across nodes (a node whose ranks all joined
// stands in through the coordinator and through the response cache).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

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

}  // namespace
}  // namespace syncd::testing
