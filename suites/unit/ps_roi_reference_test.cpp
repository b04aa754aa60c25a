// Self-checks of the ps_roi_align / ps_roi_pool references against values known in closed form (no GPU, no
// kernel code).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "detops/reference/ps_roi_reference.h"
#include "kit/reference_identities.h"
#include "matrix_rows.h"

namespace detops::reference {
namespace {

Matrixd rois(std::initializer_list<std::initializer_list<double>> values) { return rows<5>(values); }

// f(n, c, y, x) = 1e4 n + 100 c + y + 0.01 x: linear, so its mean over pixel rows [r0, r1) and columns
// [c0, c1) is f at ((r0 + r1 - 1) / 2, (c0 + c1 - 1) / 2).
Tensor4d linear_pixels(Eigen::Index n, Eigen::Index c, Eigen::Index h, Eigen::Index w) {
  Tensor4d t(n, c, h, w);
  for (Eigen::Index a = 0; a < n; ++a)
    for (Eigen::Index b = 0; b < c; ++b)
      for (Eigen::Index y = 0; y < h; ++y)
        for (Eigen::Index x = 0; x < w; ++x) t(a, b, y, x) = 1e4 * a + 100.0 * b + y + 0.01 * x;
  return t;
}

double mean_of_linear(Eigen::Index n, Eigen::Index c, std::pair<int, int> rows, std::pair<int, int> cols) {
  return 1e4 * n + 100.0 * c + (rows.first + rows.second - 1) / 2.0 + 0.01 * (cols.first + cols.second - 1) / 2.0;
}

TEST(PsRoiPoolReference, ExactBinsHaveExactIntegerBoundaries) {
  // 29 rows in 7 bins: floor(i * 29 / 7) .. ceil((i + 1) * 29 / 7), worked out by hand.
  const std::vector<std::pair<int, int>> rows{{0, 5}, {4, 9}, {8, 13}, {12, 17}, {16, 21}, {20, 25}, {24, 29}};
  const Tensor4d x = linear_pixels(1, 7, 40, 5);
  const Tensor4d out = ps_roi_pool_forward({1.0, 7, 1, true}, x, rois({{0, 0, 0, 3, 29}}));
  ASSERT_EQ(out.dimension(1), 1);
  for (int i = 0; i < 7; ++i) {
    EXPECT_NEAR(out(0, 0, i, 0), mean_of_linear(0, i, rows[static_cast<size_t>(i)], {0, 3}), 1e-9) << "bin " << i;
  }
}

TEST(PsRoiPoolReference, DefaultBinsAreTorchvisionsFloatingPointOnes) {
  // 29 rows in 7 bins with b = 29 / 7 in double: 7 * b = 29.000000000000004, so the last bin's end is
  // ceil(...) = 30 and it takes a 30th row; the other bins are the exact ones. The map has 40 rows, so the
  // forward's clip to [0, 39) does not bite.
  const std::vector<std::pair<int, int>> rows{{0, 5}, {4, 9}, {8, 13}, {12, 17}, {16, 21}, {20, 25}, {24, 30}};
  const Tensor4d x = linear_pixels(1, 7, 40, 5);
  const Tensor4d out = ps_roi_pool_forward({1.0, 7, 1}, x, rois({{0, 0, 0, 3, 29}}));
  for (int i = 0; i < 7; ++i) {
    EXPECT_NEAR(out(0, 0, i, 0), mean_of_linear(0, i, rows[static_cast<size_t>(i)], {0, 3}), 1e-9) << "bin " << i;
  }
}

TEST(PsRoiPoolReference, DefaultForwardLeavesOutTheLastRowAndColumn) {
  // torchvision's forward clips bins to [0, H-1) x [0, W-1); its backward (the gradient target's bins) to
  // the map.
  const Tensor4d x = linear_pixels(1, 1, 5, 6);
  const Matrixd r = rois({{0, 0, 0, 6, 5}, {0, 4, 3, 9, 9}, {0, 5, 4, 9, 9}});
  const Tensor4d out = ps_roi_pool_forward({1.0, 1, 1}, x, r);
  EXPECT_NEAR(out(0, 0, 0, 0), mean_of_linear(0, 0, {0, 4}, {0, 5}), 1e-12);
  EXPECT_NEAR(out(1, 0, 0, 0), mean_of_linear(0, 0, {3, 4}, {4, 5}), 1e-12);
  EXPECT_EQ(out(2, 0, 0, 0), 0.0);  // starts on the last row and column: empty
  const Tensor4d target = ps_roi_pool_gradient_target({1.0, 1, 1}, x, r);
  EXPECT_NEAR(target(0, 0, 0, 0), mean_of_linear(0, 0, {0, 5}, {0, 6}), 1e-12);
  EXPECT_NEAR(target(1, 0, 0, 0), mean_of_linear(0, 0, {3, 5}, {4, 6}), 1e-12);
  EXPECT_NEAR(target(2, 0, 0, 0), mean_of_linear(0, 0, {4, 5}, {5, 6}), 1e-12);
}

TEST(PsRoiPoolReference, ExactBinsAreClippedToTheWholeMap) {
  const Tensor4d x = linear_pixels(1, 1, 5, 6);
  const Tensor4d out = ps_roi_pool_forward({1.0, 1, 1, true}, x, rois({{0, 0, 0, 6, 5}, {0, 4, 3, 9, 9}, {0, -3, -2, 1, 1}}));
  EXPECT_NEAR(out(0, 0, 0, 0), mean_of_linear(0, 0, {0, 5}, {0, 6}), 1e-12);  // last row and column included
  EXPECT_NEAR(out(1, 0, 0, 0), mean_of_linear(0, 0, {3, 5}, {4, 6}), 1e-12);
  EXPECT_NEAR(out(2, 0, 0, 0), mean_of_linear(0, 0, {0, 1}, {0, 1}), 1e-12);
}

TEST(PsRoiPoolReference, CoordinatesRoundHalfAwayFromZero) {
  // spatial_scale 0.5: x1 = 5 -> 2.5 -> 3, x2 = 9 -> 4.5 -> 5, y1 = -1 -> -0.5 -> -1, y2 = 5 -> 2.5 -> 3.
  const Tensor4d x = linear_pixels(1, 1, 6, 8);
  const Tensor4d out = ps_roi_pool_forward({0.5, 1, 1, true}, x, rois({{0, 5, -1, 9, 5}}));
  EXPECT_NEAR(out(0, 0, 0, 0), mean_of_linear(0, 0, {0, 3}, {3, 5}), 1e-12);  // rows [-1, 3) clipped to [0, 3)
}

TEST(PsRoiPoolReference, DegenerateNaNAndInfiniteRois) {
  const Tensor4d x = linear_pixels(2, 1, 5, 6);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const Tensor4d out = ps_roi_pool_forward(
      {1.0, 1, 1, true}, x, rois({{1, 4, 3, 1, 1}, {0, nan, 0, 3, 3}, {0, -inf, -inf, inf, inf}, {1, 0, 0, inf, 2}}));
  EXPECT_NEAR(out(0, 0, 0, 0), mean_of_linear(1, 0, {3, 4}, {4, 5}), 1e-12);  // x2 < x1: one pixel wide and high
  EXPECT_EQ(out(1, 0, 0, 0), 0.0);                                            // NaN: pools nothing
  EXPECT_NEAR(out(2, 0, 0, 0), mean_of_linear(0, 0, {0, 5}, {0, 6}), 1e-12);  // clamped to +-2^30, clipped
  EXPECT_NEAR(out(3, 0, 0, 0), mean_of_linear(1, 0, {0, 2}, {0, 6}), 1e-12);
}

TEST(PsRoiReference, ChannelMappingIsPositional) {
  const Tensor4d m = ps_roi_channel_mapping(2, 3 * 2 * 4, 2, 4);
  ASSERT_EQ(m.dimension(1), 3);
  for (Eigen::Index k = 0; k < 2; ++k)
    for (Eigen::Index c = 0; c < 3; ++c)
      for (Eigen::Index i = 0; i < 2; ++i)
        for (Eigen::Index j = 0; j < 4; ++j) EXPECT_EQ(m(k, c, i, j), static_cast<double>(c * 8 + i * 4 + j));
}

TEST(PsRoiAlignReference, LinearMapGivesValueAtBinCenterOfItsChannel) {
  // kit::linear_map: inside the map, bilinear interpolation reproduces a linear function, and a bin's samples
  // are symmetric about its center; each output reads its own channel.
  const Eigen::Index C_out = 2, ph = 3, pw = 4;
  const Tensor4d x = kit::linear_map(2, C_out * ph * pw, 20, 24);
  const Matrixd r = rois({{1, 8, 4, 40, 28}, {0, 2, 2, 30, 34}});
  const auto channel_read = [&](Eigen::Index c, Eigen::Index i, Eigen::Index j) { return (c * ph + i) * pw + j; };
  for (std::int64_t sr : {0, 1, 2, 3}) {
    SCOPED_TRACE("sr=" + std::to_string(sr));
    const Tensor4d out = ps_roi_align_forward({0.5, ph, pw, sr}, x, r);
    kit::expect_linear_at_bin_centers(out, {2, C_out, ph, pw}, r, 0.5, 0.5, channel_read, 1e-11);
  }
}

TEST(PsRoiAlignReference, DefaultEmptyBinsAreNaN) {
  // An adaptive grid over a zero-size roi, or one with an extent in (-1, 0], has 0 samples: 0 / 0. Extents of
  // at most -1 give a negative ceil (a nonzero count, no samples): 0. NaN coordinates: 0.
  Tensor4d x(1, 4, 5, 5);
  x.setConstant(1.0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor4d out = ps_roi_align_forward(
      {1.0, 2, 2, 0}, x, rois({{0, 2, 2, 2, 2}, {0, 3, 1, 2.5, 4}, {0, 3, 3, 1, 1}, {0, nan, 1, 3, 3}}));
  for (Eigen::Index i = 0; i < 2; ++i)
    for (Eigen::Index j = 0; j < 2; ++j) {
      EXPECT_TRUE(std::isnan(out(0, 0, i, j)));
      EXPECT_TRUE(std::isnan(out(1, 0, i, j)));
      EXPECT_EQ(out(2, 0, i, j), 0.0);
      EXPECT_EQ(out(3, 0, i, j), 0.0);
    }
}

TEST(PsRoiAlignReference, ZeroEmptyBinsGiveZeroNotNaN) {
  Tensor4d x(1, 4, 5, 5);
  x.setConstant(1.0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor4d out = ps_roi_align_forward({1.0, 2, 2, 0, true}, x, rois({{0, 3, 3, 1, 1}, {0, nan, 1, 3, 3}, {0, 2, 2, 2, 2}}));
  for (Eigen::Index k = 0; k < 3; ++k)
    for (Eigen::Index i = 0; i < 2; ++i)
      for (Eigen::Index j = 0; j < 2; ++j) EXPECT_EQ(out(k, 0, i, j), 0.0) << "roi " << k;
  // A sub-pixel roi keeps its size (no 1x1 minimum): one sample per bin at the bin centres, which on a
  // constant map all give the constant.
  const Tensor4d tiny = ps_roi_align_forward({1.0, 2, 2, 0}, x, rois({{0, 2, 2, 2.05, 2.05}}));
  for (Eigen::Index i = 0; i < 2; ++i)
    for (Eigen::Index j = 0; j < 2; ++j) EXPECT_DOUBLE_EQ(tiny(0, 0, i, j), 1.0);
}

TEST(PsRoiAlignReference, AdaptiveGridIsCapped) {
  // Scale 1, shift -0.5: the roi spans [-2047.5, 2048.5], 4096 px; capped at 1024 samples (not 4096) the
  // spacing is 4 px, samples at -2045.5 + 4i; only i = 512 (2.5) falls in [-1, 3] on a 3x3 map.
  Tensor4d x(1, 1, 3, 3);
  x.setConstant(2.0);
  const Tensor4d out = ps_roi_align_forward({1.0, 1, 1, 0}, x, rois({{0, -2047, -2047, 2049, 2049}}));
  EXPECT_NEAR(out(0, 0, 0, 0), 2.0 / (1024.0 * 1024.0), 1e-15);
}

// kit::expect_adjoint on a [2, 12, 6, 7] map and four rois.
template <typename Params, typename Fwd, typename Bwd>
void expect_adjoint(const Params& p, Fwd&& fwd, Bwd&& bwd) {
  const Matrixd r = rois({{0, 1.3, 0.2, 9.7, 8.1}, {1, -2, -1, 5, 14}, {1, 3, 3, 3.5, 12}, {0, 10, 11, 2, 3}});
  kit::expect_adjoint({2, 12, 6, 7}, [&](const Tensor4d& x) { return fwd(p, x, r); },
                      [&](const Tensor4d& g) { return bwd(p, g, r, {2, 12, 6, 7}); });
}

TEST(PsRoiReference, BackwardsAreTheAdjointsOfForwards) {
  expect_adjoint(PsRoiAlignParams{0.75, 3, 2, 0}, ps_roi_align_forward, ps_roi_align_backward);
  expect_adjoint(PsRoiAlignParams{0.75, 2, 3, 2}, ps_roi_align_forward, ps_roi_align_backward);
  expect_adjoint(PsRoiPoolParams{0.75, 3, 2, true}, ps_roi_pool_forward, ps_roi_pool_backward);
  expect_adjoint(PsRoiPoolParams{1.0, 2, 3, true}, ps_roi_pool_forward, ps_roi_pool_backward);
  // Without exact_bins the backward is the adjoint of the gradient target (the forward with the map clip).
  expect_adjoint(PsRoiPoolParams{0.75, 3, 2}, ps_roi_pool_gradient_target, ps_roi_pool_backward);
  expect_adjoint(PsRoiPoolParams{1.0, 2, 3}, ps_roi_pool_gradient_target, ps_roi_pool_backward);
}

TEST(PsRoiReference, RejectsBadBatchIndexAndChannelCount) {
  Tensor4d x(1, 4, 2, 2);
  x.setZero();
  EXPECT_THROW(ps_roi_align_forward({1.0, 2, 2, 1}, x, rois({{1, 0, 0, 1, 1}})), std::invalid_argument);
  EXPECT_THROW(ps_roi_pool_forward({1.0, 2, 2}, x, rois({{-1, 0, 0, 1, 1}})), std::invalid_argument);
  EXPECT_THROW(ps_roi_pool_forward({1.0, 3, 1}, x, rois({{0, 0, 0, 1, 1}})), std::invalid_argument);
}

}  // namespace
}  // namespace detops::reference
