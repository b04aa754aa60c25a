#pragma once
// C++ entry points of the box IoU torch ops (no autograd): what torch.ops.detops.{box_iou,
// generalized_box_iou, distance_box_iou, complete_box_iou}, the *_loss ops and their backward ops run on
// CPU and CUDA tensors. The harness calls these directly.
#include <ATen/core/Tensor.h>

#include <string>
#include <tuple>

#include "box_iou/box_iou.h"

namespace detops {

// Dtypes as torchvision's: the boxes are computed in their promoted dtype (integer and bool boxes in
// float32; float16 / bfloat16 in float32 arithmetic); outputs are float64 for float64 computation and
// float32 otherwise; gradients have each box tensor's dtype.

// boxes1 [..., N, 4] (or one box [4]), boxes2 [..., M, 4] (x1, y1, x2, y2), leading dimensions broadcast,
// any strides, one device -> [..., N, M] contiguous.
at::Tensor box_iou_pairwise(const at::Tensor& boxes1, const at::Tensor& boxes2, const BoxIouParams& params);

// grad shaped like the pairwise output [..., N, M] and of its dtype (any strides, stride 0 included) ->
// (grad_boxes1, grad_boxes2) shaped like boxes1 and boxes2, each summed over the dimensions it was broadcast
// along: torchvision's autograd through its pairwise formulas (docs/ops/box_iou.md, Backward).
std::tuple<at::Tensor, at::Tensor> box_iou_pairwise_backward(const at::Tensor& grad, const at::Tensor& boxes1,
                                                             const at::Tensor& boxes2, const BoxIouParams& params);

// boxes1 [..., 4] and boxes2 broadcastable to boxes1's shape -> the per-pair losses shaped like boxes1
// without its last dimension (reduction 'none') or their mean or sum as a 0-d tensor.
at::Tensor box_iou_loss_forward(const at::Tensor& boxes1, const at::Tensor& boxes2, const BoxIouLossParams& params);

// grad shaped like the forward's output (any strides, stride 0 included, or 0-d) and of its dtype ->
// (grad_boxes1, grad_boxes2) shaped like boxes1 and boxes2 (boxes2's summed over its broadcast dimensions).
std::tuple<at::Tensor, at::Tensor> box_iou_loss_backward(const at::Tensor& grad, const at::Tensor& boxes1,
                                                         const at::Tensor& boxes2, const BoxIouLossParams& params);

// The complete_box_iou_loss forward with alpha computed from (alpha_boxes1, alpha_boxes2) (shaped like
// boxes1) instead of (boxes1, boxes2): the function whose gradient box_iou_loss_backward computes at
// boxes == alpha_boxes (alpha held constant, as torchvision does). For finite-difference checks.
at::Tensor complete_box_iou_loss_alpha_at(const at::Tensor& boxes1, const at::Tensor& boxes2,
                                          const at::Tensor& alpha_boxes1, const at::Tensor& alpha_boxes2,
                                          const BoxIouLossParams& params);

// The variant names of _box_iou_pairwise_backward and _box_iou_loss_backward: 'iou' | 'giou' | 'diou' | 'ciou' (ValueError otherwise,
// naming `op`). The reduction is parsed by parse_reduction<LossReduction> (common/torch_utils.h).
BoxIouVariant parse_box_iou_variant(const std::string& variant, const char* op);
const char* box_iou_variant_name(BoxIouVariant variant);

// Loss params from the schema's arguments: the reduction string parsed (torchvision's ValueError
// otherwise); eps taken as it is (any float, as torchvision).
BoxIouLossParams make_box_iou_loss_params(BoxIouVariant variant, const std::string& reduction, double eps,
                                          bool defined_degenerate = false);

}  // namespace detops
