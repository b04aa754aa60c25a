#include "detops/reference/carafe_reference.h"

#include <stdexcept>

namespace detops::reference {
namespace {

using Index = Eigen::Index;

struct Geometry {
  Index n, c, h, w, k, r, s, group_channels;
};

Geometry geometry(const CarafeParams& p, const Tensor4d& features, const Tensor4d& masks) {
  const Geometry g{features.dimension(0), features.dimension(1), features.dimension(2), features.dimension(3),
                   p.kernel_size,         (p.kernel_size - 1) / 2, p.scale_factor,       features.dimension(1) / p.group_size};
  if (p.kernel_size % 2 != 1 || features.dimension(1) % p.group_size != 0 || masks.dimension(0) != g.n ||
      masks.dimension(1) != g.k * g.k * p.group_size || masks.dimension(2) != g.h * g.s ||
      masks.dimension(3) != g.w * g.s) {
    throw std::invalid_argument("carafe reference: masks' shape, kernel_size or group_size does not fit the features");
  }
  return g;
}

// Calls fn(fy, fx, mask channel) for every tap (i, j) of output (n, c, y, x) whose feature
// (fy, fx) = (y / s + i - r, x / s + j - r) lies on the map: the terms of out[n, c, y, x].
template <typename Fn>
void for_each_term(const Geometry& g, Index c, Index y, Index x, Fn&& fn) {
  const Index group = c / g.group_channels;
  for (Index i = 0; i < g.k; ++i) {
    for (Index j = 0; j < g.k; ++j) {
      const Index fy = y / g.s + i - g.r, fx = x / g.s + j - g.r;
      if (fy < 0 || fy >= g.h || fx < 0 || fx >= g.w) continue;
      fn(fy, fx, group * g.k * g.k + i * g.k + j);
    }
  }
}

}  // namespace

Tensor4d carafe_forward(const CarafeParams& p, const Tensor4d& features, const Tensor4d& masks) {
  const Geometry g = geometry(p, features, masks);
  const Index out_h = g.h * g.s, out_w = g.w * g.s, mask_channels = masks.dimension(1);
  Tensor4d out(g.n, g.c, out_h, out_w);
  // for_each_term's terms in its order, read through the row-major tensors' data directly: the finite-difference
  // checks evaluate this forward up to 384 times per case, and Eigen's four-index operator() was most of its time.
  const double* const feature_data = features.data();
  const double* const mask_data = masks.data();
  for (Index n = 0; n < g.n; ++n) {
    for (Index c = 0; c < g.c; ++c) {
      const double* const plane = feature_data + (n * g.c + c) * g.h * g.w;
      const Index group = c / g.group_channels;
      for (Index y = 0; y < out_h; ++y) {
        for (Index x = 0; x < out_w; ++x) {
          double sum = 0.0;
          for (Index i = 0; i < g.k; ++i) {
            const Index fy = y / g.s + i - g.r;
            if (fy < 0 || fy >= g.h) continue;
            for (Index j = 0; j < g.k; ++j) {
              const Index fx = x / g.s + j - g.r;
              if (fx < 0 || fx >= g.w) continue;
              const Index m = group * g.k * g.k + i * g.k + j;
              sum += mask_data[((n * mask_channels + m) * out_h + y) * out_w + x] * plane[fy * g.w + fx];
            }
          }
          out(n, c, y, x) = sum;
        }
      }
    }
  }
  return out;
}

CarafeGrads carafe_backward(const CarafeParams& p, const Tensor4d& features, const Tensor4d& masks,
                            const Tensor4d& grad_output) {
  const Geometry g = geometry(p, features, masks);
  CarafeGrads grads{Tensor4d(features.dimensions()), Tensor4d(masks.dimensions())};
  grads.features.setZero();
  grads.masks.setZero();
  for (Index n = 0; n < g.n; ++n) {
    for (Index c = 0; c < g.c; ++c) {
      for (Index y = 0; y < g.h * g.s; ++y) {
        for (Index x = 0; x < g.w * g.s; ++x) {
          const double go = grad_output(n, c, y, x);
          for_each_term(g, c, y, x, [&](Index fy, Index fx, Index m) {
            grads.features(n, c, fy, fx) += go * masks(n, m, y, x);
            grads.masks(n, m, y, x) += go * features(n, c, fy, fx);
          });
        }
      }
    }
  }
  return grads;
}

}  // namespace detops::reference
