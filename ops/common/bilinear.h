#pragma once
// Bilinear sampling of one H x W plane with the conventions torchvision's RoIAlign uses:
// a point with y < -1 or y > H (same for x) contributes nothing; y in (-1, 0] clamps to 0; y >= H-1
// snaps to H-1. The range test is written as !(y >= -1 && y <= H) so a NaN coordinate contributes
// nothing instead of reading out of bounds.
#include <cstdint>

#include "common/macros.h"

namespace detops {

template <typename Acc>
struct BilinearTaps {
  bool valid = false;
  std::int64_t y_low = 0, y_high = 0, x_low = 0, x_high = 0;
  Acc w_ll = 0, w_lh = 0, w_hl = 0, w_hh = 0;  // weights of (y_low,x_low) (y_low,x_high) (y_high,x_low) (y_high,x_high)
};

template <typename Acc>
DETOPS_HD BilinearTaps<Acc> bilinear_taps(Acc y, Acc x, std::int64_t height, std::int64_t width) {
  BilinearTaps<Acc> t;
  if (!(y >= Acc(-1) && y <= static_cast<Acc>(height) && x >= Acc(-1) && x <= static_cast<Acc>(width))) {
    return t;
  }
  if (y <= Acc(0)) y = Acc(0);
  if (x <= Acc(0)) x = Acc(0);
  t.y_low = static_cast<std::int64_t>(y);
  t.x_low = static_cast<std::int64_t>(x);
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
