#pragma once
// C++ entry points of the torch op (no autograd): what torch.ops.detops.roi_pool and
// torch.ops.detops._roi_pool_backward run on CPU and CUDA tensors. The harness calls these directly.
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <tuple>

#include "roi_pool/roi_pool.h"

namespace detops {

// input [N, C, H, W] (any strides), rois [K, 5] of input's dtype and device ->
// (output [K, C, ph, pw] of input's dtype, argmax [K, C, ph, pw] int32: h * W + w of each max, or -1).
std::tuple<at::Tensor, at::Tensor> roi_pool_forward(const at::Tensor& input, const at::Tensor& rois,
                                                    const RoiPoolParams& params);

// grad [K, C, ph, pw] (any strides, stride 0 included), argmax as the forward returned it (int32, same
// shape) -> grad_input [N, C, H, W]: grad_input[b_k, c].flat[argmax[k, c, ph, pw]] += grad[k, c, ph, pw].
at::Tensor roi_pool_backward(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& argmax,
                             const RoiPoolParams& params, std::array<std::int64_t, 4> input_shape);

}  // namespace detops
