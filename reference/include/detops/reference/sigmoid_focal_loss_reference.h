#pragma once
// Sigmoid focal loss references in double, written from the definition (docs/ops/sigmoid_focal_loss.md).
// Share nothing with the kernels but the parameter struct. The gradients come from forward-mode automatic
// differentiation (a dual number) of the same per-element forward, not from a hand-derived formula.
#include <cstdint>
#include <vector>

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

// mmcv form. input [N, C], target: N class indices in [0, C] (C: background), weight: null or C per-class
// weights, applied as weight[target[n]] to row n (rows of the background class are unweighted). Returns
// [N, C] for 'none', else one element ('mean': the sum / N).
Matrixd sigmoid_focal_loss_mmcv_forward(const SigmoidFocalLossParams& params, const Matrixd& input,
                                        const std::vector<std::int64_t>& target, const Vectord* weight);

// The gradient of <grad, sigmoid_focal_loss_mmcv_forward(input)> with respect to input (grad: [N, C] for
// 'none', one element otherwise) -> [N, C].
Matrixd sigmoid_focal_loss_mmcv_backward(const SigmoidFocalLossParams& params, const Matrixd& input,
                                         const std::vector<std::int64_t>& target, const Vectord* weight,
                                         const Matrixd& grad);

}  // namespace detops::reference
