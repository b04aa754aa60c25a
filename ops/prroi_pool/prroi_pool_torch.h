#pragma once
// C++ entry points of the torch op (no autograd): what torch.ops.detops.prroi_pool,
// torch.ops.detops._prroi_pool_backward and torch.ops.detops._prroi_pool_rois_backward run on CPU and
// CUDA tensors. The harness calls these directly.
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>

#include "prroi_pool/prroi_pool.h"

namespace detops {

// input [N, C, H, W] (any strides), rois [K, 5] of input's dtype and device -> output [K, C, ph, pw]:
// each bin's average of the bilinear surface of input[b_k, c] (docs/ops/prroi_pool.md).
at::Tensor prroi_pool_forward(const at::Tensor& input, const at::Tensor& rois, const PrRoiPoolParams& params);

// grad [K, C, ph, pw] (any strides, stride 0 included) -> grad_input [N, C, H, W] = input_shape.
at::Tensor prroi_pool_backward(const at::Tensor& grad, const at::Tensor& rois, const PrRoiPoolParams& params,
                               std::array<std::int64_t, 4> input_shape);

// grad [K, C, ph, pw] (any strides), input and rois as in the forward -> grad_rois [K, 5] in the rois'
// dtype: d/d(x1, y1, x2, y2) of sum(grad * output) in columns 1..4, 0 in column 0 (the batch index).
at::Tensor prroi_pool_rois_backward(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& rois,
                                    const PrRoiPoolParams& params);

}  // namespace detops
