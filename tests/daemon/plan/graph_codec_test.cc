#include "daemon/plan/graph_codec.h"

#include <gtest/gtest.h>

#include "proto/graph_wire.h"

namespace syncd {
namespace {

std::string SmallGraph(uint32_t memory = 0, uint32_t compression = 0, uint32_t ppm = 0) {
  abi::GraphWriter w(3, 2, 1);
  w.Op(false, 0, 0, 0, "backward", "");
  w.Op(true, SYNCD_FLOAT32, SYNCD_AVERAGE, 1000, "allreduce_w", "grad.w", memory, compression, ppm);
  w.Op(false, 0, 0, 0, "apply", "");
  w.Edge(0, 1);
  w.Edge(1, 2);
  w.Fetch(2);
  return w.bytes();
}

TEST(GraphCodec, DecodesWhatTheClientEncodes) {
  const std::string bytes = SmallGraph();
  StatusOr<Graph> g = DecodeGraph(bytes.data(), bytes.size());
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->ops.size(), 3u);
  EXPECT_EQ(g->ops[0].name, "backward");
  EXPECT_FALSE(g->ops[0].collective);
  EXPECT_TRUE(g->ops[1].collective);
  EXPECT_EQ(g->ops[1].tensor, "grad.w");
  EXPECT_EQ(g->ops[1].dtype, SYNCD_FLOAT32);
  EXPECT_EQ(g->ops[1].op, SYNCD_AVERAGE);
  EXPECT_EQ(g->ops[1].count, 1000u);
  EXPECT_FALSE(g->ops[1].gpu);
  EXPECT_EQ(g->edges, (std::vector<std::pair<uint32_t, uint32_t>>{{0, 1}, {1, 2}}));
  EXPECT_EQ(g->fetches, std::vector<uint32_t>{2});
}

TEST(GraphCodec, ACollectiveNamesItsTensorsMemory) {
  const std::string bytes = SmallGraph(1);
  StatusOr<Graph> g = DecodeGraph(bytes.data(), bytes.size());
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(g->ops[1].gpu);
  EXPECT_FALSE(g->ops[0].gpu);

  const std::string unknown = SmallGraph(2);
  EXPECT_EQ(DecodeGraph(unknown.data(), unknown.size()).status().message(),
            "graph: operation 1 ('allreduce_w'): unknown memory kind 2 (0 host, 1 GPU)");
  abi::GraphWriter w(1, 0, 1);
  w.Op(false, 0, 0, 0, "relu", "", 1);
  w.Fetch(0);
  EXPECT_EQ(DecodeGraph(w.bytes().data(), w.bytes().size()).status().message(),
            "graph: operation 0 ('relu') names a memory kind but is not a collective");
  // Version 1 had no memory byte: a client that old is refused, not read as host memory.
  std::string v1 = SmallGraph();
  v1[4] = 1;
  EXPECT_EQ(DecodeGraph(v1.data(), v1.size()).status().message(), "graph: encoding version 1, this daemon reads 4");
}

// Version 3: a collective says what its submissions ask for (DEFAULT kept: the daemon resolves
// it as for a submission); a compressed GPU tensor, an unknown compression and a compression on
// an operation that is no collective are refused, named. Version 2 (no compression byte) is refused.
TEST(GraphCodec, ACollectiveNamesItsCompression) {
  for (uint32_t c = SYNCD_COMPRESSION_DEFAULT; c < SYNCD_COMPRESSION_COUNT; ++c) {
    const std::string bytes = SmallGraph(0, c);
    StatusOr<Graph> g = DecodeGraph(bytes.data(), bytes.size());
    ASSERT_TRUE(g.ok()) << g.status().message();
    EXPECT_EQ(g->ops[1].compression, c);
    EXPECT_EQ(g->ops[0].compression, SYNCD_COMPRESSION_NONE);
  }
  const std::string gpu = SmallGraph(1, SYNCD_COMPRESSION_FP16);
  EXPECT_EQ(DecodeGraph(gpu.data(), gpu.size()).status().message(),
            "graph: operation 1 ('allreduce_w'): fp16 compression of GPU tensors is not supported yet (NCCL moves "
            "them as they are)");
  const std::string gpu_none = SmallGraph(1, SYNCD_COMPRESSION_NONE);
  EXPECT_TRUE(DecodeGraph(gpu_none.data(), gpu_none.size()).ok());
  const std::string unknown = SmallGraph(0, SYNCD_COMPRESSION_COUNT);
  EXPECT_EQ(DecodeGraph(unknown.data(), unknown.size()).status().message(),
            "graph: operation 1 ('allreduce_w'): unknown compression " + std::to_string(SYNCD_COMPRESSION_COUNT));
  abi::GraphWriter w(1, 0, 1);
  w.Op(false, 0, 0, 0, "relu", "", 0, SYNCD_COMPRESSION_BF16);
  w.Fetch(0);
  EXPECT_EQ(DecodeGraph(w.bytes().data(), w.bytes().size()).status().message(),
            "graph: operation 0 ('relu') names a compression but is not a collective");
  std::string v2 = SmallGraph();
  v2[4] = 2;
  EXPECT_EQ(DecodeGraph(v2.data(), v2.size()).status().message(), "graph: encoding version 2, this daemon reads 4");
}

// Version 4: a collective's top-k or random-k ratio (parts per million) or PowerSGD rank, as
// asked (0: the daemon's); over 1 (over 1024 for a rank) and on an operation that is no
// collective it is refused, named. Version 3 (no ratio) is refused.
TEST(GraphCodec, ACollectiveNamesItsRatioOrRank) {
  const std::string topk = SmallGraph(0, SYNCD_COMPRESSION_TOPK, 10'000);
  StatusOr<Graph> g = DecodeGraph(topk.data(), topk.size());
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->ops[1].compression_ppm, 10'000u);
  EXPECT_EQ(g->ops[0].compression_ppm, 0u);
  const std::string over = SmallGraph(0, SYNCD_COMPRESSION_TOPK, 1'000'001);
  EXPECT_EQ(DecodeGraph(over.data(), over.size()).status().message(),
            "graph: operation 1 ('allreduce_w'): compression ratio 1000001 ppm over 1");
  const std::string rank = SmallGraph(0, SYNCD_COMPRESSION_POWERSGD, 1025);
  EXPECT_EQ(DecodeGraph(rank.data(), rank.size()).status().message(),
            "graph: operation 1 ('allreduce_w'): compression rank 1025 over 1024");
  abi::GraphWriter w(1, 0, 1);
  w.Op(false, 0, 0, 0, "relu", "", 0, 0, 5);
  w.Fetch(0);
  EXPECT_EQ(DecodeGraph(w.bytes().data(), w.bytes().size()).status().message(),
            "graph: operation 0 ('relu') names a compression but is not a collective");
  std::string v3 = SmallGraph();
  v3[4] = 3;
  EXPECT_EQ(DecodeGraph(v3.data(), v3.size()).status().message(), "graph: encoding version 3, this daemon reads 4");
}

TEST(GraphCodec, EveryTruncationFailsCleanly) {
  const std::string bytes = SmallGraph();
  for (size_t n = 0; n < bytes.size(); ++n) {
    StatusOr<Graph> g = DecodeGraph(bytes.data(), n);
    EXPECT_FALSE(g.ok()) << n;
    EXPECT_EQ(g.status().code(), SYNCD_ERR_INVALID) << n;
  }
  const std::string longer = bytes + "x";
  StatusOr<Graph> g = DecodeGraph(longer.data(), longer.size());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(), "graph: 1 trailing bytes");
}

TEST(GraphCodec, BadFieldsAreNamed) {
  std::string bytes = SmallGraph();
  std::string magic = bytes;
  magic[0] = 'x';
  EXPECT_EQ(DecodeGraph(magic.data(), magic.size()).status().message(), "graph: not a graph (bad magic)");

  abi::GraphWriter w(1, 0, 1);
  w.Op(true, 99, SYNCD_SUM, 4, "ar", "grad.b");
  w.Fetch(0);
  EXPECT_EQ(DecodeGraph(w.bytes().data(), w.bytes().size()).status().message(),
            "graph: operation 0 ('ar'): unknown dtype 99");

  abi::GraphWriter huge(1u << 20, 0, 0);  // claims a million ops in a few bytes
  EXPECT_NE(DecodeGraph(huge.bytes().data(), huge.bytes().size()).status().message().find("truncated"),
            std::string::npos);

  abi::GraphWriter named(1, 0, 1);
  named.Op(false, 0, 0, 0, "relu", "grad.x");
  named.Fetch(0);
  EXPECT_EQ(DecodeGraph(named.bytes().data(), named.bytes().size()).status().message(),
            "graph: operation 0 ('relu') names tensor 'grad.x' but is not a collective");
}

}  // namespace
}  // namespace syncd
