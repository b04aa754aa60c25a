#pragma once
// Sigmoid focal loss references in double, written from the definition (docs/ops/sigmoid_focal_loss.md).
// Share nothing with the kernels but the parameter struct. The gradients come from forward-mode automatic
// differentiation (a dual number, detops/reference/losses.h) of the same per-element forward, not from a
// hand-derived formula.
#include "detops/reference/losses.h"
#include "detops/reference/tensor.h"
#include "sigmoid_focal_loss/sigmoid_focal_loss_params.h"

namespace detops::reference {

// torchvision form. inputs, targets: the elements in row-major order. Returns the per-element losses
// ([numel], reduction 'none') or their mean or sum (one element; the mean of no elements is NaN).
Vectord sigmoid_focal_loss_forward(const SigmoidFocalLossParams& params, const Vectord& inputs,
                                   const Vectord& targets);

// The gradient of <grad, sigmoid_focal_loss_forward(inputs)> with respect to inputs (grad: [numel] for
// 'none', one element otherwise). Targets get no gradient.
Vectord sigmoid_focal_loss_backward(const SigmoidFocalLossParams& params, const Vectord& inputs,
                                    const Vectord& targets, const Vectord& grad);

// mmcv form. in: input [N, C], target N class indices in [0, C] (C: background), weight none or C per-class
// weights, applied as weight[target[n]] to row n (rows of the background class are unweighted). Returns [N, C] for
// 'none', else one element ('mean': the sum / N).
Matrixd sigmoid_focal_loss_mmcv_forward(const SigmoidFocalLossParams& params, const ClassTargetInputs& in);

// The gradient of <grad, sigmoid_focal_loss_mmcv_forward(in)> with respect to in.input (grad: [N, C] for 'none',
// one element otherwise) -> [N, C].
Matrixd sigmoid_focal_loss_mmcv_backward(const SigmoidFocalLossParams& params, const ClassTargetInputs& in,
                                         const Matrixd& grad);

}  // namespace detops::reference
