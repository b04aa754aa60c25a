#include "detops/reference/masked_conv2d_reference.h"

#include <stdexcept>

namespace detops::reference {
namespace {

using Index = Eigen::Index;

struct Geometry {
  Index n, c_in, h, w, c_out, kh, kw, h_out, w_out;
};

Geometry geometry(const MaskedConv2dParams& p, const Tensor4d& features, const Tensor4d& mask, const Tensor4d& weight) {
  Geometry g{features.dimension(0), features.dimension(1), features.dimension(2), features.dimension(3),
             weight.dimension(0),   weight.dimension(2),   weight.dimension(3),   0, 0};
  if (weight.dimension(1) != g.c_in) throw std::invalid_argument("masked_conv2d reference: weight's C_in differs");
  g.h_out = (g.h + 2 * p.padding_h - g.kh) / p.stride_h + 1;
  g.w_out = (g.w + 2 * p.padding_w - g.kw) / p.stride_w + 1;
  if (mask.dimension(1) != 1 || mask.dimension(2) != g.h_out || mask.dimension(3) != g.w_out ||
      (mask.dimension(0) != g.n && mask.dimension(0) != 1)) {
    throw std::invalid_argument("masked_conv2d reference: mask shape does not match the output");
  }
  return g;
}

// The zero-padded input: features[n, c, r - padding_h, s - padding_w], 0 outside the map.
double padded(const MaskedConv2dParams& p, const Geometry& g, const Tensor4d& features, Index n, Index c, Index r,
              Index s) {
  const Index h = r - p.padding_h, w = s - p.padding_w;
  return h >= 0 && h < g.h && w >= 0 && w < g.w ? features(n, c, h, w) : 0.0;
}

bool selected(const Tensor4d& mask, Index n, Index y, Index x) {
  return masked_conv2d_selects(mask(mask.dimension(0) == 1 ? 0 : n, 0, y, x));
}

}  // namespace

Tensor4d masked_conv2d_forward(const MaskedConv2dParams& p, const Tensor4d& features, const Tensor4d& mask,
                               const Tensor4d& weight, const Vectord* bias) {
  const Geometry g = geometry(p, features, mask, weight);
  Tensor4d out(g.n, g.c_out, g.h_out, g.w_out);
  out.setZero();
  for (Index n = 0; n < g.n; ++n) {
    for (Index y = 0; y < g.h_out; ++y) {
      for (Index x = 0; x < g.w_out; ++x) {
        if (!selected(mask, n, y, x)) continue;
        for (Index o = 0; o < g.c_out; ++o) {
          double sum = bias != nullptr ? (*bias)(o) : 0.0;
          for (Index c = 0; c < g.c_in; ++c) {
            for (Index i = 0; i < g.kh; ++i) {
              for (Index j = 0; j < g.kw; ++j) {
                sum += weight(o, c, i, j) * padded(p, g, features, n, c, y * p.stride_h + i, x * p.stride_w + j);
              }
            }
          }
          out(n, o, y, x) = sum;
        }
      }
    }
  }
  return out;
}

MaskedConv2dGrads masked_conv2d_backward(const MaskedConv2dParams& p, const Tensor4d& features, const Tensor4d& mask,
                                         const Tensor4d& weight, const Tensor4d& grad_output) {
  const Geometry g = geometry(p, features, mask, weight);
  MaskedConv2dGrads grads{Tensor4d(g.n, g.c_in, g.h, g.w), Tensor4d(g.c_out, g.c_in, g.kh, g.kw), Vectord::Zero(g.c_out)};
  grads.features.setZero();
  grads.weight.setZero();
  for (Index n = 0; n < g.n; ++n) {
    for (Index y = 0; y < g.h_out; ++y) {
      for (Index x = 0; x < g.w_out; ++x) {
        if (!selected(mask, n, y, x)) continue;
        for (Index o = 0; o < g.c_out; ++o) {
          const double go = grad_output(n, o, y, x);
          grads.bias(o) += go;
          for (Index c = 0; c < g.c_in; ++c) {
            for (Index i = 0; i < g.kh; ++i) {
              for (Index j = 0; j < g.kw; ++j) {
                const Index r = y * p.stride_h + i, s = x * p.stride_w + j;
                grads.weight(o, c, i, j) += go * padded(p, g, features, n, c, r, s);
                const Index h = r - p.padding_h, w = s - p.padding_w;
                if (h >= 0 && h < g.h && w >= 0 && w < g.w) grads.features(n, c, h, w) += go * weight(o, c, i, j);
              }
            }
          }
        }
      }
    }
  }
  return grads;
}

}  // namespace detops::reference
