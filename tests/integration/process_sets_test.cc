// Process sets through real daemons and real clients, on 2 nodes x 2 ranks (and 1 x 4): sets
// within a node, across nodes, overlapping and uneven; every kind in a set; membership errors;
// dynamic add and remove under traffic; disjoint sets running at the same time.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/integration/values.h"

namespace syncd::testing {
namespace {

int Add(syncd_client* c, std::vector<int> ranks, int* id) {
  return syncd_add_process_set(c, ranks.data(), int(ranks.size()), 60'000, id);
}

// A sum over every rank of the job (the global set goes on whatever the sets do).
int GlobalSumIsSize(syncd_client* c, const std::string& name) {
  double x = 1;
  int64_t one = 1;
  syncd_tensor t{name.c_str(), &x, SYNCD_FLOAT64, 1, &one, 0};
  syncd_handle h;
  CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK && syncd_wait(c, h, 60'000) == SYNCD_OK,
              "%s: %s", name.c_str(), syncd_last_error());
  CHILD_CHECK(x == syncd_size(c), "%s: got %g", name.c_str(), x);
  return 0;
}

bool In(const std::vector<int>& ranks, int r) { return std::find(ranks.begin(), ranks.end(), r) != ranks.end(); }

// Every kind in set `id` (ranks `ranks`), checked against what the set's ranks contributed.
int CheckSet(syncd_client* c, int rank, int id, const std::vector<int>& ranks, const std::string& tag) {
  const int n = int(ranks.size());
  const int me = int(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
  CHILD_CHECK(syncd_process_set_size(c, id) == n && syncd_process_set_rank(c, id) == me, "%s: size/rank", tag.c_str());
  // Allreduce: sum and average over the set only.
  double v[2] = {double(rank + 1), 1.0};
  int64_t two = 2;
  const std::string ar = "ar." + tag;
  syncd_tensor t{ar.c_str(), v, SYNCD_FLOAT64, 1, &two, id};
  syncd_handle h;
  CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
  CHILD_CHECK(syncd_wait(c, h, 60'000) == SYNCD_OK, "%s: %s", ar.c_str(), syncd_last_error());
  double want = 0;
  for (int r : ranks) want += r + 1;
  CHILD_CHECK(v[0] == want && v[1] == n, "%s: got %g %g want %g %d", ar.c_str(), v[0], v[1], want, n);
  const std::string avg = "avg." + tag;
  double a = double(rank);
  int64_t one = 1;
  syncd_tensor ta{avg.c_str(), &a, SYNCD_FLOAT64, 1, &one, id};
  CHILD_CHECK(syncd_allreduce_async(c, &ta, SYNCD_AVERAGE, 1, 1, &h) == SYNCD_OK && syncd_wait(c, h, 60'000) == SYNCD_OK,
              "%s: %s", avg.c_str(), syncd_last_error());
  double mean = 0;
  for (int r : ranks) mean += r;
  CHILD_CHECK(std::abs(a - mean / n) < 1e-12, "%s: got %g want %g", avg.c_str(), a, mean / n);
  // Broadcast from every member (a global rank of the set).
  for (int root : ranks) {
    const std::string bn = "bc." + tag + "." + std::to_string(root);
    int64_t x = rank * 100;
    syncd_tensor tb{bn.c_str(), &x, SYNCD_INT64, 1, &one, id};
    CHILD_CHECK(syncd_broadcast_async(c, &tb, root, &h) == SYNCD_OK && syncd_wait(c, h, 60'000) == SYNCD_OK, "%s: %s",
                bn.c_str(), syncd_last_error());
    CHILD_CHECK(x == root * 100, "%s: got %ld", bn.c_str(), (long)x);
  }
  // Allgather: the set's ranks in set order, one row each.
  const std::string ag = "ag." + tag;
  int32_t mine = rank;
  syncd_tensor tg{ag.c_str(), &mine, SYNCD_INT32, 1, &one, id};
  syncd_result res{};
  CHILD_CHECK(syncd_allgather_async(c, &tg, &res, &h) == SYNCD_OK && syncd_wait(c, h, 60'000) == SYNCD_OK, "%s: %s",
              ag.c_str(), syncd_last_error());
  CHILD_CHECK(res.nranks == n, "%s: %d rows", ag.c_str(), res.nranks);
  for (int i = 0; i < n; ++i)
    CHILD_CHECK(static_cast<const int32_t*>(res.data)[i] == ranks[size_t(i)], "%s: row %d", ag.c_str(), i);
  syncd_release_result(c, &res);
  // Alltoall: one row to each member.
  const std::string aa = "a2a." + tag;
  std::vector<int32_t> send(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) send[size_t(d)] = rank * 1000 + ranks[size_t(d)];
  int64_t rows = n;
  syncd_tensor tt{aa.c_str(), send.data(), SYNCD_INT32, 1, &rows, id};
  CHILD_CHECK(syncd_alltoall_async(c, &tt, nullptr, 0, &res, &h) == SYNCD_OK && syncd_wait(c, h, 60'000) == SYNCD_OK,
              "%s: %s", aa.c_str(), syncd_last_error());
  for (int s = 0; s < n; ++s)
    CHILD_CHECK(static_cast<const int32_t*>(res.data)[s] == ranks[size_t(s)] * 1000 + rank, "%s: from %d", aa.c_str(), s);
  syncd_release_result(c, &res);
  // Reducescatter: n + 1 rows, the first member gets two.
  const std::string rs = "rs." + tag;
  std::vector<float> in(size_t(n + 1), 1.0f);
  int64_t rrows = n + 1;
  syncd_tensor tr{rs.c_str(), in.data(), SYNCD_FLOAT32, 1, &rrows, id};
  CHILD_CHECK(syncd_reducescatter_async(c, &tr, SYNCD_SUM, 1, 1, &h) == SYNCD_OK && syncd_wait(c, h, 60'000) == SYNCD_OK,
              "%s: %s", rs.c_str(), syncd_last_error());
  CHILD_CHECK(in[0] == float(n), "%s: got %g", rs.c_str(), in[0]);
  // A barrier of the set.
  CHILD_CHECK(syncd_barrier_set_async(c, id, &h) == SYNCD_OK && syncd_wait(c, h, 60'000) == SYNCD_OK, "barrier %s: %s",
              tag.c_str(), syncd_last_error());
  return 0;
}

struct Shape {
  int nodes, local;
};

class ProcessSets : public ::testing::TestWithParam<Shape> {
 protected:
  Cluster MakeCluster(std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--cores", "none", "--log-level", "warn"};
    args.insert(args.end(), extra.begin(), extra.end());
    return Cluster(GetParam().nodes, GetParam().local, args);
  }
};

TEST_P(ProcessSets, WithinANodeAcrossNodesOverlappingAndUneven) {
  Cluster cluster = MakeCluster();
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int) {
    const std::vector<std::vector<int>> sets = {{0, 1}, {2, 3}, {1, 2}, {0, 2}, {0, 1, 2}, {3}, {0, 1, 2, 3}};
    std::vector<int> ids;
    for (const auto& s : sets) {
      int id = 0;
      CHILD_CHECK(Add(c, s, &id) == SYNCD_OK, "add: %s", syncd_last_error());
      CHILD_CHECK(id == int(ids.size()) + 1, "ids in order: got %d", id);
      ids.push_back(id);
    }
    CHILD_CHECK(ids.size() < 2 || syncd_process_set_rank(c, ids[1]) == (rank >= 2 ? rank - 2 : -1), "rank in {2,3}");
    for (size_t i = 0; i < sets.size(); ++i)
      if (In(sets[i], rank) && CheckSet(c, rank, ids[i], sets[i], "set" + std::to_string(ids[i]))) return 1;
    // The global set is untouched by all of it.
    return GlobalSumIsSize(c, "global.after");
  });
  ExpectAllSucceeded(st);
}

TEST_P(ProcessSets, StatusListsEachSetAndASetOnOneNodeStaysThere) {
  Cluster cluster = MakeCluster();
  const std::string dir = cluster.node(0).run_dir();
  const bool one_node = GetParam().nodes == 1;
  auto st = RunClusterRanks(cluster, [&](syncd_client* c, int rank, int) {
    int a = 0, b = 0;
    CHILD_CHECK(Add(c, {0, 1}, &a) == SYNCD_OK && Add(c, {1, 2}, &b) == SYNCD_OK, "add: %s", syncd_last_error());
    if (rank == 0) {
      // Node 0 holds ranks of both: {0,1} lies on node 0 alone in both shapes, {1,2} spans the
      // two nodes of 2 x 2. (The status may lag the change by a snapshot.)
      std::string json;
      for (int i = 0; i < 100 && !Contains(json, R"("process_sets":[{"id":0)") ; ++i, usleep(20'000)) json = SyncctlStatusJson(dir);
      for (int i = 0; i < 100 && !Contains(json, R"({"id":2,)"); ++i, usleep(20'000)) json = SyncctlStatusJson(dir);
      CHILD_CHECK(Contains(json, R"({"id":1,"size":2,)") && Contains(json, R"("ranks":[0,1],"nodes":1)"), "set 1: %s",
                  json.c_str());
      CHILD_CHECK(Contains(json, one_node ? R"("ranks":[1,2],"nodes":1)" : R"("ranks":[1,2],"nodes":2)"), "set 2: %s",
                  json.c_str());
      const std::string text = SyncctlStatus(dir);
      CHILD_CHECK(Contains(text, "\nprocess set 1   2 ranks (0,1) on 1 node   pending tensors 0\n"), "%s", text.c_str());
    }
    syncd_handle h;
    CHILD_CHECK(syncd_barrier_async(c, &h) == SYNCD_OK && syncd_wait(c, h, 60'000) == SYNCD_OK, "barrier");
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST_P(ProcessSets, MembershipErrorsAndMismatchedAddsFailOnEveryRank) {
  Cluster cluster = MakeCluster();
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int) {
    int id = 0;
    CHILD_CHECK(Add(c, {0, 1}, &id) == SYNCD_OK, "add: %s", syncd_last_error());
    double x = 1;
    int64_t one = 1;
    syncd_tensor t{"outsider", &x, SYNCD_FLOAT64, 1, &one, id};
    syncd_handle h;
    if (rank >= 2) {
      CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_ERR_INVALID, "a non-member submitted");
      CHILD_CHECK(strstr(syncd_last_error(), "is not in process set") != nullptr, "message: %s", syncd_last_error());
    } else {
      CHILD_CHECK(syncd_broadcast_async(c, &t, 3, &h) == SYNCD_ERR_INVALID, "root outside the set accepted");
    }
    t.process_set = 99;
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_ERR_INVALID, "unknown set accepted");
    // Ranks that disagree on a set's members: MISMATCH on every rank, naming them.
    int bad = 0;
    const int rc = Add(c, rank == 3 ? std::vector<int>{0, 3} : std::vector<int>{0, 2}, &bad);
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH, "mismatched add: %s (%s)", syncd_status_name(rc), syncd_last_error());
    CHILD_CHECK(strstr(syncd_last_error(), "mismatched process set") != nullptr, "message: %s", syncd_last_error());
    const int dup[2] = {1, 1};
    CHILD_CHECK(syncd_add_process_set(c, dup, 2, 1000, &bad) == SYNCD_ERR_INVALID, "duplicate ranks accepted");
    // Removed: its id is refused afterwards; the global set goes on.
    CHILD_CHECK(syncd_remove_process_set(c, id, 60'000) == SYNCD_OK, "remove: %s", syncd_last_error());
    t.process_set = id;
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_ERR_INVALID, "removed set accepted");
    CHILD_CHECK(syncd_remove_process_set(c, 0, 1000) == SYNCD_ERR_INVALID, "the global set was removed");
    return GlobalSumIsSize(c, "global.after");
  });
  ExpectAllSucceeded(st);
}

TEST_P(ProcessSets, DynamicAddAndRemoveUnderTraffic) {
  Cluster cluster = MakeCluster();
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    for (int round = 0; round < 20; ++round) {
      // Global traffic in flight while the sets change.
      std::vector<float> g(4096, 1.0f);
      int64_t count = 4096;
      const std::string gname = "traffic." + std::to_string(round);
      syncd_tensor tg{gname.c_str(), g.data(), SYNCD_FLOAT32, 1, &count, 0};
      syncd_handle hg;
      CHILD_CHECK(syncd_allreduce_async(c, &tg, SYNCD_SUM, 1, 1, &hg) == SYNCD_OK, "%s", syncd_last_error());
      const std::vector<int> members = round % 2 ? std::vector<int>{1, 2} : std::vector<int>{0, 3};
      int id = 0;
      CHILD_CHECK(Add(c, members, &id) == SYNCD_OK, "round %d add: %s", round, syncd_last_error());
      if (In(members, rank)) {
        double x = 1;
        int64_t one = 1;
        const std::string name = "in_set." + std::to_string(round);
        syncd_tensor t{name.c_str(), &x, SYNCD_FLOAT64, 1, &one, id};
        syncd_handle h;
        CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK && syncd_wait(c, h, 60'000) == SYNCD_OK,
                    "%s: %s", name.c_str(), syncd_last_error());
        CHILD_CHECK(x == 2.0, "%s: got %g", name.c_str(), x);
      }
      CHILD_CHECK(syncd_remove_process_set(c, id, 60'000) == SYNCD_OK, "round %d remove: %s", round, syncd_last_error());
      CHILD_CHECK(syncd_wait(c, hg, 60'000) == SYNCD_OK && g[0] == float(n), "%s: %s", gname.c_str(), syncd_last_error());
    }
    return 0;
  });
  ExpectAllSucceeded(st);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ProcessSets, ::testing::Values(Shape{1, 4}, Shape{2, 2}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return std::to_string(i.param.nodes) + "x" + std::to_string(i.param.local);
                         });

// Two disjoint sets that both span the two nodes run their allreduces at the same time: each
// rank records when its collectives ran, and the two sets' intervals overlap.
TEST(ProcessSetsConcurrency, DisjointSetsOverlapInTime) {
  auto* times = static_cast<std::atomic<int64_t>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  for (int i = 0; i < 8; ++i) new (&times[i]) std::atomic<int64_t>(0);
  Cluster cluster(2, 2, {"--cores", "none", "--log-level", "warn"});
  auto st = RunClusterRanks(cluster, [times](syncd_client* c, int rank, int) {
    int even = 0, odd = 0;
    CHILD_CHECK(Add(c, {0, 2}, &even) == SYNCD_OK && Add(c, {1, 3}, &odd) == SYNCD_OK, "add: %s", syncd_last_error());
    syncd_handle h;
    CHILD_CHECK(syncd_barrier_async(c, &h) == SYNCD_OK && syncd_wait(c, h, 60'000) == SYNCD_OK, "barrier");
    const int id = rank % 2 ? odd : even;
    std::vector<float> big(8u << 20, 1.0f);  // 32 MiB: long enough to be seen running
    int64_t count = int64_t(big.size());
    auto now = [] { return std::chrono::steady_clock::now().time_since_epoch().count(); };
    times[2 * rank] = now();
    for (int i = 0; i < 3; ++i) {
      const std::string name = "big." + std::to_string(i);
      syncd_tensor t{name.c_str(), big.data(), SYNCD_FLOAT32, 1, &count, id};
      CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK && syncd_wait(c, h, 120'000) == SYNCD_OK,
                  "%s: %s", name.c_str(), syncd_last_error());
    }
    times[2 * rank + 1] = now();
    return 0;
  });
  ExpectAllSucceeded(st);
  // Set {0,2} ran from min start to max end of ranks 0 and 2; likewise {1,3}.
  auto span = [&](int a, int b) {
    return std::make_pair(std::min(times[2 * a].load(), times[2 * b].load()),
                          std::max(times[2 * a + 1].load(), times[2 * b + 1].load()));
  };
  const auto even = span(0, 2), odd = span(1, 3);
  const int64_t overlap = std::min(even.second, odd.second) - std::max(even.first, odd.first);
  const int64_t shorter = std::min(even.second - even.first, odd.second - odd.first);
  RecordProperty("overlap_ms", std::to_string(overlap / 1e6) + " of " + std::to_string(shorter / 1e6));
  EXPECT_GT(overlap, shorter / 2) << "the sets ran one after the other: overlap " << overlap / 1e6 << " ms of "
                                  << shorter / 1e6 << " ms";
  munmap(times, 4096);
}

}  // namespace
}  // namespace syncd::testing
