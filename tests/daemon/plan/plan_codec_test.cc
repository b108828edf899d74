// A TOPO plan sent from one daemon to another (plan_codec.h): what is encoded decodes to the same
// plan with the same hash, and bytes that are not a whole, valid plan are refused with a reason,
// never taken.
#include "daemon/plan/plan_codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace syncd {
namespace {

TopoPlan Sample() {
  TopoPlan p;
  p.tensors = {{"conv1.weight.grad", SYNCD_FLOAT32, 1728, SYNCD_SUM, false, SYNCD_COMPRESSION_NONE, 0},
               {"conv1.bias.grad", SYNCD_FLOAT32, 64, SYNCD_AVERAGE, false, SYNCD_COMPRESSION_FP16, 0},
               {"fc.weight.grad", SYNCD_BFLOAT16, 640, SYNCD_SUM, true, SYNCD_COMPRESSION_NONE, 0},
               {"fc.bias.grad", SYNCD_FLOAT32, 10, SYNCD_SUM, false, SYNCD_COMPRESSION_TOPK, 10'000}};
  p.group_begin = {0, 2, 3};
  p.hash = PlanHash(p);
  return p;
}

StatusOr<TopoPlan> Decode(const std::string& bytes) { return DecodePlan(bytes.data(), bytes.size()); }

TEST(PlanCodec, APlanComesBackAsItWas) {
  const TopoPlan p = Sample();
  StatusOr<TopoPlan> back = Decode(EncodePlan(p));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->hash, p.hash);
  EXPECT_EQ(back->group_begin, p.group_begin);
  ASSERT_EQ(back->tensors.size(), p.tensors.size());
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const PlannedTensor &a = back->tensors[i], &b = p.tensors[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_TRUE(a.dtype == b.dtype && a.count == b.count && a.op == b.op && a.gpu == b.gpu &&
                a.compression == b.compression && a.compression_ppm == b.compression_ppm)
        << a.name;
  }
  StatusOr<TopoPlan> empty = Decode(EncodePlan(TopoPlan{}));
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_TRUE(empty->tensors.empty() && empty->groups() == 0);
}

TEST(PlanCodec, EveryTruncationIsRefused) {
  const std::string bytes = EncodePlan(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    StatusOr<TopoPlan> p = Decode(bytes.substr(0, n));
    EXPECT_FALSE(p.ok()) << n << " of " << bytes.size() << " bytes decoded";
  }
  StatusOr<TopoPlan> longer = Decode(bytes + "x");
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.status().message().find("1 trailing bytes"), std::string::npos) << longer.status().message();
}

// The first tensor's fields sit after the 16-byte header: dtype, op, memory, compression, ratio.
constexpr size_t kFirstTensor = 16;

TEST(PlanCodec, FieldsNoDaemonWritesAreRefusedByName) {
  const std::string good = EncodePlan(Sample());
  struct Case {
    size_t at;
    uint8_t value;
    const char* says;
  } cases[] = {{0, 0x00, "bad magic"},
               {4, 9, "encoding version 9"},
               {kFirstTensor + 0, SYNCD_DTYPE_COUNT, "is not a plan's"},
               {kFirstTensor + 1, SYNCD_REDUCE_OP_COUNT, "is not a plan's"},
               {kFirstTensor + 2, 2, "memory 2"},
               {kFirstTensor + 3, SYNCD_COMPRESSION_COUNT, "is not a plan's"},
               {kFirstTensor + 16, 0, "a name must have 1.."}};  // the name's length, low byte
  for (const Case& c : cases) {
    std::string bad = good;
    bad[c.at] = char(c.value);
    if (c.at == kFirstTensor + 16) bad[c.at + 1] = 0;
    StatusOr<TopoPlan> p = Decode(bad);
    ASSERT_FALSE(p.ok()) << "byte " << c.at << " = " << int(c.value) << " decoded";
    EXPECT_NE(p.status().message().find(c.says), std::string::npos) << p.status().message();
    EXPECT_EQ(p.status().code(), SYNCD_ERR_PROTOCOL);
  }
}

TEST(PlanCodec, RepeatedNamesAndGroupsOutOfOrderAreRefused) {
  TopoPlan twice = Sample();
  twice.tensors[1].name = twice.tensors[0].name;
  StatusOr<TopoPlan> p = Decode(EncodePlan(twice));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("'conv1.weight.grad' twice"), std::string::npos) << p.status().message();
  for (const std::vector<uint32_t>& groups :
       {std::vector<uint32_t>{1, 2, 3}, std::vector<uint32_t>{0, 2, 2}, std::vector<uint32_t>{0, 3, 2},
        std::vector<uint32_t>{0, 2, 4}}) {
    TopoPlan bad = Sample();
    bad.group_begin = groups;
    p = Decode(EncodePlan(bad));
    ASSERT_FALSE(p.ok()) << "groups " << groups[0] << "," << groups[1] << "," << groups[2];
    EXPECT_NE(p.status().message().find("begins at tensor"), std::string::npos) << p.status().message();
  }
}

TEST(PlanCodec, CountsTheBytesCannotHoldAreRefusedBeforeAllocating) {
  std::string bytes = EncodePlan(Sample());
  const uint32_t huge = 1u << 24;
  memcpy(&bytes[8], &huge, 4);
  StatusOr<TopoPlan> p = Decode(bytes);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("do not fit in"), std::string::npos) << p.status().message();
}

}  // namespace
}  // namespace syncd
