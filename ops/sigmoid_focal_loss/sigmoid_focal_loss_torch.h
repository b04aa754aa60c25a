#pragma once
// C++ entry points of torch.ops.detops.sigmoid_focal_loss (torchvision's form) and
// torch.ops.detops.sigmoid_focal_loss_mmcv (mmcv's form), no autograd: what the ops run on CPU and CUDA
// tensors. The harness calls these directly.
#include <ATen/core/Tensor.h>

#include <string>

#include "sigmoid_focal_loss/sigmoid_focal_loss.h"

namespace detops {

// Params from the schema's arguments, validated with torchvision's / mmcv's errors (ValueError): torchvision's
// alpha must be in [0, 1] or -1 ("Invalid alpha value"); gamma finite (negative values included, as torchvision and mmcv take them); reduction 'none' | 'mean' |
// 'sum' ("Invalid Value for arg 'reduction'").
SigmoidFocalLossParams make_sigmoid_focal_loss_params(double alpha, double gamma, const std::string& reduction);
SigmoidFocalLossParams make_sigmoid_focal_loss_mmcv_params(double gamma, double alpha, const std::string& reduction);

// torchvision form. inputs: logits of any shape (any strides), targets: the same shape, floating; two different
// floating dtypes are promoted (torch.promote_types) and the loss has the promoted dtype. Returns the
// per-element losses (inputs' shape, contiguous) for 'none', else a 0-d tensor; always in inputs' dtype.
at::Tensor sigmoid_focal_loss_forward(const at::Tensor& inputs, const at::Tensor& targets,
                                      const SigmoidFocalLossParams& params);
// grad shaped like the forward's output, in its dtype (any strides; stride 0 is read without a copy) ->
// d loss / d inputs, inputs' shape and dtype, contiguous. There is no gradient for targets.
at::Tensor sigmoid_focal_loss_backward(const at::Tensor& grad, const at::Tensor& inputs, const at::Tensor& targets,
                                       const SigmoidFocalLossParams& params);

// mmcv form. input [N, C] logits, target int64 [N] with values in [0, C] (C: background), weight: undefined or
// [C] in input's dtype. 'none' -> [N, C]; 'mean' -> sum / N; 'sum' -> sum; in input's dtype.
at::Tensor sigmoid_focal_loss_mmcv_forward(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight,
                                           const SigmoidFocalLossParams& params);
at::Tensor sigmoid_focal_loss_mmcv_backward(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& target,
                                            const at::Tensor& weight, const SigmoidFocalLossParams& params);

}  // namespace detops
