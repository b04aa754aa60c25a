#pragma once
// Softmax focal loss reference (mmcv's form) in double, written from the definition
// (docs/ops/softmax_focal_loss.md). Shares nothing with the kernels but the parameter struct. The gradient comes
// from forward-mode automatic differentiation (a dual number per logit) of the same per-row forward, not from
// a hand-derived formula.
#include <cstdint>
#include <vector>

#include "detops/reference/tensor.h"
#include "softmax_focal_loss/softmax_focal_loss_params.h"

namespace detops::reference {

// input [N, C]; target: N values, each a class in [0, C) or negative (an ignored row: loss 0); weight: null or
// C per-class weights, row n weighted by weight[target[n]]. Returns the N row losses (reduction 'none') or
// one element: their sum ('sum') or sum / N ('mean'; NaN for N = 0).
Vectord softmax_focal_loss_forward(const SoftmaxFocalLossParams& params, const Matrixd& input,
                                   const std::vector<std::int64_t>& target, const Vectord* weight);

// The gradient of <grad, softmax_focal_loss_forward(input)> with respect to input (grad: N elements for
// 'none', one element otherwise) -> [N, C].
Matrixd softmax_focal_loss_backward(const SoftmaxFocalLossParams& params, const Matrixd& input,
                                    const std::vector<std::int64_t>& target, const Vectord* weight,
                                    const Vectord& grad);

}  // namespace detops::reference
