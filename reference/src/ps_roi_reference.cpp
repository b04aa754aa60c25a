#include "detops/reference/ps_roi_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace detops::reference {
namespace {

// One pixel (row, col) of a plane and the weight it receives in a bin's average.
struct Tap {
  Eigen::Index row, col;
  double weight;
};

// A bin of roi k: the image it reads and the weighted pixels whose sum is its value, or NaN.
struct Bin {
  Eigen::Index batch;
  std::vector<Tap> taps;
  bool nan = false;  // the value is NaN (ps_roi_align's 0 / 0); nothing flows back
};

Eigen::Index batch_of(const char* op, const Matrixd& rois, Eigen::Index k, Eigen::Index batch) {
  const double b = rois(k, 0);
  if (!(b >= 0 && b < static_cast<double>(batch))) {
    throw std::invalid_argument(std::string(op) + " reference: rois[" + std::to_string(k) + ", 0] = " +
                                std::to_string(b) + " is not a batch index in [0, " + std::to_string(batch) + ")");
  }
  return static_cast<Eigen::Index>(b);
}

Eigen::Index output_channels(const char* op, Eigen::Index channels, Eigen::Index ph, Eigen::Index pw) {
  if (channels % (ph * pw) != 0) {
    throw std::invalid_argument(std::string(op) + " reference: channels " + std::to_string(channels) +
                                " is not a multiple of pooled_height * pooled_width");
  }
  return channels / (ph * pw);
}

// Bilinear interpolation at (y, x) on an H x W plane. Definition: points with y outside [-1, H] or x
// outside [-1, W] (NaN included) sample nothing; coordinates in [-1, 0] are read at 0; coordinates at or
// past the last pixel are read at the last pixel.
std::vector<Tap> bilinear(double y, double x, Eigen::Index height, Eigen::Index width) {
  if (!(y >= -1.0 && y <= static_cast<double>(height) && x >= -1.0 && x <= static_cast<double>(width))) return {};
  y = std::min(std::max(y, 0.0), static_cast<double>(height - 1));
  x = std::min(std::max(x, 0.0), static_cast<double>(width - 1));
  const double y0 = std::floor(y), x0 = std::floor(x);
  const double fy = y - y0, fx = x - x0;
  const auto r0 = static_cast<Eigen::Index>(y0), c0 = static_cast<Eigen::Index>(x0);
  const Eigen::Index r1 = std::min(r0 + 1, height - 1), c1 = std::min(c0 + 1, width - 1);
  return {{r0, c0, (1 - fy) * (1 - fx)}, {r0, c1, (1 - fy) * fx}, {r1, c0, fy * (1 - fx)}, {r1, c1, fy * fx}};
}

// ps_roi_align: samples per bin side are the fixed sampling_ratio, or ceil(bin extent) capped at the
// documented limit. A non-positive extent gives no samples; ceil of it (0 or negative) is still a factor of
// the count, as in torchvision. NaN extents are handled by the caller.
// (A ceil of at most -1, -inf included, is taken as -1: only its sign matters.)
double samples_per_side(const PsRoiAlignParams& p, double bin_extent) {
  if (p.sampling_ratio > 0) return static_cast<double>(p.sampling_ratio);
  if (bin_extent <= -1) return -1;
  return std::min(std::ceil(bin_extent), static_cast<double>(kPsRoiAlignMaxSamplingGrid));
}

// Bin (i, j) of roi k: the average of a grid of bilinear samples over the bin, coordinates shifted by
// -0.5 (pixel centres), no minimum roi size; the 1/count weight is folded into the taps. The count is the
// product of the samples per side; a product of 0 is torchvision's 0 / 0 (NaN) unless zero_empty_bins, a
// negative one (no samples) gives 0, and a roi with a NaN extent gives 0.
Bin align_bin(const PsRoiAlignParams& p, const Matrixd& rois, Eigen::Index k, Eigen::Index i, Eigen::Index j,
              Eigen::Index batch, Eigen::Index height, Eigen::Index width) {
  Bin out{batch_of("ps_roi_align", rois, k, batch), {}};
  const double x1 = rois(k, 1) * p.spatial_scale - 0.5, y1 = rois(k, 2) * p.spatial_scale - 0.5;
  const double x2 = rois(k, 3) * p.spatial_scale - 0.5, y2 = rois(k, 4) * p.spatial_scale - 0.5;
  const double bin_h = (y2 - y1) / static_cast<double>(p.pooled_height);
  const double bin_w = (x2 - x1) / static_cast<double>(p.pooled_width);
  if (std::isnan(bin_h) || std::isnan(bin_w)) return out;
  const double gh = samples_per_side(p, bin_h), gw = samples_per_side(p, bin_w);
  const double count = gh * gw;
  if (count == 0) {
    out.nan = !p.zero_empty_bins;
    return out;
  }
  for (double sy = 0; sy < gh; ++sy) {
    const double y = y1 + static_cast<double>(i) * bin_h + (sy + 0.5) * bin_h / gh;
    for (double sx = 0; sx < gw; ++sx) {
      const double x = x1 + static_cast<double>(j) * bin_w + (sx + 0.5) * bin_w / gw;
      for (Tap t : bilinear(y, x, height, width)) {
        t.weight /= count;
        out.taps.push_back(t);
      }
    }
  }
  return out;
}

// ps_roi_pool: a scaled coordinate rounded half away from zero after clamping to
// [-kPsRoiPoolMaxCoordinate, kPsRoiPoolMaxCoordinate]; NaN has no integer position.
bool pool_coordinate(double v, double& out) {
  if (std::isnan(v)) return false;
  out = std::round(std::clamp(v, -kPsRoiPoolMaxCoordinate, kPsRoiPoolMaxCoordinate));
  return true;
}

// exact_bins: the pixel indices 0 <= r < limit of bin `bin` of `bins` equal parts of the interval
// [start, start + size): those whose unit cell [r, r + 1) overlaps the part
// [start + bin * size / bins, start + (bin + 1) * size / bins), compared exactly in integers.
std::vector<Eigen::Index> overlapping_pixels(long long start, long long size, long long bins, long long bin,
                                             Eigen::Index limit) {
  std::vector<Eigen::Index> out;
  for (Eigen::Index r = 0; r < limit; ++r) {
    const long long rel = static_cast<long long>(r) - start;  // the cell is [rel, rel + 1) relative to start
    if ((rel + 1) * bins > bin * size && rel * bins < (bin + 1) * size) out.push_back(r);
  }
  return out;
}

// torchvision's bins: rows start + floor(bin * b) .. start + ceil((bin + 1) * b) - 1 with b = size / bins
// in double, each end clamped to [0, limit] first (so a bin reaching past limit stops there).
std::vector<Eigen::Index> torchvision_pixels(long long start, long long size, long long bins, long long bin,
                                             Eigen::Index limit) {
  const double b = static_cast<double>(size) / static_cast<double>(bins);
  const auto clamp = [limit](double v) { return std::min(std::max(v, 0.0), static_cast<double>(limit)); };
  const double lo = clamp(static_cast<double>(start) + std::floor(static_cast<double>(bin) * b));
  const double hi = clamp(static_cast<double>(start) + std::ceil(static_cast<double>(bin + 1) * b));
  std::vector<Eigen::Index> out;
  for (double r = lo; r < hi; ++r) out.push_back(static_cast<Eigen::Index>(r));
  return out;
}

// Which clip a ps_roi_pool bin gets: see pool_bin.
enum class Pass { kForward, kBackward };

// Bin (i, j) of roi k: the plain average of the pixels it covers; a roi with a NaN coordinate, or a bin
// with no pixel, has no taps (value 0). exact_bins: exact bins clipped to the map. Otherwise torchvision's
// floating-point bins, clipped to [0, H-1) x [0, W-1) for the forward and to the map for the backward
// (Pass::kBackward: the function whose gradient the backward is).
Bin pool_bin(const PsRoiPoolParams& p, const Matrixd& rois, Eigen::Index k, Eigen::Index i, Eigen::Index j,
             Eigen::Index batch, Eigen::Index height, Eigen::Index width, Pass pass) {
  Bin out{batch_of("ps_roi_pool", rois, k, batch), {}};
  double x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  if (!pool_coordinate(rois(k, 1) * p.spatial_scale, x1) || !pool_coordinate(rois(k, 2) * p.spatial_scale, y1) ||
      !pool_coordinate(rois(k, 3) * p.spatial_scale, x2) || !pool_coordinate(rois(k, 4) * p.spatial_scale, y2)) {
    return out;
  }
  const auto sx = static_cast<long long>(x1), sy = static_cast<long long>(y1);
  const long long roi_w = std::max(static_cast<long long>(x2) - sx, 1LL);  // at least one pixel
  const long long roi_h = std::max(static_cast<long long>(y2) - sy, 1LL);
  std::vector<Eigen::Index> rows, cols;
  if (p.exact_bins) {
    rows = overlapping_pixels(sy, roi_h, p.pooled_height, i, height);
    cols = overlapping_pixels(sx, roi_w, p.pooled_width, j, width);
  } else {
    const Eigen::Index cut = pass == Pass::kForward ? 1 : 0;
    rows = torchvision_pixels(sy, roi_h, p.pooled_height, i, height - cut);
    cols = torchvision_pixels(sx, roi_w, p.pooled_width, j, width - cut);
  }
  const double area = static_cast<double>(rows.size() * cols.size());
  for (Eigen::Index r : rows) {
    for (Eigen::Index c : cols) out.taps.push_back({r, c, 1.0 / area});
  }
  return out;
}

// out(k, c, i, j) = sum over bin (i, j)'s taps of weight * input(batch, (c * ph + i) * pw + j, row, col).
template <typename BinFn>
Tensor4d forward(const char* op, Eigen::Index ph, Eigen::Index pw, const Tensor4d& input, const Matrixd& rois,
                 BinFn&& bin_of) {
  const Eigen::Index N = input.dimension(0), C = input.dimension(1), H = input.dimension(2), W = input.dimension(3);
  const Eigen::Index C_out = output_channels(op, C, ph, pw), K = rois.rows();
  Tensor4d out(K, C_out, ph, pw);
  out.setZero();
  for (Eigen::Index k = 0; k < K; ++k) {
    for (Eigen::Index i = 0; i < ph; ++i) {
      for (Eigen::Index j = 0; j < pw; ++j) {
        const Bin b = bin_of(k, i, j, N, H, W);
        for (Eigen::Index c = 0; c < C_out; ++c) {
          const Eigen::Index c_in = (c * ph + i) * pw + j;
          double acc = b.nan ? std::numeric_limits<double>::quiet_NaN() : 0.0;
          for (const Tap& t : b.taps) acc += t.weight * input(b.batch, c_in, t.row, t.col);
          out(k, c, i, j) = acc;
        }
      }
    }
  }
  return out;
}

// The adjoint: grad_input(batch, c_in, row, col) += weight * grad_output(k, c, i, j).
template <typename BinFn>
Tensor4d backward(const char* op, Eigen::Index ph, Eigen::Index pw, const Tensor4d& grad_output, const Matrixd& rois,
                  const std::array<Eigen::Index, 4>& shape, BinFn&& bin_of) {
  Tensor4d grad_input(shape[0], shape[1], shape[2], shape[3]);
  grad_input.setZero();
  const Eigen::Index C_out = output_channels(op, shape[1], ph, pw), K = rois.rows();
  for (Eigen::Index k = 0; k < K; ++k) {
    for (Eigen::Index i = 0; i < ph; ++i) {
      for (Eigen::Index j = 0; j < pw; ++j) {
        const Bin b = bin_of(k, i, j, shape[0], shape[2], shape[3]);
        for (Eigen::Index c = 0; c < C_out; ++c) {
          const Eigen::Index c_in = (c * ph + i) * pw + j;
          for (const Tap& t : b.taps) grad_input(b.batch, c_in, t.row, t.col) += t.weight * grad_output(k, c, i, j);
        }
      }
    }
  }
  return grad_input;
}

}  // namespace

Tensor4d ps_roi_align_forward(const PsRoiAlignParams& p, const Tensor4d& input, const Matrixd& rois) {
  return forward("ps_roi_align", p.pooled_height, p.pooled_width, input, rois,
                 [&](Eigen::Index k, Eigen::Index i, Eigen::Index j, Eigen::Index n, Eigen::Index h, Eigen::Index w) {
                   return align_bin(p, rois, k, i, j, n, h, w);
                 });
}

Tensor4d ps_roi_align_backward(const PsRoiAlignParams& p, const Tensor4d& grad_output, const Matrixd& rois,
                               const std::array<Eigen::Index, 4>& shape) {
  return backward("ps_roi_align", p.pooled_height, p.pooled_width, grad_output, rois, shape,
                  [&](Eigen::Index k, Eigen::Index i, Eigen::Index j, Eigen::Index n, Eigen::Index h, Eigen::Index w) {
                    return align_bin(p, rois, k, i, j, n, h, w);
                  });
}

Tensor4d ps_roi_pool_forward(const PsRoiPoolParams& p, const Tensor4d& input, const Matrixd& rois) {
  return forward("ps_roi_pool", p.pooled_height, p.pooled_width, input, rois,
                 [&](Eigen::Index k, Eigen::Index i, Eigen::Index j, Eigen::Index n, Eigen::Index h, Eigen::Index w) {
                   return pool_bin(p, rois, k, i, j, n, h, w, Pass::kForward);
                 });
}

Tensor4d ps_roi_pool_gradient_target(const PsRoiPoolParams& p, const Tensor4d& input, const Matrixd& rois) {
  return forward("ps_roi_pool", p.pooled_height, p.pooled_width, input, rois,
                 [&](Eigen::Index k, Eigen::Index i, Eigen::Index j, Eigen::Index n, Eigen::Index h, Eigen::Index w) {
                   return pool_bin(p, rois, k, i, j, n, h, w, Pass::kBackward);
                 });
}

Tensor4d ps_roi_pool_backward(const PsRoiPoolParams& p, const Tensor4d& grad_output, const Matrixd& rois,
                              const std::array<Eigen::Index, 4>& shape) {
  return backward("ps_roi_pool", p.pooled_height, p.pooled_width, grad_output, rois, shape,
                  [&](Eigen::Index k, Eigen::Index i, Eigen::Index j, Eigen::Index n, Eigen::Index h, Eigen::Index w) {
                    return pool_bin(p, rois, k, i, j, n, h, w, Pass::kBackward);
                  });
}

Tensor4d ps_roi_channel_mapping(Eigen::Index num_rois, Eigen::Index channels, Eigen::Index ph, Eigen::Index pw) {
  const Eigen::Index C_out = output_channels("ps_roi", channels, ph, pw);
  Tensor4d m(num_rois, C_out, ph, pw);
  for (Eigen::Index k = 0; k < num_rois; ++k)
    for (Eigen::Index c = 0; c < C_out; ++c)
      for (Eigen::Index i = 0; i < ph; ++i)
        for (Eigen::Index j = 0; j < pw; ++j) m(k, c, i, j) = static_cast<double>((c * ph + i) * pw + j);
  return m;
}

}  // namespace detops::reference
