#pragma once
// C++ entry points of the box IoU torch ops (no autograd): what torch.ops.detops.{box_iou,
// generalized_box_iou, distance_box_iou, complete_box_iou} and the *_loss ops run on CPU and CUDA
// tensors. The harness calls these directly.
#include <ATen/core/Tensor.h>

#include <string>
#include <tuple>

#include "box_iou/box_iou.h"

namespace detops {

// Outputs are float64 for float64 boxes and float32 for float32, float16 and bfloat16 boxes (torchvision's
// ops also return float32 for half-precision boxes); gradients have the boxes' dtype.

// boxes1 [N, 4], boxes2 [M, 4] (x1, y1, x2, y2), any strides, one floating dtype and device -> [N, M]
// contiguous.
at::Tensor box_iou_pairwise(const at::Tensor& boxes1, const at::Tensor& boxes2, const BoxIouParams& params);

// boxes1, boxes2 [N, 4] -> the per-pair losses [N] (reduction 'none') or their mean or sum as a 0-d
// tensor.
at::Tensor box_iou_loss_forward(const at::Tensor& boxes1, const at::Tensor& boxes2, const BoxIouLossParams& params);

// grad shaped like the forward's output ([N], any strides, or 0-d) and of its dtype -> (grad_boxes1,
// grad_boxes2), [N, 4] contiguous in the boxes' dtype.
std::tuple<at::Tensor, at::Tensor> box_iou_loss_backward(const at::Tensor& grad, const at::Tensor& boxes1,
                                                         const at::Tensor& boxes2, const BoxIouLossParams& params);

// The complete_box_iou_loss forward with alpha computed from (alpha_boxes1, alpha_boxes2) (shaped like
// boxes1) instead of (boxes1, boxes2): the function whose gradient box_iou_loss_backward computes at
// boxes == alpha_boxes (alpha held constant, as torchvision does). For finite-difference checks.
at::Tensor complete_box_iou_loss_alpha_at(const at::Tensor& boxes1, const at::Tensor& boxes2,
                                          const at::Tensor& alpha_boxes1, const at::Tensor& alpha_boxes2,
                                          const BoxIouLossParams& params);

// The schema's strings: reduction 'none' | 'mean' | 'sum' (ValueError otherwise, naming `op`), and the
// variant names of _box_iou_loss_backward: 'iou' | 'giou' | 'diou' | 'ciou'.
LossReduction parse_loss_reduction(const std::string& reduction, const char* op);
const char* loss_reduction_name(LossReduction reduction);
BoxIouVariant parse_box_iou_variant(const std::string& variant, const char* op);
const char* box_iou_variant_name(BoxIouVariant variant);

// Loss params from the schema's arguments, validated (reduction string, eps finite and >= 0).
BoxIouLossParams make_box_iou_loss_params(BoxIouVariant variant, const std::string& reduction, double eps);

}  // namespace detops
