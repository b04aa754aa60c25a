#pragma once
// C++ entry points of the torch op (no autograd): what torch.ops.detops.roi_align and
// torch.ops.detops._roi_align_backward run on CPU and CUDA tensors. The harness calls these directly.
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>

#include "roi_align/roi_align.h"

namespace detops {

// input [N, C, H, W] (any strides), rois [K, 5] of input's dtype and device -> [K, C, ph, pw].
at::Tensor roi_align_forward(const at::Tensor& input, const at::Tensor& rois, const RoiAlignParams& params);

// grad [K, C, ph, pw] (any strides, stride 0 included) -> grad_input [N, C, H, W].
at::Tensor roi_align_backward(const at::Tensor& grad, const at::Tensor& rois, const RoiAlignParams& params,
                              std::array<std::int64_t, 4> input_shape);

}  // namespace detops
