#include "kit/feature_cases.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/rand.h>

#include <cmath>
#include <limits>
#include <utility>

namespace detops::kit {
namespace {

at::TensorOptions f64() { return at::TensorOptions().dtype(at::kDouble); }

}  // namespace

at::Tensor uniform_features(at::IntArrayRef sizes, at::Generator& gen) { return at::rand(sizes, gen, f64()) * 2 - 1; }

at::Tensor constant_planes(const at::Tensor& x, at::Generator& gen) {
  return (at::rand({x.size(0), x.size(1), 1, 1}, gen, f64()) * 2 - 1).expand_as(x).clone();
}

void sprinkle_nan(at::Tensor& x, double fraction, at::Generator& gen) {
  x.masked_fill_(at::rand(x.sizes(), gen, f64()) < fraction, std::numeric_limits<double>::quiet_NaN());
}

at::Tensor w_major(const at::Tensor& x) { return x.transpose(2, 3).contiguous().transpose(2, 3); }

at::Tensor row_stride_10(const at::Tensor& rois) { return at::cat({rois, rois}, 1).slice(1, 0, 5); }

std::function<at::Tensor(const at::Tensor& output, std::uint64_t seed)> stride0_grad_output() {
  return [](const at::Tensor& out, std::uint64_t) { return at::ones({}, out.options()).expand(out.sizes()); };
}

at::Tensor reduced_loss_magnitude(const at::Tensor& terms, bool reduced, bool mean, std::int64_t rows) {
  const at::Tensor abs = terms.abs();
  if (!reduced) return abs;
  const at::Tensor total = abs.sum();
  return mean && rows > 0 ? total / static_cast<double>(rows) : total;
}

std::string scale_name(double scale) { return "s" + std::to_string(static_cast<int>(std::lround(1.0 / scale))); }

std::function<harness::Tensors(const harness::Tensors&)> abs_input_magnitude(
    std::function<harness::Tensors(const harness::Tensors&)> reference_forward, bool first_only) {
  return [fwd = std::move(reference_forward), first_only](const harness::Tensors& in) {
    harness::Tensors abs_in = in;
    abs_in[0] = in[0].abs();
    harness::Tensors out = fwd(abs_in);
    if (first_only) out.resize(1);
    return out;
  };
}

std::function<harness::Tensors(const harness::Tensors&, const harness::Tensors&)> abs_grad_magnitude(
    std::function<harness::Tensors(const harness::Tensors&, const harness::Tensors&)> reference_backward) {
  return [bwd = std::move(reference_backward)](const harness::Tensors& in, const harness::Tensors& grad) {
    harness::Tensors abs_grad = grad;
    abs_grad[0] = grad[0].abs();
    return bwd(in, abs_grad);
  };
}

}  // namespace detops::kit
