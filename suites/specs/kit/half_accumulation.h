#pragma once
// Inputs for the half-accumulation cases: outputs that are sums of thousands of same-sign terms. A kernel
// that accumulates fp16 / bf16 inputs in their own type instead of acc_t<T> (fp32) cannot get them
// right, while an fp32 accumulator passes the half-precision tolerances with room to spare:
// - fp16 (max 65504): 4096 terms of 24..40 sum past 65504 (a running fp16 sum becomes inf), though
//   their average (the pooled output) is about 32.
// - fp16 and bf16 stall: once a running sum reaches 2^11 (fp16) or 2^8 (bf16) times a term, adding the
//   term rounds back to the sum, so 4096 terms of 0.5..1 into one element stop near 2048 (fp16) or 256
//   (bf16) instead of ~3000.
// An fp32 sum of 4096 such terms is off by ~sqrt(4096) * 2^-24 relative, far below fp16's 2e-3 and
// bf16's 1.6e-2.
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>

#include "kit/roi_cases.h"

namespace detops::kit {

// How many terms the cases put into one output (or one grad_input element) at least.
constexpr std::int64_t kHalfAccumulationTerms = 4096;

// Values uniform in [24, 40), fp64 (exact enough in every dtype: fp16 keeps 1/32 steps there).
at::Tensor half_accumulation_values(at::IntArrayRef sizes, at::Generator& gen);

// A seeded grad_output uniform in [0.5, 1), in the output's dtype and device: positive, so the terms a
// backward scatters into one element add up instead of cancelling.
std::function<at::Tensor(const at::Tensor& output, std::uint64_t seed)> half_accumulation_grad_output();

// k rois cycled over `targets`, each (x1, y1, x2, y2) row in map coordinates divided by `scale`: with k =
// kHalfAccumulationTerms * targets.size(), every target row receives kHalfAccumulationTerms rois.
RoiCorners half_accumulation_rois(const std::vector<std::array<double, 4>>& targets, double scale = 1.0);

// The four interior pixels (y, x) a backward case scatters into: (1, 1), (1, 4), (4, 1), (4, 4) of a map
// at least 6 x 6. Rows of `half_accumulation_rois` built from them with `row(y, x)`.
std::vector<std::array<double, 4>> half_accumulation_pixel_rows(const std::function<std::array<double, 4>(double y, double x)>& row);

}  // namespace detops::kit
