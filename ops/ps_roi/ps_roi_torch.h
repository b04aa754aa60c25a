#pragma once
// C++ entry points of the torch ops (no autograd): what torch.ops.detops.ps_roi_align / ps_roi_pool and
// their _*_backward ops run on CPU and CUDA tensors. The harness calls these directly.
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <tuple>

#include "ps_roi/ps_roi.h"

namespace detops {

// input [N, C_in, H, W] (any strides), rois [K, 5] of input's dtype and device ->
// (output [K, C_out, ph, pw] of input's dtype, channel_mapping [K, C_out, ph, pw] int32), C_out = C_in / (ph * pw).
std::tuple<at::Tensor, at::Tensor> ps_roi_align_forward(const at::Tensor& input, const at::Tensor& rois,
                                                        const PsRoiAlignParams& params);
std::tuple<at::Tensor, at::Tensor> ps_roi_pool_forward(const at::Tensor& input, const at::Tensor& rois,
                                                       const PsRoiPoolParams& params);

// grad [K, C_out, ph, pw] (any strides, stride 0 included) -> grad_input [N, C_in, H, W] with
// input_shape = {N, C_in, H, W}. channel_mapping must be the forward's int32 [K, C_out, ph, pw] tensor on
// grad's device; its values are implied by the layout and are not read.
at::Tensor ps_roi_align_backward(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& channel_mapping,
                                 const PsRoiAlignParams& params, std::array<std::int64_t, 4> input_shape);
at::Tensor ps_roi_pool_backward(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& channel_mapping,
                                const PsRoiPoolParams& params, std::array<std::int64_t, 4> input_shape);

}  // namespace detops
