// Softmax focal loss as a torch op: torch.ops.detops.softmax_focal_loss (the argument names, order and defaults
// of mmcv.ops.softmax_focal_loss) with a fused backward op that is differentiable once. target and weight get
// no gradient. Registered with the op kit (docs/op-kit.md).
#include "softmax_focal_loss/softmax_focal_loss_torch.h"

#include <cmath>

#include "common/torch_class_targets.h"
#include "common/torch_logit_loss.h"

namespace detops {
namespace {

constexpr const char* kOp = "softmax_focal_loss";

void check_params(const SoftmaxFocalLossParams& p) {
  TORCH_CHECK_VALUE(std::isfinite(p.gamma), kOp, ": Invalid gamma value: ", p.gamma, ". gamma must be finite");
  TORCH_CHECK_VALUE(std::isfinite(p.alpha), kOp, ": Invalid alpha value: ", p.alpha, ". alpha must be finite");
}

// Targets in [0, C), negative ones marking ignored rows (mmcv's kernels skip label < 0); C >= 1; one loss per row.
constexpr ClassTargets kTargets{kOp, /*background=*/false, /*negative_ignored=*/true, /*min_classes=*/1,
                                /*row_losses=*/true};

// The rows of input [N, C]: N losses ('none': [N]), 'mean' dividing by N (ignored rows counted, as mmcv).
LogitLossExtent extent(const at::Tensor& input) {
  return {input.size(0), input.size(1), kTargets.none_shape(input), static_cast<double>(input.size(0))};
}

}  // namespace

SoftmaxFocalLossParams make_softmax_focal_loss_params(double gamma, double alpha, const std::string& reduction) {
  SoftmaxFocalLossParams p{gamma, alpha};
  check_params(p);
  p.reduction = parse_reduction<SoftmaxFocalLossReduction>(kOp, reduction);
  return p;
}

// The launches run on the contiguous input; the kernels' invalid targets are raised (kTargets.run).
at::Tensor softmax_focal_loss_forward(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight,
                                      const SoftmaxFocalLossParams& params) {
  check_params(params);
  kTargets.check_inputs(input, target, weight);
  return logit_loss_forward(input, target, weight, params.reduction, extent(input),
                            softmax_focal_loss_chunk_count(input.size(0)),
                            [&](const LogitLossInputs& in, SoftmaxFocalLossForwardArgs& args) {
                              kTargets.run("input", in.x, in.target, args.classes, params, args,
                                           &launch_softmax_focal_loss_forward, &run_softmax_focal_loss_forward_cpu);
                            });
}

at::Tensor softmax_focal_loss_backward(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& target,
                                       const at::Tensor& weight, const SoftmaxFocalLossParams& params) {
  check_params(params);
  kTargets.check_inputs(input, target, weight);
  return logit_loss_backward(kOp, "input", grad, input, target, weight, params.reduction, extent(input),
                             [&](const LogitLossInputs& in, SoftmaxFocalLossBackwardArgs& args) {
                               kTargets.run("input", in.x, in.target, args.classes, params, args,
                                            &launch_softmax_focal_loss_backward, &run_softmax_focal_loss_backward_cpu);
                             });
}

namespace {

// The op kit definitions (common/torch_class_targets.h): mmcv's argument names, order and defaults.
using Ops = ClassTargetLossOps<kTargets, SoftmaxFocalLossParams, &make_softmax_focal_loss_params,
                               &softmax_focal_loss_forward, &softmax_focal_loss_backward>;

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) { detops::opkit::define<detops::Ops::ForwardDef, detops::Ops::BackwardDef>(m); }
