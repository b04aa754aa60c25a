#pragma once
// C++ entry points of the torch ops (no autograd): what torch.ops.detops.deform_roi_pool,
// modulated_deform_roi_pool and _deform_roi_pool_backward run on CPU and CUDA tensors. The harness calls
// these directly. Definition: docs/ops/deform_roi_pool.md.
#include <ATen/core/Tensor.h>

#include <tuple>

#include "deform_roi_pool/deform_roi_pool.h"

namespace detops {

// input [N, C, H, W] (any strides), rois [K, 5] and offset [K, 2, ph, pw] (undefined: no offsets) of input's
// dtype and device -> [K, C, ph, pw].
at::Tensor deform_roi_pool_forward(const at::Tensor& input, const at::Tensor& rois, const at::Tensor& offset,
                                   const DeformRoiPoolParams& params);

// The same times mask [K, 1, ph, pw] (required), broadcast over the channels.
at::Tensor modulated_deform_roi_pool_forward(const at::Tensor& input, const at::Tensor& rois, const at::Tensor& offset,
                                             const at::Tensor& mask, const DeformRoiPoolParams& params);

// grad [K, C, ph, pw] (any strides, stride 0 included) -> (grad_input [N, C, H, W], grad_offset [K, 2, ph, pw],
// grad_mask [K, 1, ph, pw]); grad_offset (grad_mask) is an empty [0] tensor when offset (mask) is undefined.
std::tuple<at::Tensor, at::Tensor, at::Tensor> deform_roi_pool_backward(const at::Tensor& grad, const at::Tensor& input,
                                                                        const at::Tensor& rois, const at::Tensor& offset,
                                                                        const at::Tensor& mask,
                                                                        const DeformRoiPoolParams& params);

}  // namespace detops
