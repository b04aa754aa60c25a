#pragma once
// Per-element deformable RoI pooling math shared by the CUDA kernels and the CPU implementation.
// Framework-free; compiles under nvcc (host and device) and under a plain C++ compiler.
//
// The op is RoIAlign with aligned = true (roi_align_kernel.cuh: geometry, sample points, bilinear rules,
// bin averages) whose bin (ph, pw) starts gamma * roi_w * offset[k, 0, ph, pw] further right and gamma *
// roi_h * offset[k, 1, ph, pw] further down; the modulated form multiplies the bin by mask[k, 0, ph, pw].
// The forward reuses roi_align_bin_average on the moved geometry, so a zero (or absent) offset gives
// RoIAlign's result bit for bit.
#include <cstdint>

#include "common/bilinear.h"
#include "common/macros.h"
#include "common/numeric.h"
#include "deform_roi_pool/deform_roi_pool.h"
#include "roi_align/roi_align_kernel.cuh"

namespace detops {

static_assert(kDeformRoiPoolMaxSamplingGrid == kRoiAlignMaxSamplingGrid, "the sampling-grid caps must agree");

template <typename Acc>
struct DeformRoiGeometry {
  RoiAlignGeometry<Acc> g;  // the roi's aligned RoIAlign geometry, before any offset
  Acc roi_w = 0, roi_h = 0;  // the roi's extent on the map, which the offsets scale
};

template <typename T, typename Acc>
DETOPS_HD DeformRoiGeometry<Acc> deform_roi_geometry(const DeformRoiPoolParams& p, const T* roi, std::int64_t batch) {
  const RoiAlignParams ra{p.spatial_scale, p.pooled_height, p.pooled_width, p.sampling_ratio, true};
  DeformRoiGeometry<Acc> d;
  d.g = roi_align_geometry<T, Acc>(ra, roi, batch);
  const Acc scale = static_cast<Acc>(p.spatial_scale);
  d.roi_w = to_acc<Acc>(roi[3]) * scale - Acc(0.5) - d.g.start_x;
  d.roi_h = to_acc<Acc>(roi[4]) * scale - Acc(0.5) - d.g.start_y;
  return d;
}

// The geometry of bin `bin` (= ph * pooled_width + pw) of a roi: its start moved by the bin's offsets.
// offset_k: the roi's [2, ph, pw] offsets, or nullptr (no move). A NaN offset makes every sample NaN, and
// NaN samples read nothing (bilinear.h): the bin is 0.
template <typename T, typename Acc>
DETOPS_HD RoiAlignGeometry<Acc> deform_roi_bin_geometry(const DeformRoiGeometry<Acc>& d, Acc gamma, const T* offset_k,
                                                        std::int64_t bins, std::int64_t bin) {
  RoiAlignGeometry<Acc> g = d.g;
  if (offset_k != nullptr) {
    g.start_x += gamma * d.roi_w * to_acc<Acc>(offset_k[bin]);
    g.start_y += gamma * d.roi_h * to_acc<Acc>(offset_k[bins + bin]);
  }
  return g;
}

// What one grad_output element contributes to the bin's offsets and mask (before the sum over channels).
template <typename Acc>
struct DeformRoiBinGrads {
  Acc offset_x = 0, offset_y = 0, mask = 0;
};

// The backward of one output element (bin (ph, pw) of one channel) with gradient `grad` and mask `mask`
// (1 for deform_roi_pool): scatters grad * mask / count * weight to every bilinear tap through
// add(pixel, value) (pixel = y * width + x), and, when `values`, reads the plane through read(pixel) for the
// offset and mask gradients:
//   d out / d offset_x = mask * gamma * roi_w / count * sum over samples of d v / d x, likewise y with roi_h;
//   d out / d mask     = (1 / count) * sum over samples of v.
// d v / d x is the slope of the bilinear surface that bilinear_taps evaluates: 0 where x is clamped
// (x <= 0) or snapped to the last column (x_low >= width - 1), since v does not change with x there.
template <typename Acc, typename Index, typename Read, typename Add>
DETOPS_HD DeformRoiBinGrads<Acc> deform_roi_bin_backward(const RoiAlignGeometry<Acc>& g, const DeformRoiGeometry<Acc>& d,
                                                         Acc gamma, Acc grad, Acc mask, bool values, Index height,
                                                         Index width, Index ph, Index pw, Read&& read, Add&& add) {
  const Acc g_per_sample = grad * mask / g.count;
  Acc sum_v = 0, sum_dx = 0, sum_dy = 0;
  bool any = false;
  for (int iy = 0; iy < g.grid_h; ++iy) {
    const Acc y = roi_align_sample_y(g, ph, iy);
    for (int ix = 0; ix < g.grid_w; ++ix) {
      const Acc x = roi_align_sample_x(g, pw, ix);
      const BilinearTaps<Acc, Index> t = bilinear_taps(y, x, height, width);
      if (!t.valid) continue;
      const Index p_ll = t.y_low * width + t.x_low, p_lh = t.y_low * width + t.x_high;
      const Index p_hl = t.y_high * width + t.x_low, p_hh = t.y_high * width + t.x_high;
      add(p_ll, g_per_sample * t.w_ll);
      add(p_lh, g_per_sample * t.w_lh);
      add(p_hl, g_per_sample * t.w_hl);
      add(p_hh, g_per_sample * t.w_hh);
      if (!values) continue;
      any = true;
      const Acc v_ll = read(p_ll), v_lh = read(p_lh), v_hl = read(p_hl), v_hh = read(p_hh);
      const bool y_free = y > Acc(0) && t.y_high != t.y_low, x_free = x > Acc(0) && t.x_high != t.x_low;
      const Acc ly = y_free ? y - static_cast<Acc>(t.y_low) : Acc(0);
      const Acc lx = x_free ? x - static_cast<Acc>(t.x_low) : Acc(0);
      sum_v += t.w_ll * v_ll + t.w_lh * v_lh + t.w_hl * v_hl + t.w_hh * v_hh;
      if (x_free) sum_dx += (Acc(1) - ly) * (v_lh - v_ll) + ly * (v_hh - v_hl);
      if (y_free) sum_dy += (Acc(1) - lx) * (v_hl - v_ll) + lx * (v_hh - v_lh);
    }
  }
  DeformRoiBinGrads<Acc> r;
  if (!any) return r;  // no sample on the map: nothing depends on the offsets or the mask
  const Acc per_sample = grad / g.count;
  r.offset_x = per_sample * mask * gamma * d.roi_w * sum_dx;
  r.offset_y = per_sample * mask * gamma * d.roi_h * sum_dy;
  r.mask = per_sample * sum_v;
  return r;
}

}  // namespace detops
