#pragma once
// Box IoU family references in double, written from the definition (docs/ops/box_iou.md), in both
// degenerate-box modes (the params' defined_degenerate). Shares nothing with the kernels but the parameter
// structs. The gradients (pairwise and losses) come from reverse-mode automatic differentiation of the forward
// over a tape with torch autograd's local derivatives, not from a hand-derived chain rule.
#include "box_iou/box_iou_params.h"
#include "detops/reference/tensor.h"

namespace detops::reference {

// boxes1 [N, 4], boxes2 [M, 4] of (x1, y1, x2, y2) -> [N, M]: IoU, GIoU, DIoU or CIoU of every pair.
Matrixd box_iou_pairwise(const BoxIouParams& params, const Matrixd& boxes1, const Matrixd& boxes2);

struct BoxIouGrads {
  Matrixd boxes1;  // shaped like boxes1
  Matrixd boxes2;  // shaped like boxes2
};
using BoxIouLossGrads = BoxIouGrads;

// The gradient of <grad, box_iou_pairwise(boxes)> (grad [N, M]) with torch autograd's conventions at the
// kinks of torchvision's formulas: a max / min tie splits the derivative equally, a clamp at 0 passes it where
// its input is >= 0, CIoU's alpha is a constant; a division by 0 gives torch's NaN / +-inf (terms defined as 0,
// under DetOps' rule, have no gradient). NaN for every coordinate of a box in a pair with a non-finite
// coordinate.
BoxIouGrads box_iou_pairwise_backward(const BoxIouParams& params, const Matrixd& boxes1, const Matrixd& boxes2,
                                      const Matrixd& grad);

// boxes1, boxes2 [N, 4] -> the loss of each pair ([N], reduction 'none') or their mean or sum (one
// element). CIoU: alpha is computed from (alpha_boxes1, alpha_boxes2) when given, else from the boxes.
Vectord box_iou_loss_forward(const BoxIouLossParams& params, const Matrixd& boxes1, const Matrixd& boxes2,
                             const Matrixd* alpha_boxes1 = nullptr, const Matrixd* alpha_boxes2 = nullptr);

// The gradient of <grad, box_iou_loss_forward(boxes)> (grad: [N] for 'none', one element otherwise),
// with CIoU's alpha held constant and every max / min tie split equally between its two arguments.
BoxIouLossGrads box_iou_loss_backward(const BoxIouLossParams& params, const Matrixd& boxes1, const Matrixd& boxes2,
                                      const Vectord& grad);

}  // namespace detops::reference
