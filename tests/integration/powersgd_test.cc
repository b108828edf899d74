// PowerSGD on the inter-node hop (daemon/collectives/allreduce/powersgd.cc), through real daemons:
// a matrix crosses the nodes as two factors of the asked rank, with error feedback, so a step's
// result is not the exact sum, but over the steps what was applied plus what the daemons hold is
// every gradient. What they hold is handed over by a last step of zeros under top-k at ratio 1
// (the residual is the tensor name's, whatever the method: top-k sends all of it): the sum of
// every result then comes within 1e-12 of the sum of every gradient (float64; PowerSGD's own
// drain is geometric, 3 % left after 40 steps of zeros on 2 x 1). Tensors of one dimension, and
// matrices the factors would not shrink, cross as they are: exact at every step. A rank mismatch
// fails on every rank, naming the tensor and both ranks.
#include <gtest/gtest.h>
#include <sys/mman.h>

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

struct Tensor {
  const char* name;
  std::vector<int64_t> shape;
  bool factored;  // at rank 4
};
// A matrix (crosses as factors), a bias (as it is) and a matrix too small to gain (as it is).
const std::vector<Tensor> kTensors = {{"psgd.weight", {12, 50}, true}, {"psgd.bias", {12}, false},
                                      {"psgd.small", {3, 4}, false}};
constexpr int kSteps = 5, kZeroSteps = 5;  // then the hand-over
constexpr uint32_t kRank = 4;

struct Case {
  int nodes, local;
  const char* coord;
};

class PowerSgd : public ::testing::TestWithParam<Case> {};

TEST_P(PowerSgd, WhatWasAppliedPlusTheResidualsIsEveryGradient) {
  const Case k = GetParam();
  Cluster cluster(k.nodes, k.local, {"--cores", "none", "--log-level", "warn", "--coord", k.coord});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    std::vector<std::vector<double>> v, applied;
    for (const Tensor& t : kTensors) {
      size_t count = 1;
      for (int64_t d : t.shape) count *= size_t(d);
      v.emplace_back(count);
      applied.emplace_back(count, 0.0);
    }
    bool inexact = false;  // some step's factored result was not the exact sum
    for (int step = 0; step <= kSteps + kZeroSteps; ++step) {
      const bool hand_over = step == kSteps + kZeroSteps;
      std::vector<syncd_handle> hs(kTensors.size());
      for (size_t t = 0; t < kTensors.size(); ++t) {
        for (size_t i = 0; i < v[t].size(); ++i) v[t][i] = step < kSteps ? Grad(rank, step, i) : 0.0;
        syncd_tensor tensor{kTensors[t].name, v[t].data(), SYNCD_FLOAT64, int(kTensors[t].shape.size()),
                            kTensors[t].shape.data(), 0};
        CHILD_CHECK(syncd_allreduce_compressed_ratio_async(
                        c, &tensor, SYNCD_SUM, 1.0, 1.0, hand_over ? SYNCD_COMPRESSION_TOPK : SYNCD_COMPRESSION_POWERSGD,
                        hand_over ? 1.0 : kRank, &hs[t]) == SYNCD_OK,
                    "rank %d step %d: %s", rank, step, syncd_last_error());
      }
      for (size_t t = 0; t < kTensors.size(); ++t) {
        CHILD_CHECK(syncd_wait(c, hs[t], 60'000) == SYNCD_OK, "rank %d step %d: %s", rank, step, syncd_last_error());
        for (size_t i = 0; i < v[t].size(); ++i) {
          double exact = 0;
          for (int r = 0; r < n; ++r) exact += step < kSteps ? Grad(r, step, i) : 0.0;
          if (!kTensors[t].factored)
            CHILD_CHECK(v[t][i] == exact, "rank %d step %d %s[%zu]: %.17g, the exact sum %.17g", rank, step,
                        kTensors[t].name, i, v[t][i], exact);
          else if (step == 0 && std::fabs(v[t][i] - exact) > 1e-6)
            inexact = true;
          applied[t][i] += v[t][i];
        }
      }
    }
    CHILD_CHECK(inexact, "rank %d: the first step's factored result was exact: nothing was compressed", rank);
    for (size_t t = 0; t < kTensors.size(); ++t) {
      double error = 0, norm = 0;
      for (size_t i = 0; i < applied[t].size(); ++i) {
        double want = 0;
        for (int step = 0; step < kSteps; ++step)
          for (int r = 0; r < n; ++r) want += Grad(r, step, i);
        error += (applied[t][i] - want) * (applied[t][i] - want);
        norm += want * want;
      }
      CHILD_CHECK(std::sqrt(error) <= 1e-12 * std::sqrt(norm), "rank %d %s: applied is %.3g from the gradients' sum "
                  "(norm %.3g)", rank, kTensors[t].name, std::sqrt(error), std::sqrt(norm));
    }
    return 0;
  });
  ExpectAllSucceeded(st);
  // The daemons count what crossed: the matrix as (12 + 50) x 4 values, the others whole.
  const std::string status = SyncctlStatusJson(cluster.node(0).run_dir());
  const uint64_t tensor_bytes = (12 * 50 + 12 + 12) * 8, wire_bytes = ((12 + 50) * kRank + 12 + 12) * 8;
  const int steps = kSteps + kZeroSteps;
  const std::string counted = "{\"compression\":\"powersgd\",\"tensors\":\"" + std::to_string(3 * steps) +
                              "\",\"tensor_bytes\":\"" + std::to_string(tensor_bytes * steps) +
                              "\",\"wire_bytes\":\"" + std::to_string(wire_bytes * steps) + "\"}";
  EXPECT_TRUE(Contains(status, counted)) << counted << "\n" << status;
}

INSTANTIATE_TEST_SUITE_P(Modes, PowerSgd,
                         ::testing::Values(Case{2, 2, "negotiate"}, Case{3, 1, "gs"}, Case{2, 1, "nbcs"}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::to_string(i.param.nodes) + "x" + std::to_string(i.param.local) + "_" +
                                  i.param.coord;
                         });

// --coord topo: the plan carries PowerSGD's rank (here 2, the daemons' default being 4) and every
// step's result is the negotiated job's, bit for bit (the first factor comes from the tensor's
// name, the work per member is the same whatever the grouping), so the property above holds
// under TOPO too. (Its hand-over cannot be repeated here: a plan fixes each tensor's method.)
TEST(PowerSgd, UnderTopoEveryStepIsTheNegotiatedJobsBitForBit) {
  constexpr uint32_t kPlanRank = 2;
  constexpr int kRanks = 4, kTopoSteps = kSteps + kZeroSteps;
  size_t per_step = 0;
  for (const Tensor& t : kTensors) per_step += size_t(t.shape.size() == 2 ? t.shape[0] * t.shape[1] : t.shape[0]);
  const size_t per_mode = size_t(kRanks) * kTopoSteps * per_step;
  const size_t bytes = 2 * per_mode * sizeof(double);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  double* results = static_cast<double*>(p);
  for (int mode = 0; mode < 2; ++mode) {
    const bool topo = mode == 1;
    Cluster cluster(2, 2, {"--cores", "none", "--log-level", "warn", "--coord", topo ? "topo" : "negotiate"});
    auto st = RunClusterRanks(cluster, [&](syncd_client* c, int rank, int) {
      std::vector<int64_t> counts;
      for (const Tensor& t : kTensors) counts.push_back(t.shape.size() == 2 ? t.shape[0] * t.shape[1] : t.shape[0]);
      if (topo) {
        ModelGraph model(counts, SYNCD_FLOAT64);
        for (size_t t = 0; t < counts.size(); ++t) {
          model.ops[2 * counts.size() + 1 + t].compression = SYNCD_COMPRESSION_POWERSGD;
          model.ops[2 * counts.size() + 1 + t].compression_ratio = kPlanRank;
        }
        CHILD_CHECK(syncd_register_graph(c, &model.graph, 30'000, nullptr) == SYNCD_OK, "rank %d: %s", rank,
                    syncd_last_error());
      }
      double* out = results + size_t(mode) * per_mode + size_t(rank) * kTopoSteps * per_step;
      for (int step = 0; step < kTopoSteps; ++step) {
        std::vector<syncd_handle> hs(kTensors.size());
        for (size_t t = 0, at = 0; t < kTensors.size(); at += size_t(counts[t]), ++t) {
          double* v = out + size_t(step) * per_step + at;
          for (size_t i = 0; i < size_t(counts[t]); ++i) v[i] = step < kSteps ? Grad(rank, step, i) : 0.0;
          const std::string name = "grad." + std::to_string(t);  // ModelGraph's names
          syncd_tensor tensor{name.c_str(), v, SYNCD_FLOAT64, int(kTensors[t].shape.size()), kTensors[t].shape.data(), 0};
          CHILD_CHECK(syncd_allreduce_compressed_ratio_async(c, &tensor, SYNCD_SUM, 1.0, 1.0, SYNCD_COMPRESSION_POWERSGD,
                                                             kPlanRank, &hs[t]) == SYNCD_OK,
                      "rank %d step %d: %s", rank, step, syncd_last_error());
        }
        for (syncd_handle h : hs)
          CHILD_CHECK(syncd_wait(c, h, 60'000) == SYNCD_OK, "rank %d step %d: %s", rank, step, syncd_last_error());
      }
      return 0;
    });
    ExpectAllSucceeded(st);
    if (!topo) continue;
    const std::string status = SyncctlStatusJson(cluster.node(0).run_dir());
    EXPECT_TRUE(Contains(status, "\"in_use\":true")) << status;
    EXPECT_EQ(JsonNumber(status, "fallback_tensors"), 0u) << status;
    const uint64_t wire_bytes = ((12 + 50) * kPlanRank + 12 + 12) * 8;  // the plan's rank crossed
    EXPECT_TRUE(Contains(status, "\"wire_bytes\":\"" + std::to_string(wire_bytes * kTopoSteps) + "\"}")) << status;
  }
  size_t differ = 0, first = per_mode;
  for (size_t i = 0; i < per_mode; ++i)
    if (memcmp(&results[i], &results[per_mode + i], sizeof(double)) != 0 && differ++ == 0) first = i;
  EXPECT_EQ(differ, 0u) << "first at " << first << ": negotiated " << results[first] << ", TOPO "
                        << results[per_mode + first];
  bool inexact = false;  // step 0's matrix crossed as factors: not the exact sum (rank 0's, topo's)
  for (size_t i = 0; i < 12 * 50; ++i) {
    double exact = 0;
    for (int r = 0; r < kRanks; ++r) exact += Grad(r, 0, i);
    inexact = inexact || std::fabs(results[per_mode + i] - exact) > 1e-6;
  }
  EXPECT_TRUE(inexact) << "nothing was compressed";
  munmap(p, bytes);
}

// Ranks that ask for another rank fail the tensor on every rank, naming it and both ranks; a rank
// outside 1..1024 is refused at once by the client.
TEST(PowerSgd, ARankMismatchFailsOnEveryRankNamingTheTensor) {
  Cluster cluster(2, 1, {"--cores", "none", "--log-level", "error"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int) {
    std::vector<float> v(600, 1.0f);
    const int64_t shape[2] = {12, 50};
    syncd_tensor t{"rank.mismatch", v.data(), SYNCD_FLOAT32, 2, shape, 0};
    syncd_handle h;
    int rc = syncd_allreduce_compressed_ratio_async(c, &t, SYNCD_SUM, 1.0, 1.0, SYNCD_COMPRESSION_POWERSGD,
                                                    rank == 0 ? 4 : 2, &h);
    if (rc == SYNCD_OK) rc = syncd_wait(c, h, 60'000);
    const std::string why = syncd_last_error();
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH && Contains(why, "'rank.mismatch'") && Contains(why, "powersgd (rank 2)") &&
                    Contains(why, "powersgd (rank 4)"),
                "rank %d: %s: %s", rank, syncd_status_name(rc), why.c_str());
    rc = syncd_allreduce_compressed_ratio_async(c, &t, SYNCD_SUM, 1.0, 1.0, SYNCD_COMPRESSION_POWERSGD, 2.5, &h);
    CHILD_CHECK(rc == SYNCD_ERR_INVALID && Contains(syncd_last_error(), "PowerSGD rank"), "rank %d: %s", rank,
                syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

}  // namespace
}  // namespace syncd::testing
