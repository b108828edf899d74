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

TEST(Sparsify, RandomIndicesAreDistinctAscendingTheSameForASeedAndUniform) {
  const size_t n = 1000, k = 100;
  std::vector<uint32_t> a(k), b(k), c(k);
  std::vector<uint64_t> bitmap((n + 63) / 64);
  RandomIndices(7, n, k, a.data(), bitmap.data());
  RandomIndices(7, n, k, b.data(), bitmap.data());
  RandomIndices(8, n, k, c.data(), bitmap.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::set<uint32_t>(a.begin(), a.end()).size(), k);
  EXPECT_LT(a.back(), n);
  // 2000 draws of 100 of 1000: each index about 200 times; none far off.
  std::vector<int> seen(n, 0);
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    RandomIndices(seed, n, k, a.data(), bitmap.data());
    for (uint32_t i : a) ++seen[i];
  }
  const auto [lo, hi] = std::minmax_element(seen.begin(), seen.end());
  EXPECT_GT(*lo, 140);
  EXPECT_LT(*hi, 260);
  RandomIndices(1, 5, 5, a.data(), bitmap.data());  // all of them
  EXPECT_EQ(std::vector<uint32_t>(a.begin(), a.begin() + 5), (std::vector<uint32_t>{0, 1, 2, 3, 4}));
}

TEST(Sparsify, ScaledSignSendsTheMeanMagnitudeAndKeepsTheRest) {
  std::vector<double> v = {1.5, -0.5, 0.0, -2.0};  // mean magnitude 1
  const std::vector<double> before = v;
  std::vector<uint8_t> bits(1);
  EXPECT_EQ(TakeScaledSign(v.data(), v.size(), bits.data()), 1.0);
  EXPECT_EQ(bits[0], 0b0101);  // 1.5 and 0.0 are >= 0
  EXPECT_EQ(v, (std::vector<double>{0.5, 0.5, -1.0, -1.0}));
  AddScaledSign(bits.data(), 1.0, v.size(), v.data());
  EXPECT_EQ(v, before);
}

// Error feedback over many steps, two nodes, float64 with integer gradients: each step a node
// compresses its gradient plus its residual, the nodes sum what crossed; the sum of what was
// applied plus the residuals left equals the sum of every gradient, exactly for top-k and
// random-k (1-bit rounds its scale: within 1e-9).
TEST(Sparsify, WhatWasAppliedPlusTheResidualsIsEveryGradient) {
  const size_t n = 5000, k = SparseCount(n, 10'000);
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> grad(-1000, 1000);
  for (int method = 0; method < 3; ++method) {
    SCOPED_TRACE(method == 0 ? "top-k" : method == 1 ? "random-k" : "1-bit");
    std::vector<std::vector<double>> residual(2, std::vector<double>(n, 0.0));
    std::vector<double> applied(n, 0.0), expected(n, 0.0);
    std::vector<uint32_t> idx(k), scratch(n);
    std::vector<uint64_t> bitmap((n + 63) / 64);
    std::vector<double> val(k);
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
        } else if (method == 1) {
          RandomIndices(step, n, k, idx.data(), bitmap.data());  // the same on both nodes
          TakeAt(v.data(), idx.data(), k, val.data());
          AddAt(idx.data(), val.data(), k, applied.data());
        } else {
          const double scale = TakeScaledSign(v.data(), n, bits.data());
          AddScaledSign(bits.data(), scale, n, applied.data());
        }
      }
    for (size_t i = 0; i < n; ++i) {
      const double total = applied[i] + residual[0][i] + residual[1][i];
      if (method < 2) ASSERT_EQ(total, expected[i]) << i;
      else ASSERT_NEAR(total, expected[i], 1e-9 * (1 + std::fabs(expected[i]))) << i;
    }
  }
}

}  // namespace
}  // namespace syncd
