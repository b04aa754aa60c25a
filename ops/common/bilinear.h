#pragma once
// Bilinear sampling of one H x W plane with the conventions torchvision's RoIAlign uses:
// a point with y < -1 or y > H (same for x) contributes nothing; y in (-1, 0] clamps to 0; y >= H-1
// snaps to H-1. The range test is written as !(y >= -1 && y <= H) so a NaN coordinate contributes
// nothing instead of reading out of bounds.
#include <cstdint>

#include "common/macros.h"

namespace detops {

// Index: the integer type of in-plane positions; 32-bit when the plane has fewer than 2^31 elements
// (cheaper on the GPU), 64-bit otherwise.
template <typename Acc, typename Index = std::int64_t>
struct BilinearTaps {
  bool valid = false;
  Index y_low = 0, y_high = 0, x_low = 0, x_high = 0;
  Acc w_ll = 0, w_lh = 0, w_hl = 0, w_hh = 0;  // weights of (y_low,x_low) (y_low,x_high) (y_high,x_low) (y_high,x_high)
};

// One axis of the rule: the two taps (low, high) of coordinate v on an axis of `extent` pixels and their
// weights. A 2-D sample is the product of its two axes (valid when both are), so a sum over a grid of
// samples factors into a sum over rows times a sum over columns (common/roi_bins_nhwc.cuh uses that).
template <typename Acc, typename Index = std::int64_t>
struct BilinearAxis {
  bool valid = false;
  Index low = 0, high = 0;
  Acc w_low = 0, w_high = 0;
};

template <typename Acc, typename Index>
DETOPS_HD BilinearAxis<Acc, Index> bilinear_axis(Acc v, Index extent) {
  BilinearAxis<Acc, Index> a;
  if (!(v >= Acc(-1) && v <= static_cast<Acc>(extent))) return a;
  if (v <= Acc(0)) v = Acc(0);
  a.low = static_cast<Index>(v);
  if (a.low >= extent - 1) {
    a.low = a.high = extent - 1;
    v = static_cast<Acc>(a.low);
  } else {
    a.high = a.low + 1;
  }
  a.w_high = v - static_cast<Acc>(a.low);
  a.w_low = Acc(1) - a.w_high;
  a.valid = true;
  return a;
}

// The 2-D rule, written out rather than as the product of two bilinear_axis calls: the same values (the same
// operations on each axis), but one range check up front keeps the per-sample loops of the channels-first
// kernels as fast as before the axis split (6-7% on the H200's mask-head RoIAlign).
template <typename Acc, typename Index>
DETOPS_HD BilinearTaps<Acc, Index> bilinear_taps(Acc y, Acc x, Index height, Index width) {
  BilinearTaps<Acc, Index> t;
  if (!(y >= Acc(-1) && y <= static_cast<Acc>(height) && x >= Acc(-1) && x <= static_cast<Acc>(width))) {
    return t;
  }
  if (y <= Acc(0)) y = Acc(0);
  if (x <= Acc(0)) x = Acc(0);
  t.y_low = static_cast<Index>(y);
  t.x_low = static_cast<Index>(x);
  if (t.y_low >= height - 1) {
    t.y_low = t.y_high = height - 1;
    y = static_cast<Acc>(t.y_low);
  } else {
    t.y_high = t.y_low + 1;
  }
  if (t.x_low >= width - 1) {
    t.x_low = t.x_high = width - 1;
    x = static_cast<Acc>(t.x_low);
  } else {
    t.x_high = t.x_low + 1;
  }
  const Acc ly = y - static_cast<Acc>(t.y_low), lx = x - static_cast<Acc>(t.x_low);
  const Acc hy = Acc(1) - ly, hx = Acc(1) - lx;
  t.w_ll = hy * hx;
  t.w_lh = hy * lx;
  t.w_hl = ly * hx;
  t.w_hh = ly * lx;
  t.valid = true;
  return t;
}

}  // namespace detops
