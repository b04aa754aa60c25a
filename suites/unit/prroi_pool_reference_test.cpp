// Self-checks of the Precise RoI Pooling reference against values worked out by hand (no GPU, no kernel
// code).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "detops/reference/prroi_pool_reference.h"

namespace detops::reference {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kTight = 1e-12;

// One image, one channel, H x W, element (h, w) = f(h, w).
template <typename F>
Tensor4d plane(Eigen::Index h, Eigen::Index w, F f) {
  Tensor4d t(1, 1, h, w);
  for (Eigen::Index y = 0; y < h; ++y)
    for (Eigen::Index x = 0; x < w; ++x) t(0, 0, y, x) = f(static_cast<double>(y), static_cast<double>(x));
  return t;
}

Matrixd one_roi(double b, double x1, double y1, double x2, double y2) {
  Matrixd m(1, 5);
  m << b, x1, y1, x2, y2;
  return m;
}

Tensor4d one_hot_grad(Eigen::Index ph, Eigen::Index pw, Eigen::Index i, Eigen::Index j) {
  Tensor4d g(1, 1, ph, pw);
  g.setZero();
  g(0, 0, i, j) = 1;
  return g;
}

TEST(PrRoiPoolReference, ConstantMapAveragesToTheConstant) {
  // Inside [0, W - 1] x [0, H - 1] the surface of a constant map is that constant, for any bin size.
  const Tensor4d x = plane(6, 7, [](double, double) { return 2.5; });
  const Tensor4d out = prroi_pool_forward({1.0, 3, 2}, x, one_roi(0, 1.3, 0.7, 4.9, 3.2));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) EXPECT_NEAR(out(0, 0, i, j), 2.5, kTight) << i << "," << j;
  // A roi smaller than a pixel, in 7 x 7 bins of ~0.007 x 0.004 px, and one at scale 1/4.
  const Tensor4d tiny = prroi_pool_forward({1.0, 7, 7}, x, one_roi(0, 2.1, 2.2, 2.15, 2.23));
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 7; ++j) EXPECT_NEAR(tiny(0, 0, i, j), 2.5, 1e-10);
  EXPECT_NEAR(prroi_pool_forward({0.25, 1, 1}, x, one_roi(0, 4, 4, 20, 16))(0, 0, 0, 0), 2.5, kTight);
}

TEST(PrRoiPoolReference, LinearRampAveragesToItsValueAtTheBinCenter) {
  // Bilinear interpolation reproduces a linear function, so inside the map the bin average is the
  // ramp at the bin's center. Roi (0.6, 1.2, 5.1, 4.4) at scale 1, 2 x 3 bins: bin_w = 1.5, bin_h = 1.6.
  auto ramp = [](double y, double x) { return 0.5 + 2 * x - 0.75 * y; };
  const Tensor4d x = plane(7, 8, ramp);
  const Tensor4d out = prroi_pool_forward({1.0, 2, 3}, x, one_roi(0, 0.6, 1.2, 5.1, 4.4));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(out(0, 0, i, j), ramp(1.2 + 1.6 * (i + 0.5), 0.6 + 1.5 * (j + 0.5)), kTight);
}

TEST(PrRoiPoolReference, LinearRampCoordinateGradientMovesTheBinCenter) {
  // out(i, j) = ramp(center) with center_x = x1 s + (j + 1/2) (x2 - x1) s / PW, so at scale s = 0.5:
  // d/dx1 = 2 s (1 - (j + 1/2) / PW), d/dx2 = 2 s (j + 1/2) / PW, d/dy1 = -0.75 s (1 - (i + 1/2) / PH), ...
  auto ramp = [](double y, double x) { return 0.5 + 2 * x - 0.75 * y; };
  const Tensor4d x = plane(9, 10, ramp);
  const Matrixd roi = one_roi(0, 2.4, 3.0, 13.0, 12.2);  // map coordinates [1.2, 6.5] x [1.5, 6.1]
  const double s = 0.5;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      const PrRoiPoolGrads g = prroi_pool_backward({s, 2, 3}, one_hot_grad(2, 3, i, j), x, roi);
      EXPECT_EQ(g.rois(0, 0), 0.0);
      EXPECT_NEAR(g.rois(0, 1), 2 * s * (1 - (j + 0.5) / 3), 1e-10) << i << "," << j;
      EXPECT_NEAR(g.rois(0, 3), 2 * s * (j + 0.5) / 3, 1e-10);
      EXPECT_NEAR(g.rois(0, 2), -0.75 * s * (1 - (i + 0.5) / 2), 1e-10);
      EXPECT_NEAR(g.rois(0, 4), -0.75 * s * (i + 0.5) / 2, 1e-10);
      // The bin lies inside the map, where its pixel weights sum to 1.
      double total = 0;
      for (Eigen::Index h = 0; h < 9; ++h)
        for (Eigen::Index w = 0; w < 10; ++w) total += g.input(0, 0, h, w);
      EXPECT_NEAR(total, 1.0, kTight);
    }
  }
}

TEST(PrRoiPoolReference, BinsPartlyOutsideTheMapIntegrateZerosThere) {
  // One pixel of value 1 on a 1 x 1 map: the surface is k(x) k(y), k(t) = max(0, 1 - |t|), nonzero on
  // (-1, 1)^2, with integral 1.
  const Tensor4d x = plane(1, 1, [](double, double) { return 1.0; });
  EXPECT_NEAR(prroi_pool_forward({1.0, 1, 1}, x, one_roi(0, -1, -1, 1, 1))(0, 0, 0, 0), 0.25, kTight);  // 1 / 4
  // x in [-2, 0]: integral of k is 1/2 (nothing left of -1); y in [0, 1]: 1/2; area 2.
  EXPECT_NEAR(prroi_pool_forward({1.0, 1, 1}, x, one_roi(0, -2, 0, 0, 1))(0, 0, 0, 0), 0.125, kTight);
  // Four 1 x 1 bins over [-1, 1]^2: each quadrant holds a quarter.
  const Tensor4d quads = prroi_pool_forward({1.0, 2, 2}, x, one_roi(0, -1, -1, 1, 1));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) EXPECT_NEAR(quads(0, 0, i, j), 0.25, kTight);
  // [0.5, 3] x [-0.5, 0.5]: x integral (0.5)^2 / 2 = 1/8, y integral 3/4, area 2.5 -> 0.0375.
  EXPECT_NEAR(prroi_pool_forward({1.0, 1, 1}, x, one_roi(0, 0.5, -0.5, 3, 0.5))(0, 0, 0, 0), 0.0375, kTight);
  // Beyond the support: [1, 3] touches it only on the line x = 1, where f = 0.
  EXPECT_EQ(prroi_pool_forward({1.0, 1, 1}, x, one_roi(0, 1, -1, 3, 1))(0, 0, 0, 0), 0.0);
  EXPECT_EQ(prroi_pool_forward({1.0, 1, 1}, x, one_roi(0, -9, -9, -5, -5))(0, 0, 0, 0), 0.0);
}

TEST(PrRoiPoolReference, CoordinateGradientOfAOnePixelMap) {
  // Bin [0, 1]^2 over k(x) k(y): out = Kx Ky / (bw bh), Kx = integral_{x_lo}^{x_hi} k = 1/2. With the
  // Leibniz rule, d out / d x_lo = Ky / bh * (-k(x_lo) / bw + Kx / bw^2) = 1/2 * (-1 + 1/2) = -1/4 and
  // d out / d x_hi = 1/2 * (k(1) - 1/2) = -1/4; pooled 1 x 1, scale 1: those are d/dx1 and d/dx2.
  const Tensor4d x = plane(1, 1, [](double, double) { return 1.0; });
  const PrRoiPoolGrads g = prroi_pool_backward({1.0, 1, 1}, one_hot_grad(1, 1, 0, 0), x, one_roi(0, 0, 0, 1, 1));
  const double expected[5] = {0, -0.25, -0.25, -0.25, -0.25};
  for (int c = 0; c < 5; ++c) EXPECT_NEAR(g.rois(0, c), expected[c], kTight) << c;
  // d out / d pixel = Kx Ky / (bw bh) = 1/4.
  EXPECT_NEAR(g.input(0, 0, 0, 0), 0.25, kTight);
  // The magnitude is the sum of |terms|: one term per coordinate here.
  for (int c = 1; c < 5; ++c) EXPECT_NEAR(g.rois_magnitude(0, c), 0.25, kTight);
}

TEST(PrRoiPoolReference, CoordinateGradientIsContinuousAcrossPixelBoundaries) {
  // The surface is continuous, so the bin average is continuously differentiable in its edges: the
  // gradient with an edge exactly on a pixel (x1 = 3) equals its limits from both sides.
  const Tensor4d x = plane(6, 8, [](double y, double xx) { return std::sin(1.3 * xx + 0.7 * y) + 0.1 * xx * y; });
  Tensor4d go(1, 1, 2, 2);
  go.setValues({{{{0.3, -1.1}, {0.8, 0.5}}}});
  const PrRoiPoolParams p{1.0, 2, 2};
  const PrRoiPoolGrads at = prroi_pool_backward(p, go, x, one_roi(0, 3, 1.3, 6.6, 4.9));
  for (double dx : {-1e-9, 1e-9}) {
    const PrRoiPoolGrads near = prroi_pool_backward(p, go, x, one_roi(0, 3 + dx, 1.3, 6.6, 4.9));
    for (int c = 1; c < 5; ++c) EXPECT_NEAR(near.rois(0, c), at.rois(0, c), 1e-7) << c << " " << dx;
  }
}

TEST(PrRoiPoolReference, ZeroAreaAndNonFiniteRoisGiveZerosAndNoGradient) {
  const Tensor4d x = plane(4, 5, [](double y, double xx) { return 1 + y * 5 + xx; });
  const Matrixd rois[] = {
      one_roi(0, 2, 1, 2, 3),         // zero width
      one_roi(0, 1, 2, 3, 2),         // zero height
      one_roi(0, 3, 3, 1, 1),         // x2 < x1, y2 < y1
      one_roi(0, kNaN, 0, 3, 3),      // NaN coordinate
      one_roi(0, 0, 0, kInf, 3),      // infinite coordinate
      one_roi(0, -kInf, -kInf, kInf, kInf),
  };
  for (const Matrixd& r : rois) {
    const Tensor4d out = prroi_pool_forward({1.0, 2, 2}, x, r);
    Tensor4d go(1, 1, 2, 2);
    go.setConstant(1.0);
    const PrRoiPoolGrads g = prroi_pool_backward({1.0, 2, 2}, go, x, r);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) EXPECT_EQ(out(0, 0, i, j), 0.0) << r;
    for (int c = 0; c < 5; ++c) EXPECT_EQ(g.rois(0, c), 0.0) << r;
    for (Eigen::Index h = 0; h < 4; ++h)
      for (Eigen::Index w = 0; w < 5; ++w) EXPECT_EQ(g.input(0, 0, h, w), 0.0) << r;
  }
}

TEST(PrRoiPoolReference, BatchIndexTruncatesAndIsChecked) {
  Tensor4d x(2, 1, 3, 3);
  x.setConstant(1.0);
  for (Eigen::Index h = 0; h < 3; ++h)
    for (Eigen::Index w = 0; w < 3; ++w) x(1, 0, h, w) = 7.0;
  EXPECT_NEAR(prroi_pool_forward({1.0, 1, 1}, x, one_roi(1.75, 0.5, 0.5, 1.5, 1.5))(0, 0, 0, 0), 7.0, kTight);
  EXPECT_THROW(prroi_pool_forward({1.0, 1, 1}, x, one_roi(2, 0, 0, 2, 2)), std::invalid_argument);
  EXPECT_THROW(prroi_pool_forward({1.0, 1, 1}, x, one_roi(-0.5, 0, 0, 2, 2)), std::invalid_argument);
  EXPECT_THROW(prroi_pool_forward({1.0, 1, 1}, x, one_roi(kNaN, 0, 0, 2, 2)), std::invalid_argument);
}

}  // namespace
}  // namespace detops::reference
