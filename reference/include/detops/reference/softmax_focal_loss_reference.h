#pragma once
// Softmax focal loss reference (mmcv's form) in double, written from the definition
// (docs/ops/softmax_focal_loss.md). Shares nothing with the kernels but the parameter struct. The gradient comes
// from forward-mode automatic differentiation (a dual number per logit, detops/reference/losses.h) of the same
// per-row forward, not from a hand-derived formula.
#include "detops/reference/losses.h"
#include "detops/reference/tensor.h"
#include "softmax_focal_loss/softmax_focal_loss_params.h"

namespace detops::reference {

// in: input [N, C], target N values, each a class in [0, C) or negative (an ignored row: loss 0), weight none or
// C per-class weights, row n weighted by weight[target[n]]. Returns the N row losses (reduction 'none') or one
// element: their sum ('sum') or sum / N ('mean'; NaN for N = 0).
Vectord softmax_focal_loss_forward(const SoftmaxFocalLossParams& params, const ClassTargetInputs& in);

// The gradient of <grad, softmax_focal_loss_forward(in)> with respect to in.input (grad: N elements for 'none', one
// element otherwise) -> [N, C].
Matrixd softmax_focal_loss_backward(const SoftmaxFocalLossParams& params, const ClassTargetInputs& in,
                                    const Vectord& grad);

}  // namespace detops::reference
