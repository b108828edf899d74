#include "daemon/core/reduce_kernels.h"
#include "tests/integration/values.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace syncd {
namespace {

// The compiler's own _Float16 is the reference where it exists (GCC 12 on x86-64; clang from 15).
#if defined(__FLT16_MANT_DIG__)
#define SYNCD_HAVE_FLOAT16 1
uint16_t Bits(_Float16 h) {
  uint16_t b;
  memcpy(&b, &h, 2);
  return b;
}
#endif

TEST(HalfConversion, HalfToFloatMatchesTheCompilerForAllBitPatterns) {
#ifndef SYNCD_HAVE_FLOAT16
  GTEST_SKIP() << "this compiler has no _Float16 to compare with";
#else
  for (uint32_t b = 0; b < 65536; ++b) {
    _Float16 h;
    const uint16_t bits = uint16_t(b);
    memcpy(&h, &bits, 2);
    const float want = float(h);
    const float got = HalfToFloat(bits);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << b;
    } else {
      ASSERT_EQ(got, want) << "bits " << b;
    }
  }
#endif
}

TEST(HalfConversion, FloatToHalfRoundsToNearestEvenLikeTheCompiler) {
#ifndef SYNCD_HAVE_FLOAT16
  GTEST_SKIP() << "this compiler has no _Float16 to compare with";
#else
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 2'000'000; ++i) {
    uint32_t x = any(rng);
    float f;
    memcpy(&f, &x, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), Bits(_Float16(f))) << "float bits " << x;
  }
  // Ties and the subnormal/normal boundary.
  for (float f : {0.0f, -0.0f, 65504.0f, 65520.0f, 1e-8f, 5.9604645e-8f, 2.9802322e-8f, 6.1035156e-5f, 1.00048828125f})
    EXPECT_EQ(FloatToHalf(f), Bits(_Float16(f))) << f;
#endif
}

TEST(HalfConversion, KnownValuesWithoutACompilerReference) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);                  // overflow to infinity
  EXPECT_EQ(FloatToHalf(5.9604645e-8f), 0x0001);         // smallest subnormal
  EXPECT_EQ(FloatToHalf(1.00048828125f), 0x3c00);        // tie rounds to even
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(HalfToFloat(0x0001), 5.9604645e-8f);
}

TEST(Bfloat16Conversion, RoundTripAndRounding) {
  for (float f : {0.0f, 1.0f, -2.5f, 256.0f, 0x1.fep+127f}) EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(f)), f);
  EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(1.00390625f)), 1.0f);  // tie rounds to even
  EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(1.01171875f)), 1.015625f);
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat(FloatToBfloat16(NAN))));
}

template <typename T>
std::vector<T> Reduce(const ReduceSpec& spec, std::vector<std::vector<T>> inputs) {
  std::vector<const void*> in;
  std::vector<void*> out;
  for (auto& v : inputs) {
    in.push_back(v.data());
    out.push_back(v.data());  // in place, as the executor runs it
  }
  ReduceChunk(spec, in.data(), in.size(), out.data(), out.size(), inputs[0].size());
  for (size_t i = 1; i < inputs.size(); ++i) EXPECT_EQ(inputs[i], inputs[0]) << "every output holds the result";
  return inputs[0];
}

TEST(ReduceChunk, IntegerOps) {
  auto in = [] { return std::vector<std::vector<int32_t>>{{1, -7, 100}, {2, 3, -50}, {4, 3, 1}}; };
  EXPECT_EQ(Reduce<int32_t>({SYNCD_INT32, SYNCD_SUM}, in()), (std::vector<int32_t>{7, -1, 51}));
  EXPECT_EQ(Reduce<int32_t>({SYNCD_INT32, SYNCD_MIN}, in()), (std::vector<int32_t>{1, -7, -50}));
  EXPECT_EQ(Reduce<int32_t>({SYNCD_INT32, SYNCD_MAX}, in()), (std::vector<int32_t>{4, 3, 100}));
  EXPECT_EQ(Reduce<int32_t>({SYNCD_INT32, SYNCD_PRODUCT}, in()), (std::vector<int32_t>{8, -63, -5000}));
  // AVERAGE divides the exact sum and truncates toward zero.
  EXPECT_EQ(Reduce<int32_t>({SYNCD_INT32, SYNCD_AVERAGE, 1.0, 1.0, 3}, in()), (std::vector<int32_t>{2, 0, 17}));
}

TEST(ReduceChunk, Int8SumWrapsLikeNccl) {
  EXPECT_EQ(Reduce<int8_t>({SYNCD_INT8, SYNCD_SUM}, {{100}, {100}}), (std::vector<int8_t>{-56}));
  EXPECT_EQ(Reduce<uint8_t>({SYNCD_UINT8, SYNCD_SUM}, {{200}, {100}}), (std::vector<uint8_t>{44}));
}

TEST(ReduceChunk, Int16SumAndProductWrapWithoutOverflowingInt) {
  EXPECT_EQ(Reduce<int16_t>({SYNCD_INT16, SYNCD_SUM}, {{30000}, {30000}}), (std::vector<int16_t>{-5536}));
  // 65535 * 65535 overflows int, which 16-bit values promote to: must wrap, not be undefined.
  EXPECT_EQ(Reduce<int16_t>({SYNCD_INT16, SYNCD_PRODUCT}, {{-1}, {-1}, {-32768}}), (std::vector<int16_t>{-32768}));
  EXPECT_EQ(Reduce<int16_t>({SYNCD_INT16, SYNCD_MIN}, {{-7}, {3}}), (std::vector<int16_t>{-7}));
}

TEST(ReduceChunk, BoolIsLogicalOrForSumAndMaxAndLogicalAndForMinAndProduct) {
  const std::vector<std::vector<uint8_t>> in = {{0, 0, 1, 1}, {0, 1, 0, 1}, {0, 1, 1, 1}};
  for (syncd_reduce_op op : {SYNCD_SUM, SYNCD_MAX})
    EXPECT_EQ(Reduce<uint8_t>({SYNCD_BOOL, op}, in), (std::vector<uint8_t>{0, 1, 1, 1})) << op;
  for (syncd_reduce_op op : {SYNCD_MIN, SYNCD_PRODUCT})
    EXPECT_EQ(Reduce<uint8_t>({SYNCD_BOOL, op}, in), (std::vector<uint8_t>{0, 0, 0, 1})) << op;
}

TEST(ReduceChunk, ScaleFactors) {
  EXPECT_EQ(Reduce<float>({SYNCD_FLOAT32, SYNCD_SUM, 0.5, 3.0, 1}, {{2.0f}, {4.0f}}), (std::vector<float>{9.0f}));
  EXPECT_EQ(Reduce<double>({SYNCD_FLOAT64, SYNCD_AVERAGE, 1.0, 1.0, 4}, {{1.0}, {2.0}, {3.0}, {6.0}}),
            (std::vector<double>{3.0}));
}

TEST(ReduceChunk, HalfAccumulatesInFloat) {
  // In half arithmetic 2048 + 1 + 1 stays 2048 (the spacing there is 2); in float it is 2050.
  std::vector<std::vector<uint16_t>> in = {{FloatToHalf(2048)}, {FloatToHalf(1)}, {FloatToHalf(1)}};
  EXPECT_EQ(HalfToFloat(Reduce<uint16_t>({SYNCD_FLOAT16, SYNCD_SUM}, in)[0]), 2050.0f);
  std::vector<std::vector<uint16_t>> b = {{FloatToBfloat16(256)}, {FloatToBfloat16(1)}, {FloatToBfloat16(1)}};
  EXPECT_EQ(Bfloat16ToFloat(Reduce<uint16_t>({SYNCD_BFLOAT16, SYNCD_SUM}, b)[0]), 258.0f);
}

TEST(ReduceChunk, FullChunkOfEveryDtypeAndOp) {
  for (int dt = 0; dt < SYNCD_DTYPE_COUNT; ++dt) {
    if (dt == SYNCD_BOOL) continue;  // logical, below
    for (int op = 0; op <= SYNCD_PRODUCT; ++op) {
      const size_t n = kReduceChunkElements;
      std::vector<std::vector<double>> raw(3, std::vector<double>(n));
      std::vector<std::vector<char>> buf(3, std::vector<char>(n * 8));
      for (int r = 0; r < 3; ++r)
        for (size_t i = 0; i < n; ++i) {
          const double v = double((i * 7 + size_t(r) * 3) % 5 + 1);
          raw[r][i] = v;
          syncd::testing::SetValue(buf[r].data(), syncd_dtype(dt), i, v);
        }
      const void* in[3] = {buf[0].data(), buf[1].data(), buf[2].data()};
      void* out[3] = {buf[0].data(), buf[1].data(), buf[2].data()};
      ReduceChunk({syncd_dtype(dt), syncd_reduce_op(op), 1.0, 1.0, op == SYNCD_AVERAGE ? 3u : 1u}, in, 3, out, 3, n);
      for (size_t i = 0; i < n; ++i) {
        const double a = raw[0][i], b = raw[1][i], c = raw[2][i];
        double want = op == SYNCD_MIN ? std::min({a, b, c}) : op == SYNCD_MAX ? std::max({a, b, c})
                    : op == SYNCD_PRODUCT ? a * b * c : a + b + c;
        const double got = syncd::testing::GetValue(buf[2].data(), syncd_dtype(dt), i);
        if (op == SYNCD_AVERAGE) {
          if (dt <= SYNCD_INT64 || dt == SYNCD_INT16) want = std::trunc(want / 3);
          else if (dt == SYNCD_FLOAT64) want = want * (1.0 / 3);
          else if (dt == SYNCD_FLOAT32) want = float(want) * float(1.0 / 3);
          else if (dt == SYNCD_FLOAT16) want = HalfToFloat(FloatToHalf(float(want) * float(1.0 / 3)));
          else want = Bfloat16ToFloat(FloatToBfloat16(float(want) * float(1.0 / 3)));
        }
        ASSERT_EQ(got, want) << "dtype " << dt << " op " << op << " element " << i;
      }
    }
  }
}

// The executor's other shapes: a separate output (the local reduction into a pipeline segment),
// the output aliasing only the first input (the ring's receive step), and an output aliasing a
// later input, which must not read already overwritten values.
TEST(ReduceChunk, OutputMayAliasAnyInput) {
  for (size_t alias = 0; alias <= 3; ++alias) {  // 3: separate output
    std::vector<std::vector<float>> in = {{1, 2, 3}, {10, 20, 30}, {100, 200, 300}};
    std::vector<float> separate(3, -1.0f);
    const void* ins[3] = {in[0].data(), in[1].data(), in[2].data()};
    void* out[1] = {alias < 3 ? static_cast<void*>(in[alias].data()) : separate.data()};
    ReduceChunk({SYNCD_FLOAT32, SYNCD_SUM}, ins, 3, out, 1, 3);
    EXPECT_EQ(alias < 3 ? in[alias] : separate, (std::vector<float>{111, 222, 333})) << "output aliases input " << alias;
  }
  std::vector<int64_t> a = {5, -5}, b = {3, 7};
  const void* ins[2] = {a.data(), b.data()};
  void* out[1] = {b.data()};
  ReduceChunk({SYNCD_INT64, SYNCD_MIN}, ins, 2, out, 1, 2);
  EXPECT_EQ(b, (std::vector<int64_t>{3, -5}));
}

// What a stand-in adds (a joined, lost or vacant rank): op(x, identity) == x for every dtype, op and
// value, the extremes included; Min's identity is +inf for floating types.
TEST(ReductionIdentity, LeavesEveryValueAsItIsForEveryDtypeAndOp) {
  const std::vector<double> floats = {-128, -3.5, -1, 0, 1, 2.25, 127, 1e30, -1e30, INFINITY, -INFINITY};
  const std::vector<double> ints = {-128, -1, 0, 1, 2, 127}, unsigned8 = {0, 1, 2, 255}, bools = {0, 1};
  for (int dt = 0; dt < SYNCD_DTYPE_COUNT; ++dt)
    for (int op = 0; op <= SYNCD_PRODUCT; ++op) {
      if (dt == SYNCD_BOOL && op == SYNCD_AVERAGE) continue;
      const bool floating = dt == SYNCD_FLOAT16 || dt == SYNCD_BFLOAT16 || dt == SYNCD_FLOAT32 || dt == SYNCD_FLOAT64;
      const std::vector<double>& values =
          floating ? floats : dt == SYNCD_UINT8 ? unsigned8 : dt == SYNCD_BOOL ? bools : ints;
      for (double raw : values) {
        std::vector<char> x(8), id(8);
        syncd::testing::SetValue(x.data(), syncd_dtype(dt), 0, raw);
        const double v = syncd::testing::GetValue(x.data(), syncd_dtype(dt), 0);  // as stored
        if (std::isinf(v) && op == SYNCD_PRODUCT) continue;
        ReductionIdentity(syncd_dtype(dt), syncd_reduce_op(op), id.data());
        for (int order = 0; order < 2; ++order) {
          std::vector<char> a = x, b = id;
          if (order == 1) std::swap(a, b);
          const void* in[2] = {a.data(), b.data()};
          void* out[1] = {a.data()};
          ReduceChunk({syncd_dtype(dt), syncd_reduce_op(op)}, in, 2, out, 1, 1);
          EXPECT_EQ(syncd::testing::GetValue(a.data(), syncd_dtype(dt), 0), v)
              << "dtype " << dt << " op " << op << " value " << raw << (order ? " (identity first)" : "");
        }
      }
    }
  float f;
  ReductionIdentity(SYNCD_FLOAT32, SYNCD_MIN, &f);
  EXPECT_EQ(f, INFINITY);
  ReductionIdentity(SYNCD_FLOAT32, SYNCD_MAX, &f);
  EXPECT_EQ(f, -INFINITY);
  int8_t i8;
  ReductionIdentity(SYNCD_INT8, SYNCD_MIN, &i8);
  EXPECT_EQ(i8, 127);
  uint8_t b;
  ReductionIdentity(SYNCD_BOOL, SYNCD_PRODUCT, &b);  // logical and
  EXPECT_EQ(b, 1);
  ReductionIdentity(SYNCD_BOOL, SYNCD_SUM, &b);  // logical or
  EXPECT_EQ(b, 0);
}

// Every rank stands in (a node whose ranks all joined or were lost): the node's part is the
// identity, unscaled, in every output; FillIdentity fills any count.
TEST(ReductionIdentity, NoInputsGiveTheIdentityUnscaledAndFillIdentityFillsAnyCount) {
  std::vector<float> a(5, 7.0f), b(5, 7.0f);
  void* out[2] = {a.data(), b.data()};
  ReduceChunk({SYNCD_FLOAT32, SYNCD_PRODUCT, 2.0, 3.0, 1}, nullptr, 0, out, 2, 5);
  EXPECT_EQ(a, std::vector<float>(5, 1.0f));
  EXPECT_EQ(b, std::vector<float>(5, 1.0f));
  for (size_t count : {size_t(0), size_t(1), size_t(3), size_t(1000), size_t(4097)}) {
    std::vector<int16_t> v(count + 1, 42);
    FillIdentity(SYNCD_INT16, SYNCD_MAX, v.data(), count);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(v[i], -32768) << i << " of " << count;
    EXPECT_EQ(v[count], 42) << "past the end";
    std::vector<double> z(count + 1, 5.0);
    FillIdentity(SYNCD_FLOAT64, SYNCD_AVERAGE, z.data(), count);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(z[i], 0.0);
  }
}

TEST(CopyStreaming, EveryAlignmentAndTail) {
  std::mt19937 rng(7);
  std::vector<unsigned char> src(kStreamingCopyMinBytes + 4096);
  for (auto& c : src) c = static_cast<unsigned char>(rng());
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4095}, kStreamingCopyMinBytes - 1, kStreamingCopyMinBytes,
                       kStreamingCopyMinBytes + 63, kStreamingCopyMinBytes + 1000}) {
    for (size_t dst_off : {0, 1, 8, 15}) {
      for (size_t src_off : {0, 3}) {
        std::vector<unsigned char> dst(bytes + 64, 0xAB);
        CopyStreaming(dst.data() + dst_off, src.data() + src_off, bytes);
        ASSERT_EQ(memcmp(dst.data() + dst_off, src.data() + src_off, bytes), 0)
            << bytes << " bytes, dst offset " << dst_off << ", src offset " << src_off;
        for (size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], 0xAB) << "wrote before the destination";
        for (size_t i = dst_off + bytes; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xAB) << "wrote past the destination";
      }
    }
  }
}

}  // namespace
}  // namespace syncd
