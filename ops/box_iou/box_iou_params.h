#pragma once
// The box IoU family (IoU, GIoU, DIoU, CIoU), torchvision semantics; DetOps' own definition for degenerate
// boxes as an option (docs/ops/box_iou.md). Boxes are (x1, y1, x2, y2). The one contract shared by the CUDA kernels,
// the CPU implementation, the Eigen reference, the op specs and the torch bindings.
#include <cstdint>

namespace detops {

enum class BoxIouVariant : std::uint8_t {
  kIoU,   // intersection / union
  kGIoU,  // IoU - (enclosing area - union) / enclosing area
  kDIoU,  // IoU - squared center distance / squared enclosing diagonal
  kCIoU,  // DIoU - alpha * v (aspect-ratio consistency term)
};

enum class LossReduction : std::uint8_t { kNone, kMean, kSum };

// The pairwise ops [N, 4] x [M, 4] -> [N, M] (box_iou, generalized_box_iou, distance_box_iou,
// complete_box_iou). eps is added to the squared enclosing diagonal (DIoU, CIoU) and to CIoU's alpha
// denominator, as torchvision does; IoU and GIoU do not use it.
struct BoxIouParams {
  BoxIouVariant variant = BoxIouVariant::kIoU;
  double eps = 1e-7;  // any value, as torchvision (negative, inf and NaN included)
  // false (default): torchvision's quotients for degenerate boxes (NaN, +-inf, -0.0), and its autograd's
  // gradients; true: DetOps' rule (a quotient with a denominator <= 0 is 0, no aspect ratio without an extent).
  bool defined_degenerate = false;
};

// The element-wise losses [N, 4] x [N, 4] -> [N] or a scalar (iou_loss, generalized_box_iou_loss,
// distance_box_iou_loss, complete_box_iou_loss). eps is added to the union, the enclosing area (GIoU)
// and the squared enclosing diagonal (DIoU), as in torchvision; for CIoU see kCiouLossInnerEps.
struct BoxIouLossParams {
  BoxIouVariant variant = BoxIouVariant::kIoU;
  LossReduction reduction = LossReduction::kNone;
  double eps = 1e-7;  // any value, as torchvision (negative, inf and NaN included)
  bool defined_degenerate = false;  // as BoxIouParams'
};

// torchvision's complete_box_iou_loss computes its DIoU part (the union and the diagonal denominators,
// and the IoU inside alpha) with _diou_iou_loss's default eps = 1e-7 whatever eps it is given; its eps
// only enters alpha's denominator. DetOps does the same so it can replace it unchanged.
inline constexpr double kCiouLossInnerEps = 1e-7;

// The torch op (and op spec) names of each variant: torch.ops.detops.<name>.
constexpr const char* box_iou_pairwise_op_name(BoxIouVariant v) {
  switch (v) {
    case BoxIouVariant::kIoU: return "box_iou";
    case BoxIouVariant::kGIoU: return "generalized_box_iou";
    case BoxIouVariant::kDIoU: return "distance_box_iou";
    case BoxIouVariant::kCIoU: return "complete_box_iou";
  }
  return "box_iou_unknown_variant";
}

constexpr const char* box_iou_loss_op_name(BoxIouVariant v) {
  switch (v) {
    case BoxIouVariant::kIoU: return "iou_loss";
    case BoxIouVariant::kGIoU: return "generalized_box_iou_loss";
    case BoxIouVariant::kDIoU: return "distance_box_iou_loss";
    case BoxIouVariant::kCIoU: return "complete_box_iou_loss";
  }
  return "box_iou_loss_unknown_variant";
}

// 4 / pi^2, the scale of CIoU's aspect-ratio term v.
inline constexpr double kCiouAspectScale = 0.40528473456935108578;

}  // namespace detops
