#pragma once
// Feature-map builders and the layout variants the RoI ops' cases share: the usual U[-1, 1) map, constant
// planes, NaN sprinkled in, the same values with other strides, and the grad_output `out.sum().backward()`
// hands over. All fp64 on the CPU.
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>

#include "detops/harness/op_spec.h"

namespace detops::kit {

// U[-1, 1) of the given sizes.
at::Tensor uniform_features(at::IntArrayRef sizes, at::Generator& gen);

// One U[-1, 1) value per (batch, channel) plane, expanded to x's shape (a fresh tensor).
at::Tensor constant_planes(const at::Tensor& x, at::Generator& gen);

// Sets a `fraction` of x's elements (each with that probability, one U[0, 1) draw per element) to NaN.
void sprinkle_nan(at::Tensor& x, double fraction, at::Generator& gen);

// The same values with W-major strides (a 4-D map stored transposed in its last two dimensions).
at::Tensor w_major(const at::Tensor& x);

// The same [K, 5] rois with row stride 10.
at::Tensor row_stride_10(const at::Tensor& rois);

// What `out.sum().backward()` hands the backward: one value expanded to the output's shape (stride 0).
std::function<at::Tensor(const at::Tensor& output, std::uint64_t seed)> stride0_grad_output();

// The magnitude a loss's tolerance scales with, from its unreduced per-row losses `terms`: |terms| when not
// reduced, else the sum of |terms|, divided by `rows` for a mean (when rows > 0).
at::Tensor reduced_loss_magnitude(const at::Tensor& terms, bool reduced, bool mean, std::int64_t rows);

// "s<1 / scale>" (s4 for 0.25), as the grid cases name their spatial_scale.
std::string scale_name(double scale);

// Magnitudes (the sum of |terms| behind each element) for an op whose outputs (grad_inputs) are sums with
// nonnegative weights: the same reference applied to |input 0| (|grad_output 0|). `first_only` keeps only
// output 0 (the others being integer outputs, compared exactly).
std::function<harness::Tensors(const harness::Tensors&)> abs_input_magnitude(
    std::function<harness::Tensors(const harness::Tensors&)> reference_forward, bool first_only = false);
std::function<harness::Tensors(const harness::Tensors&, const harness::Tensors&)> abs_grad_magnitude(
    std::function<harness::Tensors(const harness::Tensors&, const harness::Tensors&)> reference_backward);

}  // namespace detops::kit
