#pragma once
// Per-box and per-pair NMS math shared by the CUDA kernels and the CPU implementation. Framework-free;
// compiles under nvcc (host and device) and under a plain C++ compiler. The definition is in
// docs/ops/nms.md.
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

// IoU of two boxes, defined for every input:
// - boxes that do not overlap with positive width and height (disjoint, touching, inverted x1 > x2 or
//   y1 > y2, zero extent) have IoU 0;
// - a union that is not positive or not a number (NaN coordinates, inf - inf) gives IoU 0.
// So a degenerate or non-finite box never suppresses and is never suppressed (for thresholds >= 0).
template <typename Acc>
DETOPS_HD Acc nms_iou(const NmsBox<Acc>& a, const NmsBox<Acc>& b) {
  const Acc w = nms_min(a.x2, b.x2) - nms_max(a.x1, b.x1);
  const Acc h = nms_min(a.y2, b.y2) - nms_max(a.y1, b.y1);
  if (!(w > Acc(0) && h > Acc(0))) return Acc(0);
  const Acc inter = w * h;
  const Acc uni = a.area + b.area - inter;
  return uni > Acc(0) ? inter / uni : Acc(0);
}

// The sort key of a score: -0 becomes +0 (equal scores keep index order) and every NaN becomes the
// positive quiet NaN, which ranks above +inf (as torch.sort(descending=True) puts NaN first).
template <typename K>
DETOPS_HD K nms_score_key(K s) {
  if (s != s) return std::numeric_limits<K>::quiet_NaN();
  return s == K(0) ? K(0) : s;
}

}  // namespace detops
