// Compression with error feedback (top-k, 1-bit): each node keeps what compression left out of its
// sums and adds it to the next. What the ranks see: over any number of steps, what was applied plus
// what the daemons still hold is every gradient; once the gradients stop (zeros), top-k hands over
// the rest, so the sum of every result equals the sum of every gradient, exactly (float64, integer
// gradients). A value that is not finite: a NaN in a gradient comes out as the sum carries it and
// leaves no residual behind; a compressed sum that overflows fails the tensor on every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/integration/model_graph.h"

namespace syncd::testing {
namespace {

// Rank r's gradient at step t, element i: small integers, different on every rank and step.
double Grad(int rank, int step, size_t i) { return double(int64_t((rank + 1) * (i % 7 + 1) * (step + 3)) % 11 - 5); }

// Two float64 tensors submitted together (one fused group: the residual of each is its own), the
// second longer than a pipeline segment.
const std::vector<int64_t> kCounts = {3'000, 200'000};

struct Case {
  int nodes, local;
  const char* coord;
  syncd_compression method;
  double ratio;
  int drain_steps;  // zero gradients after the real ones, for the residuals to cross
  double prescale = 1.0;  // not 1: the node sums are made outside the residuals (NodeSumAt)
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.nodes << "x" << c.local << "_" << c.coord << "_" << int(c.method);
}

constexpr int kSteps = 5;

// Under --coord topo, the two tensors' graph (ModelGraph's "grad.0" and "grad.1", concurrent: one
// group) with the case's method and ratio, as a framework binding registers it.
int RegisterPlan(syncd_client* c, int rank, const Case& k) {
  ModelGraph model(kCounts, SYNCD_FLOAT64);
  for (size_t t = 0; t < kCounts.size(); ++t) {
    syncd_graph_op& op = model.ops[2 * kCounts.size() + 1 + t];  // ModelGraph's op numbering
    op.compression = k.method;
    op.compression_ratio = k.ratio;
  }
  CHILD_CHECK(syncd_register_graph(c, &model.graph, 30'000, nullptr) == SYNCD_OK, "rank %d: %s", rank,
              syncd_last_error());
  return 0;
}

// Runs kSteps steps of gradients and `drain_steps` of zeros; returns in `applied` the sum of every
// result, per element of the two tensors laid end to end.
int Train(syncd_client* c, int rank, const Case& k, std::vector<double>* applied) {
  if (std::string(k.coord) == "topo" && RegisterPlan(c, rank, k) != 0) return 1;
  std::vector<std::vector<double>> v(kCounts.size());
  for (size_t t = 0; t < kCounts.size(); ++t) v[t].resize(size_t(kCounts[t]));
  applied->assign(size_t(kCounts[0] + kCounts[1]), 0.0);
  for (int step = 0; step < kSteps + k.drain_steps; ++step) {
    syncd_handle h[2];
    for (size_t t = 0; t < kCounts.size(); ++t) {
      const size_t base = t == 0 ? 0 : size_t(kCounts[0]);
      for (size_t i = 0; i < v[t].size(); ++i) v[t][i] = step < kSteps ? Grad(rank, step, base + i) : 0.0;
      const std::string name = "grad." + std::to_string(t);
      syncd_tensor tensor{name.c_str(), v[t].data(), SYNCD_FLOAT64, 1, &kCounts[t], 0};
      CHILD_CHECK(syncd_allreduce_compressed_ratio_async(c, &tensor, SYNCD_SUM, k.prescale, 1.0, k.method, k.ratio, &h[t]) ==
                      SYNCD_OK,
                  "rank %d step %d: %s", rank, step, syncd_last_error());
    }
    for (size_t t = 0; t < kCounts.size(); ++t) {
      CHILD_CHECK(syncd_wait(c, h[t], 60'000) == SYNCD_OK, "rank %d step %d: %s", rank, step, syncd_last_error());
      const size_t base = t == 0 ? 0 : size_t(kCounts[0]);
      for (size_t i = 0; i < v[t].size(); ++i) (*applied)[base + i] += v[t][i];
    }
  }
  return 0;
}

std::string FeedbackName(const ::testing::TestParamInfo<Case>& i) {
  const char* method = i.param.method == SYNCD_COMPRESSION_TOPK ? "topk" : "onebit";
  return std::to_string(i.param.nodes) + "x" + std::to_string(i.param.local) + "_" + i.param.coord + "_" + method +
         (i.param.prescale != 1.0 ? "_prescaled" : "");
}

class Feedback : public ::testing::TestWithParam<Case> {};

// Top-k: after the drain, every rank's sum of results is every rank's sum of gradients, exactly.
// 1-bit: its residuals shrink step by step without reaching zero; after 30
// zero steps the sum is within 1e-4 of the gradients' in norm (a model of the daemons' arithmetic
// says 8e-7 on 2 x 2; before the drain, 0.40).
TEST_P(Feedback, WhatWasAppliedPlusTheResidualsIsEveryGradient) {
  const Case k = GetParam();
  Cluster cluster(k.nodes, k.local, {"--cores", "none", "--log-level", "warn", "--coord", k.coord});
  auto st = RunClusterRanks(cluster, [k](syncd_client* c, int rank, int n) {
    std::vector<double> applied;
    if (Train(c, rank, k, &applied) != 0) return 1;
    double error = 0, norm = 0, applied_sum = 0, want_sum = 0;
    for (size_t i = 0; i < applied.size(); ++i) {
      double want = 0;
      for (int step = 0; step < kSteps; ++step)
        for (int r = 0; r < n; ++r) want += k.prescale * Grad(r, step, i);
      if (k.method != SYNCD_COMPRESSION_ONEBIT || k.nodes == 1)
        CHILD_CHECK(applied[i] == want, "rank %d element %zu: applied %.17g, the gradients sum to %.17g", rank, i,
                    applied[i], want);
      error += (applied[i] - want) * (applied[i] - want);
      norm += want * want;
      applied_sum += applied[i];
      want_sum += want;
    }
    // 1-bit: every block of 32 crosses its sum, so each tensor's sum is every gradient's from the
    // first step on (but for rounding); element by element, the residuals drain step by step.
    CHILD_CHECK(std::fabs(applied_sum - want_sum) <= 1e-9 * norm, "rank %d: applied sums to %.17g, the gradients to "
                "%.17g", rank, applied_sum, want_sum);
    CHILD_CHECK(std::sqrt(error) <= 1e-3 * std::sqrt(norm), "rank %d: error %.6g of %.6g", rank, std::sqrt(error),
                std::sqrt(norm));
    return 0;
  });
  ExpectAllSucceeded(st);
  const std::string status = SyncctlStatusJson(cluster.node(0).run_dir());
  if (k.nodes > 1) {  // the two tensors' residuals are held (top-k: all zero by now)
    EXPECT_TRUE(Contains(status, "\"residuals\":{\"tensors\":\"2\",\"bytes\":\"" +
                                     std::to_string((kCounts[0] + kCounts[1]) * 8) + "\""))
        << status;
  }
  if (std::string(k.coord) == "topo") {  // every step ran on the plan, at the plan's ratio
    EXPECT_TRUE(Contains(status, "\"in_use\":true")) << status;
    EXPECT_EQ(JsonNumber(status, "fallback_tensors"), 0u) << status;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, Feedback,
    ::testing::Values(Case{2, 2, "negotiate", SYNCD_COMPRESSION_TOPK, 0.25, 4},
                      Case{2, 2, "gs", SYNCD_COMPRESSION_TOPK, 0.25, 4},
                      Case{2, 2, "nbcs", SYNCD_COMPRESSION_TOPK, 0.25, 4},
                      Case{3, 1, "negotiate", SYNCD_COMPRESSION_TOPK, 0.25, 4},
                      Case{3, 1, "gs", SYNCD_COMPRESSION_TOPK, 0.25, 4},
                      Case{3, 1, "nbcs", SYNCD_COMPRESSION_TOPK, 0.25, 4},
                      Case{2, 2, "topo", SYNCD_COMPRESSION_TOPK, 0.25, 4},
                      Case{3, 1, "topo", SYNCD_COMPRESSION_TOPK, 0.25, 4},
                      Case{3, 1, "topo", SYNCD_COMPRESSION_ONEBIT, 0, 30},
                      Case{2, 2, "negotiate", SYNCD_COMPRESSION_TOPK, 0.25, 4, 0.5},
                      Case{2, 2, "negotiate", SYNCD_COMPRESSION_ONEBIT, 0, 30},
                      Case{3, 1, "gs", SYNCD_COMPRESSION_ONEBIT, 0, 30},
                      Case{1, 3, "negotiate", SYNCD_COMPRESSION_TOPK, 0.01, 0}),
    FeedbackName);

// Ranks that ask for another method, or top-k at another ratio, fail the tensor on every rank,
// named; the job goes on.
TEST(Feedback, AMethodOrRatioMismatchFailsOnEveryRankNamingTheTensor) {
  Cluster cluster(2, 2, {"--cores", "none", "--log-level", "error"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    std::vector<float> v(1000, 1.0f);
    int64_t count = 1000;
    auto run = [&](const char* name, syncd_compression method, double ratio) {
      syncd_tensor t{name, v.data(), SYNCD_FLOAT32, 1, &count, 0};
      syncd_handle h;
      int rc = syncd_allreduce_compressed_ratio_async(c, &t, SYNCD_SUM, 1.0, 1.0, method, ratio, &h);
      return rc == SYNCD_OK ? syncd_wait(c, h, 60'000) : rc;
    };
    int rc = run("method", rank >= 2 ? SYNCD_COMPRESSION_ONEBIT : SYNCD_COMPRESSION_TOPK, 0.1);
    std::string why = syncd_last_error();
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH && Contains(why, "'method'") && Contains(why, "onebit") &&
                    Contains(why, "topk (ratio 0.1)"),
                "rank %d: rc %d: %s", rank, rc, why.c_str());
    rc = run("ratio", SYNCD_COMPRESSION_TOPK, rank == 1 ? 0.02 : 0.01);
    why = syncd_last_error();
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH && Contains(why, "'ratio'") && Contains(why, "topk (ratio 0.02)"),
                "rank %d: rc %d: %s", rank, rc, why.c_str());
    CHILD_CHECK(run("bad.ratio", SYNCD_COMPRESSION_TOPK, 1.5) == SYNCD_ERR_INVALID &&
                    Contains(syncd_last_error(), "ratio"),
                "rank %d: %s", rank, syncd_last_error());
    std::fill(v.begin(), v.end(), 1.0f);
    CHILD_CHECK(run("after", SYNCD_COMPRESSION_TOPK, 1.0) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(v[0] == float(n) && v[999] == float(n), "after: got %g", v[0]);
    return 0;
  });
  ExpectAllSucceeded(st);
}

// --coord topo: the plan is the agreement, so it carries top-k's ratio. A plan that leaves it to the
// daemon gets --compression-ratio; a submission asking for that ratio runs on the plan, one asking
// for another fails every rank, naming the tensor and both ratios.
TEST(Feedback, TopoPlansCarryTheRatioAndAMismatchFailsEveryRank) {
  Cluster cluster(2, 1, {"--cores", "none", "--log-level", "error", "--coord", "topo", "--compression-ratio", "0.1"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int) {
    static const std::vector<int64_t> kOne = {1'000};
    ModelGraph model(kOne, SYNCD_FLOAT32);
    model.ops[3].compression = SYNCD_COMPRESSION_TOPK;  // the one allreduce (2L + 1); ratio 0: the daemon's
    CHILD_CHECK(syncd_register_graph(c, &model.graph, 30'000, nullptr) == SYNCD_OK, "rank %d: %s", rank,
                syncd_last_error());
    std::vector<float> v(1'000, 1.0f);
    auto run = [&](double ratio) {
      syncd_tensor t{"grad.0", v.data(), SYNCD_FLOAT32, 1, &kOne[0], 0};
      syncd_handle h;
      int rc = syncd_allreduce_compressed_ratio_async(c, &t, SYNCD_SUM, 1.0, 1.0, SYNCD_COMPRESSION_TOPK, ratio, &h);
      return rc == SYNCD_OK ? syncd_wait(c, h, 20'000) : rc;
    };
    CHILD_CHECK(run(0.1) == SYNCD_OK, "rank %d: the plan's ratio, asked for by name: %s", rank, syncd_last_error());
    const int rc = run(rank == 1 ? 0.02 : 0.1);
    const std::string why = syncd_last_error();
    CHILD_CHECK(rc != SYNCD_OK && Contains(why, "grad.0") && Contains(why, "TOPO plan"), "rank %d: %s", rank,
                why.c_str());
    if (rank == 1)
      CHILD_CHECK(Contains(why, "compression topk (ratio 0.02), the plan says topk (ratio 0.1)"), "%s", why.c_str());
    return 0;
  });
  ExpectAllSucceeded(st);
}

// Nodes whose graphs ask for another ratio (or PowerSGD rank) hold different plans: registration
// fails, naming the nodes, instead of top-k's blocks differing in size across the nodes.
TEST(Feedback, TopoPlansOfAnotherRatioDifferAcrossNodes) {
  Cluster cluster(2, 1, {"--cores", "none", "--log-level", "error", "--coord", "topo"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int) {
    ModelGraph model(kCounts, SYNCD_FLOAT64);
    for (size_t t = 0; t < kCounts.size(); ++t) {
      model.ops[2 * kCounts.size() + 1 + t].compression = t == 0 ? SYNCD_COMPRESSION_TOPK : SYNCD_COMPRESSION_POWERSGD;
      model.ops[2 * kCounts.size() + 1 + t].compression_ratio = t == 0 ? 0.01 : rank == 1 ? 2 : 4;
    }
    const int rc = syncd_register_graph(c, &model.graph, 30'000, nullptr);
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH && Contains(syncd_last_error(), "TOPO plans differ across nodes"),
                "rank %d: %s: %s", rank, syncd_status_name(rc), syncd_last_error());
    model.ops[2 * kCounts.size() + 1].compression_ratio = 1.5;
    CHILD_CHECK(syncd_register_graph(c, &model.graph, 30'000, nullptr) == SYNCD_ERR_INVALID &&
                    Contains(syncd_last_error(), "graph: tensor 'grad.0': compression ratio"),
                "rank %d: %s", rank, syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

// Under --compression topk, what leaves the choice to the daemon (DEFAULT) gets top-k and a residual;
// DEFAULT_CAST (the torch.distributed backend's numbered collectives, whose names never recur) travels
// exactly and leaves no residual behind.
TEST(Feedback, DefaultCastLeavesTheDaemonsFeedbackMethodOut) {
  Cluster cluster(2, 1, {"--cores", "none", "--log-level", "warn", "--compression", "topk", "--compression-ratio",
                         "0.1", "--compression-min-bytes", "0"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int) {
    auto run = [&](const char* name, syncd_compression compression, bool exact) {
      std::vector<float> v(1000);
      for (size_t i = 0; i < v.size(); ++i) v[i] = float(Grad(rank, 0, i));
      int64_t count = int64_t(v.size());
      syncd_tensor t{name, v.data(), SYNCD_FLOAT32, 1, &count, 0};
      syncd_handle h;
      CHILD_CHECK(syncd_allreduce_compressed_async(c, &t, SYNCD_SUM, 1.0, 1.0, compression, &h) == SYNCD_OK &&
                      syncd_wait(c, h, 60'000) == SYNCD_OK,
                  "%s: %s", name, syncd_last_error());
      size_t differ = 0;
      for (size_t i = 0; i < v.size(); ++i) differ += v[i] != float(Grad(0, 0, i) + Grad(1, 0, i));
      CHILD_CHECK(exact ? differ == 0 : differ > 500, "%s: %zu of 1000 elements differ from the exact sum", name,
                  differ);
      return 0;
    };
    if (run("cast.only", SYNCD_COMPRESSION_DEFAULT_CAST, true)) return 1;
    return run("default", SYNCD_COMPRESSION_DEFAULT, false);
  });
  ExpectAllSucceeded(st);
  const std::string status = SyncctlStatusJson(cluster.node(0).run_dir());
  EXPECT_TRUE(Contains(status, "\"residuals\":{\"tensors\":\"1\",\"bytes\":\"4000\"")) << status;
}

// The error-feedback methods sum what each node keeps: asked for with Min, Max or Product they are
// refused on every rank naming the tensor (before, top-k "reduced" a Min as a sum); the daemon's own
// --compression topk leaves such allreduces uncompressed, and they come out exact. 2 x 2.
TEST(Feedback, MethodsThatSumAreRefusedForMinMaxProductAndTheDaemonsLeavesThemOut) {
  Cluster cluster(2, 2, {"--cores", "none", "--log-level", "error", "--compression", "topk", "--compression-ratio",
                         "0.1", "--compression-min-bytes", "0"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    for (syncd_reduce_op op : {SYNCD_MIN, SYNCD_MAX, SYNCD_PRODUCT}) {
      for (syncd_compression method : {SYNCD_COMPRESSION_TOPK, SYNCD_COMPRESSION_ONEBIT, SYNCD_COMPRESSION_POWERSGD}) {
        float v[4] = {1, 2, 3, 4};
        int64_t count = 4;
        const std::string name = "refused." + std::to_string(op) + "." + std::to_string(method);
        syncd_tensor t{name.c_str(), v, SYNCD_FLOAT32, 1, &count, 0};
        syncd_handle h;
        int rc = syncd_allreduce_compressed_async(c, &t, op, 1.0, 1.0, method, &h);
        if (rc == SYNCD_OK) rc = syncd_wait(c, h, 30'000);
        CHILD_CHECK(rc == SYNCD_ERR_INVALID && strstr(syncd_last_error(), name.c_str()) != nullptr &&
                        strstr(syncd_last_error(), "cannot reduce with") != nullptr,
                    "rank %d: %s: %s: %s", rank, name.c_str(), syncd_status_name(rc), syncd_last_error());
      }
      std::vector<float> v(1000);
      for (size_t i = 0; i < v.size(); ++i) v[i] = float((rank + 1) * (i % 2 ? -1 : 1) * (1 + i % 3));
      int64_t count = int64_t(v.size());
      const std::string name = "default." + std::to_string(op);
      syncd_tensor t{name.c_str(), v.data(), SYNCD_FLOAT32, 1, &count, 0};
      syncd_handle h;
      CHILD_CHECK(syncd_allreduce_async(c, &t, op, 1.0, 1.0, &h) == SYNCD_OK && syncd_wait(c, h, 30'000) == SYNCD_OK,
                  "rank %d: %s: %s", rank, name.c_str(), syncd_last_error());
      for (size_t i = 0; i < v.size(); ++i) {
        double want = op == SYNCD_PRODUCT ? 1 : op == SYNCD_MIN ? INFINITY : -INFINITY;
        for (int r = 0; r < n; ++r) {
          const double x = (r + 1) * (i % 2 ? -1 : 1) * (1 + i % 3);
          want = op == SYNCD_PRODUCT ? want * x : op == SYNCD_MIN ? std::min(want, x) : std::max(want, x);
        }
        CHILD_CHECK(v[i] == float(want), "rank %d: %s[%zu] = %g, exactly %g uncompressed", rank, name.c_str(), i,
                    double(v[i]), want);
      }
    }
    return 0;
  });
  ExpectAllSucceeded(st);
}

// Top-k takes each tensor's own share, fused or not: a tensor of small gradients fused with one of
// large gradients still sends its k largest on the first step (one selection across the group
// would take the large one's only), and what crossed counts each tensor's k.
TEST(Feedback, TopKTakesEachFusedTensorsOwnShare) {
  // Cycles on a 200 ms timer only: the two submissions meet in one cycle and fuse.
  Cluster cluster(2, 1, {"--cores", "none", "--log-level", "warn", "--cycle-start", "timer", "--cycle-time-us", "200000"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int, int) {
    std::vector<float> big(10'001), small(999);
    for (size_t i = 0; i < big.size(); ++i) big[i] = 1000.f + float(i % 97);
    for (size_t i = 0; i < small.size(); ++i) small[i] = 1.f + float(i) / 1000.f;
    const int64_t counts[2] = {int64_t(big.size()), int64_t(small.size())};
    syncd_tensor t[2] = {{"share.big", big.data(), SYNCD_FLOAT32, 1, &counts[0], 0},
                         {"share.small", small.data(), SYNCD_FLOAT32, 1, &counts[1], 0}};
    syncd_handle h[2];
    for (int i = 0; i < 2; ++i)
      CHILD_CHECK(syncd_allreduce_compressed_ratio_async(c, &t[i], SYNCD_SUM, 1.0, 1.0, SYNCD_COMPRESSION_TOPK, 0.1,
                                                         &h[i]) == SYNCD_OK,
                  "%s", syncd_last_error());
    for (int i = 0; i < 2; ++i) CHILD_CHECK(syncd_wait(c, h[i], 60'000) == SYNCD_OK, "%s", syncd_last_error());
    size_t sent = 0;
    for (size_t i = 0; i < small.size(); ++i) {
      const bool largest = i >= small.size() - 100;  // the 100 largest, the same on both nodes
      const float want = largest ? 2.f * (1.f + float(i) / 1000.f) : 0.f;
      CHILD_CHECK(small[i] == want, "share.small[%zu] = %g, want %g", i, small[i], want);
      sent += largest;
    }
    size_t big_sent = 0;
    for (float v : big) big_sent += v != 0;
    CHILD_CHECK(sent == 100 && big_sent == 1001, "sent %zu of share.small, %zu of share.big", sent, big_sent);
    return 0;
  });
  ExpectAllSucceeded(st);
  // The flag word, then 1001 + 100 elements as indices and values, each array padded to 8 bytes:
  // 8 + 2 x 4408.
  const std::string status = SyncctlStatusJson(cluster.node(0).run_dir());
  EXPECT_TRUE(Contains(status, "{\"compression\":\"topk\",\"tensors\":\"2\",\"tensor_bytes\":\"44000\","
                               "\"wire_bytes\":\"8824\"}"))
      << status;
}

// --compression-residual-bytes bounds the residuals: a tensor whose residual does not fit goes
// without feedback (counted), others evict the least recently used; the next job starts with none.
TEST(Feedback, ResidualsStayWithinTheirBoundAndGoWithTheJob) {
  Cluster cluster(2, 1, {"--cores", "none", "--log-level", "warn", "--compression-residual-bytes", "100K"});
  auto job = [&](const std::vector<std::pair<std::string, int64_t>>& tensors) {
    return RunClusterRanks(cluster, [tensors](syncd_client* c, int rank, int) {
      for (const auto& [name, count] : tensors) {
        std::vector<float> v(size_t(count), float(rank + 1));
        syncd_tensor t{name.c_str(), v.data(), SYNCD_FLOAT32, 1, &count, 0};
        syncd_handle h;
        CHILD_CHECK(syncd_allreduce_compressed_ratio_async(c, &t, SYNCD_SUM, 1.0, 1.0, SYNCD_COMPRESSION_TOPK, 0.5,
                                                           &h) == SYNCD_OK &&
                        syncd_wait(c, h, 60'000) == SYNCD_OK,
                    "%s: %s", name.c_str(), syncd_last_error());
      }
      return 0;
    });
  };
  // 40 000 B, 40 000 B, then 40 000 B again: the third evicts the first; 400 000 B never fits.
  ExpectAllSucceeded(job({{"a", 10'000}, {"b", 10'000}, {"c", 10'000}, {"huge", 100'000}}));
  std::string status = SyncctlStatusJson(cluster.node(0).run_dir());
  EXPECT_TRUE(Contains(status, "\"residuals\":{\"tensors\":\"2\",\"bytes\":\"80000\",\"capacity_bytes\":\"102400\","
                               "\"evicted\":\"1\",\"refused\":\"1\""))
      << status;
  ExpectAllSucceeded(job({{"d", 10}}));
  status = SyncctlStatusJson(cluster.node(0).run_dir());
  EXPECT_TRUE(Contains(status, "\"tensors\":\"1\",\"bytes\":\"40\"")) << status;
  EXPECT_TRUE(Contains(status, "\"cleared\":\"2\"")) << status;
  EXPECT_TRUE(Contains(SyncctlStatus(cluster.node(0).run_dir()), "residuals  1 tensors' error feedback"));
}

// Random-k is withdrawn (it does not train under momentum): asked for, it fails on the rank that
// asked, naming the tensor and why; the job goes on.
TEST(Feedback, RandomKIsRefusedNamingTheTensorAndWhy) {
  Cluster cluster(2, 1, {"--cores", "none", "--log-level", "error"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    std::vector<float> v(1000, 1.0f);
    int64_t count = 1000;
    syncd_tensor t{"grad.randomk", v.data(), SYNCD_FLOAT32, 1, &count, 0};
    syncd_handle h;
    int rc = syncd_allreduce_compressed_ratio_async(c, &t, SYNCD_SUM, 1.0, 1.0, SYNCD_COMPRESSION_RANDOMK, 0.01, &h);
    if (rc == SYNCD_OK) rc = syncd_wait(c, h, 30'000);
    CHILD_CHECK(rc == SYNCD_ERR_INVALID && Contains(syncd_last_error(), "grad.randomk") &&
                    Contains(syncd_last_error(), "random-k compression is withdrawn") &&
                    Contains(syncd_last_error(), "use topk"),
                "rank %d: %s: %s", rank, syncd_status_name(rc), syncd_last_error());
    t.name = "after";
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h) == SYNCD_OK && syncd_wait(c, h, 30'000) == SYNCD_OK &&
                    v[0] == float(n),
                "rank %d: %s", rank, syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

// Values that are not finite, per method, on 2 x 2 and 3 x 1 (float32, 1,000 elements):
//  - a NaN in one rank's gradient comes out where the sum carries it (its element; 1-bit: with
//    the elements of its block of 32 that its node sent below zero), and leaves no residual: the next
//    step's finite gradients come out finite (before, 1-bit's residual kept the NaN and every
//    later step of the tensor was NaN);
//  - finite gradients whose compressed sum overflows float32 (each node's sum is 2e38 on 2 nodes,
//    1.5e38 on 3) fail the tensor on every rank, naming it, the method and the step; the job goes
//    on, exact.
struct NotFiniteCase {
  int nodes, local;
  syncd_compression method;
};
class NotFinite : public ::testing::TestWithParam<NotFiniteCase> {};

TEST_P(NotFinite, ANanPassesAndLeavesNoResidualAnOverflowFailsEveryRankNamed) {
  const NotFiniteCase k = GetParam();
  Cluster cluster(k.nodes, k.local, {"--cores", "none", "--log-level", "error"});
  auto st = RunClusterRanks(cluster, [k](syncd_client* c, int rank, int n) {
    constexpr size_t kCount = 1000;
    constexpr size_t kNan = 100;
    std::vector<float> v(kCount);
    int64_t count = kCount;
    auto run = [&](const char* name) {
      syncd_tensor t{name, v.data(), SYNCD_FLOAT32, 1, &count, 0};
      syncd_handle h;
      int rc = syncd_allreduce_compressed_ratio_async(c, &t, SYNCD_SUM, 1.0, 1.0, k.method,
                                                      k.method == SYNCD_COMPRESSION_TOPK ? 1.0 : 0.0, &h);
      return rc == SYNCD_OK ? syncd_wait(c, h, 30'000) : rc;
    };
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < kCount; ++i) v[i] = float(1 + (i + size_t(rank)) % 5);
      if (step == 1 && rank == 0) v[kNan] = NAN;
      CHILD_CHECK(run("grad.nan") == SYNCD_OK, "rank %d step %d: %s", rank, step, syncd_last_error());
      for (size_t i = 0; i < kCount; ++i) {
        const bool in_nan = step == 1 && i == kNan;
        const bool may_be_nan = step == 1 && k.method == SYNCD_COMPRESSION_ONEBIT && i / 32 == kNan / 32;
        CHILD_CHECK(in_nan ? std::isnan(v[i]) : may_be_nan || std::isfinite(v[i]), "rank %d step %d: grad.nan[%zu] = %g",
                    rank, step, i, double(v[i]));
      }
    }
    const float each = (k.nodes == 2 ? 2e38f : 1.5e38f) / float(k.local);  // a node's sum
    for (int step = 0; step < 2; ++step) {
      std::fill(v.begin(), v.end(), step == 0 ? 1.0f : each);
      const int rc = run("grad.huge");
      const std::string why = syncd_last_error();
      if (step == 0) {
        CHILD_CHECK(rc == SYNCD_OK && v[0] == float(n), "rank %d: %s: %g", rank, why.c_str(), double(v[0]));
        continue;
      }
      CHILD_CHECK(rc == SYNCD_ERR_INVALID && Contains(why, "tensor 'grad.huge'") &&
                      Contains(why, std::string(k.method == SYNCD_COMPRESSION_TOPK ? "topk" : "onebit") +
                                        "-compressed exchange (step 2 of the tensor)") &&
                      Contains(why, "not finite") && Contains(why, "overflows float32"),
                  "rank %d: %s: %s", rank, syncd_status_name(rc), why.c_str());
    }
    std::fill(v.begin(), v.end(), 1.0f);
    count = 10;
    syncd_tensor t{"after", v.data(), SYNCD_FLOAT32, 1, &count, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h) == SYNCD_OK && syncd_wait(c, h, 30'000) == SYNCD_OK &&
                    v[0] == float(n),
                "rank %d: %s", rank, syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

INSTANTIATE_TEST_SUITE_P(Methods, NotFinite,
                         ::testing::Values(NotFiniteCase{2, 2, SYNCD_COMPRESSION_TOPK},
                                           NotFiniteCase{3, 1, SYNCD_COMPRESSION_TOPK},
                                           NotFiniteCase{2, 2, SYNCD_COMPRESSION_ONEBIT},
                                           NotFiniteCase{3, 1, SYNCD_COMPRESSION_ONEBIT}),
                         [](const ::testing::TestParamInfo<NotFiniteCase>& i) {
                           return std::to_string(i.param.nodes) + "x" + std::to_string(i.param.local) + "_" +
                                  (i.param.method == SYNCD_COMPRESSION_TOPK ? "topk" : "onebit");
                         });

}  // namespace
}  // namespace syncd::testing
