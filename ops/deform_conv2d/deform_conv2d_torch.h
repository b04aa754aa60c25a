#pragma once
// C++ entry points of torch.ops.detops.deform_conv2d and its backward op (no autograd): what the ops run on
// CPU and CUDA tensors. The harness calls these directly. Arguments are torchvision's
// (torch.ops.torchvision.deform_conv2d): every tensor is given; `mask` is read only when params.use_mask
// (torchvision passes a placeholder otherwise) and `bias` is [C_out] (torchvision passes zeros for None).
#include <ATen/core/Tensor.h>

#include <tuple>

#include "deform_conv2d/deform_conv2d.h"

namespace detops {

// input [B, C_in, H, W] (float64/32/16, bfloat16; any strides), weight [C_out, C_in / groups, kh, kw], offset
// [B, 2 * offset_groups * kh * kw, H_out, W_out], mask [B, offset_groups * kh * kw, H_out, W_out] (when
// use_mask), bias [C_out], all in input's dtype and device -> [B, C_out, H_out, W_out].
at::Tensor deform_conv2d_forward(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
                                 const at::Tensor& mask, const at::Tensor& bias, const DeformConv2dParams& params);

// grad [B, C_out, H_out, W_out] -> (grad_input, grad_weight, grad_offset, grad_mask, grad_bias), torchvision's
// order; grad_mask is zeros of mask's shape when !use_mask.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> deform_conv2d_backward(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
    const at::Tensor& mask, const at::Tensor& bias, const DeformConv2dParams& params);

}  // namespace detops
