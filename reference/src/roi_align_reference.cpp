#include "detops/reference/roi_align_reference.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace detops::reference {
namespace {

// One bilinear tap: a pixel (row, col) of the plane and the weight it receives.
struct Tap {
  Eigen::Index row, col;
  double weight;
};

// The taps of bilinear interpolation at (y, x) on an H x W plane. Definition: points with y outside
// [-1, H] or x outside [-1, W] (NaN included) sample nothing; coordinates in [-1, 0] are read at 0;
// coordinates at or past the last pixel are read at the last pixel.
std::vector<Tap> bilinear(double y, double x, Eigen::Index height, Eigen::Index width) {
  const bool inside = y >= -1.0 && y <= static_cast<double>(height) && x >= -1.0 && x <= static_cast<double>(width);
  if (!inside) return {};
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  const double last_row = static_cast<double>(height - 1), last_col = static_cast<double>(width - 1);
  if (y >= last_row) y = last_row;
  if (x >= last_col) x = last_col;
  const double y0 = std::floor(y), x0 = std::floor(x);
  const double fy = y - y0, fx = x - x0;
  const auto r0 = static_cast<Eigen::Index>(y0), c0 = static_cast<Eigen::Index>(x0);
  const Eigen::Index r1 = std::min(r0 + 1, height - 1), c1 = std::min(c0 + 1, width - 1);
  return {{r0, c0, (1 - fy) * (1 - fx)}, {r0, c1, (1 - fy) * fx}, {r1, c0, fy * (1 - fx)}, {r1, c1, fy * fx}};
}

// Samples per bin side: the fixed sampling_ratio, or ceil(bin extent) capped at the documented limit;
// a non-positive or NaN extent gives no samples.
Eigen::Index samples_per_side(const RoiAlignParams& p, double bin_extent) {
  if (p.sampling_ratio > 0) return p.sampling_ratio;
  if (!(bin_extent > 0)) return 0;
  return static_cast<Eigen::Index>(std::min(std::ceil(bin_extent), static_cast<double>(kRoiAlignMaxSamplingGrid)));
}

// Every sample point of bin (i, j) of roi k, with the 1/count averaging weight folded into its taps.
struct BinSamples {
  Eigen::Index batch;
  std::vector<Tap> taps;
};

BinSamples bin_samples(const RoiAlignParams& p, const Matrixd& rois, Eigen::Index k, Eigen::Index i, Eigen::Index j,
                       Eigen::Index batch, Eigen::Index height, Eigen::Index width) {
  const double b = rois(k, 0);
  if (!(b >= 0 && b < static_cast<double>(batch))) {
    throw std::invalid_argument("roi_align reference: rois[" + std::to_string(k) + ", 0] = " + std::to_string(b) +
                                " is not a batch index in [0, " + std::to_string(batch) + ")");
  }
  const double shift = p.aligned ? 0.5 : 0.0;
  const double x1 = rois(k, 1) * p.spatial_scale - shift, y1 = rois(k, 2) * p.spatial_scale - shift;
  const double x2 = rois(k, 3) * p.spatial_scale - shift, y2 = rois(k, 4) * p.spatial_scale - shift;
  double roi_w = x2 - x1, roi_h = y2 - y1;
  if (!p.aligned) {
    roi_w = std::max(roi_w, 1.0);
    roi_h = std::max(roi_h, 1.0);
  }
  const double bin_h = roi_h / static_cast<double>(p.pooled_height);
  const double bin_w = roi_w / static_cast<double>(p.pooled_width);
  const Eigen::Index gh = samples_per_side(p, bin_h), gw = samples_per_side(p, bin_w);
  const double count = static_cast<double>(std::max<Eigen::Index>(gh * gw, 1));
  BinSamples out{static_cast<Eigen::Index>(b), {}};
  for (Eigen::Index sy = 0; sy < gh; ++sy) {
    const double y = y1 + static_cast<double>(i) * bin_h + (static_cast<double>(sy) + 0.5) * bin_h / static_cast<double>(gh);
    for (Eigen::Index sx = 0; sx < gw; ++sx) {
      const double x = x1 + static_cast<double>(j) * bin_w + (static_cast<double>(sx) + 0.5) * bin_w / static_cast<double>(gw);
      for (Tap t : bilinear(y, x, height, width)) {
        t.weight /= count;
        out.taps.push_back(t);
      }
    }
  }
  return out;
}

}  // namespace

Tensor4d roi_align_forward(const RoiAlignParams& p, const Tensor4d& input, const Matrixd& rois) {
  const Eigen::Index N = input.dimension(0), C = input.dimension(1), H = input.dimension(2), W = input.dimension(3);
  const Eigen::Index K = rois.rows();
  Tensor4d out(K, C, p.pooled_height, p.pooled_width);
  out.setZero();
  for (Eigen::Index k = 0; k < K; ++k) {
    for (Eigen::Index i = 0; i < p.pooled_height; ++i) {
      for (Eigen::Index j = 0; j < p.pooled_width; ++j) {
        const BinSamples s = bin_samples(p, rois, k, i, j, N, H, W);
        for (Eigen::Index c = 0; c < C; ++c) {
          double acc = 0;
          for (const Tap& t : s.taps) acc += t.weight * input(s.batch, c, t.row, t.col);
          out(k, c, i, j) = acc;
        }
      }
    }
  }
  return out;
}

Tensor4d roi_align_backward(const RoiAlignParams& p, const Tensor4d& grad_output, const Matrixd& rois,
                            const std::array<Eigen::Index, 4>& shape) {
  Tensor4d grad_input(shape[0], shape[1], shape[2], shape[3]);
  grad_input.setZero();
  const Eigen::Index K = rois.rows(), C = shape[1];
  for (Eigen::Index k = 0; k < K; ++k) {
    for (Eigen::Index i = 0; i < p.pooled_height; ++i) {
      for (Eigen::Index j = 0; j < p.pooled_width; ++j) {
        const BinSamples s = bin_samples(p, rois, k, i, j, shape[0], shape[2], shape[3]);
        for (Eigen::Index c = 0; c < C; ++c) {
          for (const Tap& t : s.taps) grad_input(s.batch, c, t.row, t.col) += t.weight * grad_output(k, c, i, j);
        }
      }
    }
  }
  return grad_input;
}

}  // namespace detops::reference
