#pragma once
// C++ entry points of torch.ops.detops.masked_conv2d and its backward ops (no autograd): what the ops run on
// CPU and CUDA tensors. The harness calls these directly.
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <tuple>

#include "masked_conv2d/masked_conv2d.h"

namespace detops {

// features [N, C_in, H, W] (float64/32/16, bfloat16; any strides), mask [N, H_out, W_out] or [1, H_out, W_out]
// (broadcast over the batch; bool, integer or floating: a position is computed where mask > 0), weight
// [C_out, C_in, kh, kw] and bias [C_out] (undefined: none) in features' dtype and device
// -> [N, C_out, H_out, W_out] in features' dtype, 0 at every position the mask does not select.
at::Tensor masked_conv2d_forward(const at::Tensor& features, const at::Tensor& mask, const at::Tensor& weight,
                                 const at::Tensor& bias, const MaskedConv2dParams& params);

// grad [N, C_out, H_out, W_out] (any strides) -> d / d features, of features_shape.
at::Tensor masked_conv2d_backward_input(const at::Tensor& grad, const at::Tensor& mask, const at::Tensor& weight,
                                        const MaskedConv2dParams& params, std::array<std::int64_t, 4> features_shape);

// grad, features -> (d / d weight [C_out, C_in, kh, kw], d / d bias [C_out]); weight gives the shape only.
std::tuple<at::Tensor, at::Tensor> masked_conv2d_backward_weight(const at::Tensor& grad, const at::Tensor& features,
                                                                 const at::Tensor& mask, const at::Tensor& weight,
                                                                 const MaskedConv2dParams& params);

}  // namespace detops
