// Self-checks of the references against values known in closed form (no GPU, no kernel code).
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "detops/reference/roi_align_reference.h"
#include "kit/reference_identities.h"
#include "matrix_rows.h"

namespace detops::reference {
namespace {

Matrixd rois(std::initializer_list<std::initializer_list<double>> values) { return rows<5>(values); }

TEST(RoiAlignReference, LinearMapGivesValueAtBinCenter) {
  // The samples of a bin are symmetric about its center, so their mean of a linear function is the
  // function at the bin center, for any grid size.
  const Tensor4d x = kit::linear_map(2, 3, 20, 24);
  const Matrixd r = rois({{1, 8, 4, 40, 28}, {0, 2, 2, 30, 34}});
  for (std::int64_t sr : {0, 1, 2, 4}) {
    for (bool aligned : {false, true}) {
      SCOPED_TRACE("sr=" + std::to_string(sr) + " aligned=" + std::to_string(aligned));
      const Tensor4d out = roi_align_forward({0.5, 3, 4, sr, aligned}, x, r);
      const auto own_channel = [](Eigen::Index c, Eigen::Index, Eigen::Index) { return c; };
      kit::expect_linear_at_bin_centers(out, {2, 3, 3, 4}, r, 0.5, aligned ? 0.5 : 0.0, own_channel, 1e-12);
    }
  }
}

TEST(RoiAlignReference, ConstantMapAndRoiPartlyOutside) {
  // A constant map: inside samples give the constant; samples beyond [-1, H] give 0, so a roi whose
  // single sample lies at y = -2 gives 0, and one at y = -1 (edge, inclusive) gives the constant.
  Tensor4d x(1, 1, 4, 4);
  x.setConstant(3.0);
  const RoiAlignParams p{1.0, 1, 1, 1, false};
  const Tensor4d out = roi_align_forward(p, x, rois({{0, 1, -2.5, 2, -1.5}, {0, 1, -1.5, 2, -0.5}, {0, 1, 3.5, 2, 4.5}, {0, 1, 4.01, 2, 5.01}}));
  EXPECT_DOUBLE_EQ(out(0, 0, 0, 0), 0.0);
  EXPECT_DOUBLE_EQ(out(1, 0, 0, 0), 3.0);
  EXPECT_DOUBLE_EQ(out(2, 0, 0, 0), 3.0);  // y = 4 = H: inclusive edge, snapped to the last row
  EXPECT_DOUBLE_EQ(out(3, 0, 0, 0), 0.0);  // y = 4.51 > H
}

TEST(RoiAlignReference, EmptyBinsAndNaNGiveZeroNotNaN) {
  Tensor4d x(1, 1, 5, 5);
  x.setConstant(1.0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const RoiAlignParams aligned_adaptive{1.0, 2, 2, 0, true};
  const Tensor4d out = roi_align_forward(aligned_adaptive, x, rois({{0, 3, 3, 1, 1}, {0, nan, 1, 3, 3}, {0, 2, 2, 2, 2}}));
  for (Eigen::Index k = 0; k < 3; ++k)
    for (Eigen::Index i = 0; i < 2; ++i)
      for (Eigen::Index j = 0; j < 2; ++j) EXPECT_EQ(out(k, 0, i, j), 0.0) << "roi " << k;
}

TEST(RoiAlignReference, AdaptiveGridIsCapped) {
  // A 1e7-pixel roi on a 1x1 pooled output samples a 1024 x 1024 grid (kRoiAlignMaxSamplingGrid);
  // the grid spans the whole roi, so on a constant map only the samples inside [-1, H] count.
  Tensor4d x(1, 1, 3, 3);
  x.setConstant(2.0);
  const Tensor4d out = roi_align_forward({1.0, 1, 1, 0, true}, x, rois({{0, -5e6, -5e6, 5e6, 5e6}}));
  // Sample spacing is 1e7/1024 ~ 9766 px: the two central sample columns sit at +-4883 px, outside
  // the map, so no sample hits it.
  EXPECT_EQ(out(0, 0, 0, 0), 0.0);
  const Tensor4d out2 = roi_align_forward({1.0, 1, 1, 0, true}, x, rois({{0, -2047, -2047, 2049, 2049}}));
  // Capped at 1024 (uncapped would be 4096): spacing 4 px, samples at -2045.5 + 4i; only i = 512
  // (x = y = 2.5) falls in [-1, 3], so one sample of 1024^2 sees the map.
  EXPECT_NEAR(out2(0, 0, 0, 0), 2.0 / (1024.0 * 1024.0), 1e-15);
}

TEST(RoiAlignReference, BackwardIsTheAdjointOfForward) {
  const Matrixd r = rois({{0, 1.3, 0.2, 9.7, 8.1}, {1, -2, -1, 5, 14}, {1, 3, 3, 3.5, 12}});
  const RoiAlignParams p{0.75, 3, 2, 0, true};
  kit::expect_adjoint({2, 2, 6, 7}, [&](const Tensor4d& x) { return roi_align_forward(p, x, r); },
                      [&](const Tensor4d& g) { return roi_align_backward(p, g, r, {2, 2, 6, 7}); });
}

TEST(RoiAlignReference, RejectsOutOfRangeBatchIndex) {
  Tensor4d x(1, 1, 2, 2);
  x.setZero();
  EXPECT_THROW(roi_align_forward({1.0, 1, 1, 1, false}, x, rois({{1, 0, 0, 1, 1}})), std::invalid_argument);
}

}  // namespace
}  // namespace detops::reference
