// Sigmoid focal loss as torch ops: torch.ops.detops.sigmoid_focal_loss (argument names, order, defaults and
// errors of torchvision.ops.sigmoid_focal_loss) and torch.ops.detops.sigmoid_focal_loss_mmcv (those of
// mmcv.ops.sigmoid_focal_loss), each with a fused backward op that is differentiable once. Targets (and
// mmcv's weight) get no gradient. Registered with the op kit (docs/op-kit.md).
#include "sigmoid_focal_loss/sigmoid_focal_loss_torch.h"

#include <cmath>

#include "common/torch_class_targets.h"
#include "common/torch_logit_loss.h"

namespace detops {
namespace {

constexpr const char* kOp = "sigmoid_focal_loss";

void check_params(const SigmoidFocalLossParams& p) {
  const char* op = sigmoid_focal_loss_op_name(p.form);
  if (p.form == FocalLossForm::kTorchvision) {
    TORCH_CHECK_VALUE((p.alpha >= 0 && p.alpha <= 1) || p.alpha == -1, op, ": Invalid alpha value: ", p.alpha,
                      ". alpha must be in the range [0,1] or -1 for ignore.");
  } else {
    TORCH_CHECK_VALUE(std::isfinite(p.alpha), op, ": Invalid alpha value: ", p.alpha, ". alpha must be finite");
  }
  // Any finite gamma, negative ones included, as torchvision and mmcv accept.
  TORCH_CHECK_VALUE(std::isfinite(p.gamma), op, ": Invalid gamma value: ", p.gamma, ". gamma must be finite");
}

// The mmcv form's targets: [0, C], C being the background class.
constexpr ClassTargets kMmcvTargets{sigmoid_focal_loss_op_name(FocalLossForm::kMmcv), /*background=*/true};

// torchvision form: shapes and dtypes (also the Meta kernel's checks), with torchvision's error types
// (NotImplementedError for integer logits, RuntimeError for integer targets). Returns the loss's dtype:
// inputs and targets of two floating dtypes are promoted, as torchvision's formula promotes them.
at::ScalarType check_torchvision_inputs(const at::Tensor& inputs, const at::Tensor& targets) {
  floating_dtype_or_not_implemented(inputs, kOp, "inputs");
  TORCH_CHECK(at::isFloatingType(targets.scalar_type()), kOp,
              ": targets must be a floating-point tensor (0/1 or soft labels); got ", targets.scalar_type());
  floating_dtype_of(targets, kOp, "targets");  // then the promoted dtype is one of the kernels' too
  const at::ScalarType dtype = at::promote_types(inputs.scalar_type(), targets.scalar_type());
  check_same_device(kOp, "inputs", inputs, "targets", targets);
  TORCH_CHECK_VALUE(targets.sizes() == inputs.sizes(), kOp, ": targets must have the shape of inputs ",
                    shape_string(inputs.sizes()), "; got ", shape_string(targets.sizes()));
  return dtype;
}

// Both forms compute one loss per logit ('none': x's shape); 'mean' divides by denominator.
LogitLossExtent extent(const at::Tensor& x, std::int64_t classes, double denominator) {
  return {x.numel(), classes, x.sizes().vec(), denominator};
}

// The launcher (CUDA) or the CPU implementation over args, on x's device. The mmcv form's kernels record
// the first row whose target is not a class index; it is read back and raised (kMmcvTargets.run).
template <typename A>
void run_focal(const at::Tensor& x, const at::Tensor& tc, const SigmoidFocalLossParams& p, A& args,
               Launcher<SigmoidFocalLossParams, A>* launch, CpuEntry<SigmoidFocalLossParams, A>* cpu) {
  if (p.form == FocalLossForm::kMmcv) return kMmcvTargets.run("input", x, tc, args.classes, p, args, launch, cpu);
  const DType dtype = floating_dtype_of(x, kOp, "inputs");
  run_on_device(
      kOp, "inputs", x, [&](cudaStream_t stream) { launch(p, args, dtype, stream); },
      [&] { cpu(p, args, dtype, aten_parallel_for()); });
}

// The forward and backward of both forms (common/torch_logit_loss.h).
at::Tensor forward_impl(const at::Tensor& x, const at::Tensor& targets, const at::Tensor& weight,
                        const SigmoidFocalLossParams& p, const LogitLossExtent& e) {
  return logit_loss_forward(x, targets, weight, p.reduction, e, sigmoid_focal_loss_chunk_count(e.n),
                            [&](const LogitLossInputs& in, SigmoidFocalLossForwardArgs& args) {
                              run_focal(x, in.target, p, args, &launch_sigmoid_focal_loss_forward,
                                        &run_sigmoid_focal_loss_forward_cpu);
                            });
}

at::Tensor backward_impl(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& targets,
                         const at::Tensor& weight, const SigmoidFocalLossParams& p, const LogitLossExtent& e) {
  return logit_loss_backward(sigmoid_focal_loss_op_name(p.form), "inputs", grad, x, targets, weight, p.reduction, e,
                             [&](const LogitLossInputs& in, SigmoidFocalLossBackwardArgs& args) {
                               run_focal(x, in.target, p, args, &launch_sigmoid_focal_loss_backward,
                                         &run_sigmoid_focal_loss_backward_cpu);
                             });
}

SigmoidFocalLossParams checked(SigmoidFocalLossParams p, const std::string& reduction) {
  check_params(p);
  p.reduction = parse_reduction<FocalLossReduction>(sigmoid_focal_loss_op_name(p.form), reduction);
  return p;
}

void check_form(const SigmoidFocalLossParams& p, FocalLossForm form) {
  TORCH_CHECK_VALUE(p.form == form, sigmoid_focal_loss_op_name(form), ": params of the other form");
  check_params(p);
}

}  // namespace

SigmoidFocalLossParams make_sigmoid_focal_loss_params(double alpha, double gamma, const std::string& reduction) {
  return checked({FocalLossForm::kTorchvision, alpha, gamma}, reduction);
}

SigmoidFocalLossParams make_sigmoid_focal_loss_mmcv_params(double gamma, double alpha, const std::string& reduction) {
  return checked({FocalLossForm::kMmcv, alpha, gamma}, reduction);
}

at::Tensor sigmoid_focal_loss_forward(const at::Tensor& inputs, const at::Tensor& targets,
                                      const SigmoidFocalLossParams& params) {
  check_form(params, FocalLossForm::kTorchvision);
  const at::ScalarType dtype = check_torchvision_inputs(inputs, targets);
  const at::Tensor x = inputs.to(dtype);
  return forward_impl(x, targets.to(dtype), at::Tensor(), params, extent(x, 0, static_cast<double>(inputs.numel())));
}

at::Tensor sigmoid_focal_loss_backward(const at::Tensor& grad, const at::Tensor& inputs, const at::Tensor& targets,
                                       const SigmoidFocalLossParams& params) {
  check_form(params, FocalLossForm::kTorchvision);
  const at::ScalarType dtype = check_torchvision_inputs(inputs, targets);
  const at::Tensor x = inputs.to(dtype);
  return backward_impl(grad, x, targets.to(dtype), at::Tensor(), params,
                       extent(x, 0, static_cast<double>(inputs.numel())))
      .to(inputs.scalar_type());
}

at::Tensor sigmoid_focal_loss_mmcv_forward(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight,
                                           const SigmoidFocalLossParams& params) {
  check_form(params, FocalLossForm::kMmcv);
  kMmcvTargets.check_inputs(input, target, weight);
  return forward_impl(input, target, weight, params,
                      extent(input, input.size(1), static_cast<double>(input.size(0))));
}

at::Tensor sigmoid_focal_loss_mmcv_backward(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& target,
                                            const at::Tensor& weight, const SigmoidFocalLossParams& params) {
  check_form(params, FocalLossForm::kMmcv);
  kMmcvTargets.check_inputs(input, target, weight);
  return backward_impl(grad, input, target, weight, params,
                       extent(input, input.size(1), static_cast<double>(input.size(0))));
}

namespace {

// The torchvision form's shape-only forward for meta tensors (torch.compile's fake tensors), after the kit built
// the params (kMakeParams) and with the same checks.
at::Tensor focal_meta(const at::Tensor& inputs, const at::Tensor& targets, const SigmoidFocalLossParams& p) {
  const at::Tensor x = inputs.to(check_torchvision_inputs(inputs, targets));
  return p.reduction == FocalLossReduction::kNone ? at::empty(x.sizes(), x.options()) : at::empty({}, x.options());
}

using P = SigmoidFocalLossParams;
using opkit::Field;
using opkit::Tensor;
using Reduction = opkit::Str<&P::reduction, &reduction_name<FocalLossReduction>>;

// The torchvision form: torchvision's argument names, order and defaults. Only the logits get a gradient
// (opkit::GradFirstThenInputs); the backward op is differentiable once, its Meta an empty tensor like the logits
// (the scalars unchecked).
struct Backward : opkit::OpDef<P> {
  static constexpr const char* kSchema =
      "_sigmoid_focal_loss_backward(Tensor grad, Tensor inputs, Tensor targets, float alpha, float gamma, "
      "str reduction) -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Tensor, Field<&P::alpha>, Field<&P::gamma>, Reduction>;
  static constexpr auto kMakeParams = &make_sigmoid_focal_loss_params;  // (alpha, gamma, reduction)
  static constexpr auto kCompute = &sigmoid_focal_loss_backward;
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kOnce;
  static constexpr opkit::EmptyLike<1> kMeta{};
  static constexpr const char* kOpName = kOp;
};

struct Forward : opkit::GradFirstThenInputs<P, Backward> {
  static constexpr const char* kSchema =
      "sigmoid_focal_loss(Tensor inputs, Tensor targets, float alpha=0.25, float gamma=2, "
      "str reduction=\"none\") -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Field<&P::alpha>, Field<&P::gamma>, Reduction>;
  static constexpr auto kMakeParams = &make_sigmoid_focal_loss_params;
  static constexpr auto kCompute = &sigmoid_focal_loss_forward;
  static constexpr auto kMeta = &focal_meta;
};

// The mmcv form (common/torch_class_targets.h): mmcv's argument names, order and defaults.
using Mmcv = ClassTargetLossOps<kMmcvTargets, P, &make_sigmoid_focal_loss_mmcv_params, &sigmoid_focal_loss_mmcv_forward,
                                &sigmoid_focal_loss_mmcv_backward>;

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) {
  detops::opkit::define<detops::Forward, detops::Backward, detops::Mmcv::ForwardDef, detops::Mmcv::BackwardDef>(m);
}
