// The kinds with a root (reduce, gather, scatter) through real daemons and real client
// processes, on one node (1 x 4), across nodes (2 x 2) and one rank per node (3 x 1): every
// dtype, every root, small groups (tree across nodes) and large ones, fusion, and the errors every
// rank must see.
#include <gtest/gtest.h>

#include <cstring>
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

class Rooted : public ::testing::TestWithParam<Shape> {
 protected:
  Cluster MakeCluster(std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--cores", "none", "--log-level", "warn"};
    args.insert(args.end(), extra.begin(), extra.end());
    return Cluster(GetParam().nodes, GetParam().local, args);
  }
};

// ---- reduce ----

struct ReduceCall {
  std::string name;
  std::vector<char> buf;
  syncd_dtype dt;
  syncd_reduce_op op;
  int root;
  int64_t count;
  syncd_handle h = 0;
};

int SubmitReduce(syncd_client* c, int rank, ReduceCall* r) {
  r->buf.assign(size_t(r->count) * syncd_dtype_size(r->dt) + 1, 0);
  for (size_t i = 0; i < size_t(r->count); ++i) SetValue(r->buf.data(), r->dt, i, InputFor(r->dt, rank, i));
  syncd_tensor t{r->name.c_str(), r->buf.data(), r->dt, 1, &r->count, 0};
  CHILD_CHECK(syncd_reduce_async(c, &t, r->op, r->root, 1.0, 1.0, &r->h) == SYNCD_OK, "%s: %s", r->name.c_str(),
              syncd_last_error());
  return 0;
}

// The root holds the reduction; every other rank still holds its own input.
int CheckReduce(syncd_client* c, int rank, int n, ReduceCall* r) {
  CHILD_CHECK(syncd_wait(c, r->h, 60'000) == SYNCD_OK, "%s: %s", r->name.c_str(), syncd_last_error());
  for (size_t i = 0; i < size_t(r->count); ++i) {
    const double got = GetValue(r->buf.data(), r->dt, i);
    const double want = rank == r->root ? Expected(r->dt, r->op, n, i) : Representable(r->dt, InputFor(r->dt, rank, i));
    CHILD_CHECK(got == want, "%s (root %d) rank %d element %zu: got %g want %g", r->name.c_str(), r->root, rank, i,
                got, want);
  }
  return 0;
}

TEST_P(Rooted, ReduceEveryDtypeOpAndRootIntoTheRootOnly) {
  Cluster cluster = MakeCluster();
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    int k = 0;
    for (int dt = 0; dt < SYNCD_DTYPE_COUNT; ++dt)
      for (int op = 0; op <= SYNCD_PRODUCT; ++op, ++k) {
        if (!Allreducible(syncd_dtype(dt), syncd_reduce_op(op))) continue;
        ReduceCall r{"reduce." + std::to_string(dt) + "." + std::to_string(op), {}, syncd_dtype(dt),
                     syncd_reduce_op(op), k % n, 37};
        if (SubmitReduce(c, rank, &r) || CheckReduce(c, rank, n, &r)) return 1;
      }
    // Large groups (the reduce-scatter and gather across nodes), every root.
    for (int root = 0; root < n; ++root) {
      ReduceCall r{"reduce.large." + std::to_string(root), {}, SYNCD_FLOAT32, SYNCD_SUM, root, 300'001};
      if (SubmitReduce(c, rank, &r) || CheckReduce(c, rank, n, &r)) return 1;
    }
    // Scale factors and the average divide as allreduce's do.
    std::vector<double> v(7, 1.0 + rank);
    int64_t seven = 7;
    syncd_tensor t{"reduce.scaled", v.data(), SYNCD_FLOAT64, 1, &seven, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_reduce_async(c, &t, SYNCD_AVERAGE, n - 1, 0.5, 4.0, &h) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(syncd_wait(c, h, 60'000) == SYNCD_OK, "%s", syncd_last_error());
    const double want = rank == n - 1 ? 2.0 * (n + 1) / 2.0 : 1.0 + rank;
    CHILD_CHECK(v[6] == want, "scaled: rank %d got %g want %g", rank, v[6], want);
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST_P(Rooted, ManyReducesInFlightFuseByRootAndStayExact) {
  Cluster cluster = MakeCluster();
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    std::vector<ReduceCall> calls;
    for (int i = 0; i < 24; ++i)
      calls.push_back({"fused." + std::to_string(i), {}, i % 3 == 0 ? SYNCD_INT32 : SYNCD_FLOAT32, SYNCD_SUM, i % n,
                       int64_t(1 + i * 97)});
    for (ReduceCall& r : calls)
      if (SubmitReduce(c, rank, &r)) return 1;
    for (ReduceCall& r : calls)
      if (CheckReduce(c, rank, n, &r)) return 1;
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST_P(Rooted, ReduceErrorsNameTheTensorAndTheJobGoesOn) {
  Cluster cluster = MakeCluster();
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    float x[4] = {1, 2, 3, 4};
    int64_t four = 4;
    syncd_tensor t{"bad.root", x, SYNCD_FLOAT32, 1, &four, 0};
    syncd_handle h;
    // A root that is no rank: refused at submission.
    CHILD_CHECK(syncd_reduce_async(c, &t, SYNCD_SUM, n, 1, 1, &h) == SYNCD_ERR_INVALID, "root %d accepted", n);
    CHILD_CHECK(strstr(syncd_last_error(), "reduce root") != nullptr, "message: %s", syncd_last_error());
    // An op that is none of the enumerators, as a C caller may pass it (the enums are `int` in C++).
    CHILD_CHECK(syncd_reduce_async(c, &t, syncd_reduce_op(99), 0, 1, 1, &h) == SYNCD_ERR_INVALID, "op 99 accepted");
    CHILD_CHECK(strstr(syncd_last_error(), "unknown reduce op") != nullptr, "message: %s", syncd_last_error());
    // Ranks that name different roots: MISMATCH on every rank, naming the tensor.
    syncd_tensor m{"bad.roots", x, SYNCD_FLOAT32, 1, &four, 0};
    CHILD_CHECK(syncd_reduce_async(c, &m, SYNCD_SUM, rank == 0 ? 1 : 0, 1, 1, &h) == SYNCD_OK, "%s",
                syncd_last_error());
    const int rc = syncd_wait(c, h, 60'000);
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH, "bad.roots: %s (%s)", syncd_status_name(rc), syncd_last_error());
    CHILD_CHECK(strstr(syncd_last_error(), "bad.roots") != nullptr && strstr(syncd_last_error(), "root") != nullptr,
                "message: %s", syncd_last_error());
    // Bool cannot average.
    bool flags[4] = {true, false, true, false};
    syncd_tensor b{"bad.bool", flags, SYNCD_BOOL, 1, &four, 0};
    CHILD_CHECK(syncd_reduce_async(c, &b, SYNCD_AVERAGE, 0, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
    const int rc2 = syncd_wait(c, h, 60'000);
    CHILD_CHECK(rc2 == SYNCD_ERR_INVALID && strstr(syncd_last_error(), "cannot average") != nullptr, "bad.bool: %s (%s)",
                syncd_status_name(rc2), syncd_last_error());
    ReduceCall after{"reduce.after", {}, SYNCD_INT64, SYNCD_SUM, n - 1, 9};
    return SubmitReduce(c, rank, &after) != 0 || CheckReduce(c, rank, n, &after) != 0 ? 1 : 0;
  });
  ExpectAllSucceeded(st);
}

// ---- gather ----

// The value rank r puts at row i, column j (distinct per rank and row; bool gets 0/1).
double Cell(syncd_dtype dt, int r, int64_t i, int64_t j) {
  return dt == SYNCD_BOOL ? double((r + i + j) % 2) : double((r * 7 + i * 3 + j) % 61);
}

// Rank r contributes (r % 3) rows of `cols` columns (uneven, some ranks none); only `root` gets
// them all, in rank order.
int CheckedGather(syncd_client* c, int rank, int n, syncd_dtype dt, int64_t cols, int root, const std::string& name,
                  int64_t scale = 1) {
  auto rows_of = [scale](int r) { return int64_t(r % 3) * scale; };
  const size_t esize = syncd_dtype_size(dt);
  std::vector<char> in(size_t(rows_of(rank) * cols) * esize + 1);
  for (int64_t i = 0; i < rows_of(rank); ++i)
    for (int64_t j = 0; j < cols; ++j) SetValue(in.data(), dt, size_t(i * cols + j), Cell(dt, rank, i, j));
  int64_t shape[2] = {rows_of(rank), cols};
  syncd_tensor t{name.c_str(), in.data(), dt, 2, shape, 0};
  syncd_result res{};
  syncd_handle h;
  CHILD_CHECK(syncd_gather_async(c, &t, root, &res, &h) == SYNCD_OK, "%s: %s", name.c_str(), syncd_last_error());
  CHILD_CHECK(syncd_wait(c, h, 60'000) == SYNCD_OK, "%s: %s", name.c_str(), syncd_last_error());
  if (rank != root) {
    CHILD_CHECK(res.data == nullptr && res.bytes == 0 && res.nranks == 0, "%s: rank %d (not the root) got %lu bytes",
                name.c_str(), rank, (unsigned long)res.bytes);
    return 0;
  }
  CHILD_CHECK(res.nranks == n, "%s: %d row counts for %d ranks", name.c_str(), res.nranks, n);
  int64_t at = 0;
  for (int r = 0; r < n; ++r) {
    CHILD_CHECK(res.rows[r] == rows_of(r), "%s: rank %d sent %ld rows, result says %ld", name.c_str(), r,
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
  return 0;
}

TEST_P(Rooted, GatherEveryDtypeAndRootWithUnevenFirstDimensions) {
  Cluster cluster = MakeCluster();
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    for (int dt = 0; dt < SYNCD_DTYPE_COUNT; ++dt)
      if (CheckedGather(c, rank, n, syncd_dtype(dt), 5, dt % n, "gather." + std::to_string(dt))) return 1;
    for (int root = 0; root < n; ++root)  // megabytes from each node
      if (CheckedGather(c, rank, n, SYNCD_FLOAT32, 1000, root, "gather.large." + std::to_string(root), 100)) return 1;
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST_P(Rooted, GatherErrorsNameTheTensorAndTheJobGoesOn) {
  Cluster cluster = MakeCluster();
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    float x[8] = {};
    int64_t shape[2] = {2, 4};
    syncd_result res{};
    syncd_handle h;
    syncd_tensor t{"bad.root", x, SYNCD_FLOAT32, 2, shape, 0};
    CHILD_CHECK(syncd_gather_async(c, &t, -1, &res, &h) == SYNCD_ERR_INVALID, "root -1 accepted");
    CHILD_CHECK(strstr(syncd_last_error(), "gather root") != nullptr, "message: %s", syncd_last_error());
    CHILD_CHECK(syncd_gather_async(c, &t, 0, nullptr, &h) == SYNCD_ERR_INVALID, "a NULL result accepted");
    // Different trailing dimensions, then different roots: MISMATCH on every rank.
    int64_t cols[2] = {2, rank == n - 1 ? 3 : 4};
    syncd_tensor m{"bad.cols", x, SYNCD_FLOAT32, 2, cols, 0};
    CHILD_CHECK(syncd_gather_async(c, &m, 0, &res, &h) == SYNCD_OK, "%s", syncd_last_error());
    int rc = syncd_wait(c, h, 60'000);
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH && strstr(syncd_last_error(), "bad.cols") != nullptr, "bad.cols: %s (%s)",
                syncd_status_name(rc), syncd_last_error());
    syncd_tensor r{"bad.roots", x, SYNCD_FLOAT32, 2, shape, 0};
    CHILD_CHECK(syncd_gather_async(c, &r, rank == 0 ? n - 1 : 0, &res, &h) == SYNCD_OK, "%s", syncd_last_error());
    rc = syncd_wait(c, h, 60'000);
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH && strstr(syncd_last_error(), "root") != nullptr, "bad.roots: %s (%s)",
                syncd_status_name(rc), syncd_last_error());
    CHILD_CHECK(res.data == nullptr, "a failed gather has no result");
    return CheckedGather(c, rank, n, SYNCD_INT64, 2, n - 1, "gather.after");
  });
  ExpectAllSucceeded(st);
}

// A request the daemon refuses (here a scalar gather, which the client does not check) fails its
// rank at once; the other ranks of the name fail too, naming that rank, instead of waiting for it.
TEST_P(Rooted, ADaemonsRefusalOfOneRanksRequestFailsTheNameOnEveryRank) {
  Cluster cluster = MakeCluster();
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    float x[4] = {1, 2, 3, 4};
    int64_t four = 4;
    syncd_tensor t{"refused", x, SYNCD_FLOAT32, rank == n - 1 ? 0 : 1, &four, 0};
    syncd_result res{};
    syncd_handle h;
    CHILD_CHECK(syncd_gather_async(c, &t, 0, &res, &h) == SYNCD_OK, "%s", syncd_last_error());
    const int rc = syncd_wait(c, h, 30'000);
    if (rank == n - 1) {
      CHILD_CHECK(rc == SYNCD_ERR_INVALID && strstr(syncd_last_error(), "at least one dimension") != nullptr,
                  "the refused rank: %s (%s)", syncd_status_name(rc), syncd_last_error());
    } else {
      CHILD_CHECK(rc == SYNCD_ERR_MISMATCH, "rank %d: %s (%s)", rank, syncd_status_name(rc), syncd_last_error());
      const std::string want = "rank " + std::to_string(n - 1) + " could not take part";
      CHILD_CHECK(strstr(syncd_last_error(), want.c_str()) != nullptr && strstr(syncd_last_error(), "refused") != nullptr,
                  "message: %s", syncd_last_error());
    }
    return CheckedGather(c, rank, n, SYNCD_INT32, 2, 0, "after.refusal");
  });
  ExpectAllSucceeded(st);
}

// ---- scatter ----

// The root sends R rows of `cols` columns (row i holds Cell(dt, root, i, j)); rank k gets its share.
int CheckedScatter(syncd_client* c, int rank, int n, syncd_dtype dt, int64_t rows, int64_t cols, int root,
                   const std::string& name) {
  const size_t esize = syncd_dtype_size(dt);
  const int64_t mine_rows = rank == root ? rows : 0;
  std::vector<char> in(size_t(mine_rows * cols) * esize + 1);
  for (int64_t i = 0; i < mine_rows; ++i)
    for (int64_t j = 0; j < cols; ++j) SetValue(in.data(), dt, size_t(i * cols + j), Cell(dt, root, i, j));
  int64_t shape[2] = {mine_rows, cols};
  syncd_tensor t{name.c_str(), in.data(), dt, 2, shape, 0};
  syncd_result res{};
  syncd_handle h;
  CHILD_CHECK(syncd_scatter_async(c, &t, root, &res, &h) == SYNCD_OK, "%s: %s", name.c_str(), syncd_last_error());
  CHILD_CHECK(syncd_wait(c, h, 60'000) == SYNCD_OK, "%s: %s", name.c_str(), syncd_last_error());
  int64_t first = 0;
  for (int k = 0; k < rank; ++k) first += syncd_reducescatter_rows(rows, n, k);
  const int64_t share = syncd_reducescatter_rows(rows, n, rank);
  CHILD_CHECK(res.nranks == n, "%s: %d row counts for %d ranks", name.c_str(), res.nranks, n);
  for (int k = 0; k < n; ++k)
    CHILD_CHECK(res.rows[k] == syncd_reducescatter_rows(rows, n, k), "%s: rank %d's share says %ld rows",
                name.c_str(), k, (long)res.rows[k]);
  CHILD_CHECK(res.bytes == uint64_t(share * cols) * esize, "%s: rank %d got %lu bytes for %ld rows", name.c_str(),
              rank, (unsigned long)res.bytes, (long)share);
  for (int64_t i = 0; i < share; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double got = GetValue(res.data, dt, size_t(i * cols + j)), want = Cell(dt, root, first + i, j);
      CHILD_CHECK(got == want, "%s: rank %d row %ld col %ld: got %g want %g", name.c_str(), rank, (long)i, (long)j, got,
                  want);
    }
  syncd_release_result(c, &res);
  return 0;
}

TEST_P(Rooted, ScatterEveryDtypeAndRootWithUnevenShares) {
  Cluster cluster = MakeCluster();
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    for (int dt = 0; dt < SYNCD_DTYPE_COUNT; ++dt)  // 2n + 1 rows: the first ranks get one more
      if (CheckedScatter(c, rank, n, syncd_dtype(dt), 2 * n + 1, 3, dt % n, "scatter." + std::to_string(dt))) return 1;
    if (CheckedScatter(c, rank, n, SYNCD_INT32, n - 1, 2, 0, "scatter.fewer")) return 1;  // the last rank gets none
    for (int root = 0; root < n; ++root)  // megabytes to each node
      if (CheckedScatter(c, rank, n, SYNCD_FLOAT64, 100 * n, 1000, root, "scatter.large." + std::to_string(root)))
        return 1;
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST_P(Rooted, ScatterErrorsFailEveryRankAndTheJobGoesOn) {
  Cluster cluster = MakeCluster();
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    float x[8] = {};
    syncd_result res{};
    syncd_handle h;
    // A rank other than the root that passes rows: every rank fails, naming it.
    int64_t shape[2] = {rank == 0 || rank == n - 1 ? 2 : 0, 4};
    syncd_tensor t{"bad.rows", x, SYNCD_FLOAT32, 2, shape, 0};
    CHILD_CHECK(syncd_scatter_async(c, &t, 0, &res, &h) == SYNCD_OK, "%s", syncd_last_error());
    int rc = syncd_wait(c, h, 60'000);
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH, "bad.rows: %s (%s)", syncd_status_name(rc), syncd_last_error());
    CHILD_CHECK(strstr(syncd_last_error(), "must pass 0") != nullptr && strstr(syncd_last_error(), "bad.rows") != nullptr,
                "message: %s", syncd_last_error());
    CHILD_CHECK(res.data == nullptr, "a failed scatter has no result");
    int64_t scalar_rows = 0;
    syncd_tensor s{"bad.scalar", x, SYNCD_FLOAT32, 0, &scalar_rows, 0};
    CHILD_CHECK(syncd_scatter_async(c, &s, 0, &res, &h) == SYNCD_OK, "%s", syncd_last_error());
    rc = syncd_wait(c, h, 60'000);
    CHILD_CHECK(rc == SYNCD_ERR_INVALID && strstr(syncd_last_error(), "at least one dimension") != nullptr,
                "bad.scalar: %s (%s)", syncd_status_name(rc), syncd_last_error());
    CHILD_CHECK(syncd_scatter_async(c, &t, n + 3, &res, &h) == SYNCD_ERR_INVALID, "root n+3 accepted");
    return CheckedScatter(c, rank, n, SYNCD_UINT8, 3 * n, 2, n - 1, "scatter.after");
  });
  ExpectAllSucceeded(st);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Rooted, ::testing::Values(Shape{1, 4}, Shape{2, 2}, Shape{3, 1}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return std::to_string(i.param.nodes) + "x" + std::to_string(i.param.local);
                         });

}  // namespace
}  // namespace syncd::testing
