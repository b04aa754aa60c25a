#include "kit/box_cases.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/stack.h>

namespace detops::kit {
namespace {

at::TensorOptions f64() { return at::TensorOptions().dtype(at::kDouble); }

}  // namespace

at::Tensor uniform(at::Generator& gen, std::int64_t n, double lo, double hi) {
  return at::rand({n}, gen, f64()) * (hi - lo) + lo;
}

at::Tensor from_center_size(const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& w, const at::Tensor& h) {
  return at::stack({cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2}, 1);
}

at::Tensor random_boxes(at::Generator& gen, std::int64_t n, double c_lo, double c_hi, double s_lo, double s_hi) {
  const at::Tensor cx = uniform(gen, n, c_lo, c_hi), cy = uniform(gen, n, c_lo, c_hi);
  return from_center_size(cx, cy, uniform(gen, n, s_lo, s_hi), uniform(gen, n, s_lo, s_hi));
}

at::Tensor integer_boxes(at::Generator& gen, std::int64_t n, std::int64_t span, std::int64_t s_lo, std::int64_t s_hi) {
  const at::Tensor x1 = at::randint(0, span, {n}, gen, f64()), y1 = at::randint(0, span, {n}, gen, f64());
  const at::Tensor w = at::randint(s_lo, s_hi + 1, {n}, gen, f64()), h = at::randint(s_lo, s_hi + 1, {n}, gen, f64());
  return at::stack({x1, y1, x1 + w, y1 + h}, 1);
}

at::Tensor col(const at::Tensor& b, std::int64_t k) { return b.select(1, k); }

at::Tensor with_columns(const at::Tensor& x1, const at::Tensor& y1, const at::Tensor& x2, const at::Tensor& y2) {
  return at::stack({x1, y1, x2, y2}, 1);
}

at::Tensor mixed_degenerate_boxes(at::Generator& gen, std::int64_t n) {
  const at::Tensor b = integer_boxes(gen, n, 24, 1, 8);
  at::Tensor x1 = col(b, 0).clone(), y1 = col(b, 1).clone(), x2 = col(b, 2).clone(), y2 = col(b, 3).clone();
  for (std::int64_t i = 0; i < n; ++i) {
    switch (i % 7) {
      case 0: break;                                                          // valid
      case 1: { at::Tensor t = x1[i].clone(); x1[i] = x2[i]; x2[i] = t; } break;  // x2 < x1
      case 2: { at::Tensor t = y1[i].clone(); y1[i] = y2[i]; y2[i] = t; } break;  // y2 < y1
      case 3: {                                                               // both inverted: area > 0
        at::Tensor t = x1[i].clone(); x1[i] = x2[i]; x2[i] = t;
        t = y1[i].clone(); y1[i] = y2[i]; y2[i] = t;
        break;
      }
      case 4: x2[i] = x1[i]; break;                                           // zero width
      case 5: y2[i] = y1[i]; break;                                           // zero height
      case 6: x2[i] = x1[i]; y2[i] = y1[i]; break;                            // a point
    }
  }
  return with_columns(x1, y1, x2, y2);
}

std::pair<at::Tensor, at::Tensor> overlapping_pairs(at::Generator& gen, std::int64_t n, double c_lo, double c_hi,
                                                    double s_lo, double s_hi) {
  const at::Tensor a = random_boxes(gen, n, c_lo, c_hi, s_lo, s_hi);
  const at::Tensor w = col(a, 2) - col(a, 0), h = col(a, 3) - col(a, 1);
  const at::Tensor cx = (col(a, 0) + col(a, 2)) / 2 + at::randn({n}, gen, f64()) * 0.4 * w;
  const at::Tensor cy = (col(a, 1) + col(a, 3)) / 2 + at::randn({n}, gen, f64()) * 0.4 * h;
  return {a, from_center_size(cx, cy, w * uniform(gen, n, 0.5, 1.5), h * uniform(gen, n, 0.5, 1.5))};
}

}  // namespace detops::kit
