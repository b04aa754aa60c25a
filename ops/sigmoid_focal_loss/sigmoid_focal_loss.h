#pragma once
// Sigmoid focal loss launchers (CUDA and CPU), framework-free. Parameters: sigmoid_focal_loss_params.h.
#include <cstdint>

#include "common/entry_points.h"
#include "detops/core/dtype.h"
#include "sigmoid_focal_loss/sigmoid_focal_loss_params.h"

namespace detops {

// Logits, the loss, the incoming gradient and the outgoing gradient are in the logits' dtype T (as
// torchvision and mmcv return them); every computation, every partial sum included, is in acc_t<T>
// (float for fp32, fp16 and bf16; double for fp64).
//
// torchvision form: inputs and targets have numel elements, contiguous, both T.
// mmcv form: inputs [numel / num_classes, num_classes] contiguous; targets int64 [numel / num_classes];
// weight T [num_classes] or null.
struct SigmoidFocalLossForwardArgs {
  std::int64_t numel = 0;
  std::int64_t num_classes = 0;  // mmcv form only
  const void* inputs = nullptr;
  const void* targets = nullptr;
  const void* weight = nullptr;  // mmcv form only, optional
  // reduction 'none': [numel] contiguous. 'mean' / 'sum': one element, the sum of the losses times scale.
  void* out = nullptr;
  // 'mean' / 'sum' only: acc_t<T> workspace of sigmoid_focal_loss_chunk_count(numel) elements.
  void* partials = nullptr;
  double scale = 1.0;
  // CUDA, mmcv form, optional: the kernel records here (atomicMin) the first row whose target is not in
  // [0, num_classes]; such rows contribute 0. The CPU path expects its targets checked beforehand.
  unsigned long long* first_invalid_row = nullptr;
};

// grad: element i of the upstream gradient is grad[i * grad_stride] * grad_scale (grad_stride 1 for a
// contiguous 'none' gradient; 0 for an expanded one or the scalar of 'mean' / 'sum', with grad_scale the
// reduction's scale). grad_inputs [numel] contiguous, T.
struct SigmoidFocalLossBackwardArgs {
  std::int64_t numel = 0;
  std::int64_t num_classes = 0;
  const void* grad = nullptr;
  std::int64_t grad_stride = 1;
  double grad_scale = 1.0;
  const void* inputs = nullptr;
  const void* targets = nullptr;
  const void* weight = nullptr;
  void* grad_inputs = nullptr;
  unsigned long long* first_invalid_row = nullptr;
};

// CUDA launchers (common/entry_points.h). No atomics on values: 'none' and the backward write each element
// from one thread; 'mean' / 'sum' reduce fixed chunks with a fixed tree (one kernel) and then the chunk
// sums in one block (a second kernel), so the result is bitwise reproducible.
Launcher<SigmoidFocalLossParams, SigmoidFocalLossForwardArgs> launch_sigmoid_focal_loss_forward;
Launcher<SigmoidFocalLossParams, SigmoidFocalLossBackwardArgs> launch_sigmoid_focal_loss_backward;

// CPU implementations over the same per-element math. Each output element and each chunk sum is written
// once, and the chunk sums are added in order (chunked_sum), so results do not depend on the split.
CpuEntry<SigmoidFocalLossParams, SigmoidFocalLossForwardArgs> run_sigmoid_focal_loss_forward_cpu;
CpuEntry<SigmoidFocalLossParams, SigmoidFocalLossBackwardArgs> run_sigmoid_focal_loss_backward_cpu;

}  // namespace detops
