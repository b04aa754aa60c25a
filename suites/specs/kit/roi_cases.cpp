#include "kit/roi_cases.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

#include <limits>
#include <utility>

namespace detops::kit {
namespace {

at::TensorOptions f64() { return at::TensorOptions().dtype(at::kDouble); }

}  // namespace

RandomRois random_image_rois(std::int64_t k, double img_w, double img_h, at::Generator& gen) {
  RandomRois out;
  out.u = at::rand({k, 4}, gen, f64());
  RoiCorners& r = out.corners;
  r.x1 = out.u.select(1, 0) * img_w * 0.8;
  r.y1 = out.u.select(1, 1) * img_h * 0.8;
  r.x2 = r.x1 + 1 + out.u.select(1, 2) * img_w * 0.5;
  r.y2 = r.y1 + 1 + out.u.select(1, 3) * img_h * 0.5;
  return out;
}

void move_outside(RoiCorners& r, double img_w, double img_h) {
  const std::int64_t k = r.x1.size(0);
  r.x1 = r.x1 - 3 * img_w;
  r.x2 = r.x2 - 3 * img_w;
  r.y1.slice(0, 0, k / 2).add_(4 * img_h);
  r.y2.slice(0, 0, k / 2).add_(4 * img_h);
}

void move_partly_outside(RoiCorners& r, double img_w, double img_h) {
  r.x1 = r.x1 - 0.5 * img_w;
  r.y2 = r.y2 + 0.5 * img_h;
}

void invert(RoiCorners& r) {
  std::swap(r.x1, r.x2);
  std::swap(r.y1, r.y2);
}

void collapse_to_points(RoiCorners& r) {
  r.x2 = r.x1.clone();
  r.y2 = r.y1.clone();
}

RoiCorners straddling_rois(const at::Tensor& u, double img_w, double img_h) {
  return {-(0.3 + u.select(1, 0) * 0.5) * img_w, -(0.3 + u.select(1, 1) * 0.5) * img_h,
          (1.3 + u.select(1, 2) * 0.5) * img_w, (1.3 + u.select(1, 3) * 0.5) * img_h};
}

void set_nan_corners(RoiCorners& r) {
  const std::int64_t k = r.x1.size(0);
  if (k == 0) return;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  r.x1[0] = nan;
  r.y1[1 % k] = nan;
  r.x2[2 % k] = nan;
  r.y2[3 % k] = nan;
}

RoiCorners infinite_rois(std::int64_t k, double img_w, double img_h) {
  const double inf = std::numeric_limits<double>::infinity();
  return cycled_rows(k, {{-inf, 0, inf, img_h}, {0, -inf, img_w, inf}, {-1e30, -1e30, 1e30, 1e30},
                         {-inf, -inf, -inf, -inf}, {inf, inf, inf, inf}, {2, 3, inf, 1e30}});
}

RoiCorners cycled_rows(std::int64_t k, const std::vector<std::array<double, 4>>& rows, double scale) {
  RoiCorners r{at::empty({k}, f64()), at::empty({k}, f64()), at::empty({k}, f64()), at::empty({k}, f64())};
  double* cols[4] = {r.x1.data_ptr<double>(), r.y1.data_ptr<double>(), r.x2.data_ptr<double>(),
                     r.y2.data_ptr<double>()};
  for (std::int64_t i = 0; i < k; ++i) {
    const auto& row = rows[static_cast<size_t>(i) % rows.size()];
    for (int j = 0; j < 4; ++j) cols[j][i] = row[j] / scale;
  }
  return r;
}

at::Tensor roi_batch_column(RoiBatchLayout layout, std::int64_t k, std::int64_t batch) {
  switch (layout) {
    case RoiBatchLayout::kSpread: return at::arange(k, f64()).remainder(static_cast<double>(batch));
    case RoiBatchLayout::kAllInFirst: return at::zeros({k}, f64());
    case RoiBatchLayout::kFractional:
      return (at::arange(k, f64()).remainder(static_cast<double>(batch)) + 0.75)
          .clamp_max_(static_cast<double>(batch) - 0.25);
  }
  return {};
}

at::Tensor stack_rois(const at::Tensor& batch_index, const RoiCorners& r) {
  return at::stack({batch_index, r.x1, r.y1, r.x2, r.y2}, 1);
}

}  // namespace detops::kit
