// FastDivisor (ops/common/fast_divisor.h): the multiply-high division the deformable convolution's point kernels use
// for 32-bit indices, checked on the host (the same arithmetic as the device's __umulhi) against plain division.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/fast_divisor.h"

namespace detops {
namespace {

constexpr std::int32_t kMax32 = 2147483647;  // the largest 32-bit index

// n / d over the quotient boundaries a wrong magic number or shift misses first: each multiple of d, one below it
// and one above, from 0 up to the largest 32-bit index, sampled where there are too many.
void expect_boundaries(std::int64_t d) {
  const FastDivisor f(d);
  const std::int64_t multiples = kMax32 / d;
  const std::int64_t step = multiples > 4096 ? multiples / 4096 : 1;
  for (std::int64_t k = 0; k <= multiples; k += step) {
    for (std::int64_t n : {k * d - 1, k * d, k * d + 1, k * d + d - 1}) {
      if (n < 0 || n > kMax32) continue;
      ASSERT_EQ(f.div(static_cast<std::int32_t>(n)), static_cast<std::int32_t>(n / d)) << "n = " << n << ", d = " << d;
    }
  }
  ASSERT_EQ(f.div(kMax32), static_cast<std::int32_t>(kMax32 / d)) << "d = " << d;
}

// Every divisor up to 2^12 (the point kernels' widths, taps and group counts live here) at its boundaries.
TEST(FastDivisor, EverySmallDivisorAtEveryQuotientBoundary) {
  for (std::int64_t d = 1; d <= 4096; ++d) expect_boundaries(d);
}

// Powers of two and their neighbours up to 2^31 + 1 (the shift's edges), and the largest 32-bit values.
TEST(FastDivisor, PowersOfTwoAndNeighbours) {
  for (int e = 1; e <= 31; ++e) {
    const std::int64_t p = std::int64_t{1} << e;
    for (std::int64_t d : {p - 1, p, p + 1}) expect_boundaries(d);
  }
  for (std::int64_t d : {std::int64_t{kMax32} - 1, std::int64_t{kMax32}}) expect_boundaries(d);
}

// Random divisors over the whole 31-bit range and random numerators (a fixed seed).
TEST(FastDivisor, RandomDivisorsAndNumerators) {
  std::mt19937_64 rng(20261129);
  std::uniform_int_distribution<std::int64_t> divisor(1, kMax32), numerator(0, kMax32);
  for (int i = 0; i < 200000; ++i) {
    const std::int64_t d = divisor(rng) >> (rng() % 31);  // every magnitude, not mostly ~2^30
    const FastDivisor f(d > 0 ? d : 1);
    const std::int64_t n = numerator(rng);
    ASSERT_EQ(f.div(static_cast<std::int32_t>(n)), static_cast<std::int32_t>(n / (d > 0 ? d : 1)))
        << "n = " << n << ", d = " << d;
  }
}

// Divisors of 2^31 and more give 0 for every 32-bit index; 64-bit indices divide plainly; a divisor below 1 is 1.
TEST(FastDivisor, LargeDivisorsSixtyFourBitIndicesAndNonPositive) {
  for (std::int64_t d : {std::int64_t{1} << 31, (std::int64_t{1} << 31) + 1, std::int64_t{1} << 40}) {
    const FastDivisor f(d);
    for (std::int32_t n : {0, 1, 12345, kMax32 - 1, kMax32}) EXPECT_EQ(f.div(n), 0) << "n = " << n << ", d = " << d;
    EXPECT_EQ(f.div(std::int64_t{5} * d + 3), 5) << "d = " << d;
  }
  const FastDivisor three(3);
  EXPECT_EQ(three.div((std::int64_t{1} << 40) + 5), ((std::int64_t{1} << 40) + 5) / 3);
  EXPECT_EQ(three.div(std::int64_t{kMax32} * 4), std::int64_t{kMax32} * 4 / 3);
  for (std::int64_t v : {std::int64_t{0}, std::int64_t{-7}}) {
    const FastDivisor one(v);
    EXPECT_EQ(one.d, 1);
    for (std::int32_t n : {0, 1, 99, kMax32}) EXPECT_EQ(one.div(n), n);
  }
}

}  // namespace
}  // namespace detops
