#pragma once
// Softmax focal loss launchers (CUDA and CPU), framework-free. Parameters: softmax_focal_loss_params.h.
#include <cstdint>

#include "common/entry_points.h"
#include "common/logit_loss.h"
#include "detops/core/dtype.h"
#include "softmax_focal_loss/softmax_focal_loss_params.h"

namespace detops {

// The args (common/logit_loss.h): n = rows. input [rows, classes] contiguous, T; target int64 [rows]; weight T
// [classes] or null. The loss, the incoming and the outgoing gradient are in T; every computation (softmax,
// powers, partial sums) is in acc_t<T> (float for fp32, fp16 and bf16; double for fp64).
// Forward: out [rows] ('none'); partials: softmax_focal_loss_chunk_count(rows) elements; first_invalid_row: the
// first row whose target is >= classes.
// Backward: row n's upstream gradient is grad.at(n) (grad.stride 1 for a contiguous 'none' gradient; 0 for an
// expanded one or the scalar of 'mean' / 'sum', with grad.scale the reduction's scale). grad_input [rows, classes].
using SoftmaxFocalLossForwardArgs = LogitLossForwardArgs;
using SoftmaxFocalLossBackwardArgs = LogitLossBackwardArgs;

// CUDA launchers (common/entry_points.h). Rows of fewer than kSoftmaxFocalBlockRowClasses classes: tiles of rows
// copied into shared memory, a group of lanes per row (softmax_focal_loss_cuda.cu); longer rows: a block per row.
// No atomics on values: each loss and gradient element is written by one thread; 'mean' / 'sum' reduce fixed
// chunks of rows with a fixed tree, then the chunk sums in one block, so the result is bitwise reproducible.
//
// CPU implementations over the same per-row math, split over rows; reductions by chunked_sum over the same
// chunks of rows, so results do not depend on the split.
DETOPS_DECLARE_ENTRY(SoftmaxFocalLossParams, SoftmaxFocalLossForwardArgs, softmax_focal_loss_forward);
DETOPS_DECLARE_ENTRY(SoftmaxFocalLossParams, SoftmaxFocalLossBackwardArgs, softmax_focal_loss_backward);

}  // namespace detops
