#pragma once
// Per-element Precise RoI Pooling math shared by the CUDA kernels and the CPU implementation.
// Framework-free; compiles under nvcc (host and device) and under a plain C++ compiler.
//
// Formulation (docs/ops/prroi_pool.md has the definition). The bilinear surface of one H x W plane is
//   f(x, y) = sum_{h, w} d[h, w] k(y - h) k(x - w),   k(t) = max(0, 1 - |t|),
// with d = 0 outside the map, so its average over a bin [x_lo, x_hi] x [y_lo, y_hi] separates into
//   out = sum_{h, w} d[h, w] wy(h) wx(w),   wx(w) = (1 / bin_w) * integral_{x_lo}^{x_hi} k(x - w) dx.
// Write the bin as x = x_lo + a * bin_w, a in [0, 1]. Cell j = [j, j + 1] holds the a-interval
// [a_s, a_e] of the bin; its share is lambda_j = a_e - a_s, the midpoint of its part of the bin lies at
// j + mu_j, and abar_j = (a_s + a_e) / 2. On a cell f is linear in x, so
//   wx(w) = lambda_w (1 - mu_w) + lambda_{w-1} mu_{w-1}      (w: left corner of cell w, right of w - 1).
// The edge derivatives use the same parametrization: d out / d x_lo is the bin average of (1 - a) df/dx
// and d out / d x_hi that of a df/dx, where df/dx = d[., j + 1] - d[., j] on cell j (constant in x). Per
// pixel that is
//   d out / d x_lo = sum d[h, w] wy(h) tlo(w),   tlo(w) = lambda_{w-1} (1 - abar_{w-1}) - lambda_w (1 - abar_w)
//   d out / d x_hi = sum d[h, w] wy(h) thi(w),   thi(w) = lambda_{w-1} abar_{w-1} - lambda_w abar_w
// and likewise for y. Nothing is divided by the bin size, so bins far smaller than a pixel are as well
// conditioned as large ones. Cells outside the support [-1, extent] of f carry f = 0 and df/dx = 0 and
// are dropped, which bounds the work of any roi (huge coordinates included) by the map's size.
//
// The bin geometry (scaled coordinates, bin edges, cell shares) is computed in double for every dtype;
// the shares are then rounded to the accumulation type Acc, in which the pixel loops run.
#include <cmath>
#include <cstdint>

#include "common/macros.h"
#include "common/numeric.h"
#include "common/readonly_load.h"
#include "prroi_pool/prroi_pool.h"

namespace detops {

struct PrRoiGeometry {
  std::int64_t batch = -1;  // -1 when the roi's batch index is NaN or outside [0, batch)
  // false when a scaled coordinate (or the roi's width or height) is not finite, or when its bins are
  // not at least kPrRoiMinBinSize wide and high (width or height <= 0 included): every bin of the roi
  // is then 0 and has no gradient.
  bool pools = false;
  double x1 = 0, y1 = 0, bin_w = 0, bin_h = 0;  // feature-map coordinates
};

template <typename T>
DETOPS_HD double prroi_load_coordinate(const T* roi, int column) {
  return static_cast<double>(to_acc<acc_t<T>>(load_readonly(roi + column)));
}

template <typename T>
DETOPS_HD PrRoiGeometry prroi_geometry(const PrRoiPoolParams& p, const T* roi, std::int64_t batch) {
  PrRoiGeometry g;
  const double b = prroi_load_coordinate(roi, 0);
  g.batch = (b >= 0.0 && b < static_cast<double>(batch)) ? static_cast<std::int64_t>(b) : -1;
  const double x1 = prroi_load_coordinate(roi, 1) * p.spatial_scale;
  const double y1 = prroi_load_coordinate(roi, 2) * p.spatial_scale;
  const double x2 = prroi_load_coordinate(roi, 3) * p.spatial_scale;
  const double y2 = prroi_load_coordinate(roi, 4) * p.spatial_scale;
  const double roi_w = x2 - x1, roi_h = y2 - y1;
  g.x1 = x1;
  g.y1 = y1;
  g.bin_w = roi_w / static_cast<double>(p.pooled_width);
  g.bin_h = roi_h / static_cast<double>(p.pooled_height);
  // is_finite is false for NaN; x2 - x1 is not finite when either is not (or when it overflows).
  g.pools = is_finite(x1) && is_finite(y1) && is_finite(roi_w) && is_finite(roi_h) && g.bin_w >= kPrRoiMinBinSize &&
            g.bin_h >= kPrRoiMinBinSize;
  return g;
}

// A cell's share of a bin along one axis (see the top of this file).
template <typename Acc>
struct PrRoiCell {
  Acc lambda = 0, mu = 0, abar = 0;
};

// Cell [j, j + 1]'s share of the bin [lo, lo + size] (inv_size = 1 / size), in double. The cell must
// overlap the bin.
DETOPS_HD PrRoiCell<double> prroi_cell_share(double j, double lo, double size, double inv_size) {
  const double hi = lo + size;
  const bool starts_at_cell = j >= lo;       // the bin began before this cell: its part starts at j
  const bool ends_at_cell = j + 1.0 <= hi;   // the bin goes past this cell: its part ends at j + 1
  const double start_from_lo = starts_at_cell ? j - lo : 0.0;
  const double end_from_lo = ends_at_cell ? (j + 1.0) - lo : size;
  const double start_in_cell = starts_at_cell ? 0.0 : lo - j;
  const double end_in_cell = ends_at_cell ? 1.0 : (lo - j) + size;
  PrRoiCell<double> c;
  if (starts_at_cell && ends_at_cell) {
    c.lambda = inv_size;
  } else if (!starts_at_cell && !ends_at_cell) {
    c.lambda = 1.0;  // the whole bin lies in this cell
  } else {
    c.lambda = (end_from_lo - start_from_lo) * inv_size;
  }
  c.mu = 0.5 * (start_in_cell + end_in_cell);
  c.abar = 0.5 * (start_from_lo + end_from_lo) * inv_size;
  return c;
}

// One bin along one axis: it overlaps cells [first, last] of the support (empty when last < first),
// whose two boundary cells have their own shares; every interior cell has lambda = 1 / size, mu = 1/2
// and abar = interior_abar + (j - first - 1) * lambda. Pixels [pixel_begin, pixel_end) of the map are
// the corners of those cells.
template <typename Acc>
struct PrRoiAxis {
  std::int64_t first = 0, last = -1;
  std::int64_t pixel_begin = 0, pixel_end = 0;
  PrRoiCell<Acc> head, tail;
  Acc interior_lambda = 0, interior_abar = 0;
};

template <typename Acc>
DETOPS_HD PrRoiCell<Acc> prroi_cell_to(const PrRoiCell<double>& c) {
  PrRoiCell<Acc> out;
  out.lambda = static_cast<Acc>(c.lambda);
  out.mu = static_cast<Acc>(c.mu);
  out.abar = static_cast<Acc>(c.abar);
  return out;
}

// The bin [lo, lo + size] (size > 0, both finite) on an axis of `extent` pixels.
template <typename Acc>
DETOPS_HD PrRoiAxis<Acc> prroi_axis(double lo, double size, std::int64_t extent) {
  PrRoiAxis<Acc> a;
  const double hi = lo + size;
  const double end = static_cast<double>(extent);
  if (!(hi > -1.0 && lo < end)) return a;  // no overlap with the support (-1, extent)
  const double first = lo > -1.0 ? floor(lo) : -1.0;
  double last = ceil(hi) - 1.0;
  if (last > end - 1.0) last = end - 1.0;
  // size below lo's resolution: hi == lo, and the bin is the point lo, in cell floor(lo).
  if (last < first) last = first;
  a.first = static_cast<std::int64_t>(first);
  a.last = static_cast<std::int64_t>(last);
  a.pixel_begin = a.first > 0 ? a.first : 0;
  a.pixel_end = a.last + 2 < extent ? a.last + 2 : extent;
  const double inv_size = 1.0 / size;
  a.head = prroi_cell_to<Acc>(prroi_cell_share(first, lo, size, inv_size));
  if (a.last > a.first) a.tail = prroi_cell_to<Acc>(prroi_cell_share(last, lo, size, inv_size));
  a.interior_lambda = static_cast<Acc>(inv_size);
  a.interior_abar = static_cast<Acc>(((first + 1.0) - lo + 0.5) * inv_size);
  return a;
}

template <typename Acc>
DETOPS_HD PrRoiCell<Acc> prroi_cell(const PrRoiAxis<Acc>& a, std::int64_t j) {
  PrRoiCell<Acc> c;
  if (j < a.first || j > a.last) return c;
  if (j == a.first) return a.head;
  if (j == a.last) return a.tail;
  c.lambda = a.interior_lambda;
  c.mu = Acc(0.5);
  c.abar = a.interior_abar + static_cast<Acc>(j - a.first - 1) * a.interior_lambda;
  return c;
}

// wx(p): pixel p's weight in the bin average along this axis.
template <typename Acc>
DETOPS_HD Acc prroi_pixel_weight(const PrRoiAxis<Acc>& a, std::int64_t p) {
  if (p - 1 > a.first && p < a.last) return a.interior_lambda;  // both cells interior
  const PrRoiCell<Acc> after = prroi_cell(a, p);        // p is the left corner of cell p
  const PrRoiCell<Acc> before = prroi_cell(a, p - 1);   // and the right corner of cell p - 1
  return after.lambda * (Acc(1) - after.mu) + before.lambda * before.mu;
}

template <typename Acc>
struct PrRoiEdgeWeights {
  Acc lo = 0, hi = 0;  // tlo(p), thi(p): pixel p's weight in d out / d lo and d out / d hi
};

template <typename Acc>
DETOPS_HD PrRoiEdgeWeights<Acc> prroi_pixel_edge_weights(const PrRoiAxis<Acc>& a, std::int64_t p) {
  PrRoiEdgeWeights<Acc> e;
  if (p - 1 > a.first && p < a.last) {  // both cells interior: abar_p - abar_{p-1} = lambda, exactly
    e.lo = a.interior_lambda * a.interior_lambda;
    e.hi = -e.lo;
    return e;
  }
  const PrRoiCell<Acc> after = prroi_cell(a, p);
  const PrRoiCell<Acc> before = prroi_cell(a, p - 1);
  e.lo = before.lambda * (Acc(1) - before.abar) - after.lambda * (Acc(1) - after.abar);
  e.hi = before.lambda * before.abar - after.lambda * after.abar;
  return e;
}

// The axes of bin (ph, pw) of a roi that pools.
template <typename Acc>
DETOPS_HD PrRoiAxis<Acc> prroi_bin_axis_x(const PrRoiGeometry& g, std::int64_t pw, std::int64_t width) {
  return prroi_axis<Acc>(g.x1 + g.bin_w * static_cast<double>(pw), g.bin_w, width);
}

template <typename Acc>
DETOPS_HD PrRoiAxis<Acc> prroi_bin_axis_y(const PrRoiGeometry& g, std::int64_t ph, std::int64_t height) {
  return prroi_axis<Acc>(g.y1 + g.bin_h * static_cast<double>(ph), g.bin_h, height);
}

// The bin's average of the surface of one plane. NaN or infinite values among the pixels the bin
// touches (the corners of its cells) propagate.
template <typename T, typename Acc>
DETOPS_HD Acc prroi_bin_average(const PrRoiAxis<Acc>& ay, const PrRoiAxis<Acc>& ax, const T* plane,
                                std::int64_t width) {
  Acc sum = 0;
  for (std::int64_t h = ay.pixel_begin; h < ay.pixel_end; ++h) {
    const T* row = plane + h * width;
    Acc row_sum = 0;
    for (std::int64_t w = ax.pixel_begin; w < ax.pixel_end; ++w) {
      row_sum += to_acc<Acc>(load_readonly(row + w)) * prroi_pixel_weight(ax, w);
    }
    sum += prroi_pixel_weight(ay, h) * row_sum;
  }
  return sum;
}

template <typename Acc>
struct PrRoiBinDerivatives {
  Acc x_lo = 0, x_hi = 0, y_lo = 0, y_hi = 0;  // d out / d (bin edge), in feature-map coordinates
};

template <typename T, typename Acc>
DETOPS_HD PrRoiBinDerivatives<Acc> prroi_bin_derivatives(const PrRoiAxis<Acc>& ay, const PrRoiAxis<Acc>& ax,
                                                         const T* plane, std::int64_t width) {
  PrRoiBinDerivatives<Acc> d;
  for (std::int64_t h = ay.pixel_begin; h < ay.pixel_end; ++h) {
    const T* row = plane + h * width;
    Acc average = 0, lo = 0, hi = 0;
    for (std::int64_t w = ax.pixel_begin; w < ax.pixel_end; ++w) {
      const Acc v = to_acc<Acc>(load_readonly(row + w));
      const PrRoiEdgeWeights<Acc> e = prroi_pixel_edge_weights(ax, w);
      average += v * prroi_pixel_weight(ax, w);
      lo += v * e.lo;
      hi += v * e.hi;
    }
    const Acc wy = prroi_pixel_weight(ay, h);
    const PrRoiEdgeWeights<Acc> ey = prroi_pixel_edge_weights(ay, h);
    d.x_lo += wy * lo;
    d.x_hi += wy * hi;
    d.y_lo += ey.lo * average;
    d.y_hi += ey.hi * average;
  }
  return d;
}

template <typename Acc>
struct PrRoiCoordinateGrad {
  Acc x1 = 0, y1 = 0, x2 = 0, y2 = 0;  // d out / d (roi column 1..4), input-image coordinates
};

// Chain rule from the bin edges to the roi row: x_lo = x1' + pw * (x2' - x1') / PW and
// x_hi = x1' + (pw + 1) * (x2' - x1') / PW with x1' = x1 * spatial_scale (likewise y), for a roi that pools.
template <typename Acc>
DETOPS_HD PrRoiCoordinateGrad<Acc> prroi_coordinate_grad(const PrRoiBinDerivatives<Acc>& d, const PrRoiPoolParams& p,
                                                         std::int64_t ph, std::int64_t pw) {
  const Acc scale = static_cast<Acc>(p.spatial_scale);
  const Acc fx_lo = static_cast<Acc>(pw) / static_cast<Acc>(p.pooled_width);
  const Acc fx_hi = static_cast<Acc>(pw + 1) / static_cast<Acc>(p.pooled_width);
  const Acc fy_lo = static_cast<Acc>(ph) / static_cast<Acc>(p.pooled_height);
  const Acc fy_hi = static_cast<Acc>(ph + 1) / static_cast<Acc>(p.pooled_height);
  PrRoiCoordinateGrad<Acc> g;
  g.x1 = scale * ((Acc(1) - fx_lo) * d.x_lo + (Acc(1) - fx_hi) * d.x_hi);
  g.x2 = scale * (fx_lo * d.x_lo + fx_hi * d.x_hi);
  g.y1 = scale * ((Acc(1) - fy_lo) * d.y_lo + (Acc(1) - fy_hi) * d.y_hi);
  g.y2 = scale * (fy_lo * d.y_lo + fy_hi * d.y_hi);
  return g;
}

}  // namespace detops
