#include "detops/reference/deform_conv2d_reference.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace detops::reference {
namespace {

using Index = Eigen::Index;

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("deform_conv2d reference: " + what); }

struct Geometry {
  Index batch, c_in, h, w, c_out, kh, kw, h_out, w_out;
  Index in_per_group, out_per_group, in_per_offset_group;
  Index taps() const { return kh * kw; }
};

Geometry geometry(const DeformConv2dParams& p, const Tensor4d& input, const Tensor4d& weight, const Tensor4d& offset,
                  const Tensor4d* mask) {
  Geometry g{input.dimension(0), input.dimension(1), input.dimension(2), input.dimension(3),
             weight.dimension(0), weight.dimension(2), weight.dimension(3), 0, 0, 0, 0, 0};
  if (p.stride_h < 1 || p.stride_w < 1 || p.pad_h < 0 || p.pad_w < 0 || p.dilation_h < 1 || p.dilation_w < 1 ||
      p.groups < 1 || p.offset_groups < 1) {
    fail("stride, dilation and the groups must be >= 1, padding >= 0");
  }
  if (g.c_in % p.groups != 0 || g.c_out % p.groups != 0 || g.c_in % p.offset_groups != 0) {
    fail("C_in and C_out must be divisible by groups, C_in by offset_groups");
  }
  if (weight.dimension(1) * p.groups != g.c_in) fail("weight's second dimension must be C_in / groups");
  g.h_out = deform_conv2d_out_size(g.h, g.kh, p.pad_h, p.dilation_h, p.stride_h);
  g.w_out = deform_conv2d_out_size(g.w, g.kw, p.pad_w, p.dilation_w, p.stride_w);
  if (g.h + 2 * p.pad_h < p.dilation_h * (g.kh - 1) + 1 || g.w + 2 * p.pad_w < p.dilation_w * (g.kw - 1) + 1) {
    fail("the kernel's extent exceeds the padded input");
  }
  g.in_per_group = g.c_in / p.groups;
  g.out_per_group = g.c_out / p.groups;
  g.in_per_offset_group = g.c_in / p.offset_groups;
  if (offset.dimension(0) != g.batch || offset.dimension(1) != 2 * p.offset_groups * g.taps() ||
      offset.dimension(2) != g.h_out || offset.dimension(3) != g.w_out) {
    fail("offset must be [B, 2 * offset_groups * kh * kw, H_out, W_out]");
  }
  if ((mask != nullptr) != p.use_mask) fail("a mask is given exactly when params.use_mask");
  if (mask != nullptr && (mask->dimension(0) != g.batch || mask->dimension(1) != p.offset_groups * g.taps() ||
                          mask->dimension(2) != g.h_out || mask->dimension(3) != g.w_out)) {
    fail("mask must be [B, offset_groups * kh * kw, H_out, W_out]");
  }
  return g;
}

double term(double v, bool abs_terms) { return abs_terms ? std::abs(v) : v; }

// One plane (b, c) of the input, zero outside the map; |values| with abs_terms. Read through the row-major
// tensor's data (the finite-difference checks evaluate the forward up to 960 times per case, and Eigen's
// four-index operator() was much of its time).
struct Plane {
  Plane(const Tensor4d& x, Index b, Index c, Index h, Index w, bool abs_terms)
      : data(x.data() + (b * x.dimension(1) + c) * h * w), h(h), w(w), abs_terms(abs_terms) {}
  const double* data;
  Index h, w;
  bool abs_terms;
  double at(Index r, Index s) const { return r >= 0 && r < h && s >= 0 && s < w ? term(data[r * w + s], abs_terms) : 0.0; }
};

// The sampling limit: the sample is 0 unless -1 < py < H and -1 < px < W (false for NaN).
bool in_limit(double py, double px, Index h, Index w) {
  return py > -1 && py < static_cast<double>(h) && px > -1 && px < static_cast<double>(w);
}

// The cell [r, r + 1] x [s, s + 1] holding (py, px) and the fractions within it.
struct Cell {
  Index r, s;
  double ly, lx;
};
Cell cell(double py, double px) {
  const double r = std::floor(py), s = std::floor(px);
  return {static_cast<Index>(r), static_cast<Index>(s), py - r, px - s};
}

// Zero-padded bilinear interpolation at (py, px).
double sample(const Plane& pl, double py, double px) {
  if (!in_limit(py, px, pl.h, pl.w)) return 0.0;
  const Cell q = cell(py, px);
  return (1 - q.ly) * (1 - q.lx) * pl.at(q.r, q.s) + (1 - q.ly) * q.lx * pl.at(q.r, q.s + 1) +
         q.ly * (1 - q.lx) * pl.at(q.r + 1, q.s) + q.ly * q.lx * pl.at(q.r + 1, q.s + 1);
}

// sample()'s adjoint: t times each corner's weight added to grad's plane (b, c), corners inside the map only.
void scatter(Tensor4d& grad, Index b, Index c, Index h, Index w, double py, double px, double t) {
  if (!in_limit(py, px, h, w)) return;
  const Cell q = cell(py, px);
  auto add = [&](Index r, Index s, double weight) {
    if (r >= 0 && r < h && s >= 0 && s < w) grad(b, c, r, s) += weight * t;
  };
  add(q.r, q.s, (1 - q.ly) * (1 - q.lx));
  add(q.r, q.s + 1, (1 - q.ly) * q.lx);
  add(q.r + 1, q.s, q.ly * (1 - q.lx));
  add(q.r + 1, q.s + 1, q.ly * q.lx);
}

// d sample / d py and d px on (py, px)'s cell, taken for (py, px) in [-1, H) x [-1, W) (torchvision's border:
// at exactly -1 the forward is 0 but this is the right derivative); outside that range (and for NaN) every
// corner of the cell is off the map and both are 0. With abs_terms, differences of corners become sums of |values|.
struct Slopes {
  double dy, dx;
};
Slopes slopes(const Plane& pl, double py, double px) {
  if (!(py >= -1 && py < static_cast<double>(pl.h) && px >= -1 && px < static_cast<double>(pl.w))) return {0.0, 0.0};
  const Cell q = cell(py, px);
  const double v00 = pl.at(q.r, q.s), v01 = pl.at(q.r, q.s + 1), v10 = pl.at(q.r + 1, q.s), v11 = pl.at(q.r + 1, q.s + 1);
  auto diff = [&](double hi, double lo) { return pl.abs_terms ? hi + lo : hi - lo; };  // at() gave |values| already
  return {(1 - q.lx) * diff(v10, v00) + q.lx * diff(v11, v01), (1 - q.ly) * diff(v01, v00) + q.ly * diff(v11, v10)};
}

// Visits every (b, c, i, j, y, x): the input channel c, its weight group's output channels [o_begin, o_end) and
// column cw within the weight, its offset group G, the tap k = i * kw + j, and the sample point (py, px).
struct Visit {
  Index b, c, cw, o_begin, o_end, i, j, k, y, x, mask_channel;
  double py, px;
};
template <typename F>
void for_each_sample(const DeformConv2dParams& p, const Geometry& g, const Tensor4d& offset, F&& f) {
  for (Index b = 0; b < g.batch; ++b) {
    for (Index c = 0; c < g.c_in; ++c) {
      const Index group = c / g.in_per_group, offset_group = c / g.in_per_offset_group;
      for (Index i = 0; i < g.kh; ++i) {
        for (Index j = 0; j < g.kw; ++j) {
          const Index k = i * g.kw + j, mask_channel = offset_group * g.taps() + k;
          for (Index y = 0; y < g.h_out; ++y) {
            for (Index x = 0; x < g.w_out; ++x) {
              const double py = static_cast<double>(y * p.stride_h - p.pad_h + i * p.dilation_h) +
                                offset(b, 2 * mask_channel, y, x);
              const double px = static_cast<double>(x * p.stride_w - p.pad_w + j * p.dilation_w) +
                                offset(b, 2 * mask_channel + 1, y, x);
              f(Visit{b, c, c - group * g.in_per_group, group * g.out_per_group, (group + 1) * g.out_per_group, i, j, k, y,
                      x, mask_channel, py, px});
            }
          }
        }
      }
    }
  }
}

}  // namespace

Tensor4d deform_conv2d_forward(const DeformConv2dParams& p, const Tensor4d& input, const Tensor4d& weight,
                               const Tensor4d& offset, const Tensor4d* mask, const Vectord* bias, bool abs_terms) {
  const Geometry g = geometry(p, input, weight, offset, mask);
  if (bias != nullptr && bias->size() != g.c_out) fail("bias must have C_out values");
  Tensor4d out(g.batch, g.c_out, g.h_out, g.w_out);
  for (Index b = 0; b < g.batch; ++b) {
    for (Index o = 0; o < g.c_out; ++o) {
      const double b0 = bias != nullptr ? term((*bias)(o), abs_terms) : 0.0;
      for (Index y = 0; y < g.h_out; ++y) {
        for (Index x = 0; x < g.w_out; ++x) out(b, o, y, x) = b0;
      }
    }
  }
  double* const out_data = out.data();
  const double* const weight_data = weight.data();
  const Index weight_cols = weight.dimension(1);
  for_each_sample(p, g, offset, [&](const Visit& v) {
    const Plane plane(input, v.b, v.c, g.h, g.w, abs_terms);
    const double m = mask != nullptr ? term((*mask)(v.b, v.mask_channel, v.y, v.x), abs_terms) : 1.0;
    const double s = m * sample(plane, v.py, v.px);
    for (Index o = v.o_begin; o < v.o_end; ++o) {  // out(b, o, y, x) += |weight(o, cw, i, j)| * s
      out_data[((v.b * g.c_out + o) * g.h_out + v.y) * g.w_out + v.x] +=
          term(weight_data[((o * weight_cols + v.cw) * g.kh + v.i) * g.kw + v.j], abs_terms) * s;
    }
  });
  return out;
}

DeformConv2dGrads deform_conv2d_backward(const DeformConv2dParams& p, const Tensor4d& input, const Tensor4d& weight,
                                         const Tensor4d& offset, const Tensor4d* mask, const Tensor4d& grad_output,
                                         bool abs_terms) {
  const Geometry g = geometry(p, input, weight, offset, mask);
  if (grad_output.dimension(0) != g.batch || grad_output.dimension(1) != g.c_out ||
      grad_output.dimension(2) != g.h_out || grad_output.dimension(3) != g.w_out) {
    fail("grad_output must be [B, C_out, H_out, W_out]");
  }
  DeformConv2dGrads grads{Tensor4d(g.batch, g.c_in, g.h, g.w), Tensor4d(weight.dimensions()),
                          Tensor4d(offset.dimensions()),
                          mask != nullptr ? Tensor4d(mask->dimensions()) : Tensor4d(0, 0, 0, 0), Vectord::Zero(g.c_out)};
  grads.input.setZero();
  grads.weight.setZero();
  grads.offset.setZero();
  grads.mask.setZero();
  for (Index b = 0; b < g.batch; ++b) {
    for (Index o = 0; o < g.c_out; ++o) {
      for (Index y = 0; y < g.h_out; ++y) {
        for (Index x = 0; x < g.w_out; ++x) grads.bias(o) += term(grad_output(b, o, y, x), abs_terms);
      }
    }
  }
  for_each_sample(p, g, offset, [&](const Visit& v) {
    const Plane plane(input, v.b, v.c, g.h, g.w, abs_terms);
    const double m = mask != nullptr ? term((*mask)(v.b, v.mask_channel, v.y, v.x), abs_terms) : 1.0;
    const double s = sample(plane, v.py, v.px);
    // d out(b, o, y, x) / d (m * s) summed against grad_output: sum over o of grad * weight.
    double column_grad = 0.0;
    for (Index o = v.o_begin; o < v.o_end; ++o) {
      const double go = term(grad_output(v.b, o, v.y, v.x), abs_terms);
      grads.weight(o, v.cw, v.i, v.j) += go * m * s;
      column_grad += go * term(weight(o, v.cw, v.i, v.j), abs_terms);
    }
    if (mask != nullptr) grads.mask(v.b, v.mask_channel, v.y, v.x) += column_grad * s;
    const Slopes d = slopes(plane, v.py, v.px);
    grads.offset(v.b, 2 * v.mask_channel, v.y, v.x) += column_grad * m * d.dy;
    grads.offset(v.b, 2 * v.mask_channel + 1, v.y, v.x) += column_grad * m * d.dx;
    scatter(grads.input, v.b, v.c, g.h, g.w, v.py, v.px, column_grad * m);
  });
  return grads;
}

}  // namespace detops::reference
