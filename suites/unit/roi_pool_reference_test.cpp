// Self-checks of the RoIPool reference against values worked out by hand (no GPU, no kernel code).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "detops/reference/roi_pool_reference.h"

namespace detops::reference {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// One image, one channel, H x W, element (h, w) = f(h * W + w).
template <typename F>
Tensor4d plane(Eigen::Index h, Eigen::Index w, F f) {
  Tensor4d t(1, 1, h, w);
  for (Eigen::Index y = 0; y < h; ++y)
    for (Eigen::Index x = 0; x < w; ++x) t(0, 0, y, x) = f(static_cast<double>(y * w + x));
  return t;
}

Matrixd one_roi(double b, double x1, double y1, double x2, double y2) {
  Matrixd m(1, 5);
  m << b, x1, y1, x2, y2;
  return m;
}

// Roi (x1, y1, x2, y2) = (1, 2, 8, 6) at scale 1 on a 10 x 12 map, pooled 2 x 3:
// roi_h = 5, bin_h = 2.5 -> rows [2, 5), [4, 7); roi_w = 8, bin_w = 8/3 -> columns [1, 4), [3, 7), [6, 9).
const RoiPoolParams kParams{1.0, 2, 3};
const Matrixd kRoi = one_roi(0, 1, 2, 8, 6);
constexpr Eigen::Index kRows[2][2] = {{2, 5}, {4, 7}};
constexpr Eigen::Index kCols[3][2] = {{1, 4}, {3, 7}, {6, 9}};

TEST(RoiPoolReference, IncreasingPlaneMaxIsTheBinsLastElement) {
  const Tensor4d x = plane(10, 12, [](double i) { return i; });
  const RoiPoolResult r = roi_pool_forward(kParams, x, kRoi);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      const Eigen::Index last = (kRows[i][1] - 1) * 12 + (kCols[j][1] - 1);
      EXPECT_EQ(r.argmax(0, 0, i, j), last) << i << "," << j;
      EXPECT_EQ(r.output(0, 0, i, j), static_cast<double>(last));
    }
}

TEST(RoiPoolReference, NegativeValuesGiveTheMaxOfNegativesNotZero) {
  const Tensor4d x = plane(10, 12, [](double i) { return -i - 1; });
  const RoiPoolResult r = roi_pool_forward(kParams, x, kRoi);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      const Eigen::Index first = kRows[i][0] * 12 + kCols[j][0];
      EXPECT_EQ(r.argmax(0, 0, i, j), first);
      EXPECT_EQ(r.output(0, 0, i, j), -static_cast<double>(first) - 1);
    }
}

TEST(RoiPoolReference, TiesKeepTheFirstMaximumInRowMajorOrder) {
  const Tensor4d x = plane(10, 12, [](double) { return 0.5; });
  const RoiPoolResult r = roi_pool_forward(kParams, x, kRoi);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(r.argmax(0, 0, i, j), kRows[i][0] * 12 + kCols[j][0]);
  // Two equal maxima in one bin, the later one earlier in column order: (3, 1) and (2, 3) -> (2, 3).
  Tensor4d y = plane(10, 12, [](double) { return 0.0; });
  y(0, 0, 3, 1) = 1;
  y(0, 0, 2, 3) = 1;
  EXPECT_EQ(roi_pool_forward(kParams, y, kRoi).argmax(0, 0, 0, 0), 2 * 12 + 3);
}

TEST(RoiPoolReference, RoundsHalfAwayFromZero) {
  // (2.5, 0.5) -> column 3, row 1; half-to-even would give column 2, row 0. -0.5 -> -1.
  const Tensor4d x = plane(4, 5, [](double i) { return i; });
  EXPECT_EQ(roi_pool_forward({1.0, 1, 1}, x, one_roi(0, 2.5, 0.5, 2.5, 0.5)).argmax(0, 0, 0, 0), 1 * 5 + 3);
  // x: [-1, 0] (roi_w 2) split in 2 bins: [-1, 0) is off the map (empty), [0, 1) is column 0.
  const RoiPoolResult r = roi_pool_forward({1.0, 1, 2}, x, one_roi(0, -0.5, 0, 0.4, 0));
  EXPECT_EQ(r.argmax(0, 0, 0, 0), -1);
  EXPECT_EQ(r.output(0, 0, 0, 0), 0.0);
  EXPECT_EQ(r.argmax(0, 0, 0, 1), 0);
}

TEST(RoiPoolReference, EmptyBinsGiveZeroAndArgmaxMinusOne) {
  const Tensor4d x = plane(4, 5, [](double i) { return i + 1; });
  const RoiPoolResult outside = roi_pool_forward({1.0, 2, 2}, x, one_roi(0, -20, -20, -10, 3));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ(outside.output(0, 0, i, j), 0.0);
      EXPECT_EQ(outside.argmax(0, 0, i, j), -1);
    }
}

TEST(RoiPoolReference, DegenerateRoiIsOnePixelAtItsStart) {
  const Tensor4d x = plane(4, 5, [](double i) { return i; });
  const RoiPoolResult r = roi_pool_forward({0.5, 2, 2}, x, one_roi(0, 6, 4, 2, 0));  // (3, 2) -> (1, 0)
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) EXPECT_EQ(r.argmax(0, 0, i, j), 2 * 5 + 3);
}

TEST(RoiPoolReference, NaNs) {
  const Tensor4d x = plane(4, 5, [](double i) { return i; });
  const RoiPoolResult nan_roi = roi_pool_forward({1.0, 1, 1}, x, one_roi(0, 0, kNaN, 4, 3));
  EXPECT_EQ(nan_roi.output(0, 0, 0, 0), 0.0);
  EXPECT_EQ(nan_roi.argmax(0, 0, 0, 0), -1);
  // NaN features never win (in both modes); with exact_max a bin of NaNs only gives NaN with argmax -1.
  Tensor4d y = plane(4, 5, [](double i) { return -i; });
  y(0, 0, 0, 0) = kNaN;
  y(0, 0, 0, 1) = kNaN;
  for (bool exact : {false, true}) {
    const RoiPoolResult mixed = roi_pool_forward({1.0, 1, 1, exact}, y, one_roi(0, 0, 0, 4, 3));
    EXPECT_EQ(mixed.argmax(0, 0, 0, 0), 2);
    EXPECT_EQ(mixed.output(0, 0, 0, 0), -2.0);
  }
  const RoiPoolResult all_nan = roi_pool_forward({1.0, 1, 1, true}, y, one_roi(0, 0, 0, 1, 0));
  EXPECT_TRUE(std::isnan(all_nan.output(0, 0, 0, 0)));
  EXPECT_EQ(all_nan.argmax(0, 0, 0, 0), -1);
  // With exact_max -inf is a value like any other: a bin of -inf gives -inf at its first element.
  const Tensor4d m = plane(4, 5, [](double) { return -kInf; });
  EXPECT_EQ(roi_pool_forward({1.0, 1, 1, true}, m, one_roi(0, 2, 1, 3, 2)).argmax(0, 0, 0, 0), 1 * 5 + 2);
}

// The default (torchvision's): a max starts at -FLT_MAX = -3.4028234663852886e38 and only values strictly
// above it count. Bins of the 1 x 5 plane {NaN, -inf, -FLT_MAX, -1e300, -5} at columns [0, 2), [0, 4),
// [3, 5): no candidate, no candidate, -5 at column 4; with exact_max: -inf at 1, -FLT_MAX at 2, -5 at 4.
TEST(RoiPoolReference, DefaultMaxStartsAtMinusFltMax) {
  const double flt_max = 3.4028234663852886e38;
  const double values[5] = {kNaN, -kInf, -flt_max, -1e300, -5.0};
  const Tensor4d x = plane(1, 5, [&](double i) { return values[static_cast<int>(i)]; });
  Matrixd rois(3, 5);
  rois << 0, 0, 0, 1, 0,  //
      0, 0, 0, 3, 0,      //
      0, 3, 0, 4, 0;
  const RoiPoolResult def = roi_pool_forward({1.0, 1, 1}, x, rois);
  const RoiPoolResult exact = roi_pool_forward({1.0, 1, 1, true}, x, rois);
  const double def_out[3] = {-flt_max, -flt_max, -5.0}, exact_out[3] = {-kInf, -flt_max, -5.0};
  const std::int64_t def_arg[3] = {-1, -1, 4}, exact_arg[3] = {1, 2, 4};
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(def.output(k, 0, 0, 0), def_out[k]) << k;
    EXPECT_EQ(def.argmax(k, 0, 0, 0), def_arg[k]) << k;
    EXPECT_EQ(exact.output(k, 0, 0, 0), exact_out[k]) << k;
    EXPECT_EQ(exact.argmax(k, 0, 0, 0), exact_arg[k]) << k;
  }
  // No gradient where argmax is -1: only roi 2's reaches column 4.
  Tensor4d g(3, 1, 1, 1);
  g.setValues({{{{1.0}}}, {{{2.0}}}, {{{4.0}}}});
  const Tensor4d gi = roi_pool_backward({1.0, 1, 1}, g, x, rois);
  for (Eigen::Index w = 0; w < 5; ++w) EXPECT_EQ(gi(0, 0, 0, w), w == 4 ? 4.0 : 0.0) << w;
  const Tensor4d gi_exact = roi_pool_backward({1.0, 1, 1, true}, g, x, rois);
  const double want_exact[5] = {0.0, 1.0, 2.0, 0.0, 4.0};
  for (Eigen::Index w = 0; w < 5; ++w) EXPECT_EQ(gi_exact(0, 0, 0, w), want_exact[w]) << w;
}

TEST(RoiPoolReference, InfiniteCoordinatesCoverTheMap) {
  const Tensor4d x = plane(4, 5, [](double i) { return i == 7 ? 100.0 : i; });
  const RoiPoolResult r = roi_pool_forward({0.25, 1, 1}, x, one_roi(0, -kInf, -kInf, kInf, kInf));
  EXPECT_EQ(r.argmax(0, 0, 0, 0), 7);
}

TEST(RoiPoolReference, BackwardSendsEachGradientToItsArgmax) {
  // All four bins of a one-pixel roi share the pixel: its gradient is the sum of the four.
  const Tensor4d x = plane(4, 5, [](double i) { return i; });
  Tensor4d g(1, 1, 2, 2);
  g.setValues({{{{1.0, 2.0}, {4.0, 8.0}}}});
  const Tensor4d gi = roi_pool_backward({1.0, 2, 2}, g, x, one_roi(0, 3, 2, 3, 2));
  for (Eigen::Index h = 0; h < 4; ++h)
    for (Eigen::Index w = 0; w < 5; ++w) EXPECT_EQ(gi(0, 0, h, w), h == 2 && w == 3 ? 15.0 : 0.0);
}

TEST(RoiPoolReference, RejectsInvalidBatchIndex) {
  const Tensor4d x = plane(4, 5, [](double i) { return i; });
  EXPECT_THROW(roi_pool_forward({1.0, 1, 1}, x, one_roi(1, 0, 0, 2, 2)), std::invalid_argument);
  EXPECT_THROW(roi_pool_forward({1.0, 1, 1}, x, one_roi(kNaN, 0, 0, 2, 2)), std::invalid_argument);
}

}  // namespace
}  // namespace detops::reference
