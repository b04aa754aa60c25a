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
