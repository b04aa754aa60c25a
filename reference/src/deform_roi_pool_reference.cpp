#include "detops/reference/deform_roi_pool_reference.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace detops::reference {
namespace {

// The bilinear surface of one H x W plane at (y, x), by its definition: a point with y outside [-1, H] or x
// outside [-1, W] (NaN included) is off the map. On it, the coordinates are clamped into [0, H - 1] x [0,
// W - 1] and the four pixels around the clamped point are weighted by their distances. The surface is flat
// in y where y was clamped (y <= 0 or y >= H - 1), likewise in x, so its slope there is 0.
struct SurfacePoint {
  bool on_map = false;
  Eigen::Index r0 = 0, r1 = 0, c0 = 0, c1 = 0;
  double fy = 0, fx = 0;        // the clamped point's distance from row r0 / column c0
  bool slope_y = false, slope_x = false;  // whether the surface changes with y / x here
};

SurfacePoint surface_point(double y, double x, Eigen::Index height, Eigen::Index width) {
  SurfacePoint s;
  const double h = static_cast<double>(height), w = static_cast<double>(width);
  if (!(y >= -1.0 && y <= h && x >= -1.0 && x <= w)) return s;
  s.on_map = true;
  s.slope_y = y > 0.0 && y < h - 1.0;
  s.slope_x = x > 0.0 && x < w - 1.0;
  const double yc = std::clamp(y, 0.0, h - 1.0), xc = std::clamp(x, 0.0, w - 1.0);
  s.r0 = static_cast<Eigen::Index>(std::floor(yc));
  s.c0 = static_cast<Eigen::Index>(std::floor(xc));
  s.r1 = std::min(s.r0 + 1, height - 1);
  s.c1 = std::min(s.c0 + 1, width - 1);
  s.fy = yc - static_cast<double>(s.r0);
  s.fx = xc - static_cast<double>(s.c0);
  return s;
}

// Pixel values of the four corners around a surface point on plane (n, c).
struct Corners {
  double v00, v01, v10, v11;  // (r0, c0), (r0, c1), (r1, c0), (r1, c1)
};

Corners corners(const Tensor4d& t, Eigen::Index n, Eigen::Index c, const SurfacePoint& s) {
  return {t(n, c, s.r0, s.c0), t(n, c, s.r0, s.c1), t(n, c, s.r1, s.c0), t(n, c, s.r1, s.c1)};
}

// The four (row, column, weight) taps of a surface point.
struct Tap {
  Eigen::Index row, col;
  double weight;
};

std::array<Tap, 4> taps(const SurfacePoint& s) {
  return {{{s.r0, s.c0, (1 - s.fy) * (1 - s.fx)},
           {s.r0, s.c1, (1 - s.fy) * s.fx},
           {s.r1, s.c0, s.fy * (1 - s.fx)},
           {s.r1, s.c1, s.fy * s.fx}}};
}

// Bin (i, j) of roi k: the image, the roi's extent, and the bin's sample points (moved by its offsets).
struct Bin {
  Eigen::Index batch;
  double roi_w, roi_h;
  double count;  // max(samples, 1): an empty bin averages to 0
  std::vector<SurfacePoint> points;  // the samples on the map
};

Bin bin_of(const DeformRoiPoolParams& p, const Matrixd& rois, const Tensor4d* offset, Eigen::Index k, Eigen::Index i,
           Eigen::Index j, Eigen::Index batch, Eigen::Index height, Eigen::Index width) {
  const double b = rois(k, 0);
  if (!(b >= 0 && b < static_cast<double>(batch))) {
    throw std::invalid_argument("deform_roi_pool reference: rois[" + std::to_string(k) + ", 0] = " + std::to_string(b) +
                                " is not a batch index in [0, " + std::to_string(batch) + ")");
  }
  // Always aligned: pixel centers at integer coordinates.
  const double x1 = rois(k, 1) * p.spatial_scale - 0.5, y1 = rois(k, 2) * p.spatial_scale - 0.5;
  const double x2 = rois(k, 3) * p.spatial_scale - 0.5, y2 = rois(k, 4) * p.spatial_scale - 0.5;
  Bin bin{static_cast<Eigen::Index>(b), x2 - x1, y2 - y1, 1, {}};
  const double bin_h = bin.roi_h / static_cast<double>(p.pooled_height);
  const double bin_w = bin.roi_w / static_cast<double>(p.pooled_width);
  const auto per_side = [&](double extent) -> Eigen::Index {
    if (p.sampling_ratio > 0) return p.sampling_ratio;
    if (!(extent > 0)) return 0;
    return static_cast<Eigen::Index>(std::min(std::ceil(extent), static_cast<double>(kDeformRoiPoolMaxSamplingGrid)));
  };
  const Eigen::Index gh = per_side(bin_h), gw = per_side(bin_w);
  bin.count = static_cast<double>(std::max<Eigen::Index>(gh * gw, 1));
  const double dx = offset ? p.gamma * bin.roi_w * (*offset)(k, 0, i, j) : 0.0;
  const double dy = offset ? p.gamma * bin.roi_h * (*offset)(k, 1, i, j) : 0.0;
  for (Eigen::Index sy = 0; sy < gh; ++sy) {
    const double y = y1 + dy + static_cast<double>(i) * bin_h + (static_cast<double>(sy) + 0.5) * bin_h / static_cast<double>(gh);
    for (Eigen::Index sx = 0; sx < gw; ++sx) {
      const double x = x1 + dx + static_cast<double>(j) * bin_w + (static_cast<double>(sx) + 0.5) * bin_w / static_cast<double>(gw);
      const SurfacePoint s = surface_point(y, x, height, width);
      if (s.on_map) bin.points.push_back(s);
    }
  }
  return bin;
}

double mask_of(const Tensor4d* mask, Eigen::Index k, Eigen::Index i, Eigen::Index j) {
  return mask ? (*mask)(k, 0, i, j) : 1.0;
}

Tensor4d zeros(Eigen::Index a, Eigen::Index b, Eigen::Index c, Eigen::Index d) {
  Tensor4d t(a, b, c, d);
  t.setZero();
  return t;
}

}  // namespace

Tensor4d deform_roi_pool_forward(const DeformRoiPoolParams& p, const Tensor4d& input, const Matrixd& rois,
                                 const Tensor4d* offset, const Tensor4d* mask) {
  const Eigen::Index N = input.dimension(0), C = input.dimension(1), H = input.dimension(2), W = input.dimension(3);
  const Eigen::Index K = rois.rows();
  Tensor4d out = zeros(K, C, p.pooled_height, p.pooled_width);
  for (Eigen::Index k = 0; k < K; ++k) {
    for (Eigen::Index i = 0; i < p.pooled_height; ++i) {
      for (Eigen::Index j = 0; j < p.pooled_width; ++j) {
        const Bin bin = bin_of(p, rois, offset, k, i, j, N, H, W);
        const double m = mask_of(mask, k, i, j);
        for (Eigen::Index c = 0; c < C; ++c) {
          double sum = 0;
          for (const SurfacePoint& s : bin.points) {
            for (const Tap& t : taps(s)) sum += t.weight * input(bin.batch, c, t.row, t.col);
          }
          out(k, c, i, j) = m * sum / bin.count;
        }
      }
    }
  }
  return out;
}

DeformRoiPoolGrads deform_roi_pool_backward(const DeformRoiPoolParams& p, const Tensor4d& grad_output,
                                            const Tensor4d& input, const Matrixd& rois, const Tensor4d* offset,
                                            const Tensor4d* mask) {
  const Eigen::Index N = input.dimension(0), C = input.dimension(1), H = input.dimension(2), W = input.dimension(3);
  const Eigen::Index K = rois.rows(), PH = p.pooled_height, PW = p.pooled_width;
  DeformRoiPoolGrads g;
  g.input = zeros(N, C, H, W);
  g.input_magnitude = zeros(N, C, H, W);
  g.offset = offset ? zeros(K, 2, PH, PW) : zeros(0, 0, 0, 0);
  g.offset_magnitude = g.offset;
  g.mask = mask ? zeros(K, 1, PH, PW) : zeros(0, 0, 0, 0);
  g.mask_magnitude = g.mask;
  for (Eigen::Index k = 0; k < K; ++k) {
    for (Eigen::Index i = 0; i < PH; ++i) {
      for (Eigen::Index j = 0; j < PW; ++j) {
        const Bin bin = bin_of(p, rois, offset, k, i, j, N, H, W);
        const double m = mask_of(mask, k, i, j);
        for (Eigen::Index c = 0; c < C; ++c) {
          const double go = grad_output(k, c, i, j) / bin.count;  // d loss / d (each sample of the mean)
          for (const SurfacePoint& s : bin.points) {
            // input: every tap of the sample, weighted.
            for (const Tap& t : taps(s)) {
              g.input(bin.batch, c, t.row, t.col) += go * m * t.weight;
              g.input_magnitude(bin.batch, c, t.row, t.col) += std::abs(go * m) * t.weight;
            }
            const Corners v = corners(input, bin.batch, c, s);
            if (offset) {
              // The sample moves by gamma * roi_w per unit of offset x (roi_h: y); the surface's slope there.
              const double ax = go * m * p.gamma * bin.roi_w, ay = go * m * p.gamma * bin.roi_h;
              if (s.slope_x) {
                g.offset(k, 0, i, j) += ax * ((1 - s.fy) * (v.v01 - v.v00) + s.fy * (v.v11 - v.v10));
                g.offset_magnitude(k, 0, i, j) +=
                    std::abs(ax) * ((1 - s.fy) * (std::abs(v.v01) + std::abs(v.v00)) + s.fy * (std::abs(v.v11) + std::abs(v.v10)));
              }
              if (s.slope_y) {
                g.offset(k, 1, i, j) += ay * ((1 - s.fx) * (v.v10 - v.v00) + s.fx * (v.v11 - v.v01));
                g.offset_magnitude(k, 1, i, j) +=
                    std::abs(ay) * ((1 - s.fx) * (std::abs(v.v10) + std::abs(v.v00)) + s.fx * (std::abs(v.v11) + std::abs(v.v01)));
              }
            }
            if (mask) {
              const std::array<Tap, 4> t = taps(s);
              const double value = t[0].weight * v.v00 + t[1].weight * v.v01 + t[2].weight * v.v10 + t[3].weight * v.v11;
              const double size = t[0].weight * std::abs(v.v00) + t[1].weight * std::abs(v.v01) +
                                  t[2].weight * std::abs(v.v10) + t[3].weight * std::abs(v.v11);
              g.mask(k, 0, i, j) += go * value;
              g.mask_magnitude(k, 0, i, j) += std::abs(go) * size;
            }
          }
        }
      }
    }
  }
  return g;
}

}  // namespace detops::reference
