#include "daemon/core/sparsify.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace syncd {
namespace {

// The top k by a full sort (magnitude descending, NaN first, ties to the lower index), ascending.
template <typename T>
std::vector<uint32_t> ReferenceTopK(const std::vector<T>& v, size_t k) {
  std::vector<uint32_t> order(v.size());
  std::iota(order.begin(), order.end(), 0u);
  auto key = [&](uint32_t i) {
    return std::isnan(v[i]) ? std::numeric_limits<double>::infinity() : std::fabs(double(v[i]));
  };
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return key(a) > key(b); });
  order.resize(std::min(k, v.size()));
  std::sort(order.begin(), order.end());
  return order;
}

// Takes the top k of `v` and checks it against the reference: the indices, the values, zeros left
// behind, and what was taken plus what stayed equal to `v`, bit for bit.
template <typename T>
void CheckTopK(std::vector<T> v, size_t k) {
  const std::vector<T> before = v;
  std::vector<uint32_t> idx(k), scratch(v.size());
  std::vector<T> val(k);
  TakeTopK(v.data(), v.size(), k, idx.data(), val.data(), scratch.data());
  ASSERT_EQ(idx, ReferenceTopK(before, k)) << "n " << before.size() << " k " << k;
  std::vector<T> rebuilt = v;
  for (size_t i = 0; i < k; ++i) {
    EXPECT_EQ(v[idx[i]], T(0));
    if (std::isnan(before[idx[i]])) EXPECT_TRUE(std::isnan(val[i]));
    else EXPECT_EQ(val[i], before[idx[i]]);
  }
  AddAt(idx.data(), val.data(), k, rebuilt.data());
  for (size_t i = 0; i < before.size(); ++i) {
    if (std::isnan(before[i])) continue;
    ASSERT_EQ(rebuilt[i], before[i]) << i;
  }
}

TEST(Sparsify, SparseCountIsTheRatioRoundedUpAtLeastOneAtMostAll) {
  EXPECT_EQ(SparseCount(1000, 10'000), 10u);    // 1 %
  EXPECT_EQ(SparseCount(1001, 10'000), 11u);    // rounded up
  EXPECT_EQ(SparseCount(10, 10'000), 1u);       // at least one
  EXPECT_EQ(SparseCount(10, 1'000'000), 10u);   // all
  EXPECT_EQ(SparseCount(10, 4'000'000), 10u);   // never more
  EXPECT_EQ(SparseCount(262'144, 1'000), 263u);  // 0.1 % of a 1 MiB float segment
}

TEST(Sparsify, TopKEqualsAFullSortForSmallAndSampledSegments) {
  std::mt19937 rng(38);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t n : {1u, 7u, 100u, 4096u, 20'000u, 262'144u})
    for (uint32_t ppm : {1'000u, 10'000u, 250'000u, 1'000'000u}) {
      std::vector<float> v(n);
      for (float& x : v) x = normal(rng);
      CheckTopK(v, SparseCount(n, ppm));
    }
  std::vector<double> d(100'000);
  for (double& x : d) x = double(normal(rng)) * 1e3;
  CheckTopK(d, SparseCount(d.size(), 10'000));
}

TEST(Sparsify, TopKTakesNansFirstAndBreaksTiesByTheLowerIndex) {
  std::vector<float> v = {1, -3, 3, std::nanf(""), -3, 0.5f, 3};
  CheckTopK(v, 3);  // the NaN, then -3 at 1 and 3 at 2
  std::vector<float> same(50'000, 2.0f);  // the sample sees one magnitude only
  CheckTopK(same, 500);
}

// The sampled threshold can mislead (here every sampled element is large and the rest small, so
// too few elements reach it): the selection falls back to ordering every element.
TEST(Sparsify, TopKIsExactWhenTheSampleMisleads) {
  const size_t n = 65'536, stride = n / 2048;
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (i % stride == 0) ? 1000.0f + float(i) : float(i % 97) / 97.0f;
  CheckTopK(v, 2000);
}

TEST(Sparsify, OneBitSendsEachBlocksMeanOfEachSignAndKeepsTheRest) {
  std::vector<double> v = {1.5, -0.5, 0.0, -2.5};  // >= 0: 1.5 and 0.0 (mean 0.75); < 0: mean -1.5
  const std::vector<double> before = v;
  std::vector<uint8_t> bits(1);
  std::vector<double> scales(2);
  EXPECT_TRUE(TakeOneBit(v.data(), v.size(), bits.data(), scales.data()));
  EXPECT_EQ(bits[0], 0b0101);
  EXPECT_EQ(scales, (std::vector<double>{0.75, -1.5}));
  EXPECT_EQ(v, (std::vector<double>{0.75, 1.0, -0.75, -1.0}));
  AddOneBit(bits.data(), scales.data(), v.size(), v.data());
  EXPECT_EQ(v, before);
}

// Blocks of kOneBitBlock: each its own two values, and its sum crosses as it is; a block of one
// sign sends 0 for the other; the last block may be short.
TEST(Sparsify, OneBitKeepsEachBlocksSumAndItsOwnValues) {
  constexpr size_t B = kOneBitBlock;
  const size_t n = B * 3 + 5;
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i < B ? float(i % 7) + 1.0f : (i < 2 * B ? -0.001f * float(i) : float(i % 5) - 2.0f);
  const std::vector<float> before = v;
  std::vector<uint8_t> bits((n + 7) / 8);
  std::vector<float> scales(2 * OneBitBlocks(n));
  ASSERT_EQ(scales.size(), 8u);
  EXPECT_TRUE(TakeOneBit(v.data(), n, bits.data(), scales.data()));
  EXPECT_EQ(scales[1], 0.0f);  // block 0: no negatives
  EXPECT_EQ(scales[2], 0.0f);  // block 1: no element >= 0
  EXPECT_NE(scales[4], scales[6]);  // blocks 2 and 3: their own values
  std::vector<float> sent(n, 0.0f);
  AddOneBit(bits.data(), scales.data(), n, sent.data());
  for (size_t b = 0; b < OneBitBlocks(n); ++b) {
    double want = 0, got = 0;
    for (size_t i = b * B; i < std::min(n, b * B + B); ++i) want += before[i], got += sent[i];
    EXPECT_NEAR(got, want, 1e-4 * (1 + std::fabs(want))) << "block " << b;
  }
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(sent[i] + v[i], before[i], 1e-5) << i;
}

// float32's whole blocks take a vector path, float64's and the last short block the generic one:
// the same bits (-0.0 and 0.0 count as >= 0), the same values but for float32's rounding, and
// what was sent plus what stayed is the input.
TEST(Sparsify, OneBitOfFloat32AgreesWithFloat64) {
  const size_t n = kOneBitBlock * 40 + 7;
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1e-3f);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = i % 11 == 0 ? (i % 2 == 0 ? 0.0f : -0.0f) : g(rng);
  for (size_t i = 2 * kOneBitBlock; i < 3 * kOneBitBlock; ++i) f[i] = std::fabs(f[i]);  // one sign only
  std::vector<double> d(f.begin(), f.end());
  const std::vector<float> before = f;
  std::vector<uint8_t> fbits((n + 7) / 8), dbits((n + 7) / 8);
  std::vector<float> fscales(2 * OneBitBlocks(n));
  std::vector<double> dscales(2 * OneBitBlocks(n));
  ASSERT_TRUE(TakeOneBit(f.data(), n, fbits.data(), fscales.data()));
  ASSERT_TRUE(TakeOneBit(d.data(), n, dbits.data(), dscales.data()));
  EXPECT_EQ(fbits, dbits);
  for (size_t j = 0; j < fscales.size(); ++j) ASSERT_NEAR(fscales[j], dscales[j], 1e-6 * std::fabs(dscales[j])) << j;
  EXPECT_EQ(fscales[5], 0.0f);  // block 2: nothing below zero
  std::vector<float> sent(n, 1.0f);
  AddOneBit(fbits.data(), fscales.data(), n, sent.data());
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(sent[i] - 1.0f + f[i], before[i], 1e-6f) << i;
}

TEST(Sparsify, OneBitSaysWhenABlockHeldANanOrAnInfinity) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> v(200, 1.0f);
    v[130] = bad;
    std::vector<uint8_t> bits(25);
    std::vector<float> scales(2 * OneBitBlocks(v.size()));
    EXPECT_FALSE(TakeOneBit(v.data(), v.size(), bits.data(), scales.data())) << bad;
    EXPECT_TRUE(std::isfinite(scales[0]) && std::isfinite(scales[1])) << "block 0 holds no " << bad;
  }
}

// Error feedback over many steps, two nodes, float64 with integer gradients: each step a node
// compresses its gradient plus its residual, the nodes sum what crossed; the sum of what was
// applied plus the residuals left equals the sum of every gradient, exactly for top-k (1-bit
// rounds its values: within 1e-9).
TEST(Sparsify, WhatWasAppliedPlusTheResidualsIsEveryGradient) {
  const size_t n = 5000, k = SparseCount(n, 10'000);
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> grad(-1000, 1000);
  for (int method = 0; method < 2; ++method) {
    SCOPED_TRACE(method == 0 ? "top-k" : "1-bit");
    std::vector<std::vector<double>> residual(2, std::vector<double>(n, 0.0));
    std::vector<double> applied(n, 0.0), expected(n, 0.0);
    std::vector<uint32_t> idx(k), scratch(n);
    std::vector<double> val(k), scales(2 * OneBitBlocks(n));
    std::vector<uint8_t> bits((n + 7) / 8);
    for (uint64_t step = 0; step < 50; ++step)
      for (int node = 0; node < 2; ++node) {
        std::vector<double>& v = residual[size_t(node)];
        for (size_t i = 0; i < n; ++i) {
          const double g = grad(rng);
          v[i] += g;
          expected[i] += g;
        }
        if (method == 0) {
          TakeTopK(v.data(), n, k, idx.data(), val.data(), scratch.data());
          AddAt(idx.data(), val.data(), k, applied.data());
        } else {
          ASSERT_TRUE(TakeOneBit(v.data(), n, bits.data(), scales.data()));
          AddOneBit(bits.data(), scales.data(), n, applied.data());
        }
      }
    for (size_t i = 0; i < n; ++i) {
      const double total = applied[i] + residual[0][i] + residual[1][i];
      if (method == 0) ASSERT_EQ(total, expected[i]) << i;
      else ASSERT_NEAR(total, expected[i], 1e-9 * (1 + std::fabs(expected[i]))) << i;
    }
  }
}

}  // namespace
}  // namespace syncd
