#include "detops/reference/roi_pool_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace detops::reference {
namespace {

// The rows [h0, h1) and columns [w0, w1) of the feature map that bin (i, j) of a roi covers.
struct Window {
  Eigen::Index h0 = 0, h1 = 0, w0 = 0, w1 = 0;
};

// A feature-map coordinate: x * spatial_scale rounded half away from zero, then limited to
// [-kRoiPoolCoordinateLimit, kRoiPoolCoordinateLimit]. NaN has no coordinate (returns false).
bool map_coordinate(double x, double spatial_scale, Eigen::Index* out) {
  const double r = std::round(x * spatial_scale);
  if (std::isnan(r)) return false;
  const double limit = static_cast<double>(kRoiPoolCoordinateLimit);
  *out = static_cast<Eigen::Index>(std::min(std::max(r, -limit), limit));
  return true;
}

// FLT_MAX, the largest finite float, as a double: torchvision's start of every bin's max.
constexpr double kFltMax = static_cast<double>(std::numeric_limits<float>::max());

Eigen::Index clip(Eigen::Index v, Eigen::Index size) { return std::min(std::max<Eigen::Index>(v, 0), size); }

// Definition: a roi (x1, y1, x2, y2) covers feature-map rows start_h .. start_h + roi_h - 1 with
// roi_h = max(y2' - y1' + 1, 1) (primes: map coordinates; a malformed roi is one pixel). Its height is
// split into pooled_height bins of roi_h / pooled_height rows: bin i spans
// [floor(i * bin_h), ceil((i + 1) * bin_h)) relative to start_h, clipped to the map. Likewise columns.
// A roi with a NaN coordinate covers nothing.
Window bin_window(const RoiPoolParams& p, const Matrixd& rois, Eigen::Index k, Eigen::Index i, Eigen::Index j,
                  Eigen::Index height, Eigen::Index width) {
  Eigen::Index x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  const bool has_coordinates = map_coordinate(rois(k, 1), p.spatial_scale, &x1) &&
                               map_coordinate(rois(k, 2), p.spatial_scale, &y1) &&
                               map_coordinate(rois(k, 3), p.spatial_scale, &x2) &&
                               map_coordinate(rois(k, 4), p.spatial_scale, &y2);
  if (!has_coordinates) return {};
  const Eigen::Index roi_w = std::max<Eigen::Index>(x2 - x1 + 1, 1);
  const Eigen::Index roi_h = std::max<Eigen::Index>(y2 - y1 + 1, 1);
  const double bin_h = static_cast<double>(roi_h) / static_cast<double>(p.pooled_height);
  const double bin_w = static_cast<double>(roi_w) / static_cast<double>(p.pooled_width);
  Window win;
  win.h0 = clip(static_cast<Eigen::Index>(std::floor(static_cast<double>(i) * bin_h)) + y1, height);
  win.h1 = clip(static_cast<Eigen::Index>(std::ceil(static_cast<double>(i + 1) * bin_h)) + y1, height);
  win.w0 = clip(static_cast<Eigen::Index>(std::floor(static_cast<double>(j) * bin_w)) + x1, width);
  win.w1 = clip(static_cast<Eigen::Index>(std::ceil(static_cast<double>(j + 1) * bin_w)) + x1, width);
  return win;
}

Eigen::Index batch_of(const Matrixd& rois, Eigen::Index k, Eigen::Index batch) {
  const double b = rois(k, 0);
  if (!(b >= 0 && b < static_cast<double>(batch))) {
    throw std::invalid_argument("roi_pool reference: rois[" + std::to_string(k) + ", 0] = " + std::to_string(b) +
                                " is not a batch index in [0, " + std::to_string(batch) + ")");
  }
  return static_cast<Eigen::Index>(b);  // truncation toward zero
}

}  // namespace

RoiPoolResult roi_pool_forward(const RoiPoolParams& p, const Tensor4d& input, const Matrixd& rois) {
  const Eigen::Index N = input.dimension(0), C = input.dimension(1), H = input.dimension(2), W = input.dimension(3);
  const Eigen::Index K = rois.rows();
  RoiPoolResult r{Tensor4d(K, C, p.pooled_height, p.pooled_width), Index4d(K, C, p.pooled_height, p.pooled_width)};
  for (Eigen::Index k = 0; k < K; ++k) {
    const Eigen::Index b = batch_of(rois, k, N);
    for (Eigen::Index i = 0; i < p.pooled_height; ++i) {
      for (Eigen::Index j = 0; j < p.pooled_width; ++j) {
        const Window win = bin_window(p, rois, k, i, j, H, W);
        const bool empty = win.h1 <= win.h0 || win.w1 <= win.w0;
        for (Eigen::Index c = 0; c < C; ++c) {
          // The candidates of a bin: with p.exact_max its non-NaN values, otherwise (torchvision's) its
          // values strictly above -FLT_MAX. The output is the largest candidate, the first in row-major
          // order among equal ones, with its position as argmax. A bin without candidates has argmax -1
          // and gives NaN with p.exact_max (its values are NaNs), otherwise -FLT_MAX. An empty bin gives 0.
          const auto candidate = [&p](double v) { return p.exact_max ? !std::isnan(v) : v > -kFltMax; };
          double best = empty ? 0.0 : (p.exact_max ? std::numeric_limits<double>::quiet_NaN() : -kFltMax);
          std::int64_t where = -1;
          for (Eigen::Index h = win.h0; h < win.h1; ++h) {
            for (Eigen::Index w = win.w0; w < win.w1; ++w) {
              const double v = input(b, c, h, w);
              if (!candidate(v)) continue;
              if (where == -1 || v > best) {
                best = v;
                where = h * W + w;
              }
            }
          }
          r.output(k, c, i, j) = best;
          r.argmax(k, c, i, j) = where;
        }
      }
    }
  }
  return r;
}

Tensor4d roi_pool_backward(const RoiPoolParams& p, const Tensor4d& grad_output, const Tensor4d& input,
                           const Matrixd& rois) {
  const Eigen::Index N = input.dimension(0), C = input.dimension(1), W = input.dimension(3);
  Tensor4d grad_input(N, C, input.dimension(2), W);
  grad_input.setZero();
  const RoiPoolResult fwd = roi_pool_forward(p, input, rois);
  for (Eigen::Index k = 0; k < rois.rows(); ++k) {
    const Eigen::Index b = batch_of(rois, k, N);
    for (Eigen::Index c = 0; c < C; ++c) {
      for (Eigen::Index i = 0; i < p.pooled_height; ++i) {
        for (Eigen::Index j = 0; j < p.pooled_width; ++j) {
          const std::int64_t where = fwd.argmax(k, c, i, j);
          if (where < 0) continue;
          grad_input(b, c, where / W, where % W) += grad_output(k, c, i, j);
        }
      }
    }
  }
  return grad_input;
}

}  // namespace detops::reference
