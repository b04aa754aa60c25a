// common/bilinear.h on the host: bilinear_taps (the channels-first RoIAlign-family kernels' per-sample rule) and
// bilinear_axis (the channels-last gather's separable rows x columns, common/roi_bins_nhwc.cuh) must agree bit
// for bit: the channels-last path is only a regrouping of the same weights if every 2-D tap is the product of its
// two axes' taps. bilinear_taps is written out for speed rather than built from bilinear_axis, so an edit to one
// rule (the clamp at -1, the snap at extent - 1, the NaN test) that misses the other fails here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/bilinear.h"

namespace detops {
namespace {

// Coordinates around every boundary of an axis of `extent` pixels: beyond -1, the clamp band (-1, 0], the interior,
// the snap at extent - 1, the edge at extent, beyond it, and non-finite values.
template <typename Acc>
std::vector<Acc> probe_coordinates(int extent) {
  const Acc inf = std::numeric_limits<Acc>::infinity();
  std::vector<Acc> v = {-inf, inf, std::numeric_limits<Acc>::quiet_NaN(), Acc(-1e30), Acc(1e30)};
  for (Acc base : {Acc(-2), Acc(-1), Acc(0), Acc(1), static_cast<Acc>(extent - 2), static_cast<Acc>(extent - 1),
                   static_cast<Acc>(extent), static_cast<Acc>(extent + 1)}) {
    for (Acc d : {Acc(-0.75), Acc(-0.5), Acc(-1e-3), Acc(0), Acc(1e-3), Acc(0.25), Acc(0.5), Acc(0.9999)}) {
      v.push_back(base + d);
    }
    v.push_back(std::nextafter(base, -inf));
    v.push_back(std::nextafter(base, inf));
  }
  for (int i = 0; i <= 64; ++i) v.push_back(static_cast<Acc>(extent + 2) * static_cast<Acc>(i) / Acc(64) - Acc(1));
  return v;
}

template <typename Acc, typename Index>
void expect_taps_are_axis_products(Index height, Index width) {
  int compared = 0;
  for (const Acc y : probe_coordinates<Acc>(static_cast<int>(height))) {
    for (const Acc x : probe_coordinates<Acc>(static_cast<int>(width))) {
      const BilinearTaps<Acc, Index> t = bilinear_taps(y, x, height, width);
      const BilinearAxis<Acc, Index> ay = bilinear_axis(y, height), ax = bilinear_axis(x, width);
      ASSERT_EQ(t.valid, ay.valid && ax.valid) << "y=" << y << " x=" << x;
      if (!t.valid) continue;
      ++compared;
      ASSERT_EQ(t.y_low, ay.low) << "y=" << y;
      ASSERT_EQ(t.y_high, ay.high) << "y=" << y;
      ASSERT_EQ(t.x_low, ax.low) << "x=" << x;
      ASSERT_EQ(t.x_high, ax.high) << "x=" << x;
      // Bitwise: EXPECT_EQ on the values (no NaN can reach here: NaN coordinates are invalid).
      ASSERT_EQ(t.w_ll, ay.w_low * ax.w_low) << "y=" << y << " x=" << x;
      ASSERT_EQ(t.w_lh, ay.w_low * ax.w_high) << "y=" << y << " x=" << x;
      ASSERT_EQ(t.w_hl, ay.w_high * ax.w_low) << "y=" << y << " x=" << x;
      ASSERT_EQ(t.w_hh, ay.w_high * ax.w_high) << "y=" << y << " x=" << x;
      ASSERT_GE(t.y_low, Index(0));
      ASSERT_LT(t.y_high, height);
      ASSERT_GE(t.x_low, Index(0));
      ASSERT_LT(t.x_high, width);
    }
  }
  EXPECT_GT(compared, 1000);  // the probes reach the valid region on both axes
}

TEST(Bilinear, TapsAreProductsOfAxesFloat) {
  expect_taps_are_axis_products<float, std::int32_t>(7, 13);
  expect_taps_are_axis_products<float, std::int64_t>(1, 2);  // one-pixel axes snap at once
}

TEST(Bilinear, TapsAreProductsOfAxesDouble) {
  expect_taps_are_axis_products<double, std::int64_t>(200, 336);
  expect_taps_are_axis_products<double, std::int32_t>(2, 1);
}

// The axis rule itself at its boundaries (torchvision's): out of range beyond -1 and extent, (-1, 0] clamps to
// pixel 0 with all weight on it, >= extent - 1 snaps to the last pixel.
void expect_axis(double v, std::int64_t extent, std::int64_t low, std::int64_t high, double w_low, double w_high) {
  const BilinearAxis<double, std::int64_t> a = bilinear_axis(v, extent);
  ASSERT_TRUE(a.valid) << "v=" << v;
  EXPECT_EQ(a.low, low) << "v=" << v;
  EXPECT_EQ(a.high, high) << "v=" << v;
  EXPECT_EQ(a.w_low, w_low) << "v=" << v;
  EXPECT_EQ(a.w_high, w_high) << "v=" << v;
}

TEST(Bilinear, AxisBoundaries) {
  EXPECT_FALSE(bilinear_axis(-1.0001, std::int64_t{10}).valid);
  EXPECT_FALSE(bilinear_axis(10.0001, std::int64_t{10}).valid);
  EXPECT_FALSE(bilinear_axis(std::nan(""), std::int64_t{10}).valid);
  expect_axis(-0.5, 10, 0, 1, 1.0, 0.0);   // clamped to 0
  expect_axis(9.5, 10, 9, 9, 1.0, 0.0);    // snapped to the last pixel
  expect_axis(3.25, 10, 3, 4, 0.75, 0.25);
}

}  // namespace
}  // namespace detops
