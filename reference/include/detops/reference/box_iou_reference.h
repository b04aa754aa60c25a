#pragma once
// Box IoU family references in double, written from the definition (docs/ops/box_iou.md). Shares nothing
// with the kernels but the parameter structs. The loss gradients come from forward-mode automatic
// differentiation (Eigen's AutoDiffScalar) of the forward, not from a hand-derived chain rule.
#include "box_iou/box_iou_params.h"
#include "detops/reference/tensor.h"

namespace detops::reference {

// boxes1 [N, 4], boxes2 [M, 4] of (x1, y1, x2, y2) -> [N, M]: IoU, GIoU, DIoU or CIoU of every pair.
Matrixd box_iou_pairwise(const BoxIouParams& params, const Matrixd& boxes1, const Matrixd& boxes2);

// boxes1, boxes2 [N, 4] -> the loss of each pair ([N], reduction 'none') or their mean or sum (one
// element). CIoU: alpha is computed from (alpha_boxes1, alpha_boxes2) when given, else from the boxes.
Vectord box_iou_loss_forward(const BoxIouLossParams& params, const Matrixd& boxes1, const Matrixd& boxes2,
                             const Matrixd* alpha_boxes1 = nullptr, const Matrixd* alpha_boxes2 = nullptr);

struct BoxIouLossGrads {
  Matrixd boxes1;  // [N, 4]
  Matrixd boxes2;  // [N, 4]
};

// The gradient of <grad, box_iou_loss_forward(boxes)> (grad: [N] for 'none', one element otherwise),
// with CIoU's alpha held constant and every max / min tie split equally between its two arguments.
BoxIouLossGrads box_iou_loss_backward(const BoxIouLossParams& params, const Matrixd& boxes1, const Matrixd& boxes2,
                                      const Vectord& grad);

}  // namespace detops::reference
