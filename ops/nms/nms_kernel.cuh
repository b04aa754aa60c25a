#pragma once
// Per-box and per-pair NMS math shared by the CUDA kernels and the CPU implementation. Framework-free;
// compiles under nvcc (host and device) and under a plain C++ compiler. The definition is in
// docs/ops/nms.md.
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/macros.h"
#include "common/numeric.h"

namespace detops {

// A box in the accumulation type (float for fp32/fp16/bf16 boxes, double for fp64), with its area, so
// fp16 coordinates never produce an fp16 area (which overflows past 65504).
template <typename Acc>
struct NmsBox {
  Acc x1, y1, x2, y2, area;
};

template <typename Acc, typename T>
DETOPS_HD NmsBox<Acc> make_nms_box(const T* box) {
  NmsBox<Acc> b;
  b.x1 = to_acc<Acc>(box[0]);
  b.y1 = to_acc<Acc>(box[1]);
  b.x2 = to_acc<Acc>(box[2]);
  b.y2 = to_acc<Acc>(box[3]);
  b.area = (b.x2 - b.x1) * (b.y2 - b.y1);
  return b;
}

template <typename Acc>
DETOPS_HD Acc nms_min(Acc a, Acc b) { return a < b ? a : b; }
template <typename Acc>
DETOPS_HD Acc nms_max(Acc a, Acc b) { return a > b ? a : b; }

// Whether box a suppresses box b: their IoU, as torchvision's kernels compute it, exceeds the threshold.
// The IoU is inter / (area_a + area_b - inter) with the overlap extents clamped at 0 (a NaN extent counts
// as 0), taken as it is: boxes that are disjoint, touching, inverted (x1 > x2 or y1 > y2) or of zero extent
// give +-0 (NaN when the union is also 0), and a NaN coordinate gives NaN. None of these exceeds a threshold
// >= 0, so such a box never suppresses and is never suppressed there; below 0 a +-0 does exceed the
// threshold and a NaN never does, as in torchvision. The pairs that do not overlap (most pairs) are decided
// without the division, with the same result.
template <typename Acc>
DETOPS_HD bool nms_suppresses(const NmsBox<Acc>& a, const NmsBox<Acc>& b, Acc threshold) {
  const Acc w = nms_min(a.x2, b.x2) - nms_max(a.x1, b.x1);
  const Acc h = nms_min(a.y2, b.y2) - nms_max(a.y1, b.y1);
  if (!(w > Acc(0) && h > Acc(0))) {
    if (!(threshold < Acc(0))) return false;
    const Acc uni = a.area + b.area;  // minus an intersection of 0
    return uni == uni && uni != Acc(0);
  }
  const Acc inter = w * h;
  return inter / (a.area + b.area - inter) > threshold;
}

// The threshold an Acc IoU is compared with (iou > t) so that the decision is exactly
// `static_cast<double>(iou) > iou_threshold`, as torchvision's CPU kernel decides (its IoU in the boxes'
// type against the double threshold). For double it is the threshold itself; for float it is the largest
// float <= the threshold (so a float IoU of 0.2f, which is above the double 0.2, suppresses at 0.2). NaN
// stays NaN (nothing is suppressed). Host code: the launchers call it once.
template <typename Acc>
Acc nms_compare_threshold(double iou_threshold);

template <>
inline double nms_compare_threshold<double>(double iou_threshold) {
  return iou_threshold;
}

template <>
inline float nms_compare_threshold<float>(double iou_threshold) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr double kMax = static_cast<double>(std::numeric_limits<float>::max());
  if (iou_threshold != iou_threshold) return std::numeric_limits<float>::quiet_NaN();
  if (iou_threshold >= kMax) return iou_threshold == static_cast<double>(kInf) ? kInf : std::numeric_limits<float>::max();
  if (iou_threshold < -kMax) return -kInf;
  float t = static_cast<float>(iou_threshold);
  if (static_cast<double>(t) > iou_threshold) t = std::nextafter(t, -kInf);
  return t;
}

// The sort key of a score: -0 becomes +0 (equal scores keep index order) and every NaN becomes the
// positive quiet NaN, which ranks above +inf (as torch.sort(descending=True) puts NaN first).
template <typename K>
DETOPS_HD K nms_score_key(K s) {
  if (s != s) return std::numeric_limits<K>::quiet_NaN();
  return s == K(0) ? K(0) : s;
}

}  // namespace detops
