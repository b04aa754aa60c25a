#pragma once
// Per-element RoIPool math shared by the CUDA kernels and the CPU implementation. Framework-free;
// compiles under nvcc (host and device) and under a plain C++ compiler. Geometry is computed in the
// accumulation type (double for fp64, float otherwise) with torchvision's operations, so fp64 and fp32
// bin edges are bit-identical to torchvision's.
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/macros.h"
#include "common/numeric.h"
#include "common/readonly_load.h"
#include "roi_pool/roi_pool.h"

namespace detops {

template <typename Acc>
struct RoiPoolGeometry {
  std::int64_t batch = -1;  // -1 when the roi's batch index is NaN or outside [0, batch)
  bool pools = false;       // false when a scaled coordinate is NaN: every bin is then empty
  std::int64_t start_h = 0, start_w = 0;
  Acc bin_h = 0, bin_w = 0;
};

// Bin rows [hstart, hend) and columns [wstart, wend), already clipped to the map.
struct RoiPoolBin {
  std::int64_t hstart = 0, hend = 0, wstart = 0, wend = 0;
  DETOPS_HD bool empty() const { return hend <= hstart || wend <= wstart; }
};

// round(v * scale) (half away from zero), clamped to +-kRoiPoolCoordinateLimit; false for NaN.
template <typename Acc>
DETOPS_HD bool roi_pool_scaled_coordinate(Acc v, Acc scale, std::int64_t* out) {
  const Acc r = round(v * scale);
  if (!(r == r)) return false;
  const Acc limit = static_cast<Acc>(kRoiPoolCoordinateLimit);
  *out = static_cast<std::int64_t>(r < -limit ? -limit : (r > limit ? limit : r));
  return true;
}

template <typename T, typename Acc>
DETOPS_HD RoiPoolGeometry<Acc> roi_pool_geometry(const RoiPoolParams& p, const T* roi, std::int64_t batch) {
  RoiPoolGeometry<Acc> g;
  const Acc b = to_acc<Acc>(load_readonly(roi));
  g.batch = (b >= Acc(0) && b < static_cast<Acc>(batch)) ? static_cast<std::int64_t>(b) : -1;
  const Acc scale = static_cast<Acc>(p.spatial_scale);
  std::int64_t x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  g.pools = roi_pool_scaled_coordinate(to_acc<Acc>(load_readonly(roi + 1)), scale, &x1) &&
            roi_pool_scaled_coordinate(to_acc<Acc>(load_readonly(roi + 2)), scale, &y1) &&
            roi_pool_scaled_coordinate(to_acc<Acc>(load_readonly(roi + 3)), scale, &x2) &&
            roi_pool_scaled_coordinate(to_acc<Acc>(load_readonly(roi + 4)), scale, &y2);
  // Malformed rois (x2 < x1) become one pixel wide, as in torchvision.
  const std::int64_t roi_w = x2 - x1 + 1 > 1 ? x2 - x1 + 1 : 1;
  const std::int64_t roi_h = y2 - y1 + 1 > 1 ? y2 - y1 + 1 : 1;
  g.start_h = y1;
  g.start_w = x1;
  g.bin_h = static_cast<Acc>(roi_h) / static_cast<Acc>(p.pooled_height);
  g.bin_w = static_cast<Acc>(roi_w) / static_cast<Acc>(p.pooled_width);
  return g;
}

DETOPS_HD std::int64_t roi_pool_clip(std::int64_t v, std::int64_t size) { return v < 0 ? 0 : (v > size ? size : v); }

template <typename Acc>
DETOPS_HD RoiPoolBin roi_pool_bin(const RoiPoolGeometry<Acc>& g, std::int64_t ph, std::int64_t pw, std::int64_t height,
                                  std::int64_t width) {
  RoiPoolBin b;
  if (!g.pools) return b;
  b.hstart = roi_pool_clip(static_cast<std::int64_t>(floor(static_cast<Acc>(ph) * g.bin_h)) + g.start_h, height);
  b.hend = roi_pool_clip(static_cast<std::int64_t>(ceil(static_cast<Acc>(ph + 1) * g.bin_h)) + g.start_h, height);
  b.wstart = roi_pool_clip(static_cast<std::int64_t>(floor(static_cast<Acc>(pw) * g.bin_w)) + g.start_w, width);
  b.wend = roi_pool_clip(static_cast<std::int64_t>(ceil(static_cast<Acc>(pw + 1) * g.bin_w)) + g.start_w, width);
  return b;
}

template <typename Acc>
struct RoiPoolMax {
  Acc value = 0;
  std::int64_t index = -1;  // h * width + w within the plane; -1 for an empty bin or one without a max
};

// The max of one bin of an H x W plane, scanned row by row: a value replaces the max only if strictly
// greater, so ties keep the first maximum and NaNs never win. Empty bin: value 0, index -1. The start:
// - exact_max false (torchvision's): -FLT_MAX with index -1. A bin with nothing above it (NaN, -inf or, in
//   fp64, values <= -FLT_MAX only) keeps value -FLT_MAX (the caller's from_acc<T> rounds it to -inf for
//   fp16 and bf16, as torchvision's T(-FLT_MAX)) and index -1. Every fp16 / bf16 value above -inf is
//   above -FLT_MAX, so comparing in Acc picks the elements torchvision's comparison in T picks.
// - exact_max true: -inf; a bin with nothing above -inf then takes its first -inf, or, for NaNs only,
//   reports value NaN with index -1.
template <typename T, typename Acc>
DETOPS_HD RoiPoolMax<Acc> roi_pool_bin_max(const RoiPoolBin& b, const T* plane, std::int64_t width, bool exact_max) {
  RoiPoolMax<Acc> m;
  if (b.empty()) return m;
  // The binding limits a plane to < 2^31 elements (argmax is int32, as in torchvision), so the scan,
  // the hot loop, runs in 32-bit arithmetic with one comparison per element.
  const int h0 = static_cast<int>(b.hstart), h1 = static_cast<int>(b.hend);
  const int w0 = static_cast<int>(b.wstart), w1 = static_cast<int>(b.wend), stride = static_cast<int>(width);
  const Acc lowest_float = -static_cast<Acc>(std::numeric_limits<float>::max());  // -FLT_MAX
  Acc best = exact_max ? -std::numeric_limits<Acc>::infinity() : lowest_float;
  int best_i = -1;
  for (int h = h0; h < h1; ++h) {
    const int row = h * stride;
    for (int w = w0; w < w1; ++w) {
      const Acc v = to_acc<Acc>(load_readonly(plane + row + w));
      if (v > best) {  // strict: ties keep the first maximum; NaN never wins
        best = v;
        best_i = row + w;
      }
    }
  }
  if (best_i < 0 && exact_max) {
    // Nothing above -inf: the bin holds only -inf and NaN. The first -inf is the maximum; a bin of NaN
    // alone has none (argmax -1) and reports its first element, a NaN.
    best = to_acc<Acc>(load_readonly(plane + h0 * stride + w0));
    for (int h = h0; h < h1 && best_i < 0; ++h) {
      for (int w = w0; w < w1; ++w) {
        const Acc v = to_acc<Acc>(load_readonly(plane + h * stride + w));
        if (v == v) {
          best = v;
          best_i = h * stride + w;
          break;
        }
      }
    }
  }
  m.value = best;
  m.index = best_i;
  return m;
}

enum class RoiPoolArgmaxKind { kNone, kElement, kInvalid };

DETOPS_HD RoiPoolArgmaxKind roi_pool_argmax_kind(std::int32_t argmax, std::int64_t plane_elements) {
  if (argmax == -1) return RoiPoolArgmaxKind::kNone;
  return argmax >= 0 && argmax < plane_elements ? RoiPoolArgmaxKind::kElement : RoiPoolArgmaxKind::kInvalid;
}

}  // namespace detops
