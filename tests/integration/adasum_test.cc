// Adasum (op SYNCD_ADASUM, Horovod's hvd.Adasum) through real daemons against a float64 reference of
// the rule: on 2, 4 and 8 ranks (2 x 1, 1 x 4, 2 x 2, 2 x 4, 4 x 2), every float dtype, fused
// groups (each member its own dot products), scale factors, vectors that are zero (the rule's
// guard), parallel (an average) and orthogonal (a sum), negotiated and in a TOPO plan; a process
// set laid out unevenly over the nodes (the daemons gather every rank's tensor). What Adasum cannot
// do fails on every rank naming why: a set of 3 ranks, integer tensors, a rank that joined.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/integration/values.h"

namespace syncd::testing {
namespace {

// The pairwise rule in float64 (a zero vector's coefficient 1).
void Combine(std::vector<double>* a, const std::vector<double>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    dot += (*a)[i] * b[i];
    aa += (*a)[i] * (*a)[i];
    bb += b[i] * b[i];
  }
  const double ca = aa > 0 ? 1 - dot / aa * 0.5 : 1, cb = bb > 0 ? 1 - dot / bb * 0.5 : 1;
  for (size_t i = 0; i < b.size(); ++i) (*a)[i] = ca * (*a)[i] + cb * b[i];
}

// The tree over the ranks' vectors (a power of two of them): ranks r and r + 2^k at level k.
std::vector<double> Reference(std::vector<std::vector<double>> v) {
  for (size_t level = 1; level < v.size(); level <<= 1)
    for (size_t r = 0; r + level < v.size(); r += 2 * level) Combine(&v[r], v[r + level]);
  return v[0];
}

struct Tensor {
  std::string name;
  syncd_dtype dtype;
  int64_t count;
  int kind;  // 0 mixed, 1 zero on odd ranks, 2 parallel, 3 orthogonal
  double prescale = 1, postscale = 1;
};

std::vector<Tensor> Tensors() {
  std::vector<Tensor> ts;
  for (syncd_dtype d : {SYNCD_FLOAT16, SYNCD_BFLOAT16, SYNCD_FLOAT32, SYNCD_FLOAT64})
    for (int kind = 0; kind < 4; ++kind)
      ts.push_back({"ada." + std::to_string(d) + "." + std::to_string(kind), d, 37 + 100 * kind, kind});
  ts.push_back({"ada.scaled", SYNCD_FLOAT32, 50, 0, 0.5, 3.0});
  return ts;
}

// Rank r's element i of `t` (set rank r of n), as its dtype stores it.
double Input(const Tensor& t, int r, int64_t i) {
  double v;
  switch (t.kind) {
    case 1: v = r % 2 ? 0.0 : std::sin(0.37 * double(i) + 1.3 * r); break;
    case 2: v = (1 + r) * std::cos(0.11 * double(i)); break;
    case 3: v = i % 8 == r % 8 ? 1.0 + 0.25 * r : 0.0; break;  // disjoint supports
    default: v = std::sin(0.37 * double(i) + 1.3 * r + t.count) * (1 + i % 5) + 0.2 * (r % 3); break;
  }
  char stored[8];
  SetValue(stored, t.dtype, 0, v);
  return GetValue(stored, t.dtype, 0);
}

double Tolerance(syncd_dtype d) {
  switch (d) {
    case SYNCD_FLOAT16: return 4e-3;
    case SYNCD_BFLOAT16: return 3e-2;
    case SYNCD_FLOAT32: return 2e-6;
    default: return 1e-12;
  }
}

// Every tensor at once (fused by dtype), each checked against the reference over `members` (global
// ranks in set order; this rank is set rank `me`).
int AdasumEveryTensor(syncd_client* c, int me, const std::vector<int>& members, int set, const char* prefix) {
  const std::vector<Tensor> ts = Tensors();
  std::vector<std::vector<char>> data(ts.size());
  std::vector<syncd_handle> hs(ts.size());
  for (size_t j = 0; j < ts.size(); ++j) {
    const Tensor& t = ts[j];
    data[j].assign(size_t(t.count) * syncd_dtype_size(t.dtype), 0);
    for (int64_t i = 0; i < t.count; ++i) SetValue(data[j].data(), t.dtype, size_t(i), Input(t, me, i));
    const std::string name = prefix + t.name;
    const syncd_tensor x{name.c_str(), data[j].data(), t.dtype, 1, &t.count, set};
    CHILD_CHECK(syncd_allreduce_async(c, &x, SYNCD_ADASUM, t.prescale, t.postscale, &hs[j]) == SYNCD_OK, "%s: %s",
                name.c_str(), syncd_last_error());
  }
  for (size_t j = 0; j < ts.size(); ++j) {
    const Tensor& t = ts[j];
    CHILD_CHECK(syncd_wait(c, hs[j], 60'000) == SYNCD_OK, "set rank %d: %s%s: %s", me, prefix, t.name.c_str(),
                syncd_last_error());
    std::vector<std::vector<double>> v(members.size(), std::vector<double>(size_t(t.count)));
    for (size_t r = 0; r < members.size(); ++r)
      for (int64_t i = 0; i < t.count; ++i) v[r][size_t(i)] = Input(t, int(r), i) * t.prescale;
    const std::vector<double> want = Reference(v);
    double scale = 1e-30, worst = 0;
    for (double w : want) scale = std::max(scale, std::fabs(w * t.postscale));
    for (int64_t i = 0; i < t.count; ++i)
      worst = std::max(worst, std::fabs(GetValue(data[j].data(), t.dtype, size_t(i)) - want[size_t(i)] * t.postscale));
    CHILD_CHECK(worst <= Tolerance(t.dtype) * scale, "set rank %d: %s%s (dtype %d): off the float64 reference by %g "
                "(largest element %g)", me, prefix, t.name.c_str(), int(t.dtype), worst, scale);
  }
  return 0;
}

// The plan of the tensors (--coord topo): one collective each, every one a fetch.
struct AdasumGraph {
  std::vector<Tensor> ts = Tensors();
  std::vector<syncd_graph_op> ops;
  std::vector<uint32_t> fetches;
  syncd_graph graph{};
  AdasumGraph() {
    for (size_t j = 0; j < ts.size(); ++j) {
      if (ts[j].prescale != 1 || ts[j].postscale != 1) continue;  // scaled: negotiated
      ops.push_back(syncd_graph_op{ts[j].name.c_str(), ts[j].name.c_str(), ts[j].dtype, uint64_t(ts[j].count),
                                   SYNCD_ADASUM, SYNCD_MEMORY_HOST, SYNCD_COMPRESSION_DEFAULT, 0});
      fetches.push_back(uint32_t(ops.size() - 1));
    }
    graph = syncd_graph{ops.data(), ops.size(), nullptr, 0, fetches.data(), fetches.size()};
  }
};

struct Shape {
  int nodes, local;
  const char* coord;
};

class Adasum : public ::testing::TestWithParam<Shape> {};

TEST_P(Adasum, EveryFloatDtypeMatchesTheFloat64ReferenceOfTheRule) {
  const Shape k = GetParam();
  Cluster cluster(k.nodes, k.local, {"--cores", "none", "--log-level", "warn", "--coord", k.coord});
  auto st = RunClusterRanks(cluster, [&k](syncd_client* c, int rank, int n) {
    if (std::string(k.coord) == "topo") {
      AdasumGraph g;
      CHILD_CHECK(syncd_register_graph(c, &g.graph, 30'000, nullptr) == SYNCD_OK, "register: %s", syncd_last_error());
    }
    std::vector<int> all;
    for (int r = 0; r < n; ++r) all.push_back(r);
    for (int step = 0; step < 2; ++step)  // the second through the response cache (or the plan again)
      if (AdasumEveryTensor(c, rank, all, 0, "") != 0) return 1;
    // A set of 4 laid out unevenly (2 x 4: 3 ranks on node 0, 1 on node 1): gathered and run whole.
    if (n == 8) {
      const std::vector<int> members = {0, 1, 2, 4};
      int set = 0;
      CHILD_CHECK(syncd_add_process_set(c, members.data(), 4, 30'000, &set) == SYNCD_OK, "%s", syncd_last_error());
      const auto at = std::find(members.begin(), members.end(), rank);
      if (at != members.end() && AdasumEveryTensor(c, int(at - members.begin()), members, set, "set.") != 0) return 1;
      CHILD_CHECK(syncd_remove_process_set(c, set, 30'000) == SYNCD_OK, "%s", syncd_last_error());
    }
    return 0;
  }, 120'000);
  ExpectAllSucceeded(st);
  if (std::string(k.coord) == "topo") {  // the plan's groups ran Adasum, negotiated by nobody
    EXPECT_GE(PlanGroupsRun(SyncctlStatus(cluster.node(0).run_dir())), 8);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Adasum,
                         ::testing::Values(Shape{2, 1, "negotiate"}, Shape{1, 4, "negotiate"}, Shape{2, 2, "negotiate"},
                                           Shape{2, 4, "negotiate"}, Shape{4, 2, "negotiate"}, Shape{1, 4, "topo"},
                                           Shape{2, 2, "topo"}, Shape{4, 2, "nbcs"}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return std::to_string(i.param.nodes) + "x" + std::to_string(i.param.local) + "_" +
                                  i.param.coord;
                         });

// What Adasum cannot do fails on every rank, naming why; the job goes on.
TEST(AdasumRefusals, ThreeRanksIntegersAndAJoinedRankFailNamingWhy) {
  Cluster cluster(2, 2, {"--cores", "none", "--log-level", "error"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int) {
    auto adasum = [&](const char* name, syncd_dtype dtype, int set, const char* why) {
      char data[64] = {};
      int64_t count = 4;
      syncd_tensor t{name, data, dtype, 1, &count, set};
      syncd_handle h;
      int rc = syncd_allreduce_async(c, &t, SYNCD_ADASUM, 1, 1, &h);
      if (rc == SYNCD_OK) rc = syncd_wait(c, h, 30'000);
      // INVALID where the refusal is this rank's own; a node's refusal reaches the others as MISMATCH.
      CHILD_CHECK((rc == SYNCD_ERR_INVALID || rc == SYNCD_ERR_MISMATCH) && strstr(syncd_last_error(), why) != nullptr &&
                      strstr(syncd_last_error(), name) != nullptr,
                  "rank %d: %s: %s: %s", rank, name, syncd_status_name(rc), syncd_last_error());
      return 0;
    };
    if (adasum("ints", SYNCD_INT32, 0, "float tensors") != 0) return 1;
    const int three[] = {0, 1, 2};
    int set = 0;
    CHILD_CHECK(syncd_add_process_set(c, three, 3, 30'000, &set) == SYNCD_OK, "%s", syncd_last_error());
    if (rank < 3 && adasum("three", SYNCD_FLOAT32, set, "power of two") != 0) return 1;
    CHILD_CHECK(syncd_remove_process_set(c, set, 30'000) == SYNCD_OK, "%s", syncd_last_error());
    // Rank 3 joins: the others' Adasum fails naming it; a Sum beside it goes on.
    if (rank == 3) {
      int last = -1;
      CHILD_CHECK(syncd_join(c, 60'000, &last) == SYNCD_OK, "join: %s", syncd_last_error());
      return 0;
    }
    if (adasum("with.a.joined.rank", SYNCD_FLOAT32, 0, "rank 3 has none") != 0) return 1;
    float one = 1;
    int64_t count = 1;
    syncd_tensor t{"sum", &one, SYNCD_FLOAT32, 1, &count, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK && syncd_wait(c, h, 30'000) == SYNCD_OK &&
                    one == 3.0f,
                "rank %d: sum beside the joined rank: %g: %s", rank, double(one), syncd_last_error());
    int last = -1;
    CHILD_CHECK(syncd_join(c, 60'000, &last) == SYNCD_OK, "join: %s", syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

}  // namespace
}  // namespace syncd::testing
