#pragma once
// Softmax focal loss launchers (CUDA and CPU), framework-free. Parameters: softmax_focal_loss_params.h.
#include <cstdint>

#include "common/entry_points.h"
#include "detops/core/dtype.h"
#include "softmax_focal_loss/softmax_focal_loss_params.h"

namespace detops {

// input [rows, classes] contiguous, T; target int64 [rows]; weight T [classes] or null. The loss, the
// incoming and the outgoing gradient are in T; every computation (softmax, powers, partial sums) is in
// acc_t<T> (float for fp32, fp16 and bf16; double for fp64).
struct SoftmaxFocalLossForwardArgs {
  std::int64_t rows = 0;
  std::int64_t classes = 0;
  const void* input = nullptr;
  const void* target = nullptr;
  const void* weight = nullptr;
  // 'none': [rows] contiguous. 'mean' / 'sum': one element, the sum of the row losses times scale.
  void* out = nullptr;
  // 'mean' / 'sum' only: acc_t<T> workspace of softmax_focal_loss_chunk_count(rows) elements.
  void* partials = nullptr;
  double scale = 1.0;
  // CUDA, optional: the kernels record here (atomicMin) the first row whose target is >= classes; such rows
  // contribute 0. The CPU path expects its targets checked beforehand.
  unsigned long long* first_invalid_row = nullptr;
};

// grad: row n's upstream gradient is grad[n * grad_stride] * grad_scale (grad_stride 1 for a contiguous
// 'none' gradient; 0 for an expanded one or the scalar of 'mean' / 'sum', with grad_scale the reduction's
// scale). grad_input [rows, classes] contiguous, T.
struct SoftmaxFocalLossBackwardArgs {
  std::int64_t rows = 0;
  std::int64_t classes = 0;
  const void* grad = nullptr;
  std::int64_t grad_stride = 1;
  double grad_scale = 1.0;
  const void* input = nullptr;
  const void* target = nullptr;
  const void* weight = nullptr;
  void* grad_input = nullptr;
  unsigned long long* first_invalid_row = nullptr;
};

// CUDA launchers (common/entry_points.h). One warp per row (one block for rows of at least
// kSoftmaxFocalBlockRowClasses classes). No atomics on values: each loss and gradient element is written by
// one thread; 'mean' / 'sum' reduce fixed chunks of rows with a fixed tree, then the chunk sums in one block,
// so the result is bitwise reproducible.
Launcher<SoftmaxFocalLossParams, SoftmaxFocalLossForwardArgs> launch_softmax_focal_loss_forward;
Launcher<SoftmaxFocalLossParams, SoftmaxFocalLossBackwardArgs> launch_softmax_focal_loss_backward;

// CPU implementations over the same per-row math, split over rows; reductions by chunked_sum over the same
// chunks of rows, so results do not depend on the split.
CpuEntry<SoftmaxFocalLossParams, SoftmaxFocalLossForwardArgs> run_softmax_focal_loss_forward_cpu;
CpuEntry<SoftmaxFocalLossParams, SoftmaxFocalLossBackwardArgs> run_softmax_focal_loss_backward_cpu;

}  // namespace detops
