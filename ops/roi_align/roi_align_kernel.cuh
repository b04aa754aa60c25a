#pragma once
// Per-element RoIAlign math shared by the CUDA kernels and the CPU implementation. Framework-free;
// compiles under nvcc (host and device) and under a plain C++ compiler.
#include <cmath>
#include <cstdint>

#include "common/bilinear.h"
#include "common/macros.h"
#include "common/numeric.h"
#include "roi_align/roi_align.h"

namespace detops {

template <typename Acc>
struct RoiAlignGeometry {
  std::int64_t batch = -1;  // -1 when the roi's batch index is NaN or outside [0, batch)
  Acc start_y = 0, start_x = 0, bin_h = 0, bin_w = 0;
  int grid_h = 0, grid_w = 0;  // <= kRoiAlignMaxSamplingGrid
  Acc count = 1;  // max(grid_h * grid_w, 1): an empty bin averages to 0, never NaN
};

// min(ceil(v), kRoiAlignMaxSamplingGrid) for v > 0, else 0 (NaN and negative extents sample nothing).
template <typename Acc>
DETOPS_HD int roi_align_adaptive_grid(Acc v) {
  if (!(v > Acc(0))) return 0;
  if (!(v < static_cast<Acc>(kRoiAlignMaxSamplingGrid))) return static_cast<int>(kRoiAlignMaxSamplingGrid);
  return static_cast<int>(ceil(v));
}

template <typename T, typename Acc>
DETOPS_HD RoiAlignGeometry<Acc> roi_align_geometry(const RoiAlignParams& p, const T* roi, std::int64_t batch) {
  RoiAlignGeometry<Acc> g;
  const Acc b = to_acc<Acc>(roi[0]);
  g.batch = (b >= Acc(0) && b < static_cast<Acc>(batch)) ? static_cast<std::int64_t>(b) : -1;
  const Acc scale = static_cast<Acc>(p.spatial_scale);
  const Acc offset = p.aligned ? Acc(0.5) : Acc(0);
  g.start_x = to_acc<Acc>(roi[1]) * scale - offset;
  g.start_y = to_acc<Acc>(roi[2]) * scale - offset;
  Acc roi_w = to_acc<Acc>(roi[3]) * scale - offset - g.start_x;
  Acc roi_h = to_acc<Acc>(roi[4]) * scale - offset - g.start_y;
  if (!p.aligned) {  // legacy mode: rois at least one pixel wide and high
    if (roi_w < Acc(1)) roi_w = Acc(1);
    if (roi_h < Acc(1)) roi_h = Acc(1);
  }
  g.bin_h = roi_h / static_cast<Acc>(p.pooled_height);
  g.bin_w = roi_w / static_cast<Acc>(p.pooled_width);
  // sampling_ratio <= kRoiAlignMaxSamplingGrid is checked by the framework layer.
  g.grid_h = p.sampling_ratio > 0 ? static_cast<int>(p.sampling_ratio) : roi_align_adaptive_grid(g.bin_h);
  g.grid_w = p.sampling_ratio > 0 ? static_cast<int>(p.sampling_ratio) : roi_align_adaptive_grid(g.bin_w);
  const int n = g.grid_h * g.grid_w;
  g.count = static_cast<Acc>(n > 1 ? n : 1);
  return g;
}

template <typename Acc, typename Index>
DETOPS_HD Acc roi_align_sample_y(const RoiAlignGeometry<Acc>& g, Index ph, int iy) {
  return g.start_y + static_cast<Acc>(ph) * g.bin_h +
         static_cast<Acc>(static_cast<Acc>(iy) + Acc(0.5)) * g.bin_h / static_cast<Acc>(g.grid_h);
}

template <typename Acc, typename Index>
DETOPS_HD Acc roi_align_sample_x(const RoiAlignGeometry<Acc>& g, Index pw, int ix) {
  return g.start_x + static_cast<Acc>(pw) * g.bin_w +
         static_cast<Acc>(static_cast<Acc>(ix) + Acc(0.5)) * g.bin_w / static_cast<Acc>(g.grid_w);
}

// Calls fn(taps) for the bilinear taps of every sample of bin (ph, pw) that lands on the map.
// Index: see bilinear.h.
template <typename Acc, typename Index, typename Fn>
DETOPS_HD void roi_align_for_each_sample(const RoiAlignGeometry<Acc>& g, Index height, Index width, Index ph, Index pw,
                                         Fn&& fn) {
  for (int iy = 0; iy < g.grid_h; ++iy) {
    const Acc y = roi_align_sample_y(g, ph, iy);
    for (int ix = 0; ix < g.grid_w; ++ix) {
      const BilinearTaps<Acc, Index> t = bilinear_taps(y, roi_align_sample_x(g, pw, ix), height, width);
      if (t.valid) fn(t);
    }
  }
}

// Average of the bilinear samples of bin (ph, pw) over one H x W plane.
template <typename T, typename Acc, typename Index>
DETOPS_HD Acc roi_align_bin_average(const RoiAlignGeometry<Acc>& g, const T* plane, Index height, Index width,
                                    Index ph, Index pw) {
  Acc sum = 0;
  roi_align_for_each_sample(g, height, width, ph, pw, [&](const BilinearTaps<Acc, Index>& t) {
    sum += t.w_ll * to_acc<Acc>(plane[t.y_low * width + t.x_low]) +
           t.w_lh * to_acc<Acc>(plane[t.y_low * width + t.x_high]) +
           t.w_hl * to_acc<Acc>(plane[t.y_high * width + t.x_low]) +
           t.w_hh * to_acc<Acc>(plane[t.y_high * width + t.x_high]);
  });
  return sum / g.count;
}

// Scatters grad (the gradient of bin (ph, pw)) to the plane through add(flat_offset, value).
template <typename Acc, typename Index, typename AddFn>
DETOPS_HD void roi_align_bin_scatter(const RoiAlignGeometry<Acc>& g, Acc grad, Index height, Index width, Index ph,
                                     Index pw, AddFn&& add) {
  const Acc g_per_sample = grad / g.count;
  roi_align_for_each_sample(g, height, width, ph, pw, [&](const BilinearTaps<Acc, Index>& t) {
    add(t.y_low * width + t.x_low, g_per_sample * t.w_ll);
    add(t.y_low * width + t.x_high, g_per_sample * t.w_lh);
    add(t.y_high * width + t.x_low, g_per_sample * t.w_hl);
    add(t.y_high * width + t.x_high, g_per_sample * t.w_hh);
  });
}

// The (roi, channel, bin row, bin column) of flat output index i of a [K, C, ph, pw] tensor.
template <typename Index>
struct RoiAlignElement {
  Index k, c, ph, pw;
};

template <typename Index>
DETOPS_HD RoiAlignElement<Index> roi_align_element(Index i, Index channels, Index pooled_h, Index pooled_w) {
  const Index pw = i % pooled_w;
  const Index rest = i / pooled_w;
  const Index ph = rest % pooled_h;
  const Index kc = rest / pooled_h;
  return {kc / channels, kc % channels, ph, pw};
}

}  // namespace detops
