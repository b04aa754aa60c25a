#pragma once
// Deformable convolution's per-element math, shared by the CUDA kernels and the CPU implementation (DETOPS_HD):
// where a tap samples, the zero-padded bilinear sample and its derivatives (deform_conv2d_params.h), and the
// im2col row / offset / mask addressing. Coordinates are formed and interpolated in Acc (fp32 for the half
// types), the sampled values read from T.
#include <cmath>
#include <cstdint>

#include "common/macros.h"
#include "common/numeric.h"
#include "deform_conv2d/deform_conv2d.h"

namespace detops {

// One sample: its cell's top-left corner, the fractions within the cell, and which corners lie in the map.
template <typename Acc, typename Index>
struct DeformCell {
  Index y0 = 0, x0 = 0;
  Acc ly = 0, lx = 0;  // y - y0, x - x0
  bool top = false, bottom = false, left = false, right = false;  // rows y0, y0 + 1 and columns x0, x0 + 1 inside
};

// The cell of (y, x) for a sample whose derivatives are wanted: false when every corner lies outside the map
// (then the value and both derivatives are 0). The forward's value is 0 unless deform_in_map(y, x) too.
template <typename Acc, typename Index>
DETOPS_HD bool deform_cell(Acc y, Acc x, Index height, Index width, DeformCell<Acc, Index>& c) {
  // y in [-1, H) and x in [-1, W): NaN fails both tests.
  if (!(y >= Acc(-1) && y < static_cast<Acc>(height) && x >= Acc(-1) && x < static_cast<Acc>(width))) return false;
  const Acc yf = std::floor(y), xf = std::floor(x);
  c.y0 = static_cast<Index>(yf);
  c.x0 = static_cast<Index>(xf);
  c.ly = y - yf;
  c.lx = x - xf;
  c.top = c.y0 >= 0;
  c.bottom = c.y0 + 1 < height;
  c.left = c.x0 >= 0;
  c.right = c.x0 + 1 < width;
  return true;
}

// Whether the forward samples (y, x) at all: -1 < y < H and -1 < x < W (torchvision's rule; NaN: no).
template <typename Acc, typename Index>
DETOPS_HD bool deform_in_map(Acc y, Acc x, Index height, Index width) {
  return y > Acc(-1) && y < static_cast<Acc>(height) && x > Acc(-1) && x < static_cast<Acc>(width);
}

// The four corner values of a cell (0 outside the map).
template <typename Acc>
struct DeformCorners {
  Acc v00 = 0, v01 = 0, v10 = 0, v11 = 0;  // (y0, x0), (y0, x0 + 1), (y0 + 1, x0), (y0 + 1, x0 + 1)
};

template <typename Acc, typename T, typename Index>
DETOPS_HD DeformCorners<Acc> deform_corners(const T* plane, Index width, const DeformCell<Acc, Index>& c) {
  DeformCorners<Acc> v;
  const Index row0 = c.y0 * width, row1 = row0 + width;
  if (c.top && c.left) v.v00 = to_acc<Acc>(plane[row0 + c.x0]);
  if (c.top && c.right) v.v01 = to_acc<Acc>(plane[row0 + c.x0 + 1]);
  if (c.bottom && c.left) v.v10 = to_acc<Acc>(plane[row1 + c.x0]);
  if (c.bottom && c.right) v.v11 = to_acc<Acc>(plane[row1 + c.x0 + 1]);
  return v;
}

template <typename Acc, typename Index>
DETOPS_HD Acc deform_interpolate(const DeformCell<Acc, Index>& c, const DeformCorners<Acc>& v) {
  const Acc hy = Acc(1) - c.ly, hx = Acc(1) - c.lx;
  return hy * hx * v.v00 + hy * c.lx * v.v01 + c.ly * hx * v.v10 + c.ly * c.lx * v.v11;
}

// The zero-padded bilinear sample of plane [H, W] at (y, x).
template <typename Acc, typename T, typename Index>
DETOPS_HD Acc deform_sample(const T* plane, Index height, Index width, Acc y, Acc x) {
  DeformCell<Acc, Index> c;
  if (!deform_in_map(y, x, height, width) || !deform_cell(y, x, height, width, c)) return Acc(0);
  return deform_interpolate(c, deform_corners<Acc>(plane, width, c));
}

// The sample and its derivatives in y and x (the cell's, torchvision's get_coordinate_weight): the derivative
// is taken on [y0, y0 + 1] x [x0, x0 + 1] even where the forward is 0 at y = -1 or x = -1 exactly.
template <typename Acc>
struct DeformSampleGrad {
  Acc value = 0, dy = 0, dx = 0;
};

template <typename Acc, typename T, typename Index>
DETOPS_HD DeformSampleGrad<Acc> deform_sample_grad(const T* plane, Index height, Index width, Acc y, Acc x) {
  DeformSampleGrad<Acc> g;
  DeformCell<Acc, Index> c;
  if (!deform_cell(y, x, height, width, c)) return g;
  const DeformCorners<Acc> v = deform_corners<Acc>(plane, width, c);
  const Acc hy = Acc(1) - c.ly, hx = Acc(1) - c.lx;
  g.dy = hx * (v.v10 - v.v00) + c.lx * (v.v11 - v.v01);
  g.dx = hy * (v.v01 - v.v00) + c.ly * (v.v11 - v.v10);
  if (deform_in_map(y, x, height, width)) g.value = deform_interpolate(c, v);
  return g;
}

// The adjoint of deform_sample: scatter(index, weight * g) for each corner inside the map.
template <typename Acc, typename Index, typename Scatter>
DETOPS_HD void deform_sample_scatter(Index height, Index width, Acc y, Acc x, Acc g, Scatter&& scatter) {
  DeformCell<Acc, Index> c;
  if (!deform_in_map(y, x, height, width) || !deform_cell(y, x, height, width, c)) return;
  const Acc hy = Acc(1) - c.ly, hx = Acc(1) - c.lx;
  const Index row0 = c.y0 * width, row1 = row0 + width;
  if (c.top && c.left) scatter(row0 + c.x0, hy * hx * g);
  if (c.top && c.right) scatter(row0 + c.x0 + 1, hy * c.lx * g);
  if (c.bottom && c.left) scatter(row1 + c.x0, c.ly * hx * g);
  if (c.bottom && c.right) scatter(row1 + c.x0 + 1, c.ly * c.lx * g);
}

// The geometry of one sample of the batch (chunk), in Index arithmetic: output position `pos` of sample b,
// input channel c. Offsets and masks are addressed per offset group: offset row 2 (G kh kw + k) (dy) and
// that + 1 (dx), mask row G kh kw + k, each row P = H_out W_out long.
template <typename Index>
struct DeformGeometry {
  Index channels, height, width, out_width, positions, taps, offset_groups, channels_per_offset_group;
  Index stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, kernel_w;

  DETOPS_HD DeformGeometry(const DeformConv2dParams& p, const DeformConv2dShape& s)
      : channels(static_cast<Index>(s.in_channels)), height(static_cast<Index>(s.height)),
        width(static_cast<Index>(s.width)), out_width(static_cast<Index>(s.out_width)),
        positions(static_cast<Index>(s.positions())), taps(static_cast<Index>(s.kernel_taps())),
        offset_groups(static_cast<Index>(p.offset_groups)),
        channels_per_offset_group(static_cast<Index>(s.in_channels / p.offset_groups)),
        stride_h(static_cast<Index>(p.stride_h)), stride_w(static_cast<Index>(p.stride_w)),
        pad_h(static_cast<Index>(p.pad_h)), pad_w(static_cast<Index>(p.pad_w)),
        dilation_h(static_cast<Index>(p.dilation_h)), dilation_w(static_cast<Index>(p.dilation_w)),
        kernel_w(static_cast<Index>(s.kernel_w)) {}

  // The first offset row of (sample b, offset group g), and the first mask row.
  DETOPS_HD Index offset_base(Index b, Index g) const { return ((b * offset_groups + g) * 2 * taps) * positions; }
  DETOPS_HD Index mask_base(Index b, Index g) const { return ((b * offset_groups + g) * taps) * positions; }

  // Where tap k of output position pos samples, before its offset (exact integers).
  template <typename Acc>
  DETOPS_HD Acc base_y(Index pos, Index k) const {
    return static_cast<Acc>((pos / out_width) * stride_h - pad_h + (k / kernel_w) * dilation_h);
  }
  template <typename Acc>
  DETOPS_HD Acc base_x(Index pos, Index k) const {
    return static_cast<Acc>((pos % out_width) * stride_w - pad_w + (k % kernel_w) * dilation_w);
  }
};

}  // namespace detops
