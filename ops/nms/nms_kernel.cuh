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

// IEEE arithmetic, each operation rounded on its own: on the device the _rn intrinsics, which the compiler
// never contracts into a fused multiply-add (an FMA would round `area_a + area_b - w * h` once instead of
// twice and could move an IoU across the threshold); on the host the plain operators.
template <typename Acc>
DETOPS_HD Acc nms_mul(Acc a, Acc b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(Acc) == sizeof(float)) return __fmul_rn(a, b); else return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
template <typename Acc>
DETOPS_HD Acc nms_add(Acc a, Acc b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(Acc) == sizeof(float)) return __fadd_rn(a, b); else return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
template <typename Acc>
DETOPS_HD Acc nms_sub(Acc a, Acc b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(Acc) == sizeof(float)) return __fsub_rn(a, b); else return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
template <typename Acc>
DETOPS_HD Acc nms_div(Acc a, Acc b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(Acc) == sizeof(float)) return __fdiv_rn(a, b); else return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

// The threshold as the per-pair test uses it (host: nms_make_threshold, once per launch).
template <typename Acc>
struct NmsThreshold {
  Acc value = 0;          // nms_compare_threshold: suppress when the Acc IoU > value
  Acc quick = 0;          // 0, or a factor q with inter < q * union  =>  inter / union <= value (below)
  bool negative = false;  // value < 0: pairs that do not overlap suppress too
};

// Two boxes that overlap (w > 0 and h > 0: the overlap extents) suppress when inter / union > value, the
// quotient rounded as IEEE division rounds it (torchvision's IoU; never replaced by a multiplication).
//
// The quick test only skips divisions whose result cannot exceed the threshold, so the decision is the
// division's in every case. When 2^-60 <= value < 1, 0 < quick <= value * (1 - 2^-20) (float; 1 - 2^-48 for
// double; u = 2^-24 or 2^-53 is the unit roundoff). If bound = fl(quick * union) is a normal number, it is at
// most quick * union * (1 + u), and union > 0; so inter < bound gives the exact quotient
//   x = inter / union < quick * (1 + u) < value,
// and the correctly rounded quotient is at most value (rounding is monotonic and value is a float / double):
// not above it. A NaN or subnormal bound (union NaN, negative, zero or tiny) falls through to the division;
// an infinite bound (union = inf) skips a quotient that is 0 or NaN. With quick = 0 (thresholds outside
// [2^-60, 1), NaN) bound is 0 or NaN and every overlapping pair is divided.
template <typename Acc>
DETOPS_HD bool nms_overlap_suppresses(Acc w, Acc h, Acc area_a, Acc area_b, const NmsThreshold<Acc>& th) {
  const Acc inter = nms_mul(w, h);
  const Acc uni = nms_sub(nms_add(area_a, area_b), inter);
  const Acc bound = nms_mul(th.quick, uni);
  if (inter < bound && bound >= std::numeric_limits<Acc>::min()) return false;
  return nms_div(inter, uni) > th.value;
}

// Two boxes that do not overlap (IoU +-0, or NaN when the union is 0 or NaN) suppress only below a negative
// threshold (th.negative), where +-0 exceeds it and NaN does not.
template <typename Acc>
DETOPS_HD bool nms_disjoint_suppresses(Acc area_a, Acc area_b) {
  const Acc uni = nms_add(area_a, area_b);  // minus an intersection of 0
  return uni == uni && uni != Acc(0);
}

// Whether box a suppresses box b: their IoU, as torchvision's kernels compute it, exceeds the threshold.
// The IoU is inter / (area_a + area_b - inter) with the overlap extents clamped at 0 (a NaN extent counts
// as 0), taken as it is: boxes that are disjoint, touching, inverted (x1 > x2 or y1 > y2) or of zero extent
// give +-0 (NaN when the union is also 0), and a NaN coordinate gives NaN. None of these exceeds a threshold
// >= 0, so such a box never suppresses and is never suppressed there; below 0 a +-0 does exceed the
// threshold and a NaN never does, as in torchvision. The pairs that do not overlap (most pairs) are decided
// without the division, with the same result.
//
// A NaN coordinate makes its box's area NaN, hence the union NaN on both paths and the decision false
// whatever the extents are; so the CUDA tile loop may take the extents with fmin / fmax (one instruction,
// NaN-dropping) instead of these comparisons and decide every pair the same way.
template <typename Acc>
DETOPS_HD bool nms_suppresses(const NmsBox<Acc>& a, const NmsBox<Acc>& b, const NmsThreshold<Acc>& th) {
  const Acc w = nms_sub(nms_min(a.x2, b.x2), nms_max(a.x1, b.x1));
  const Acc h = nms_sub(nms_min(a.y2, b.y2), nms_max(a.y1, b.y1));
  if (w > Acc(0) && h > Acc(0)) return nms_overlap_suppresses(w, h, a.area, b.area, th);
  return th.negative && nms_disjoint_suppresses(a.area, b.area);
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

// nms_overlap_suppresses's threshold: the compared value, and the quick test's factor when the threshold is
// in [2^-60, 1) (the usual 0.3 .. 0.9), else 0 (no quick test). Host code.
template <typename Acc>
NmsThreshold<Acc> nms_make_threshold(double iou_threshold) {
  NmsThreshold<Acc> th;
  th.value = nms_compare_threshold<Acc>(iou_threshold);
  th.negative = th.value < Acc(0);
  const double v = static_cast<double>(th.value);
  if (v >= 0x1p-60 && v < 1.0) {
    // float: v * (1 - 2^-20) is exact in double, then rounded down to float. double: rounded to nearest,
    // then one step down, which lands below the exact product (half an ulp at most above it before).
    const double scaled = sizeof(Acc) == sizeof(float) ? v * (1.0 - 0x1p-20) : v * (1.0 - 0x1p-48);
    Acc q = static_cast<Acc>(scaled);
    if (sizeof(Acc) != sizeof(float) || static_cast<double>(q) > scaled) q = std::nextafter(q, Acc(0));
    th.quick = q;
  }
  return th;
}

// The sort key of a score: -0 becomes +0 (equal scores keep index order) and every NaN becomes the
// positive quiet NaN, which ranks above +inf (as torch.sort(descending=True) puts NaN first).
template <typename K>
DETOPS_HD K nms_score_key(K s) {
  if (s != s) return std::numeric_limits<K>::quiet_NaN();
  return s == K(0) ? K(0) : s;
}

}  // namespace detops
