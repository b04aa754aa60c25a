#pragma once
// Box IoU family launchers (CUDA and CPU), framework-free. Parameters: box_iou_params.h.
#include <cstdint>

#include "box_iou/box_iou_params.h"
#include "common/entry_points.h"
#include "common/upstream_grad.h"
#include "detops/core/dtype.h"

namespace detops {

// Outputs (and the losses' incoming gradients) are in the accumulation type of the boxes' dtype: double
// for fp64, float for fp32, fp16 and bf16 (torchvision's ops also return float32 for half-precision boxes).
// Gradients with respect to the boxes are in the boxes' dtype.

// boxes1 [batch, n, 4] and boxes2 [batch, m, 4] contiguous, (x1, y1, x2, y2), one dtype; out [batch, n, m]
// contiguous, in the accumulation type: batch independent [n, 4] x [m, 4] problems.
struct BoxIouPairwiseArgs {
  std::int64_t n = 0, m = 0;
  const void* boxes1 = nullptr;
  const void* boxes2 = nullptr;
  void* out = nullptr;
  std::int64_t batch = 1;
};

// The pairwise backward: grad [batch, n, m] in the accumulation type at grad[b * grad_strides[0] + i *
// grad_strides[1] + j * grad_strides[2]] (any strides, 0 included); boxes as BoxIouPairwiseArgs';
// grad_boxes1 [batch, n, 4] and grad_boxes2 [batch, m, 4] contiguous, in the boxes' dtype: each the sum over
// the other box tensor's rows of the pairs' gradients, in a fixed order (no atomics).
struct BoxIouPairwiseBackwardArgs {
  std::int64_t n = 0, m = 0, batch = 1;
  const void* grad = nullptr;
  std::int64_t grad_strides[3] = {0, 0, 0};
  const void* boxes1 = nullptr;
  const void* boxes2 = nullptr;
  void* grad_boxes1 = nullptr;
  void* grad_boxes2 = nullptr;
};

// boxes1, boxes2 [n, 4] contiguous, one dtype. loss [n] contiguous, in the accumulation type: the per-pair
// losses before any reduction (the framework layer sums them for 'mean' and 'sum').
struct BoxIouLossForwardArgs {
  std::int64_t n = 0;
  const void* boxes1 = nullptr;
  const void* boxes2 = nullptr;
  // CIoU only, optional ([n, 4] each, like boxes1/boxes2): compute the alpha factor from these boxes
  // instead of (boxes1, boxes2). The backward holds alpha constant (torchvision computes it under
  // no_grad); finite-difference checks use this to differentiate exactly what the backward does.
  const void* alpha_boxes1 = nullptr;
  const void* alpha_boxes2 = nullptr;
  void* loss = nullptr;
};

// grad (accumulation type): the upstream gradient of pair i is grad.data[i * grad.stride] * grad.scale
// (common/upstream_grad.h: stride 0 for the scalar of a 'mean' or 'sum' reduction, scale 1/n for 'mean').
// grad_boxes1, grad_boxes2 [n, 4] contiguous, in the boxes' dtype.
struct BoxIouLossBackwardArgs {
  std::int64_t n = 0;
  UpstreamGrad grad;
  const void* boxes1 = nullptr;
  const void* boxes2 = nullptr;
  void* grad_boxes1 = nullptr;
  void* grad_boxes2 = nullptr;
};

// CUDA launchers: validate nothing (the framework layer does), return immediately on empty work, check
// the launch. Asynchronous on `stream`. Each output element is written by one thread: deterministic.
//
// CPU implementations over the same per-element math. `parallel_for(begin, end, body)` may run body on
// disjoint sub-ranges concurrently (rows of the pairwise output, the boxes of a pairwise gradient, pairs of
// the losses); every output element is written once, so the results do not depend on the split.
DETOPS_DECLARE_ENTRY(BoxIouParams, BoxIouPairwiseArgs, box_iou_pairwise);
DETOPS_DECLARE_ENTRY(BoxIouParams, BoxIouPairwiseBackwardArgs, box_iou_pairwise_backward);
DETOPS_DECLARE_ENTRY(BoxIouLossParams, BoxIouLossForwardArgs, box_iou_loss_forward);
DETOPS_DECLARE_ENTRY(BoxIouLossParams, BoxIouLossBackwardArgs, box_iou_loss_backward);

}  // namespace detops
