// Compression of an allreduce's inter-node hop (syncd_allreduce_compressed_async, --compression):
// the node's ranks reduce exactly, the sum crosses the nodes in half precision, every rank of a
// collective must ask for the same.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "daemon/core/reduce_kernels.h"
#include "tests/integration/harness.h"
#include "tests/integration/model_graph.h"

namespace syncd::testing {
namespace {

// Neither representable in half precision nor in bfloat16, different on every rank.
double Input(int rank, size_t i) { return 1.0 + double(i % 1000) * 1e-3 + rank * 0.3333; }

int AllreduceAs(syncd_client* c, const std::string& name, void* data, syncd_dtype dt, int64_t count,
                syncd_compression compression) {
  syncd_tensor t{name.c_str(), data, dt, 1, &count, 0};
  syncd_handle h;
  if (int rc = syncd_allreduce_compressed_async(c, &t, SYNCD_SUM, 1.0, 1.0, compression, &h); rc != SYNCD_OK) return rc;
  return syncd_wait(c, h, 60'000);
}

// syncctl status's JSON entry for what a daemon compressed: `tensors` tensors, their float32 and
// float64 bytes, and the bytes they crossed the nodes as.
std::string CompressedEntry(const char* compression, uint64_t tensors, uint64_t f32_bytes, uint64_t f64_bytes,
                            uint64_t wire_bytes) {
  return std::string("{\"compression\":\"") + compression + "\",\"tensors\":\"" + std::to_string(tensors) +
         "\",\"tensor_bytes\":\"" + std::to_string(f32_bytes + f64_bytes) + "\",\"wire_bytes\":\"" +
         std::to_string(wire_bytes) + "\"}";
}

float ThroughWire(float v, syncd_compression compression) {
  return compression == SYNCD_COMPRESSION_FP16 ? HalfToFloat(FloatToHalf(v)) : Bfloat16ToFloat(FloatToBfloat16(v));
}

// A float32 sum over two nodes of `local` ranks each, as the daemons compute it: each node's sum
// exact in float32 (ranks in order), cast to the wire type, the two added in float and rounded to
// the wire type once, cast back.
float TwoNodeSum(size_t i, int local, syncd_compression compression) {
  float node_sum[2] = {0, 0};
  for (int node = 0; node < 2; ++node)
    for (int l = 0; l < local; ++l) node_sum[node] += float(Input(node * local + l, i));
  return ThroughWire(ThroughWire(node_sum[0], compression) + ThroughWire(node_sum[1], compression), compression);
}

struct Case {
  int nodes, local;
  const char* coord;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.nodes << "x" << c.local << "_" << c.coord; }

class Compressed : public ::testing::TestWithParam<Case> {};

// fp16 and bf16, float32 (more than one pipeline segment) and float64: within the wire type's
// rounding of the exact sum, and not exact (it did cross in half precision); on two nodes exactly
// the model's value. On one node nothing crosses: exact.
TEST_P(Compressed, TheSumCrossesNodesInHalfPrecisionAndTheNodesReduceExactly) {
  const Case k = GetParam();
  Cluster cluster(k.nodes, k.local, {"--cores", "none", "--log-level", "warn", "--coord", k.coord});
  auto st = RunClusterRanks(cluster, [k](syncd_client* c, int rank, int n) {
    for (syncd_compression compression : {SYNCD_COMPRESSION_FP16, SYNCD_COMPRESSION_BF16}) {
      const double unit = compression == SYNCD_COMPRESSION_FP16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      const size_t count = 300'001;  // 1.2 MB of float32: two segments of the pipeline
      std::vector<float> f(count);
      std::vector<double> d(count);
      for (size_t i = 0; i < count; ++i) f[i] = float(d[i] = Input(rank, i));
      const std::string suffix = compression == SYNCD_COMPRESSION_FP16 ? ".fp16" : ".bf16";
      CHILD_CHECK(AllreduceAs(c, "f32" + suffix, f.data(), SYNCD_FLOAT32, int64_t(count), compression) == SYNCD_OK,
                  "%s", syncd_last_error());
      CHILD_CHECK(AllreduceAs(c, "f64" + suffix, d.data(), SYNCD_FLOAT64, int64_t(count), compression) == SYNCD_OK,
                  "%s", syncd_last_error());
      size_t inexact = 0;
      for (size_t i = 0; i < count; ++i) {
        double exact = 0;
        for (int r = 0; r < n; ++r) exact += Input(r, i);
        const double bound = 2.0 * k.nodes * unit * exact;  // each node's cast, then each addition's rounding
        CHILD_CHECK(std::fabs(f[i] - exact) <= bound && std::fabs(d[i] - exact) <= bound,
                    "%s element %zu: got %.9g and %.9g, exact %.9g", suffix.c_str(), i, f[i], d[i], exact);
        if (k.nodes == 1) {
          float local = 0;
          for (int r = 0; r < n; ++r) local += float(Input(r, i));
          CHILD_CHECK(f[i] == local && std::fabs(d[i] - exact) < 1e-12, "one node: element %zu inexact", i);
        } else if (k.nodes == 2) {
          const float want = TwoNodeSum(i, k.local, compression);
          CHILD_CHECK(f[i] == want, "%s element %zu: got %.9g, the model says %.9g", suffix.c_str(), i, f[i], want);
        }
        inexact += double(f[i]) != double(float(exact));
      }
      if (k.nodes > 1) CHILD_CHECK(inexact > count / 2, "%s: only %zu of %zu inexact", suffix.c_str(), inexact, count);
    }
    return 0;
  });
  ExpectAllSucceeded(st);
  // Each daemon counts the tensors whose sum it sent compressed: a float32 and a float64 tensor of
  // 300,001 elements per compression, each as 300,001 halves; on one node, none.
  const std::string status = SyncctlStatusJson(cluster.node(k.nodes - 1).run_dir());
  if (k.nodes == 1) {
    EXPECT_TRUE(Contains(status, "\"compressed\":[]")) << status;
  } else {
    for (const char* compression : {"fp16", "bf16"})
      EXPECT_TRUE(Contains(status, CompressedEntry(compression, 2, 300'001 * 4, 300'001 * 8, 2 * 300'001 * 2)))
          << compression << ": " << status;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Compressed,
                         ::testing::Values(Case{2, 2, "negotiate"}, Case{2, 2, "gs"}, Case{2, 2, "nbcs"},
                                           Case{3, 1, "negotiate"}, Case{3, 1, "gs"}, Case{3, 1, "nbcs"},
                                           Case{1, 3, "negotiate"}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::to_string(i.param.nodes) + "x" + std::to_string(i.param.local) + "_" +
                                  i.param.coord;
                         });

// A rank that asks for another compression than the others fails the tensor on every rank, named,
// whether it differs from its own node's ranks or another node's; the job goes on.
TEST(Compression, AMismatchFailsOnEveryRankNamingTheTensorAndTheJobGoesOn) {
  Cluster cluster(2, 2, {"--cores", "none", "--log-level", "error"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    std::vector<float> v(1000, 1.0f);
    // "in.node": rank 0 against its node's rank 1; "across": node 1 against node 0.
    int rc = AllreduceAs(c, "in.node", v.data(), SYNCD_FLOAT32, 1000,
                         rank == 0 ? SYNCD_COMPRESSION_FP16 : SYNCD_COMPRESSION_NONE);
    std::string why = syncd_last_error();
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH && why.find("'in.node'") != std::string::npos &&
                    why.find("compression") != std::string::npos,
                "rank %d: rc %d: %s", rank, rc, why.c_str());
    rc = AllreduceAs(c, "across", v.data(), SYNCD_FLOAT32, 1000,
                     rank >= 2 ? SYNCD_COMPRESSION_BF16 : SYNCD_COMPRESSION_FP16);
    why = syncd_last_error();
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH && why.find("'across'") != std::string::npos &&
                    why.find("compression") != std::string::npos,
                "rank %d: rc %d: %s", rank, rc, why.c_str());
    std::fill(v.begin(), v.end(), 1.0f);
    CHILD_CHECK(AllreduceAs(c, "after", v.data(), SYNCD_FLOAT32, 1000, SYNCD_COMPRESSION_FP16) == SYNCD_OK, "%s",
                syncd_last_error());
    CHILD_CHECK(v[0] == float(n) && v[999] == float(n), "after: got %g", v[0]);
    return 0;
  });
  ExpectAllSucceeded(st);
}

// --compression: what the ranks leave to the daemon (DEFAULT, and DEFAULT_CAST where the daemon's
// choice is a cast) is compressed from --compression-min-bytes on; smaller tensors, an explicit
// NONE and integers travel exactly.
TEST(Compression, TheDaemonsDefaultAppliesFromItsMinimumSizeOnAndAnExplicitChoiceWins) {
  Cluster cluster(2, 2,
                  {"--cores", "none", "--log-level", "warn", "--compression", "bf16", "--compression-min-bytes", "4K"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    CHILD_CHECK(n == 4, "2 x 2");
    auto run = [&](const char* name, size_t count, syncd_compression compression, bool compressed) {
      std::vector<float> v(count);
      for (size_t i = 0; i < count; ++i) v[i] = float(Input(rank, i));
      CHILD_CHECK(AllreduceAs(c, name, v.data(), SYNCD_FLOAT32, int64_t(count), compression) == SYNCD_OK, "%s: %s",
                  name, syncd_last_error());
      for (size_t i = 0; i < count; ++i) {
        // Uncompressed: each node's sum, then the two added (float32 throughout).
        const float exact = (float(Input(0, i)) + float(Input(1, i))) + (float(Input(2, i)) + float(Input(3, i)));
        const float want = compressed ? TwoNodeSum(i, 2, SYNCD_COMPRESSION_BF16) : exact;
        CHILD_CHECK(v[i] == want, "%s element %zu: got %.9g want %.9g", name, i, v[i], want);
      }
      return 0;
    };
    if (run("default.big", 1024, SYNCD_COMPRESSION_DEFAULT, true)) return 1;  // 4 KiB: compressed
    if (run("default.small", 1023, SYNCD_COMPRESSION_DEFAULT, false)) return 1;
    if (run("default_cast.big", 1024, SYNCD_COMPRESSION_DEFAULT_CAST, true)) return 1;
    if (run("explicit.none", 4096, SYNCD_COMPRESSION_NONE, false)) return 1;
    std::vector<int32_t> ints(4096, rank + 1);
    int64_t count = 4096;
    syncd_tensor t{"ints", ints.data(), SYNCD_INT32, 1, &count, 0};
    syncd_handle h;
    CHILD_CHECK(
        syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h) == SYNCD_OK && syncd_wait(c, h, 60'000) == SYNCD_OK,
        "ints: %s", syncd_last_error());
    CHILD_CHECK(ints[4095] == n * (n + 1) / 2, "ints: got %d", ints[4095]);
    return 0;
  });
  ExpectAllSucceeded(st);
  // syncctl status says so.
  const std::string status = SyncctlStatusJson(cluster.node(1).run_dir());
  EXPECT_TRUE(Contains(status, "\"compression\":\"bf16\",\"compression_min_bytes\":\"4096\"")) << status;
  // Only "default.big" and "default_cast.big" crossed compressed: 1,024 float32 as 1,024 bfloat16 each.
  EXPECT_TRUE(Contains(status, "\"compressed\":[" + CompressedEntry("bf16", 2, 8192, 0, 4096) + "]")) << status;
}

// --coord topo: the registered graph carries each gradient's compression (fp16, bf16, none here);
// plan-driven steps cast exactly as negotiated ones (the two-node model), a group never mixes
// compressions, and no tensor falls back to negotiation.
TEST(Compression, TopoPlansCarryEachTensorsCompression) {
  Cluster cluster(2, 2, {"--cores", "none", "--log-level", "warn", "--coord", "topo", "--fusion-threshold", "1M"});
  static const std::vector<int64_t> kCounts = {300'001, 1'000, 5'000};
  static const syncd_compression kAsked[] = {SYNCD_COMPRESSION_FP16, SYNCD_COMPRESSION_BF16, SYNCD_COMPRESSION_NONE};
  constexpr int kSteps = 3;
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int) {
    ModelGraph model(kCounts, SYNCD_FLOAT32);
    const size_t first_allreduce = 2 * kCounts.size() + 1;  // ModelGraph's op numbering
    for (size_t i = 0; i < kCounts.size(); ++i) model.ops[first_allreduce + i].compression = kAsked[i];
    CHILD_CHECK(syncd_register_graph(c, &model.graph, 30'000, nullptr) == SYNCD_OK, "rank %d: %s", rank,
                syncd_last_error());
    std::vector<std::vector<float>> grads(kCounts.size());
    for (int step = 0; step < kSteps; ++step) {
      std::vector<syncd_handle> hs(kCounts.size());
      for (size_t i = kCounts.size(); i-- > 0;) {  // backward: the last layer's first
        grads[i].resize(size_t(kCounts[i]));
        for (size_t k = 0; k < grads[i].size(); ++k) grads[i][k] = float(Input(rank, k + size_t(step)));
        const std::string name = "grad." + std::to_string(i);
        syncd_tensor t{name.c_str(), grads[i].data(), SYNCD_FLOAT32, 1, &kCounts[i], 0};
        CHILD_CHECK(syncd_allreduce_compressed_async(c, &t, SYNCD_SUM, 1.0, 1.0, kAsked[i], &hs[i]) == SYNCD_OK, "%s",
                    syncd_last_error());
      }
      for (size_t i = 0; i < kCounts.size(); ++i) {
        CHILD_CHECK(syncd_wait(c, hs[i], 60'000) == SYNCD_OK, "step %d grad.%zu: %s", step, i, syncd_last_error());
        for (size_t k = 0; k < grads[i].size(); ++k) {
          const size_t e = k + size_t(step);
          const float want = kAsked[i] == SYNCD_COMPRESSION_NONE
                                 ? (float(Input(0, e)) + float(Input(1, e))) + (float(Input(2, e)) + float(Input(3, e)))
                                 : TwoNodeSum(e, 2, kAsked[i]);
          CHILD_CHECK(grads[i][k] == want, "step %d grad.%zu[%zu]: got %.9g, want %.9g", step, i, k, grads[i][k], want);
        }
      }
    }
    return 0;
  });
  ExpectAllSucceeded(st);
  const std::string status = SyncctlStatusJson(cluster.node(1).run_dir());
  EXPECT_TRUE(Contains(status, "\"in_use\":true")) << status;
  EXPECT_EQ(JsonNumber(status, "fallback_tensors"), 0u) << status;
  EXPECT_EQ(JsonNumber(status, "plan_groups"), 3u) << "grad.1 and grad.2 fit in one 1 MiB group but for compression";
  EXPECT_TRUE(Contains(status, CompressedEntry("fp16", kSteps, kSteps * 300'001 * 4, 0, kSteps * 300'001 * 2))) << status;
  EXPECT_TRUE(Contains(status, CompressedEntry("bf16", kSteps, kSteps * 1'000 * 4, 0, kSteps * 1'000 * 2))) << status;
}

// A tensor submitted with another compression than the plan's fails every rank, naming both.
TEST(Compression, ATensorAskingForAnotherCompressionThanThePlanFailsEveryRank) {
  Cluster cluster(2, 1, {"--cores", "none", "--log-level", "error", "--coord", "topo"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int) {
    static const std::vector<int64_t> kCounts = {1'000};
    ModelGraph model(kCounts, SYNCD_FLOAT32);
    model.ops[3].compression = SYNCD_COMPRESSION_FP16;  // the one allreduce (2L + 1)
    int rc = syncd_register_graph(c, &model.graph, 30'000, nullptr);
    if (rc == SYNCD_OK) {  // else node 1 aborted the job before node 0's registration finished
      std::vector<float> v(1'000, 1.0f);
      syncd_tensor t{"grad.0", v.data(), SYNCD_FLOAT32, 1, &kCounts[0], 0};
      syncd_handle h;
      rc = syncd_allreduce_compressed_async(c, &t, SYNCD_SUM, 1.0, 1.0,
                                            rank == 1 ? SYNCD_COMPRESSION_BF16 : SYNCD_COMPRESSION_FP16, &h);
      if (rc == SYNCD_OK) rc = syncd_wait(c, h, 20'000);
    }
    CHILD_CHECK(rc != SYNCD_OK, "rank %d: a tensor against the plan ran", rank);
    CHILD_CHECK(Contains(syncd_last_error(), "grad.0") && Contains(syncd_last_error(), "TOPO plan"), "rank %d: %s",
                rank, syncd_last_error());
    if (rank == 1)
      CHILD_CHECK(Contains(syncd_last_error(), "compression bf16, the plan says fp16"), "%s", syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

}  // namespace
}  // namespace syncd::testing
