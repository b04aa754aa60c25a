#include "detops/reference/prroi_pool_reference.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace detops::reference {
namespace {

using Index = Eigen::Index;

// Definition. The surface of plane (b, c) is the bilinear interpolation of its pixels, which sit at
// integer coordinates, with every pixel outside the map taken as 0: on the unit cell
// [q, q + 1] x [r, r + 1] (u = x - q, v = y - r in [0, 1])
//   f = p(r, q) (1 - u)(1 - v) + p(r, q + 1) u (1 - v) + p(r + 1, q)(1 - u) v + p(r + 1, q + 1) u v,
// so f is 0 outside (-1, W) x (-1, H). Roi k covers [x1 s, x2 s] x [y1 s, y2 s] (s = spatial_scale),
// split into pooled_height x pooled_width bins of bin_w = (x2 - x1) s / pooled_width by bin_h; bin
// (i, j) is [x1 s + j bin_w, + bin_w] x [y1 s + i bin_h, + bin_h]. Its value is the integral of f over
// the bin divided by bin_w * bin_h. A roi with a non-finite scaled coordinate, or with bins narrower
// or lower than kPrRoiMinBinSize (a width or height <= 0 included), has only zero bins and no gradient.
struct Roi {
  Index batch = 0;
  bool pools = false;
  double x1 = 0, y1 = 0, bin_w = 0, bin_h = 0;
};

struct Bin {
  double x_lo = 0, x_hi = 0, y_lo = 0, y_hi = 0;
};

Roi roi_of(const PrRoiPoolParams& p, const Matrixd& rois, Index k, Index batch) {
  Roi r;
  const double b = rois(k, 0);
  if (!(b >= 0 && b < static_cast<double>(batch))) {
    throw std::invalid_argument("prroi_pool reference: rois[" + std::to_string(k) + ", 0] = " + std::to_string(b) +
                                " is not a batch index in [0, " + std::to_string(batch) + ")");
  }
  r.batch = static_cast<Index>(b);  // truncation toward zero
  r.x1 = rois(k, 1) * p.spatial_scale;
  r.y1 = rois(k, 2) * p.spatial_scale;
  const double width = rois(k, 3) * p.spatial_scale - r.x1;
  const double height = rois(k, 4) * p.spatial_scale - r.y1;
  r.bin_w = width / static_cast<double>(p.pooled_width);
  r.bin_h = height / static_cast<double>(p.pooled_height);
  r.pools = std::isfinite(r.x1) && std::isfinite(r.y1) && std::isfinite(width) && std::isfinite(height) &&
            r.bin_w >= kPrRoiMinBinSize && r.bin_h >= kPrRoiMinBinSize;
  return r;
}

Bin bin_of(const Roi& r, Index i, Index j) {
  Bin b;
  b.x_lo = r.x1 + static_cast<double>(j) * r.bin_w;
  b.x_hi = b.x_lo + r.bin_w;
  b.y_lo = r.y1 + static_cast<double>(i) * r.bin_h;
  b.y_hi = b.y_lo + r.bin_h;
  return b;
}

double pixel(const Tensor4d& x, Index b, Index c, Index h, Index w) {
  if (h < 0 || w < 0 || h >= x.dimension(2) || w >= x.dimension(3)) return 0.0;
  return x(b, c, h, w);
}

// The cells [first, last] that [lo, hi] overlaps, among those where f can be nonzero (-1 .. extent - 1).
struct CellRange {
  Index first = 0, last = -1;
};

CellRange cells(double lo, double hi, Index extent) {
  const double first = std::max(std::floor(lo), -1.0);
  const double last = std::min(std::ceil(hi) - 1.0, static_cast<double>(extent - 1));
  if (!(first <= last)) return {};
  return {static_cast<Index>(first), static_cast<Index>(last)};
}

// Part [t0, t1] (local coordinates in [0, 1]) of cell [q, q + 1] inside [lo, hi], and the exact
// integrals of the two linear factors over it: near = integral of (1 - t), far = integral of t.
struct CellPart {
  double t0 = 0, t1 = 0, near = 0, far = 0;
  bool empty() const { return !(t1 > t0); }
};

CellPart part_of(Index q, double lo, double hi) {
  CellPart c;
  const double cell = static_cast<double>(q);
  c.t0 = std::max(lo, cell) - cell;
  c.t1 = std::min(hi, cell + 1.0) - cell;
  if (c.empty()) return c;
  const double length = c.t1 - c.t0, mid = 0.5 * (c.t0 + c.t1);
  c.near = length * (1.0 - mid);  // (t1 - t0) - (t1^2 - t0^2) / 2
  c.far = length * mid;           // (t1^2 - t0^2) / 2
  return c;
}

// Calls fn(r, q, u, v) for each cell [q, q + 1] x [r, r + 1] that overlaps the bin (of a height x width map)
// with a nonzero area, row by row, u and v being the cell's parts along x and y.
template <typename Fn>
void for_each_cell(const Bin& bin, Index height, Index width, Fn&& fn) {
  const CellRange rows = cells(bin.y_lo, bin.y_hi, height);
  const CellRange cols = cells(bin.x_lo, bin.x_hi, width);
  for (Index r = rows.first; r <= rows.last; ++r) {
    const CellPart v = part_of(r, bin.y_lo, bin.y_hi);
    if (v.empty()) continue;
    for (Index q = cols.first; q <= cols.last; ++q) {
      const CellPart u = part_of(q, bin.x_lo, bin.x_hi);
      if (u.empty()) continue;
      fn(r, q, u, v);
    }
  }
}

double bin_integral(const Tensor4d& x, Index b, Index c, const Bin& bin) {
  double total = 0;
  for_each_cell(bin, x.dimension(2), x.dimension(3), [&](Index r, Index q, const CellPart& u, const CellPart& v) {
    total += pixel(x, b, c, r, q) * u.near * v.near + pixel(x, b, c, r, q + 1) * u.far * v.near +
             pixel(x, b, c, r + 1, q) * u.near * v.far + pixel(x, b, c, r + 1, q + 1) * u.far * v.far;
  });
  return total;
}

// The integral of f along a line of constant x = at (vertical) or constant y = at (horizontal), over
// [lo, hi] of the other coordinate. On each cell of the line f is linear, so the midpoint rule is exact.
double line_integral(const Tensor4d& x, Index b, Index c, bool vertical, double at, double lo, double hi) {
  const Index across = vertical ? x.dimension(3) : x.dimension(2);
  const Index along = vertical ? x.dimension(2) : x.dimension(3);
  if (!(at > -1.0 && at < static_cast<double>(across))) return 0.0;
  const Index q = static_cast<Index>(std::floor(at));
  const double t = at - static_cast<double>(q);
  // f on the line at position s of the other axis, for integer s: interpolated across.
  auto on_line = [&](Index s) {
    return vertical ? (1 - t) * pixel(x, b, c, s, q) + t * pixel(x, b, c, s, q + 1)
                    : (1 - t) * pixel(x, b, c, q, s) + t * pixel(x, b, c, q + 1, s);
  };
  const CellRange range = cells(lo, hi, along);
  double total = 0;
  for (Index s = range.first; s <= range.last; ++s) {
    const CellPart part = part_of(s, lo, hi);
    if (part.empty()) continue;
    total += part.near * on_line(s) + part.far * on_line(s + 1);
  }
  return total;
}

}  // namespace

Tensor4d prroi_pool_forward(const PrRoiPoolParams& p, const Tensor4d& input, const Matrixd& rois) {
  const Index C = input.dimension(1);
  Tensor4d out(rois.rows(), C, p.pooled_height, p.pooled_width);
  out.setZero();
  for (Index k = 0; k < rois.rows(); ++k) {
    const Roi r = roi_of(p, rois, k, input.dimension(0));
    if (!r.pools) continue;
    const double area = r.bin_w * r.bin_h;
    for (Index i = 0; i < p.pooled_height; ++i) {
      for (Index j = 0; j < p.pooled_width; ++j) {
        const Bin bin = bin_of(r, i, j);
        for (Index c = 0; c < C; ++c) out(k, c, i, j) = bin_integral(input, r.batch, c, bin) / area;
      }
    }
  }
  return out;
}

PrRoiPoolGrads prroi_pool_backward(const PrRoiPoolParams& p, const Tensor4d& grad_output, const Tensor4d& input,
                                   const Matrixd& rois) {
  const Index N = input.dimension(0), C = input.dimension(1), H = input.dimension(2), W = input.dimension(3);
  PrRoiPoolGrads g{Tensor4d(N, C, H, W), Matrixd::Zero(rois.rows(), 5), Matrixd::Zero(rois.rows(), 5)};
  g.input.setZero();
  const double PH = static_cast<double>(p.pooled_height), PW = static_cast<double>(p.pooled_width);
  for (Index k = 0; k < rois.rows(); ++k) {
    const Roi r = roi_of(p, rois, k, N);
    if (!r.pools) continue;
    const double bw = r.bin_w, bh = r.bin_h, area = bw * bh;
    for (Index i = 0; i < p.pooled_height; ++i) {
      for (Index j = 0; j < p.pooled_width; ++j) {
        const Bin bin = bin_of(r, i, j);
        // Bin edges as functions of the roi row: x_lo = x1 s + j (x2 - x1) s / PW, x_hi = x1 s + (j + 1) (x2 - x1) s / PW.
        const double x_lo_of_x1 = 1 - j / PW, x_lo_of_x2 = j / PW, x_hi_of_x1 = 1 - (j + 1) / PW, x_hi_of_x2 = (j + 1) / PW;
        const double y_lo_of_y1 = 1 - i / PH, y_lo_of_y2 = i / PH, y_hi_of_y1 = 1 - (i + 1) / PH, y_hi_of_y2 = (i + 1) / PH;
        for (Index c = 0; c < C; ++c) {
          const double go = grad_output(k, c, i, j);
          // d out / d input: the weight of each cell corner in the integral, over the area.
          for_each_cell(bin, H, W, [&](Index rr, Index q, const CellPart& u, const CellPart& v) {
            const double corner[2][2] = {{u.near * v.near, u.far * v.near}, {u.near * v.far, u.far * v.far}};
            for (Index dr = 0; dr < 2; ++dr) {
              for (Index dq = 0; dq < 2; ++dq) {
                const Index h = rr + dr, w = q + dq;
                if (h >= 0 && h < H && w >= 0 && w < W) g.input(r.batch, c, h, w) += go * corner[dr][dq] / area;
              }
            }
          });
          // d out / d bin edges by the Leibniz rule: with I the integral, d I / d x_lo = -(integral of f
          // along the edge x = x_lo), d I / d x_hi = +(along x = x_hi), and out = I / (bw bh).
          const double I = bin_integral(input, r.batch, c, bin);
          const double left = line_integral(input, r.batch, c, true, bin.x_lo, bin.y_lo, bin.y_hi);
          const double right = line_integral(input, r.batch, c, true, bin.x_hi, bin.y_lo, bin.y_hi);
          const double top = line_integral(input, r.batch, c, false, bin.y_lo, bin.x_lo, bin.x_hi);
          const double bottom = line_integral(input, r.batch, c, false, bin.y_hi, bin.x_lo, bin.x_hi);
          const double d_x_lo = (I / bw - left) / area, d_x_hi = (right - I / bw) / area;
          const double d_y_lo = (I / bh - top) / area, d_y_hi = (bottom - I / bh) / area;
          const double s = go * p.spatial_scale;
          g.rois(k, 1) += s * (x_lo_of_x1 * d_x_lo + x_hi_of_x1 * d_x_hi);
          g.rois(k, 2) += s * (y_lo_of_y1 * d_y_lo + y_hi_of_y1 * d_y_hi);
          g.rois(k, 3) += s * (x_lo_of_x2 * d_x_lo + x_hi_of_x2 * d_x_hi);
          g.rois(k, 4) += s * (y_lo_of_y2 * d_y_lo + y_hi_of_y2 * d_y_hi);
          const double m = std::fabs(s);
          g.rois_magnitude(k, 1) += m * (std::fabs(x_lo_of_x1 * d_x_lo) + std::fabs(x_hi_of_x1 * d_x_hi));
          g.rois_magnitude(k, 2) += m * (std::fabs(y_lo_of_y1 * d_y_lo) + std::fabs(y_hi_of_y1 * d_y_hi));
          g.rois_magnitude(k, 3) += m * (std::fabs(x_lo_of_x2 * d_x_lo) + std::fabs(x_hi_of_x2 * d_x_hi));
          g.rois_magnitude(k, 4) += m * (std::fabs(y_lo_of_y2 * d_y_lo) + std::fabs(y_hi_of_y2 * d_y_hi));
        }
      }
    }
  }
  return g;
}

}  // namespace detops::reference
