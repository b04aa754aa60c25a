#pragma once
// Sigmoid focal loss launchers (CUDA and CPU), framework-free. Parameters: sigmoid_focal_loss_params.h.
#include <cstdint>

#include "common/entry_points.h"
#include "common/logit_loss.h"
#include "detops/core/dtype.h"
#include "sigmoid_focal_loss/sigmoid_focal_loss_params.h"

namespace detops {

// The args (common/logit_loss.h): n = numel elements. Logits, the loss, the incoming gradient and the outgoing
// gradient are in the logits' dtype T (as torchvision and mmcv return them); every computation, every partial sum
// included, is in acc_t<T> (float for fp32, fp16 and bf16; double for fp64).
//
// torchvision form: input and target have numel elements, contiguous, both T; classes is 0.
// mmcv form: input [numel / classes, classes] contiguous; target int64 [numel / classes]; weight T [classes] or
// null; first_invalid_row: the first row whose target is not in [0, classes].
// Forward: out [numel] ('none'); partials: sigmoid_focal_loss_chunk_count(numel) elements.
// Backward: element i of the upstream gradient is grad.at(i) (grad.stride 1 for a contiguous 'none' gradient; 0
// for an expanded one or the scalar of 'mean' / 'sum', with grad.scale the reduction's scale). grad_input [numel].
using SigmoidFocalLossForwardArgs = LogitLossForwardArgs;
using SigmoidFocalLossBackwardArgs = LogitLossBackwardArgs;

// CUDA launchers (common/entry_points.h). No atomics on values: 'none' and the backward write each element
// from one thread; 'mean' / 'sum' reduce fixed chunks with a fixed tree (one kernel) and then the chunk
// sums in one block (a second kernel), so the result is bitwise reproducible.
//
// CPU implementations over the same per-element math. Each output element and each chunk sum is written
// once, and the chunk sums are added in order (chunked_sum), so results do not depend on the split.
DETOPS_DECLARE_ENTRY(SigmoidFocalLossParams, SigmoidFocalLossForwardArgs, sigmoid_focal_loss_forward);
DETOPS_DECLARE_ENTRY(SigmoidFocalLossParams, SigmoidFocalLossBackwardArgs, sigmoid_focal_loss_backward);

}  // namespace detops
