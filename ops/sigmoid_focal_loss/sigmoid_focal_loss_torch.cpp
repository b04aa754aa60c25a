// Sigmoid focal loss as torch ops: torch.ops.detops.sigmoid_focal_loss (argument names, order, defaults and
// errors of torchvision.ops.sigmoid_focal_loss) and torch.ops.detops.sigmoid_focal_loss_mmcv (those of
// mmcv.ops.sigmoid_focal_loss), each with a fused backward op that is differentiable once. Targets (and
// mmcv's weight) get no gradient. Registered with the op kit (docs/op-kit.md).
#include "sigmoid_focal_loss/sigmoid_focal_loss_torch.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <algorithm>
#include <cmath>

#include "common/torch_class_targets.h"

namespace detops {
namespace {

constexpr const char* kOp = "sigmoid_focal_loss";
constexpr const char* kMmcvOp = "sigmoid_focal_loss_mmcv";

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
constexpr ClassTargets kMmcvTargets{kMmcvOp, /*background=*/true};

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

// The launcher (CUDA) or the CPU implementation over args, on x's device. The mmcv form's kernels record
// the first row whose target is not a class index; it is read back and raised (kMmcvTargets.run).
template <typename A>
void run_focal(const at::Tensor& x, const at::Tensor& tc, const SigmoidFocalLossParams& p, std::int64_t classes,
               A& args, Launcher<SigmoidFocalLossParams, A>* launch, CpuEntry<SigmoidFocalLossParams, A>* cpu) {
  if (p.form == FocalLossForm::kMmcv) return kMmcvTargets.run("input", x, tc, classes, p, args, launch, cpu);
  const DType dtype = floating_dtype_of(x, kOp, "inputs");
  run_on_device(
      kOp, "inputs", x, [&](cudaStream_t stream) { launch(p, args, dtype, stream); },
      [&] { cpu(p, args, dtype, aten_parallel_for()); });
}

// The forward of both forms. denominator: what 'mean' divides by. No elements: 'none' is empty, 'sum' 0,
// 'mean' NaN (torchvision's mean of nothing, mmcv's sum / 0).
at::Tensor forward_impl(const at::Tensor& x, const at::Tensor& targets, const at::Tensor& weight,
                        const SigmoidFocalLossParams& p, std::int64_t classes, double denominator) {
  const bool reduce = p.reduction != FocalLossReduction::kNone;
  if (x.numel() == 0 && reduce) {
    return at::full({}, p.reduction == FocalLossReduction::kMean ? std::nan("") : 0.0, x.options());
  }
  at::Tensor out = reduce ? at::empty({}, x.options()) : at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  const at::Tensor xc = x.contiguous(), tc = targets.contiguous();
  const at::Tensor wc = weight.defined() ? weight.contiguous() : at::Tensor();
  at::Tensor partials;
  SigmoidFocalLossForwardArgs args{x.numel(), classes, xc.data_ptr(), tc.data_ptr(),
                                   wc.defined() ? wc.data_ptr() : nullptr, out.data_ptr()};
  if (reduce) {
    partials = at::empty({sigmoid_focal_loss_chunk_count(x.numel())},
                         x.options().dtype(accumulation_scalar_type(x.scalar_type())));
    args.partials = partials.data_ptr();
    args.scale = p.reduction == FocalLossReduction::kMean ? 1.0 / denominator : 1.0;
  }
  run_focal(x, tc, p, classes, args, &launch_sigmoid_focal_loss_forward, &run_sigmoid_focal_loss_forward_cpu);
  return out;
}

// The backward of both forms. The upstream gradient: a scalar or an expanded (all strides 0) tensor is read
// through stride 0, any other through stride 1 (contiguous, copied if need be).
at::Tensor backward_impl(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& targets,
                         const at::Tensor& weight, const SigmoidFocalLossParams& p, std::int64_t classes,
                         double denominator) {
  const char* op = sigmoid_focal_loss_op_name(p.form);
  check_same_device(op, "inputs", x, "grad", grad);
  TORCH_CHECK_TYPE(grad.scalar_type() == x.scalar_type(), op, ": grad dtype (", grad.scalar_type(),
                   ") must be the loss's dtype, ", x.scalar_type());
  const bool reduce = p.reduction != FocalLossReduction::kNone;
  check_loss_grad(op, grad, x.sizes(), reduce, reduction_name(p.reduction));
  at::Tensor grad_inputs = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return grad_inputs;
  const at::Tensor xc = x.contiguous(), tc = targets.contiguous();
  const at::Tensor wc = weight.defined() ? weight.contiguous() : at::Tensor();
  const auto strides = grad.strides();
  const bool stride0 = reduce || std::all_of(strides.begin(), strides.end(), [](std::int64_t s) { return s == 0; });
  const at::Tensor g = stride0 ? grad : grad.contiguous();
  SigmoidFocalLossBackwardArgs args{x.numel(), classes, g.data_ptr(), stride0 ? 0 : 1,
                                    p.reduction == FocalLossReduction::kMean ? 1.0 / denominator : 1.0,
                                    xc.data_ptr(), tc.data_ptr(), wc.defined() ? wc.data_ptr() : nullptr,
                                    grad_inputs.data_ptr()};
  run_focal(x, tc, p, classes, args, &launch_sigmoid_focal_loss_backward, &run_sigmoid_focal_loss_backward_cpu);
  return grad_inputs;
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
  return forward_impl(inputs.to(dtype), targets.to(dtype), at::Tensor(), params, 0, static_cast<double>(inputs.numel()));
}

at::Tensor sigmoid_focal_loss_backward(const at::Tensor& grad, const at::Tensor& inputs, const at::Tensor& targets,
                                       const SigmoidFocalLossParams& params) {
  check_form(params, FocalLossForm::kTorchvision);
  const at::ScalarType dtype = check_torchvision_inputs(inputs, targets);
  return backward_impl(grad, inputs.to(dtype), targets.to(dtype), at::Tensor(), params, 0,
                       static_cast<double>(inputs.numel()))
      .to(inputs.scalar_type());
}

at::Tensor sigmoid_focal_loss_mmcv_forward(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight,
                                           const SigmoidFocalLossParams& params) {
  check_form(params, FocalLossForm::kMmcv);
  kMmcvTargets.check_inputs(input, target, weight);
  return forward_impl(input, target, weight, params, input.size(1), static_cast<double>(input.size(0)));
}

at::Tensor sigmoid_focal_loss_mmcv_backward(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& target,
                                            const at::Tensor& weight, const SigmoidFocalLossParams& params) {
  check_form(params, FocalLossForm::kMmcv);
  kMmcvTargets.check_inputs(input, target, weight);
  return backward_impl(grad, input, target, weight, params, input.size(1), static_cast<double>(input.size(0)));
}

namespace {

// Shape-only forwards for meta tensors (torch.compile's fake tensors), after the kit built the params
// (kMakeParams) and with the same checks. The backward ops' Meta is opkit::EmptyLike, which checks nothing.
at::Tensor meta_out(const at::Tensor& x, const SigmoidFocalLossParams& p) {
  return p.reduction == FocalLossReduction::kNone ? at::empty(x.sizes(), x.options()) : at::empty({}, x.options());
}
at::Tensor focal_meta(const at::Tensor& inputs, const at::Tensor& targets, const SigmoidFocalLossParams& p) {
  return meta_out(inputs.to(check_torchvision_inputs(inputs, targets)), p);
}
at::Tensor mmcv_meta(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight,
                     const SigmoidFocalLossParams& p) {
  kMmcvTargets.check_inputs(input, target, weight);
  return meta_out(input, p);
}

using P = SigmoidFocalLossParams;
using opkit::Field;
using opkit::OptionalTensor;
using opkit::Tensor;
using Reduction = opkit::Str<&P::reduction, &reduction_name<FocalLossReduction>>;

// The forwards' autograd: opkit::GradFirstThenInputs (only the logits get a gradient; see
// docs/ops/sigmoid_focal_loss.md).
template <typename Backward>
using FocalForwardDef = opkit::GradFirstThenInputs<P, Backward>;

// The backward ops: differentiable once; Meta is an empty tensor like the logits (the scalars unchecked).
struct FocalBackwardDef : opkit::OpDef<P> {
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kOnce;
  static constexpr opkit::EmptyLike<1> kMeta{};
};

struct Backward : FocalBackwardDef {
  static constexpr const char* kSchema =
      "_sigmoid_focal_loss_backward(Tensor grad, Tensor inputs, Tensor targets, float alpha, float gamma, "
      "str reduction) -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Tensor, Field<&P::alpha>, Field<&P::gamma>, Reduction>;
  static constexpr auto kMakeParams = &make_sigmoid_focal_loss_params;  // (alpha, gamma, reduction)
  static constexpr auto kCompute = &sigmoid_focal_loss_backward;
  static constexpr const char* kOpName = kOp;
};

struct Forward : FocalForwardDef<Backward> {
  static constexpr const char* kSchema =
      "sigmoid_focal_loss(Tensor inputs, Tensor targets, float alpha=0.25, float gamma=2, "
      "str reduction=\"none\") -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Field<&P::alpha>, Field<&P::gamma>, Reduction>;
  static constexpr auto kMakeParams = &make_sigmoid_focal_loss_params;
  static constexpr auto kCompute = &sigmoid_focal_loss_forward;
  static constexpr auto kMeta = &focal_meta;
};

struct MmcvBackward : FocalBackwardDef {
  static constexpr const char* kSchema =
      "_sigmoid_focal_loss_mmcv_backward(Tensor grad, Tensor input, Tensor target, float gamma, float alpha, "
      "Tensor? weight, str reduction) -> Tensor";
  using Args =
      opkit::Args<Tensor, Tensor, Tensor, Field<&P::gamma>, Field<&P::alpha>, OptionalTensor, Reduction>;
  static constexpr auto kMakeParams = &make_sigmoid_focal_loss_mmcv_params;  // (gamma, alpha, reduction)
  static constexpr auto kCompute = &sigmoid_focal_loss_mmcv_backward;
  static constexpr const char* kOpName = kMmcvOp;
};

struct MmcvForward : FocalForwardDef<MmcvBackward> {
  static constexpr const char* kSchema =
      "sigmoid_focal_loss_mmcv(Tensor input, Tensor target, float gamma=2.0, float alpha=0.25, "
      "Tensor? weight=None, str reduction=\"mean\") -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Field<&P::gamma>, Field<&P::alpha>, OptionalTensor, Reduction>;
  static constexpr auto kMakeParams = &make_sigmoid_focal_loss_mmcv_params;
  static constexpr auto kCompute = &sigmoid_focal_loss_mmcv_forward;
  static constexpr auto kMeta = &mmcv_meta;
};

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) {
  detops::opkit::define<detops::Forward, detops::Backward, detops::MmcvForward, detops::MmcvBackward>(m);
}
