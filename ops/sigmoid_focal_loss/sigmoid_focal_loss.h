#pragma once
// Sigmoid focal loss launchers (CUDA and CPU), framework-free. Parameters: sigmoid_focal_loss_params.h.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

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

// CUDA launchers: validate nothing (the framework layer does), return immediately on empty work, check
// the launches. Asynchronous on `stream`. No atomics on values: 'none' and the backward write each element
// from one thread; 'mean' / 'sum' reduce fixed chunks with a fixed tree (one kernel) and then the chunk
// sums in one block (a second kernel), so the result is bitwise reproducible.
void launch_sigmoid_focal_loss_forward(const SigmoidFocalLossParams& params, const SigmoidFocalLossForwardArgs& args,
                                       DType dtype, cudaStream_t stream);
void launch_sigmoid_focal_loss_backward(const SigmoidFocalLossParams& params,
                                        const SigmoidFocalLossBackwardArgs& args, DType dtype, cudaStream_t stream);

// CPU implementations over the same per-element math. `parallel_for(begin, end, body)` may run body on
// disjoint sub-ranges concurrently (elements, or the chunks of a reduction); each output element and each
// chunk sum is written once, and the chunk sums are added in order, so results do not depend on the split.
using FocalParallelFor =
    std::function<void(std::int64_t, std::int64_t, const std::function<void(std::int64_t, std::int64_t)>&)>;
void run_sigmoid_focal_loss_forward_cpu(const SigmoidFocalLossParams& params, const SigmoidFocalLossForwardArgs& args,
                                        DType dtype, const FocalParallelFor& parallel_for);
void run_sigmoid_focal_loss_backward_cpu(const SigmoidFocalLossParams& params,
                                         const SigmoidFocalLossBackwardArgs& args, DType dtype,
                                         const FocalParallelFor& parallel_for);

}  // namespace detops
