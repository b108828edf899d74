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
      for (int op = 0; op < SYNCD_REDUCE_OP_COUNT; ++op, ++k) {
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
    CHILD_CHECK(syncd_reduce_async(c, &t, syncd_reduce_op(99), 0, 1, 1, &h) == SYNCD_ERR_INVALID, "op 99 accepted");
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

INSTANTIATE_TEST_SUITE_P(Shapes, Rooted, ::testing::Values(Shape{1, 4}, Shape{2, 2}, Shape{3, 1}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return std::to_string(i.param.nodes) + "x" + std::to_string(i.param.local);
                         });

}  // namespace
}  // namespace syncd::testing
