// Allgather, alltoall and reducescatter through real daemons and real client processes, on one
// node (1 x 4) and across nodes (2 x 2): every dtype, uneven first dimensions, results placed in
// the result area and given back, and the errors every rank must see.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/integration/values.h"

namespace syncd::testing {
namespace {

struct Shape {
  int nodes, local;
};
void PrintTo(const Shape& s, std::ostream* os) { *os << s.nodes << "x" << s.local; }

class GatherScatter : public ::testing::TestWithParam<Shape> {
 protected:
  Cluster MakeCluster(std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--cores", "none", "--log-level", "warn"};
    args.insert(args.end(), extra.begin(), extra.end());
    return Cluster(GetParam().nodes, GetParam().local, args);
  }
};

// The value rank r puts at row i, column j (distinct per rank and row, exact in every dtype but
// bool, which gets 0/1).
double Cell(syncd_dtype dt, int r, int64_t i, int64_t j) {
  return dt == SYNCD_BOOL ? double((r + i + j) % 2) : double((r * 7 + i * 3 + j) % 61);
}

int Allgather(syncd_client* c, const std::string& name, void* buf, syncd_dtype dt, int64_t rows, int64_t cols,
              syncd_result* out) {
  int64_t shape[2] = {rows, cols};
  syncd_tensor t{name.c_str(), buf, dt, 2, shape, 0};
  syncd_handle h;
  if (int rc = syncd_allgather_async(c, &t, out, &h); rc != SYNCD_OK) return rc;
  return syncd_wait(c, h, 60'000);
}

// Rank r contributes rows_of(r) rows of `cols` columns; every rank checks every rank's.
int CheckedAllgatherRows(syncd_client* c, int rank, int n, syncd_dtype dt, int64_t cols, const std::string& name,
                         const std::function<int64_t(int)>& rows_of) {
  const size_t esize = syncd_dtype_size(dt);
  std::vector<char> in(size_t(rows_of(rank) * cols) * esize + 1);
  for (int64_t i = 0; i < rows_of(rank); ++i)
    for (int64_t j = 0; j < cols; ++j) SetValue(in.data(), dt, size_t(i * cols + j), Cell(dt, rank, i, j));
  syncd_result res{};
  CHILD_CHECK(Allgather(c, name, in.data(), dt, rows_of(rank), cols, &res) == SYNCD_OK, "%s: %s", name.c_str(),
              syncd_last_error());
  CHILD_CHECK(res.nranks == n, "%s: %d row counts for %d ranks", name.c_str(), res.nranks, n);
  int64_t at = 0;
  for (int r = 0; r < n; ++r) {
    CHILD_CHECK(res.rows[r] == rows_of(r), "%s: rank %d contributed %ld rows, result says %ld", name.c_str(), r,
                (long)rows_of(r), (long)res.rows[r]);
    for (int64_t i = 0; i < rows_of(r); ++i, ++at)
      for (int64_t j = 0; j < cols; ++j) {
        const double got = GetValue(res.data, dt, size_t(at * cols + j)), want = Cell(dt, r, i, j);
        CHILD_CHECK(got == want, "%s: row %ld (rank %d's row %ld) col %ld: got %g want %g", name.c_str(), (long)at, r,
                    (long)i, (long)j, got, want);
      }
  }
  CHILD_CHECK(res.bytes == uint64_t(at * cols) * esize, "%s: %lu result bytes for %ld rows", name.c_str(),
              (unsigned long)res.bytes, (long)at);
  syncd_release_result(c, &res);
  CHILD_CHECK(res.data == nullptr, "release clears the result");
  return 0;
}

// Rank r contributes ((r + shift) % 3) rows of `cols` columns: uneven, and some ranks none at all.
int CheckedAllgather(syncd_client* c, int rank, int n, syncd_dtype dt, int64_t cols, const std::string& name,
                     int shift = 0) {
  return CheckedAllgatherRows(c, rank, n, dt, cols, name, [shift](int r) { return int64_t((r + shift) % 3); });
}

TEST_P(GatherScatter, AllgatherEveryDtypeWithUnevenFirstDimensions) {
  Cluster cluster = MakeCluster();
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    for (int dt = 0; dt < SYNCD_DTYPE_COUNT; ++dt)
      if (CheckedAllgather(c, rank, n, syncd_dtype(dt), 5, "ag." + std::to_string(dt))) return 1;
    // Large enough for several ring steps of megabytes between the daemons.
    if (CheckedAllgather(c, rank, n, SYNCD_FLOAT32, 300'000, "ag.large")) return 1;
    return 0;
  });
  ExpectAllSucceeded(st);
}

// Rank s sends (2s + d + shift) % 3 rows to rank d; cell values say who sent which row to whom.
double AlltoallCell(syncd_dtype dt, int s, int d, int64_t k, int64_t j) {
  return dt == SYNCD_BOOL ? double((s + d + k + j) % 2) : double((s * 11 + d * 5 + k * 3 + j) % 61);
}

int CheckedAlltoall(syncd_client* c, int rank, int n, syncd_dtype dt, int64_t cols, bool equal, const std::string& name,
                    int shift = 0) {
  auto rows = [equal, shift](int s, int d) { return equal ? int64_t(2) : int64_t((2 * s + d + shift) % 3); };  // not symmetric
  const size_t esize = syncd_dtype_size(dt);
  std::vector<int64_t> splits(static_cast<size_t>(n));
  int64_t total = 0;
  for (int d = 0; d < n; ++d) total += splits[size_t(d)] = rows(rank, d);
  std::vector<char> in(size_t(total * cols) * esize + 1);
  int64_t at = 0;
  for (int d = 0; d < n; ++d)
    for (int64_t k = 0; k < rows(rank, d); ++k, ++at)
      for (int64_t j = 0; j < cols; ++j) SetValue(in.data(), dt, size_t(at * cols + j), AlltoallCell(dt, rank, d, k, j));
  int64_t shape[2] = {total, cols};
  syncd_tensor t{name.c_str(), in.data(), dt, 2, shape, 0};
  syncd_result res{};
  syncd_handle h;
  CHILD_CHECK(syncd_alltoall_async(c, &t, equal ? nullptr : splits.data(), n, &res, &h) == SYNCD_OK, "%s: %s",
              name.c_str(), syncd_last_error());
  CHILD_CHECK(syncd_wait(c, h, 60'000) == SYNCD_OK, "%s: %s", name.c_str(), syncd_last_error());
  CHILD_CHECK(res.nranks == n, "%s: %d received splits for %d ranks", name.c_str(), res.nranks, n);
  at = 0;
  for (int s = 0; s < n; ++s) {
    CHILD_CHECK(res.rows[s] == rows(s, rank), "%s: rank %d sent %ld rows, received splits say %ld", name.c_str(), s,
                (long)rows(s, rank), (long)res.rows[s]);
    for (int64_t k = 0; k < rows(s, rank); ++k, ++at)
      for (int64_t j = 0; j < cols; ++j) {
        const double got = GetValue(res.data, dt, size_t(at * cols + j)), want = AlltoallCell(dt, s, rank, k, j);
        CHILD_CHECK(got == want, "%s: row %ld from rank %d col %ld: got %g want %g", name.c_str(), (long)k, s, (long)j,
                    got, want);
      }
  }
  CHILD_CHECK(res.bytes == uint64_t(at * cols) * esize, "%s: result bytes", name.c_str());
  syncd_release_result(c, &res);
  return 0;
}

TEST_P(GatherScatter, AlltoallEveryDtypeWithSplitsAndEqualParts) {
  Cluster cluster = MakeCluster();
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    for (int dt = 0; dt < SYNCD_DTYPE_COUNT; ++dt)
      for (bool equal : {false, true})
        if (CheckedAlltoall(c, rank, n, syncd_dtype(dt), 3, equal,
                            "a2a." + std::to_string(dt) + (equal ? ".equal" : ".splits")))
          return 1;
    if (CheckedAlltoall(c, rank, n, SYNCD_FLOAT64, 200'000, false, "a2a.large")) return 1;
    return 0;
  });
  ExpectAllSucceeded(st);
}

// Every rank reduces a (2n + 1) x cols tensor; rank d keeps its rows at the start of its tensor.
int CheckedReducescatter(syncd_client* c, int rank, int n, syncd_dtype dt, syncd_reduce_op op, int64_t rows,
                         int64_t cols, const std::string& name) {
  const size_t count = size_t(rows * cols);
  std::vector<char> buf(count * syncd_dtype_size(dt) + 1);
  for (size_t i = 0; i < count; ++i) SetValue(buf.data(), dt, i, Input(rank, i));
  int64_t shape[2] = {rows, cols};
  syncd_tensor t{name.c_str(), buf.data(), dt, 2, shape, 0};
  syncd_handle h;
  CHILD_CHECK(syncd_reducescatter_async(c, &t, op, 1.0, 1.0, &h) == SYNCD_OK, "%s: %s", name.c_str(), syncd_last_error());
  CHILD_CHECK(syncd_wait(c, h, 60'000) == SYNCD_OK, "%s: %s", name.c_str(), syncd_last_error());
  int64_t first_row = 0;
  for (int r = 0; r < rank; ++r) first_row += syncd_reducescatter_rows(rows, n, r);
  const int64_t mine = syncd_reducescatter_rows(rows, n, rank);
  CHILD_CHECK(mine == rows / n + (rank < rows % n ? 1 : 0), "%s: rows %ld", name.c_str(), (long)mine);
  for (size_t i = 0; i < size_t(mine * cols); ++i) {
    const double got = GetValue(buf.data(), dt, i), want = Expected(dt, op, n, size_t(first_row * cols) + i);
    CHILD_CHECK(got == want, "%s rank %d element %zu: got %g want %g", name.c_str(), rank, i, got, want);
  }
  return 0;
}

TEST_P(GatherScatter, ReducescatterSumAndAverageEveryDtypeUnevenRows) {
  Cluster cluster = MakeCluster();
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    for (int dt = 0; dt < SYNCD_DTYPE_COUNT; ++dt) {
      if (dt == SYNCD_BOOL) continue;
      for (syncd_reduce_op op : {SYNCD_SUM, SYNCD_AVERAGE})
        if (CheckedReducescatter(c, rank, n, syncd_dtype(dt), op, 2 * n + 1, 3,
                                 "rs." + std::to_string(dt) + "." + std::to_string(op)))
          return 1;
    }
    if (CheckedReducescatter(c, rank, n, SYNCD_FLOAT32, SYNCD_SUM, 4 * n + 3, 100'000, "rs.large")) return 1;
    // Scale factors apply as in allreduce.
    std::vector<double> v(size_t(n), 1.0 + rank);
    int64_t shape = n;
    syncd_tensor t{"rs.scaled", v.data(), SYNCD_FLOAT64, 1, &shape, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_reducescatter_async(c, &t, SYNCD_SUM, 0.5, 4.0, &h) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(syncd_wait(c, h, 60'000) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(v[0] == 2.0 * n * (n + 1) / 2.0, "scaled: got %g", v[0]);
    return 0;
  });
  ExpectAllSucceeded(st);
}

// One name per kind, step after step, as a training loop submits them: on many nodes a step whose
// shapes are those of the step before is agreed through the response cache (every rank's rows and
// splits cached), one whose shapes changed goes through the coordinator again; results are exact
// either way.
TEST_P(GatherScatter, OneNameStepAfterStepIsExactAndCachedUntilItsShapesChange) {
  Cluster cluster = MakeCluster();
  constexpr int kSteps = 9;
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    for (int step = 0; step < kSteps; ++step) {
      const int shift = step / 3;  // the shapes change at steps 3 and 6
      if (CheckedAllgather(c, rank, n, SYNCD_FLOAT32, 5, "steps.ag", shift)) return 1;
      if (CheckedAlltoall(c, rank, n, SYNCD_INT32, 3, false, "steps.a2a", shift)) return 1;
      if (CheckedReducescatter(c, rank, n, SYNCD_FLOAT64, SYNCD_SUM, 2 * n + 1 + shift, 3, "steps.rs")) return 1;
    }
    return 0;
  });
  ExpectAllSucceeded(st);
  if (GetParam().nodes == 1) return;  // one node: nothing to agree with
  const std::string json = cluster.node(GetParam().nodes - 1).StatusJson();
  ASSERT_FALSE(json.empty());
  // Each of the 3 names through the coordinator at steps 0, 3 and 6, from the cache at the others.
  EXPECT_EQ(JsonNumber(json, "cache_misses"), 9u) << json;
  EXPECT_EQ(JsonNumber(json, "cache_hits"), 18u) << json;
}

TEST_P(GatherScatter, DisagreementsFailOnEveryRankAndTheJobGoesOn) {
  Cluster cluster = MakeCluster();
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    // Different trailing dimensions: MISMATCH everywhere, naming the ranks.
    std::vector<float> x(64, 1.0f);
    syncd_result res{};
    const int rc = Allgather(c, "bad.cols", x.data(), SYNCD_FLOAT32, 2, rank == n - 1 ? 4 : 3, &res);
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH, "bad.cols: %s (%s)", syncd_status_name(rc), syncd_last_error());
    CHILD_CHECK(strstr(syncd_last_error(), "shape after the first dimension") != nullptr, "message: %s",
                syncd_last_error());
    CHILD_CHECK(res.data == nullptr, "a failed allgather has no result");
    // Different dtypes for one name.
    int64_t shape[1] = {4};
    syncd_tensor t{"bad.dtype", x.data(), rank == 0 ? SYNCD_FLOAT32 : SYNCD_INT32, 1, shape, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_reducescatter_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
    const int rc2 = syncd_wait(c, h, 60'000);
    CHILD_CHECK(rc2 == SYNCD_ERR_MISMATCH, "bad.dtype: %s (%s)", syncd_status_name(rc2), syncd_last_error());
    // Refused before anything is sent: scalars, wrong splits, ops reducescatter lacks.
    syncd_tensor scalar{"scalar", x.data(), SYNCD_FLOAT32, 0, nullptr, 0};
    CHILD_CHECK(syncd_allgather_async(c, &scalar, &res, &h) == SYNCD_ERR_INVALID, "scalar allgather accepted");
    int64_t five = 5;
    syncd_tensor odd{"odd", x.data(), SYNCD_FLOAT32, 1, &five, 0};
    if (5 % n != 0) CHILD_CHECK(syncd_alltoall_async(c, &odd, nullptr, n, &res, &h) == SYNCD_ERR_INVALID, "5 rows split equally");
    std::vector<int64_t> wrong(static_cast<size_t>(n), 1);
    CHILD_CHECK(syncd_alltoall_async(c, &odd, wrong.data(), n, &res, &h) == SYNCD_ERR_INVALID, "splits not adding up");
    CHILD_CHECK(strstr(syncd_last_error(), "add up to") != nullptr, "message: %s", syncd_last_error());
    std::vector<int64_t> huge(static_cast<size_t>(n), INT64_MAX);  // a sum that would overflow
    CHILD_CHECK(syncd_alltoall_async(c, &odd, huge.data(), n, &res, &h) == SYNCD_ERR_INVALID, "huge splits");
    CHILD_CHECK(strstr(syncd_last_error(), "more than the tensor's 5 rows") != nullptr, "message: %s", syncd_last_error());
    CHILD_CHECK(syncd_reducescatter_async(c, &odd, SYNCD_MIN, 1, 1, &h) == SYNCD_ERR_INVALID, "reducescatter min");
    // The job goes on.
    return CheckedAllgather(c, rank, n, SYNCD_INT64, 2, "after");
  });
  ExpectAllSucceeded(st);
}

TEST_P(GatherScatter, AFullResultAreaFailsThatRankOnlyAndReleasedBlocksAreReused) {
  // 1 MiB of result area; each allgather below returns 4 x 64 KiB = 256 KiB.
  Cluster cluster = MakeCluster({"--result-area-size", "1M"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    std::vector<float> x(16 * 1024, float(rank));
    const uint64_t bytes = uint64_t(n) * x.size() * sizeof(float);
    // Released results: the area is reused, a hundred rounds fit in 1 MiB.
    for (int i = 0; i < 100; ++i) {
      syncd_result res{};
      const std::string name = "reuse." + std::to_string(i);
      CHILD_CHECK(Allgather(c, name, x.data(), SYNCD_FLOAT32, int64_t(x.size()), 1, &res) == SYNCD_OK, "%s: %s",
                  name.c_str(), syncd_last_error());
      CHILD_CHECK(res.bytes == bytes, "%s: bytes", name.c_str());
      syncd_release_result(c, &res);
    }
    // Rank 0 keeps its results: once its area is full its allgather fails, the others' complete.
    std::vector<syncd_result> kept;
    bool failed = false;
    for (int i = 0; i < 8; ++i) {
      syncd_result res{};
      const std::string name = "keep." + std::to_string(i);
      const int rc = Allgather(c, name, x.data(), SYNCD_FLOAT32, int64_t(x.size()), 1, &res);
      if (rank == 0 && rc == SYNCD_ERR_NO_MEMORY) {
        CHILD_CHECK(strstr(syncd_last_error(), "result area") != nullptr, "message: %s", syncd_last_error());
        failed = true;
        continue;
      }
      CHILD_CHECK(rc == SYNCD_OK, "rank %d %s: %s", rank, name.c_str(), syncd_last_error());
      if (rank == 0) kept.push_back(res);
      else syncd_release_result(c, &res);
    }
    CHILD_CHECK(rank != 0 || (failed && kept.size() < 8), "rank 0 never ran out of room (%zu kept)", kept.size());
    for (syncd_result& r : kept) syncd_release_result(c, &r);
    return CheckedAllgather(c, rank, n, SYNCD_INT32, 3, "after");
  });
  ExpectAllSucceeded(st);
}

// Under --coord topo (cycles on demand), a cached name whose shape changes on one node only: that
// node invalidates the entry (after node 0 offered its hit), and the others, whose hit was evicted, send it through the
// coordinator in a cycle they ask for (it once waited for a cycle nobody started: the elastic
// job's allgather of the ranks left, after a loss on one node).
TEST(GatherScatterTopo, AShapeThatChangesOnOneNodeOnlyIsNegotiatedAgain) {
  Cluster cluster(2, 2, {"--cores", "none", "--log-level", "warn", "--coord", "topo"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    for (int step = 0; step < 6; ++step) {
      if (rank >= 2) usleep(20'000);  // node 0 offers its hit first; node 1 then invalidates it
      if (CheckedAllgatherRows(c, rank, n, SYNCD_INT32, 2, "one.node", [step](int r) { return r >= 2 ? 1 + step / 3 : 1; }))
        return 1;
    }
    return 0;
  }, 30'000);
  ExpectAllSucceeded(st);
}

// Under --coord topo, once a plan is registered, the new kinds (outside any plan) are
// negotiated on demand between the plan's groups, as other allreduces are.
TEST(GatherScatterTopo, NewKindsOutsideARegisteredPlanAreNegotiatedOnDemand) {
  Cluster cluster(2, 2, {"--cores", "none", "--log-level", "warn", "--coord", "topo"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    const syncd_compression d = SYNCD_COMPRESSION_DEFAULT;
    syncd_graph_op ops[3] = {{"fwd", nullptr, SYNCD_FLOAT32, 0, SYNCD_SUM, SYNCD_MEMORY_HOST, d, 0},
                             {"ar", "plan.grad", SYNCD_FLOAT32, 4, SYNCD_SUM, SYNCD_MEMORY_HOST, d, 0},
                             {"update", nullptr, SYNCD_FLOAT32, 0, SYNCD_SUM, SYNCD_MEMORY_HOST, d, 0}};
    const uint32_t edges[4] = {0, 1, 1, 2};
    const uint32_t fetch = 2;
    syncd_graph g{ops, 3, edges, 2, &fetch, 1};
    CHILD_CHECK(syncd_register_graph(c, &g, 30'000, nullptr) == SYNCD_OK, "register: %s", syncd_last_error());
    for (int step = 0; step < 3; ++step) {
      float v[4] = {1, 1, 1, 1};
      int64_t four = 4;
      syncd_tensor t{"plan.grad", v, SYNCD_FLOAT32, 1, &four, 0};
      syncd_handle h;
      CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
      const std::string tag = "." + std::to_string(step);
      if (CheckedAllgather(c, rank, n, SYNCD_FLOAT32, 2, "topo.ag" + tag)) return 1;
      if (CheckedAlltoall(c, rank, n, SYNCD_INT32, 2, false, "topo.a2a" + tag)) return 1;
      if (CheckedReducescatter(c, rank, n, SYNCD_FLOAT64, SYNCD_AVERAGE, 2 * n + 1, 2, "topo.rs" + tag)) return 1;
      CHILD_CHECK(syncd_wait(c, h, 60'000) == SYNCD_OK && v[0] == float(n), "plan.grad: %s", syncd_last_error());
    }
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST_P(GatherScatter, AnAlltoallWhoseResultHasNoRoomFailsThatRankAndTheOthersGetTheirs) {
  // 1 MiB of result area; each alltoall below returns 256 KiB to each rank.
  Cluster cluster = MakeCluster({"--result-area-size", "1M"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    std::vector<float> x(size_t(n) * 16 * 1024);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(rank * 1000 + int(i / (16 * 1024)));  // piece d holds rank*1000+d
    int64_t rows = int64_t(x.size());
    std::vector<syncd_result> kept;
    bool failed = false;
    for (int i = 0; i < 8; ++i) {
      const std::string name = "a2a.keep." + std::to_string(i);
      syncd_tensor t{name.c_str(), x.data(), SYNCD_FLOAT32, 1, &rows, 0};
      syncd_result res{};
      syncd_handle h;
      CHILD_CHECK(syncd_alltoall_async(c, &t, nullptr, 0, &res, &h) == SYNCD_OK, "%s", syncd_last_error());
      const int rc = syncd_wait(c, h, 60'000);
      if (rank == 0 && rc == SYNCD_ERR_NO_MEMORY) {
        failed = true;  // it still received what it was sent (into scratch): the others go on
        continue;
      }
      CHILD_CHECK(rc == SYNCD_OK, "rank %d %s: %s", rank, name.c_str(), syncd_last_error());
      for (int s = 0; s < n; ++s)
        CHILD_CHECK(static_cast<const float*>(res.data)[size_t(s) * 16 * 1024] == float(s * 1000 + rank),
                    "%s: piece from rank %d", name.c_str(), s);
      if (rank == 0) kept.push_back(res);
      else syncd_release_result(c, &res);
    }
    CHILD_CHECK(rank != 0 || failed, "rank 0 never ran out of room (%zu kept)", kept.size());
    for (syncd_result& r : kept) syncd_release_result(c, &r);
    return CheckedAlltoall(c, rank, n, SYNCD_INT32, 2, false, "a2a.after");
  });
  ExpectAllSucceeded(st);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GatherScatter, ::testing::Values(Shape{1, 4}, Shape{2, 2}, Shape{3, 1}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return std::to_string(i.param.nodes) + "x" + std::to_string(i.param.local);
                         });

}  // namespace
}  // namespace syncd::testing
