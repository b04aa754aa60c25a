#pragma once
// Per-element ps_roi_align / ps_roi_pool math shared by the CUDA kernels and the CPU implementation.
// Framework-free; compiles under nvcc (host and device) and under a plain C++ compiler.
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/bilinear.h"
#include "common/macros.h"
#include "common/numeric.h"
#include "ps_roi/ps_roi.h"

namespace detops {

// Element (k, c, i, j) of a [K, C_out, ph, pw] output sits at flat index k * C_in + c_in, where
// c_in = (c * ph + i) * pw + j is also the input channel it reads.
struct PsRoiElement {
  std::int64_t roi = 0, input_channel = 0, out_channel = 0, bin_y = 0, bin_x = 0;
};

DETOPS_HD PsRoiElement ps_roi_element(std::int64_t flat, std::int64_t channels, std::int64_t pooled_height,
                                      std::int64_t pooled_width) {
  PsRoiElement e;
  e.roi = flat / channels;
  e.input_channel = flat - e.roi * channels;
  e.bin_x = e.input_channel % pooled_width;
  e.bin_y = (e.input_channel / pooled_width) % pooled_height;
  e.out_channel = e.input_channel / (pooled_width * pooled_height);
  return e;
}

// The roi's image when its batch index b satisfies 0 <= b < batch (truncated toward zero), else -1 (NaN
// included).
template <typename T, typename Acc>
DETOPS_HD std::int64_t ps_roi_batch_index(const T* roi, std::int64_t batch) {
  const Acc b = to_acc<Acc>(roi[0]);
  return (b >= Acc(0) && b < static_cast<Acc>(batch)) ? static_cast<std::int64_t>(b) : -1;
}

// ps_roi_align

template <typename Acc>
DETOPS_HD Acc ps_roi_quiet_nan() {
  return std::numeric_limits<Acc>::quiet_NaN();
}

template <typename Acc>
struct PsRoiAlignGeometry {
  std::int64_t batch = -1;  // -1 when the roi's batch index is NaN or outside [0, batch)
  Acc start_y = 0, start_x = 0, bin_h = 0, bin_w = 0;
  std::int64_t grid_h = 0, grid_w = 0;  // samples per side; <= 0: none
  // The divisor of a bin's sum: grid_h * grid_w when positive; 1 when that product is negative (no
  // samples, torchvision's -0), when the roi has a NaN extent, or with zero_empty_bins; else 0, and a bin
  // with a count of 0 is NaN (torchvision's 0 / 0).
  Acc count = 1;
};

// Samples per side of an adaptive grid over a bin extent v: min(ceil(v), kPsRoiAlignMaxSamplingGrid) for
// v > 0; 0 for -1 < v <= 0 and NaN; -1 for v <= -1 (ceil(v) is negative: no samples either, but a
// nonzero factor of the count, as in torchvision).
template <typename Acc>
DETOPS_HD std::int64_t ps_roi_align_adaptive_grid(Acc v) {
  if (!(v > Acc(0))) return v <= Acc(-1) ? -1 : 0;
  if (!(v < static_cast<Acc>(kPsRoiAlignMaxSamplingGrid))) return kPsRoiAlignMaxSamplingGrid;
  return static_cast<std::int64_t>(ceil(v));
}

template <typename T, typename Acc>
DETOPS_HD PsRoiAlignGeometry<Acc> ps_roi_align_geometry(const PsRoiAlignParams& p, const T* roi, std::int64_t batch) {
  PsRoiAlignGeometry<Acc> g;
  g.batch = ps_roi_batch_index<T, Acc>(roi, batch);
  const Acc scale = static_cast<Acc>(p.spatial_scale);
  g.start_x = to_acc<Acc>(roi[1]) * scale - Acc(0.5);
  g.start_y = to_acc<Acc>(roi[2]) * scale - Acc(0.5);
  const Acc roi_w = (to_acc<Acc>(roi[3]) * scale - Acc(0.5)) - g.start_x;  // no minimum size, as torchvision
  const Acc roi_h = (to_acc<Acc>(roi[4]) * scale - Acc(0.5)) - g.start_y;
  g.bin_h = roi_h / static_cast<Acc>(p.pooled_height);
  g.bin_w = roi_w / static_cast<Acc>(p.pooled_width);
  g.grid_h = p.sampling_ratio > 0 ? p.sampling_ratio : ps_roi_align_adaptive_grid(g.bin_h);
  g.grid_w = p.sampling_ratio > 0 ? p.sampling_ratio : ps_roi_align_adaptive_grid(g.bin_w);
  const std::int64_t n = g.grid_h * g.grid_w;
  const bool nan_extent = !(g.bin_h == g.bin_h) || !(g.bin_w == g.bin_w);
  g.count = static_cast<Acc>(n > 0 ? n : (n < 0 || nan_extent || p.zero_empty_bins) ? 1 : 0);
  return g;
}

// Sample s of a grid of `grid` samples along one axis of bin `bin`: start + bin * size + (s + 0.5) * size / grid.
// Every path (the per-sample loop, the separable taps below, CPU and CUDA) computes positions with this one
// expression (the same as before the separable form).
template <typename Acc>
DETOPS_HD Acc ps_roi_align_sample(Acc start, Acc size, std::int64_t grid, std::int64_t bin, std::int64_t s) {
  return start + static_cast<Acc>(bin) * size +
         static_cast<Acc>(static_cast<Acc>(s) + Acc(0.5)) * size / static_cast<Acc>(grid);
}

template <typename Acc>
DETOPS_HD Acc ps_roi_align_sample_y(const PsRoiAlignGeometry<Acc>& g, std::int64_t i, std::int64_t iy) {
  return ps_roi_align_sample(g.start_y, g.bin_h, g.grid_h, i, iy);
}

template <typename Acc>
DETOPS_HD Acc ps_roi_align_sample_x(const PsRoiAlignGeometry<Acc>& g, std::int64_t j, std::int64_t ix) {
  return ps_roi_align_sample(g.start_x, g.bin_w, g.grid_w, j, ix);
}

// Calls fn(taps) for the bilinear taps of every sample of bin (i, j) that lands on the map.
template <typename Acc, typename Fn>
DETOPS_HD void ps_roi_align_for_each_sample(const PsRoiAlignGeometry<Acc>& g, std::int64_t height, std::int64_t width,
                                            std::int64_t i, std::int64_t j, Fn&& fn) {
  for (std::int64_t iy = 0; iy < g.grid_h; ++iy) {
    const Acc y = ps_roi_align_sample_y(g, i, iy);
    for (std::int64_t ix = 0; ix < g.grid_w; ++ix) {
      const Acc x = ps_roi_align_sample_x(g, j, ix);
      const BilinearTaps<Acc> t = bilinear_taps(y, x, height, width);
      if (t.valid) fn(t);
    }
  }
}

// Average of the bilinear samples of bin (i, j) over one H x W plane (the bin's own input channel); NaN
// when the count is 0.
template <typename T, typename Acc>
DETOPS_HD Acc ps_roi_align_bin_average(const PsRoiAlignGeometry<Acc>& g, const T* plane, std::int64_t height,
                                       std::int64_t width, std::int64_t i, std::int64_t j) {
  if (g.count == Acc(0)) return ps_roi_quiet_nan<Acc>();
  Acc sum = 0;
  ps_roi_align_for_each_sample(g, height, width, i, j, [&](const BilinearTaps<Acc>& t) {
    sum += t.w_ll * to_acc<Acc>(plane[t.y_low * width + t.x_low]) +
           t.w_lh * to_acc<Acc>(plane[t.y_low * width + t.x_high]) +
           t.w_hl * to_acc<Acc>(plane[t.y_high * width + t.x_low]) +
           t.w_hh * to_acc<Acc>(plane[t.y_high * width + t.x_high]);
  });
  return sum / g.count;
}

// Scatters grad (the gradient of bin (i, j)) to its plane through add(flat_offset, value). A bin with no
// samples scatters nothing.
template <typename Acc, typename AddFn>
DETOPS_HD void ps_roi_align_bin_scatter(const PsRoiAlignGeometry<Acc>& g, Acc grad, std::int64_t height,
                                        std::int64_t width, std::int64_t i, std::int64_t j, AddFn&& add) {
  if (g.count == Acc(0)) return;
  const Acc g_per_sample = grad / g.count;
  ps_roi_align_for_each_sample(g, height, width, i, j, [&](const BilinearTaps<Acc>& t) {
    add(t.y_low * width + t.x_low, g_per_sample * t.w_ll);
    add(t.y_low * width + t.x_high, g_per_sample * t.w_lh);
    add(t.y_high * width + t.x_low, g_per_sample * t.w_hl);
    add(t.y_high * width + t.x_high, g_per_sample * t.w_hh);
  });
}

// ps_roi_align, separable form. A bin's samples form a grid (rows y(iy) x columns x(ix)); a sample is on the map
// when both coordinates are (bilinear_axis's valid flag on each axis: the [-1, H] test of y does not depend on x
// and vice versa, NaN failing both), and its tap weight at pixel (r, c) is wy(r) * wx(c), each factor from its
// own axis. So the bin's sum over its valid samples and their four taps is
//     sum over rows r and columns c of Wy(r) * Wx(c) * plane[r, c],
// Wy(r) the sum of the weights the valid row samples give row r (likewise Wx): each touched pixel is read once
// (scattered to once) instead of once per tap of every sample touching it. An axis without a valid sample has an
// empty list, so the bin sums to 0; its samples still count in `count` (PsRoiAlignGeometry), as in the per-sample
// form. The row and column lists hold every (row, column) pair some sample taps: no other pixel is read.

// Taps one axis list may hold. 34 holds every adaptive grid of up to 32 samples a side (samples at most a pixel
// apart touch at most grid + 1 pixels), any fixed grid of up to 17 (2 taps per sample), and any grid over an axis
// of at most 34 pixels; a bin whose list would be longer takes the per-sample loop.
inline constexpr int kPsRoiAlignListTaps = 34;

// One merged tap of an axis: pos = pixel index * stride (rows: * width, columns: * 1), and its summed weight.
template <typename Acc, typename Index>
struct PsRoiAxisTap {
  Index pos;
  Acc weight;
};

// The merged taps of bin `bin` along one axis (start, size = bin extent, grid samples; extent pixels), in sample
// order, into taps[0 .. return). Returns -1 when they need more than `capacity` entries. The sample positions are
// monotone in s (non-decreasing for size >= 0, non-increasing for size < 0: each floating-point step is monotone),
// so with each sample's two taps pushed in that direction a pixel repeats only as one of the last two entries:
// each pixel gets one entry, and the entries are the distinct pixels the valid samples tap.
template <typename Acc, typename Index>
DETOPS_HD int ps_roi_align_axis_taps(Acc start, Acc size, std::int64_t grid, std::int64_t bin, Index extent,
                                     Index stride, PsRoiAxisTap<Acc, Index>* taps, int capacity) {
  int n = 0;
  Index last = -1, before_last = -1;  // pos of entries n - 1 and n - 2
  const bool increasing = !(size < Acc(0));
  for (std::int64_t s = 0; s < grid; ++s) {
    const Acc v = ps_roi_align_sample(start, size, grid, bin, s);
    const BilinearAxis<Acc, Index> a = bilinear_axis(v, extent);
    if (!a.valid) {
      // Past the far end of the axis: every later sample is too (monotone).
      if (increasing ? v > static_cast<Acc>(extent) : v < Acc(-1)) break;
      continue;
    }
    for (int t = 0; t < 2; ++t) {
      const bool low = (t == 0) == increasing;
      const Index pos = (low ? a.low : a.high) * stride;
      const Acc w = low ? a.w_low : a.w_high;
      if (n > 0 && pos == last) {
        taps[n - 1].weight += w;
      } else if (n > 1 && pos == before_last) {
        taps[n - 2].weight += w;
      } else {
        if (n == capacity) return -1;
        taps[n].pos = pos;
        taps[n].weight = w;
        ++n;
        before_last = last;
        last = pos;
      }
    }
  }
  return n;
}

// Both lists of bin (i, j), when both fit kPsRoiAlignListTaps (separable); else the per-sample form applies.
template <typename Acc, typename Index>
struct PsRoiAlignBinTaps {
  PsRoiAxisTap<Acc, Index> rows[kPsRoiAlignListTaps], cols[kPsRoiAlignListTaps];
  int row_count = 0, col_count = 0;
  bool separable = false;
};

template <typename Acc, typename Index>
DETOPS_HD void ps_roi_align_bin_taps(const PsRoiAlignGeometry<Acc>& g, Index height, Index width, std::int64_t i,
                                     std::int64_t j, PsRoiAlignBinTaps<Acc, Index>& b) {
  b.row_count = ps_roi_align_axis_taps(g.start_y, g.bin_h, g.grid_h, i, height, width, b.rows, kPsRoiAlignListTaps);
  b.col_count = b.row_count < 0 ? -1
                                : ps_roi_align_axis_taps(g.start_x, g.bin_w, g.grid_w, j, width, Index(1), b.cols,
                                                         kPsRoiAlignListTaps);
  b.separable = b.row_count >= 0 && b.col_count >= 0;
}

// ps_roi_pool

DETOPS_HD float round_half_away(float v) { return roundf(v); }
DETOPS_HD double round_half_away(double v) { return round(v); }

// round(v) as an integer after clamping v to [-kPsRoiPoolMaxCoordinate, kPsRoiPoolMaxCoordinate];
// false for NaN.
template <typename Acc>
DETOPS_HD bool ps_roi_pool_coordinate(Acc v, std::int64_t& out) {
  if (!(v == v)) return false;
  const Acc limit = static_cast<Acc>(kPsRoiPoolMaxCoordinate);
  if (v > limit) v = limit;
  if (v < -limit) v = -limit;
  out = static_cast<std::int64_t>(round_half_away(v));
  return true;
}

struct PsRoiPoolGeometry {
  std::int64_t batch = -1;  // -1 when the roi's batch index is NaN or outside [0, batch)
  bool valid = false;       // false when a coordinate is NaN: every bin is empty
  std::int64_t start_y = 0, start_x = 0, roi_h = 1, roi_w = 1;  // roi_h, roi_w >= 1
};

template <typename T, typename Acc>
DETOPS_HD PsRoiPoolGeometry ps_roi_pool_geometry(const PsRoiPoolParams& p, const T* roi, std::int64_t batch) {
  PsRoiPoolGeometry g;
  g.batch = ps_roi_batch_index<T, Acc>(roi, batch);
  const Acc scale = static_cast<Acc>(p.spatial_scale);
  std::int64_t x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  const bool ok_x1 = ps_roi_pool_coordinate<Acc>(to_acc<Acc>(roi[1]) * scale, x1);
  const bool ok_y1 = ps_roi_pool_coordinate<Acc>(to_acc<Acc>(roi[2]) * scale, y1);
  const bool ok_x2 = ps_roi_pool_coordinate<Acc>(to_acc<Acc>(roi[3]) * scale, x2);
  const bool ok_y2 = ps_roi_pool_coordinate<Acc>(to_acc<Acc>(roi[4]) * scale, y2);
  g.valid = ok_x1 && ok_y1 && ok_x2 && ok_y2;
  g.start_x = x1;
  g.start_y = y1;
  g.roi_w = x2 - x1 > 1 ? x2 - x1 : 1;  // a roi narrower than one pixel pools one column
  g.roi_h = y2 - y1 > 1 ? y2 - y1 : 1;
  return g;
}

// Pixels [begin, end) along one axis.
struct PixelRange {
  std::int64_t begin = 0, end = 0;
};

DETOPS_HD std::int64_t clip_to(std::int64_t v, std::int64_t limit) { return v < 0 ? 0 : (v > limit ? limit : v); }

// Bin `bin` of `bins` over a roi of `size` >= 1 pixels starting at `origin`, clipped to [0, limit).
// exact_bins: [origin + floor(bin * size / bins), origin + ceil((bin + 1) * size / bins)) in exact integer
// arithmetic (no overflow: |origin| <= 2^30, size <= 2^31, bins < 2^31). Otherwise torchvision's
// arithmetic: floor(bin * b) and ceil((bin + 1) * b) with b = size / bins in Acc.
template <typename Acc>
DETOPS_HD PixelRange ps_roi_pool_bin_range(bool exact_bins, std::int64_t origin, std::int64_t size, std::int64_t bins,
                                           std::int64_t bin, std::int64_t limit) {
  std::int64_t begin, end;
  if (exact_bins) {
    begin = (bin * size) / bins;
    end = ((bin + 1) * size + bins - 1) / bins;
  } else {
    const Acc b = static_cast<Acc>(size) / static_cast<Acc>(bins);
    begin = static_cast<std::int64_t>(floor(static_cast<Acc>(bin) * b));
    end = static_cast<std::int64_t>(ceil(static_cast<Acc>(bin + 1) * b));
  }
  return PixelRange{clip_to(origin + begin, limit), clip_to(origin + end, limit)};
}

// The rows and columns bin (i, j) pools; empty (begin == end) when the roi is invalid.
struct PsRoiPoolBin {
  PixelRange rows, cols;
  DETOPS_HD bool empty() const { return rows.end <= rows.begin || cols.end <= cols.begin; }
  DETOPS_HD std::int64_t area() const { return (rows.end - rows.begin) * (cols.end - cols.begin); }
};

// Which direction a bin is for: without exact_bins, torchvision's forward clips bins to [0, H-1) x
// [0, W-1), its backward to [0, H) x [0, W). With exact_bins both clip to [0, H) x [0, W).
enum class PsRoiPoolPass { kForward, kBackward };

template <typename Acc>
DETOPS_HD PsRoiPoolBin ps_roi_pool_bin(const PsRoiPoolParams& p, const PsRoiPoolGeometry& g, std::int64_t height,
                                       std::int64_t width, std::int64_t i, std::int64_t j, PsRoiPoolPass pass) {
  PsRoiPoolBin b;
  if (!g.valid) return b;
  const std::int64_t cut = (p.exact_bins || pass == PsRoiPoolPass::kBackward) ? 0 : 1;
  b.rows = ps_roi_pool_bin_range<Acc>(p.exact_bins, g.start_y, g.roi_h, p.pooled_height, i, height - cut);
  b.cols = ps_roi_pool_bin_range<Acc>(p.exact_bins, g.start_x, g.roi_w, p.pooled_width, j, width - cut);
  return b;
}

// Mean of the bin's pixels of one H x W plane; 0 for an empty bin.
template <typename T, typename Acc>
DETOPS_HD Acc ps_roi_pool_bin_average(const PsRoiPoolBin& b, const T* plane, std::int64_t width) {
  if (b.empty()) return Acc(0);
  Acc sum = 0;
  for (std::int64_t y = b.rows.begin; y < b.rows.end; ++y) {
    const T* row = plane + y * width;
    for (std::int64_t x = b.cols.begin; x < b.cols.end; ++x) sum += to_acc<Acc>(row[x]);
  }
  return sum / static_cast<Acc>(b.area());
}

// Scatters grad / area to every pixel of the bin through add(flat_offset, value).
template <typename Acc, typename AddFn>
DETOPS_HD void ps_roi_pool_bin_scatter(const PsRoiPoolBin& b, Acc grad, std::int64_t width, AddFn&& add) {
  if (b.empty()) return;
  const Acc share = grad / static_cast<Acc>(b.area());
  for (std::int64_t y = b.rows.begin; y < b.rows.end; ++y) {
    for (std::int64_t x = b.cols.begin; x < b.cols.end; ++x) add(y * width + x, share);
  }
}

// Each op's per-element math behind one interface, for the CPU loops and the CUDA kernels:
//   geometry(p, roi, batch)            the roi's geometry (batch < 0: invalid)
//   value(p, g, e, plane, s)           element e's value, from its input channel's plane
//   scatter(p, g, e, grad, s, add)     element e's gradient, through add(offset in that plane, value)
struct PsRoiAlignMath {
  template <typename T>
  static DETOPS_HD PsRoiAlignGeometry<acc_t<T>> geometry(const PsRoiAlignParams& p, const T* roi, std::int64_t batch) {
    return ps_roi_align_geometry<T, acc_t<T>>(p, roi, batch);
  }
  // The separable form when the bin's lists fit, else the loop over samples and taps (the CUDA kernels decide the
  // same way, per roi).
  template <typename T>
  static DETOPS_HD acc_t<T> value(const PsRoiAlignParams&, const PsRoiAlignGeometry<acc_t<T>>& g, const PsRoiElement& e,
                                  const T* plane, const RoiShape& s) {
    using Acc = acc_t<T>;
    if (g.count == Acc(0)) return ps_roi_quiet_nan<Acc>();
    PsRoiAlignBinTaps<Acc, std::int64_t> b;
    ps_roi_align_bin_taps(g, s.height, s.width, e.bin_y, e.bin_x, b);
    if (!b.separable) return ps_roi_align_bin_average<T, Acc>(g, plane, s.height, s.width, e.bin_y, e.bin_x);
    Acc sum = 0;
    for (int c = 0; c < b.col_count; ++c) {
      for (int r = 0; r < b.row_count; ++r) {
        sum += (b.rows[r].weight * b.cols[c].weight) * to_acc<Acc>(plane[b.rows[r].pos + b.cols[c].pos]);
      }
    }
    return sum / g.count;
  }
  template <typename Acc, typename AddFn>
  static DETOPS_HD void scatter(const PsRoiAlignParams&, const PsRoiAlignGeometry<Acc>& g, const PsRoiElement& e,
                                Acc grad, const RoiShape& s, AddFn&& add) {
    if (g.count == Acc(0)) return;
    PsRoiAlignBinTaps<Acc, std::int64_t> b;
    ps_roi_align_bin_taps(g, s.height, s.width, e.bin_y, e.bin_x, b);
    if (!b.separable) return ps_roi_align_bin_scatter(g, grad, s.height, s.width, e.bin_y, e.bin_x, add);
    const Acc g_per_sample = grad / g.count;
    for (int c = 0; c < b.col_count; ++c) {
      for (int r = 0; r < b.row_count; ++r) {
        add(b.rows[r].pos + b.cols[c].pos, g_per_sample * (b.rows[r].weight * b.cols[c].weight));
      }
    }
  }
};

struct PsRoiPoolMath {
  template <typename T>
  static DETOPS_HD PsRoiPoolGeometry geometry(const PsRoiPoolParams& p, const T* roi, std::int64_t batch) {
    return ps_roi_pool_geometry<T, acc_t<T>>(p, roi, batch);
  }
  template <typename T>
  static DETOPS_HD acc_t<T> value(const PsRoiPoolParams& p, const PsRoiPoolGeometry& g, const PsRoiElement& e,
                                  const T* plane, const RoiShape& s) {
    const PsRoiPoolBin bin =
        ps_roi_pool_bin<acc_t<T>>(p, g, s.height, s.width, e.bin_y, e.bin_x, PsRoiPoolPass::kForward);
    return ps_roi_pool_bin_average<T, acc_t<T>>(bin, plane, s.width);
  }
  template <typename Acc, typename AddFn>
  static DETOPS_HD void scatter(const PsRoiPoolParams& p, const PsRoiPoolGeometry& g, const PsRoiElement& e, Acc grad,
                                const RoiShape& s, AddFn&& add) {
    const PsRoiPoolBin bin = ps_roi_pool_bin<Acc>(p, g, s.height, s.width, e.bin_y, e.bin_x, PsRoiPoolPass::kBackward);
    ps_roi_pool_bin_scatter(bin, grad, s.width, add);
  }
};

}  // namespace detops
