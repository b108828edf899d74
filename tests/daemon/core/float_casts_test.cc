#include "daemon/core/float_casts.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "daemon/core/reduce_kernels.h"

namespace syncd {
namespace {

float FromBits(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}

// Edge cases first (zeros, subnormals of both types, the largest half, ties, overflow, infinities,
// NaNs), then random bit patterns over float32's whole range; an odd count leaves a tail for the
// scalar loop after the vector one.
std::vector<float> Floats() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          -65536.0f,
                          5.96e-8f,
                          2.98e-8f,
                          2.99e-8f,
                          6.1e-5f,
                          1.0f + 1.0f / 2048,
                          1.0f + 3.0f / 2048,
                          1e-40f,
                          3.4e38f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          FromBits(0x7f800001),
                          FromBits(0xffc12345)};
  std::mt19937 rng(7);
  for (int i = 0; i < 100001; ++i) v.push_back(FromBits(uint32_t(rng())));
  return v;
}

// Whole-array casts agree element for element with the scalar ones (a NaN with a NaN).
template <typename Scalar>
void ExpectSameAsScalar(const std::vector<float>& in, const std::vector<uint16_t>& out, Scalar scalar, bool half) {
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t want = scalar(in[i]);
    const bool want_nan =
        half ? (want & 0x7c00) == 0x7c00 && (want & 0x3ff) : (want & 0x7f80) == 0x7f80 && (want & 0x7f);
    if (want_nan) {
      const bool got_nan =
          half ? (out[i] & 0x7c00) == 0x7c00 && (out[i] & 0x3ff) : (out[i] & 0x7f80) == 0x7f80 && (out[i] & 0x7f);
      EXPECT_TRUE(got_nan) << i << ": " << in[i];
    } else {
      ASSERT_EQ(out[i], want) << "element " << i << ": " << in[i];
    }
  }
}

TEST(FloatCasts, FloatsToHalfRoundsEveryElementAsTheScalarCast) {
  const std::vector<float> in = Floats();
  std::vector<uint16_t> out(in.size());
  FloatsToHalf(in.data(), out.data(), in.size());
  ExpectSameAsScalar(in, out, FloatToHalf, true);
}

TEST(FloatCasts, FloatsToBfloat16RoundsEveryElementAsTheScalarCast) {
  const std::vector<float> in = Floats();
  std::vector<uint16_t> out(in.size());
  FloatsToBfloat16(in.data(), out.data(), in.size());
  ExpectSameAsScalar(in, out, FloatToBfloat16, false);
}

TEST(FloatCasts, EveryHalfAndBfloat16BitPatternWidensExactly) {
  std::vector<uint16_t> in(65536 + 3);
  for (size_t i = 0; i < in.size(); ++i) in[i] = uint16_t(i);
  std::vector<float> half(in.size()), bf16(in.size());
  HalfToFloats(in.data(), half.data(), in.size());
  Bfloat16ToFloats(in.data(), bf16.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const float want_half = HalfToFloat(in[i]), want_bf16 = Bfloat16ToFloat(in[i]);
    if (std::isnan(want_half))
      EXPECT_TRUE(std::isnan(half[i])) << i;
    else
      ASSERT_EQ(memcmp(&half[i], &want_half, 4), 0) << "half bits " << i;
    if (std::isnan(want_bf16))
      EXPECT_TRUE(std::isnan(bf16[i])) << i;
    else
      ASSERT_EQ(memcmp(&bf16[i], &want_bf16, 4), 0) << "bfloat16 bits " << i;
  }
}

// The inter-node hop: float32 and float64 to each wire type and back lose no more than the wire
// type's rounding (half: relative 2^-11 in its normal range; bfloat16: 2^-8).
TEST(FloatCasts, WireRoundTripOfFloat32AndFloat64StaysWithinTheWireTypesRounding) {
  EXPECT_EQ(WireDtype(SYNCD_COMPRESSION_FP16, SYNCD_FLOAT32), SYNCD_FLOAT16);
  EXPECT_EQ(WireDtype(SYNCD_COMPRESSION_BF16, SYNCD_FLOAT64), SYNCD_BFLOAT16);
  EXPECT_EQ(WireDtype(SYNCD_COMPRESSION_NONE, SYNCD_FLOAT64), SYNCD_FLOAT64);
  const size_t n = 5000;  // more than one float64 chunk
  std::vector<double> d(n);
  std::vector<float> f(n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> value(-1000.0, 1000.0);
  for (size_t i = 0; i < n; ++i) f[i] = float(d[i] = value(rng));
  for (syncd_dtype wire : {SYNCD_FLOAT16, SYNCD_BFLOAT16}) {
    const double tolerance = wire == SYNCD_FLOAT16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    std::vector<uint16_t> packed(n);
    std::vector<double> d_back(n);
    std::vector<float> f_back(n);
    CastToWire(SYNCD_FLOAT64, wire, d.data(), packed.data(), n);
    CastFromWire(wire, SYNCD_FLOAT64, packed.data(), d_back.data(), n);
    CastToWire(SYNCD_FLOAT32, wire, f.data(), packed.data(), n);
    CastFromWire(wire, SYNCD_FLOAT32, packed.data(), f_back.data(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(d_back[i] - d[i]), tolerance * std::fabs(d[i]) + 1e-7) << i << " wire " << wire;
      ASSERT_LE(std::fabs(double(f_back[i]) - double(f[i])), tolerance * std::fabs(f[i]) + 1e-7) << i;
    }
  }
}

}  // namespace
}  // namespace syncd
