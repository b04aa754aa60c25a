#pragma once
// C++ entry points of torch.ops.detops.carafe and its backward ops (no autograd): what the ops run on CPU and
// CUDA tensors. The harness calls these directly.
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>

#include "carafe/carafe.h"

namespace detops {

// features [N, C, H, W] (float64/32/16, bfloat16; any strides), masks [N, k k G, H s, W s] in features' dtype
// and device -> [N, C, H s, W s] in features' dtype.
at::Tensor carafe_forward(const at::Tensor& features, const at::Tensor& masks, const CarafeParams& params);

// grad [N, C, H s, W s] (any strides), masks -> d / d features, of features_shape [N, C, H, W].
at::Tensor carafe_backward_features(const at::Tensor& grad, const at::Tensor& masks, const CarafeParams& params,
                                    std::array<std::int64_t, 4> features_shape);

// grad, features -> d / d masks [N, k k G, H s, W s].
at::Tensor carafe_backward_masks(const at::Tensor& grad, const at::Tensor& features, const CarafeParams& params);

}  // namespace detops
