#pragma once
// Sigmoid focal loss (RetinaNet), in torchvision's form and in mmcv's (docs/ops/sigmoid_focal_loss.md).
// The one contract shared by the CUDA kernels, the CPU implementation, the Eigen reference, the op specs
// and the torch bindings.
#include <cstdint>

namespace detops {

enum class FocalLossForm : std::uint8_t {
  // torchvision.ops.sigmoid_focal_loss: logits of any shape, float targets of the same shape (any value in
  // [0, 1] is accepted, as by torchvision's formula); alpha = -1 disables the alpha weighting.
  kTorchvision,
  // mmcv.ops.sigmoid_focal_loss: logits [N, C], int64 class targets [N] in [0, C] (C = background: every
  // logit of the row is a negative), optional per-class weight [C] applied as weight[target[n]] to every
  // element of row n (rows of the background class are unweighted), 'mean' divides by N.
  kMmcv,
};

enum class FocalLossReduction : std::uint8_t { kNone, kMean, kSum };

struct SigmoidFocalLossParams {
  FocalLossForm form = FocalLossForm::kTorchvision;
  double alpha = 0.25;  // torchvision: in [0, 1] or -1 (no alpha weighting); mmcv: any finite value, used as is
  double gamma = 2.0;   // finite, >= 0
  FocalLossReduction reduction = FocalLossReduction::kNone;
};

// The torch op (and op spec) names of each form: torch.ops.detops.<name>.
constexpr const char* sigmoid_focal_loss_op_name(FocalLossForm form) {
  return form == FocalLossForm::kMmcv ? "sigmoid_focal_loss_mmcv" : "sigmoid_focal_loss";
}

// Reductions sum fixed chunks of this many consecutive elements into partial sums (in the accumulation
// type), then the partial sums in order: the result does not depend on the device's size or the thread
// count, and no partial sum ever lives in a half type.
inline constexpr std::int64_t kFocalLossChunk = 2048;

constexpr std::int64_t sigmoid_focal_loss_chunk_count(std::int64_t numel) {
  return (numel + kFocalLossChunk - 1) / kFocalLossChunk;
}

}  // namespace detops
