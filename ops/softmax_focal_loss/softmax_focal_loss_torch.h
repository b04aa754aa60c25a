#pragma once
// C++ entry points of torch.ops.detops.softmax_focal_loss (mmcv.ops.softmax_focal_loss's form), no autograd:
// what the op runs on CPU and CUDA tensors. The harness calls these directly.
#include <ATen/core/Tensor.h>

#include <string>

#include "softmax_focal_loss/softmax_focal_loss.h"

namespace detops {

// Params from the schema's arguments (ValueError): gamma and alpha finite; reduction 'none' | 'mean' | 'sum'
// ("Invalid Value for arg 'reduction'").
SoftmaxFocalLossParams make_softmax_focal_loss_params(double gamma, double alpha, const std::string& reduction);

// input [N, C] logits (C >= 1, any strides), target int64 [N] with values < C (a negative value marks an
// ignored row; C or more raises IndexError), weight: undefined or [C] in input's dtype. 'none' -> [N];
// 'mean' -> sum / N; 'sum' -> sum (0-d); in input's dtype.
at::Tensor softmax_focal_loss_forward(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight,
                                      const SoftmaxFocalLossParams& params);
// grad shaped like the forward's output, in its dtype (any strides; stride 0 is read without a copy) ->
// d loss / d input, [N, C] in input's dtype, contiguous. There is no gradient for target or weight.
at::Tensor softmax_focal_loss_backward(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& target,
                                       const at::Tensor& weight, const SoftmaxFocalLossParams& params);

}  // namespace detops
