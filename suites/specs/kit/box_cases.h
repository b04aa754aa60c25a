#pragma once
// Box builders shared by the box specs (the box IoU family; nms builds its own from a std::mt19937_64):
// random, integer and degenerate boxes as fp64 [n, 4] (x1, y1, x2, y2) tensors on the CPU.
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

namespace detops::kit {

// n values uniform in [lo, hi).
at::Tensor uniform(at::Generator& gen, std::int64_t n, double lo, double hi);

// Boxes from their centers and sizes.
at::Tensor from_center_size(const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& w, const at::Tensor& h);

// n boxes with centers uniform in [c_lo, c_hi]^2 and sides uniform in [s_lo, s_hi].
at::Tensor random_boxes(at::Generator& gen, std::int64_t n, double c_lo, double c_hi, double s_lo, double s_hi);

// n boxes with integer coordinates: corner in [0, span), sides in [s_lo, s_hi]. Small integers are exact
// in every dtype (bf16 holds integers up to 256 exactly), so ties and touching edges survive rounding.
at::Tensor integer_boxes(at::Generator& gen, std::int64_t n, std::int64_t span, std::int64_t s_lo, std::int64_t s_hi);

// Column k (0: x1, 1: y1, 2: x2, 3: y2) of boxes b.
at::Tensor col(const at::Tensor& b, std::int64_t k);

at::Tensor with_columns(const at::Tensor& x1, const at::Tensor& y1, const at::Tensor& x2, const at::Tensor& y2);

// Rows of integer boxes cycling through every kind of degenerate box, and valid ones.
at::Tensor mixed_degenerate_boxes(at::Generator& gen, std::int64_t n);

// n pairs around one another: the second box centered within ~0.4 sides of the first, sides scaled by
// [0.5, 1.5].
std::pair<at::Tensor, at::Tensor> overlapping_pairs(at::Generator& gen, std::int64_t n, double c_lo, double c_hi,
                                                    double s_lo, double s_hi);

}  // namespace detops::kit
