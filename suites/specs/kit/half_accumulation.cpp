#include "kit/half_accumulation.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/zeros_like.h>

namespace detops::kit {

at::Tensor half_accumulation_values(at::IntArrayRef sizes, at::Generator& gen) {
  return at::rand(sizes, gen, at::TensorOptions().dtype(at::kDouble)) * 16 + 24;
}

std::function<at::Tensor(const at::Tensor& output, std::uint64_t seed)> half_accumulation_grad_output() {
  return [](const at::Tensor& out, std::uint64_t seed) {
    if (!out.is_floating_point()) return at::zeros_like(out);  // integer outputs (argmax, channel_mapping)
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
    return (at::rand(out.sizes(), g, at::TensorOptions().dtype(at::kDouble)) * 0.5 + 0.5).to(out.options());
  };
}

RoiCorners half_accumulation_rois(const std::vector<std::array<double, 4>>& targets, double scale) {
  return cycled_rows(kHalfAccumulationTerms * static_cast<std::int64_t>(targets.size()), targets, scale);
}

std::vector<std::array<double, 4>> half_accumulation_pixel_rows(
    const std::function<std::array<double, 4>(double y, double x)>& row) {
  return {row(1, 1), row(1, 4), row(4, 1), row(4, 4)};
}

}  // namespace detops::kit
