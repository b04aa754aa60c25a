#pragma once
// Closed-form identities that the references' self-checks share (suites/unit/*reference_test.cpp: Eigen and
// GoogleTest, no torch, no GPU): a linear feature map, whose RoIAlign-style bin averages are its values at the
// bin centers, and the adjoint identity that defines a backward.
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "detops/reference/tensor.h"

namespace detops::kit {

// f(n, c, y, x) = (c + 1) y / 2 - (c + 2) x / 4 + n: linear in y and x, so bilinear interpolation reproduces it
// inside the map, and the mean of samples symmetric about a point is f at that point.
inline double linear_value(double n, double c, double y, double x) { return (c + 1) * 0.5 * y - (c + 2) * 0.25 * x + n; }

// f at the pixels of an [n, c, h, w] map.
inline reference::Tensor4d linear_map(Eigen::Index n, Eigen::Index c, Eigen::Index h, Eigen::Index w) {
  reference::Tensor4d t(n, c, h, w);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < c; ++j)
      for (Eigen::Index y = 0; y < h; ++y)
        for (Eigen::Index x = 0; x < w; ++x) t(i, j, y, x) = linear_value(i, j, y, x);
  return t;
}

// Expects out, pooled from a linear_map by RoIAlign's bins, to be [K, C, ph, pw] = `shape` and to hold f at
// each bin's center: roi k of rois [K, 5] (batch, x1, y1, x2, y2) is scaled by `scale`, moved by -shift and
// split into ph x pw bins, and output (k, c, i, j) reads input channel channel_of(c, i, j) of image rois(k, 0).
template <typename ChannelOf>
void expect_linear_at_bin_centers(const reference::Tensor4d& out, const std::array<Eigen::Index, 4>& shape,
                                  const reference::Matrixd& rois, double scale, double shift, ChannelOf&& channel_of,
                                  double tolerance) {
  for (int d = 0; d < 4; ++d) ASSERT_EQ(out.dimension(d), shape[d]) << "dimension " << d;
  ASSERT_EQ(rois.rows(), shape[0]);
  const Eigen::Index ph = shape[2], pw = shape[3];
  for (Eigen::Index k = 0; k < shape[0]; ++k) {
    const double x1 = rois(k, 1) * scale - shift, y1 = rois(k, 2) * scale - shift;
    const double bw = (rois(k, 3) - rois(k, 1)) * scale / pw, bh = (rois(k, 4) - rois(k, 2)) * scale / ph;
    for (Eigen::Index c = 0; c < shape[1]; ++c)
      for (Eigen::Index i = 0; i < ph; ++i)
        for (Eigen::Index j = 0; j < pw; ++j) {
          const double cy = y1 + (i + 0.5) * bh, cx = x1 + (j + 0.5) * bw;
          EXPECT_NEAR(out(k, c, i, j), linear_value(rois(k, 0), channel_of(c, i, j), cy, cx), tolerance)
              << "k=" << k << " c=" << c << " i=" << i << " j=" << j;
        }
  }
}

// <fwd(x), g> == <x, bwd(g)> for random x of `shape` and random g of fwd(x)'s shape: the defining property of
// bwd as the backward (the adjoint) of the linear map fwd.
template <typename Fwd, typename Bwd>
void expect_adjoint(const std::array<Eigen::Index, 4>& shape, Fwd&& fwd, Bwd&& bwd) {
  reference::Tensor4d x(shape[0], shape[1], shape[2], shape[3]);
  x.setRandom();
  const reference::Tensor4d y = fwd(x);
  reference::Tensor4d g(y.dimensions());
  g.setRandom();
  const reference::Tensor4d gx = bwd(g);
  const Eigen::Tensor<double, 0, Eigen::RowMajor> lhs = (y * g).sum();
  const Eigen::Tensor<double, 0, Eigen::RowMajor> rhs = (x * gx).sum();
  EXPECT_NEAR(lhs(), rhs(), 1e-12 * (1 + std::abs(lhs())));
}

}  // namespace detops::kit
