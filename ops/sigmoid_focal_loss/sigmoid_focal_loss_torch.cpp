// Sigmoid focal loss as torch ops: torch.ops.detops.sigmoid_focal_loss (argument names, order, defaults and
// errors of torchvision.ops.sigmoid_focal_loss) and torch.ops.detops.sigmoid_focal_loss_mmcv (those of
// mmcv.ops.sigmoid_focal_loss), each with a fused backward op that is differentiable once. Targets (and
// mmcv's weight) get no gradient. Registered with the op kit (docs/op-kit.md).
#include "sigmoid_focal_loss/sigmoid_focal_loss_torch.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <c10/cuda/CUDAGuard.h>

#include <cmath>
#include <limits>

#include "common/torch_op_kit.h"
#include "common/torch_utils.h"

namespace detops {
namespace {

constexpr const char* kOp = "sigmoid_focal_loss";
constexpr const char* kMmcvOp = "sigmoid_focal_loss_mmcv";

cudaStream_t current_stream(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

FocalLossReduction parse_reduction(const std::string& reduction, const char* op) {
  if (reduction == "none") return FocalLossReduction::kNone;
  if (reduction == "mean") return FocalLossReduction::kMean;
  if (reduction == "sum") return FocalLossReduction::kSum;
  TORCH_CHECK_VALUE(false, op, ": Invalid Value for arg 'reduction': '", reduction,
                    "'. Supported reduction modes: 'none', 'mean', 'sum'");
}

void check_gamma(const char* op, double gamma) {
  TORCH_CHECK_VALUE(std::isfinite(gamma) && gamma >= 0, op, ": Invalid gamma value: ", gamma,
                    ". gamma must be a finite number >= 0");
}

void check_params(const SigmoidFocalLossParams& p) {
  const char* op = sigmoid_focal_loss_op_name(p.form);
  if (p.form == FocalLossForm::kTorchvision) {
    TORCH_CHECK_VALUE((p.alpha >= 0 && p.alpha <= 1) || p.alpha == -1, op, ": Invalid alpha value: ", p.alpha,
                      ". alpha must be in the range [0,1] or -1 for ignore.");
  } else {
    TORCH_CHECK_VALUE(std::isfinite(p.alpha), op, ": Invalid alpha value: ", p.alpha, ". alpha must be finite");
  }
  check_gamma(op, p.gamma);
}

void check_device(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK(t.is_cpu() || t.is_cuda(), op, ": ", name, " must be a CPU or CUDA tensor; got ", t.device());
}

// The reduced value of no elements: torchvision's mean of an empty tensor is NaN (0 / 0), a sum 0; mmcv's
// mean is sum / N, NaN for N = 0.
at::Tensor empty_reduction(const at::TensorOptions& options, double denominator, FocalLossReduction reduction) {
  const double value =
      reduction == FocalLossReduction::kMean && denominator == 0 ? std::numeric_limits<double>::quiet_NaN() : 0.0;
  return at::full({}, value, options);
}

// The element-wise forward of both forms. denominator: what 'mean' divides by.
at::Tensor forward_impl(const at::Tensor& x, const at::Tensor& targets, const at::Tensor& weight,
                        const SigmoidFocalLossParams& params, std::int64_t num_classes, double denominator) {
  const DType dtype = floating_dtype_of(x, sigmoid_focal_loss_op_name(params.form), "inputs");
  const std::int64_t numel = x.numel();
  const bool reduce = params.reduction != FocalLossReduction::kNone;
  if (numel == 0) {
    return reduce ? empty_reduction(x.options(), denominator, params.reduction) : at::empty(x.sizes(), x.options());
  }
  const at::Tensor xc = x.contiguous(), tc = targets.contiguous();
  const at::Tensor wc = weight.defined() ? weight.contiguous() : at::Tensor();
  at::Tensor out = reduce ? at::empty({}, x.options()) : at::empty(x.sizes(), x.options());
  at::Tensor partials;
  SigmoidFocalLossForwardArgs args;
  args.numel = numel;
  args.num_classes = num_classes;
  args.inputs = xc.data_ptr();
  args.targets = tc.data_ptr();
  args.weight = wc.defined() ? wc.data_ptr() : nullptr;
  args.out = out.data_ptr();
  if (reduce) {
    partials = at::empty({sigmoid_focal_loss_chunk_count(numel)},
                         x.options().dtype(accumulation_scalar_type(x.scalar_type())));
    args.partials = partials.data_ptr();
    args.scale = params.reduction == FocalLossReduction::kMean ? 1.0 / denominator : 1.0;
  }
  if (x.is_cuda()) {
    c10::cuda::CUDAGuard guard(x.device());
    const cudaStream_t stream = current_stream(x);
    if (params.form == FocalLossForm::kMmcv) {
      FirstInvalidRow invalid(tc, stream);
      args.first_invalid_row = invalid.get();
      launch_sigmoid_focal_loss_forward(params, args, dtype, stream);
      const std::int64_t row = invalid.read();
      TORCH_CHECK_INDEX(row < 0, kMmcvOp, ": target[", row, "] = ", row < 0 ? 0 : tc[row].item<std::int64_t>(),
                        " is not a class index: expected a value in [0, ", num_classes, "] (", num_classes,
                        " = background)");
    } else {
      launch_sigmoid_focal_loss_forward(params, args, dtype, stream);
    }
  } else {
    run_sigmoid_focal_loss_forward_cpu(params, args, dtype, aten_parallel_for());
  }
  return out;
}

at::Tensor backward_impl(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& targets,
                         const at::Tensor& weight, const SigmoidFocalLossParams& params, std::int64_t num_classes,
                         double denominator) {
  const char* op = sigmoid_focal_loss_op_name(params.form);
  const DType dtype = floating_dtype_of(x, op, "inputs");
  check_same_device(op, "inputs", x, "grad", grad);
  TORCH_CHECK_TYPE(grad.scalar_type() == x.scalar_type(), op, ": grad dtype (", grad.scalar_type(),
                   ") must be the loss's dtype, ", x.scalar_type());
  const bool reduce = params.reduction != FocalLossReduction::kNone;
  if (reduce) {
    TORCH_CHECK_VALUE(grad.dim() == 0, op, ": grad must be a 0-d tensor for reduction '",
                      focal_loss_reduction_name(params.reduction), "'; got shape ", shape_string(grad.sizes()));
  } else {
    TORCH_CHECK_VALUE(grad.sizes() == x.sizes(), op, ": grad must have the loss's shape ", shape_string(x.sizes()),
                      " for reduction 'none'; got shape ", shape_string(grad.sizes()));
  }
  at::Tensor grad_inputs = at::empty(x.sizes(), x.options());
  const std::int64_t numel = x.numel();
  if (numel == 0) return grad_inputs;
  const at::Tensor xc = x.contiguous(), tc = targets.contiguous();
  const at::Tensor wc = weight.defined() ? weight.contiguous() : at::Tensor();
  // The upstream gradient: a scalar or an expanded (all strides 0) tensor is read through stride 0, a
  // contiguous one through stride 1; anything else is copied first.
  at::Tensor g = grad;
  std::int64_t grad_stride = 0;
  if (!reduce) {
    bool expanded = true;
    for (const std::int64_t s : grad.strides()) expanded = expanded && s == 0;
    if (!expanded) {
      g = grad.contiguous();
      grad_stride = 1;
    }
  }
  SigmoidFocalLossBackwardArgs args;
  args.numel = numel;
  args.num_classes = num_classes;
  args.grad = g.data_ptr();
  args.grad_stride = grad_stride;
  args.grad_scale = params.reduction == FocalLossReduction::kMean ? 1.0 / denominator : 1.0;
  args.inputs = xc.data_ptr();
  args.targets = tc.data_ptr();
  args.weight = wc.defined() ? wc.data_ptr() : nullptr;
  args.grad_inputs = grad_inputs.data_ptr();
  if (x.is_cuda()) {
    c10::cuda::CUDAGuard guard(x.device());
    const cudaStream_t stream = current_stream(x);
    if (params.form == FocalLossForm::kMmcv) {
      FirstInvalidRow invalid(tc, stream);
      args.first_invalid_row = invalid.get();
      launch_sigmoid_focal_loss_backward(params, args, dtype, stream);
      const std::int64_t row = invalid.read();
      TORCH_CHECK_INDEX(row < 0, kMmcvOp, ": target[", row, "] = ", row < 0 ? 0 : tc[row].item<std::int64_t>(),
                        " is not a class index: expected a value in [0, ", num_classes, "] (", num_classes,
                        " = background)");
    } else {
      launch_sigmoid_focal_loss_backward(params, args, dtype, stream);
    }
  } else {
    run_sigmoid_focal_loss_backward_cpu(params, args, dtype, aten_parallel_for());
  }
  return grad_inputs;
}

// torchvision form: shapes, dtypes, devices.
void check_torchvision_inputs(const at::Tensor& inputs, const at::Tensor& targets) {
  floating_dtype_of(inputs, kOp, "inputs");
  check_device(kOp, "inputs", inputs);
  check_same_device(kOp, "inputs", inputs, "targets", targets);
  check_same_dtype(kOp, "inputs", inputs, "targets", targets);
  TORCH_CHECK_VALUE(targets.sizes() == inputs.sizes(), kOp, ": targets must have the shape of inputs ",
                    shape_string(inputs.sizes()), "; got ", shape_string(targets.sizes()));
}

// mmcv form: shapes, dtypes, devices (the target values are checked where the op runs).
void check_mmcv_shapes(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight) {
  TORCH_CHECK_VALUE(input.dim() == 2, kMmcvOp, ": input must be a 2-D tensor [N, C] of logits; got shape ",
                    shape_string(input.sizes()));
  TORCH_CHECK_TYPE(target.scalar_type() == at::kLong, kMmcvOp, ": target must be an int64 tensor of class indices; got ",
                   target.scalar_type());
  TORCH_CHECK_VALUE(target.dim() == 1 && target.size(0) == input.size(0), kMmcvOp, ": target must have shape [",
                    input.size(0), "] (one class index per row of input); got shape ", shape_string(target.sizes()));
  if (weight.defined()) {
    TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == input.size(1), kMmcvOp,
                      ": weight must have shape [", input.size(1), "] (one weight per class); got shape ",
                      shape_string(weight.sizes()));
  }
}

void check_mmcv_inputs(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight) {
  floating_dtype_of(input, kMmcvOp, "input");
  check_device(kMmcvOp, "input", input);
  check_mmcv_shapes(input, target, weight);
  check_same_device(kMmcvOp, "input", input, "target", target);
  if (weight.defined()) {
    check_same_device(kMmcvOp, "input", input, "weight", weight);
    check_same_dtype(kMmcvOp, "input", input, "weight", weight);
  }
  if (target.is_cpu() && target.numel() > 0) {
    const at::Tensor tc = target.contiguous();
    const std::int64_t* t = tc.data_ptr<std::int64_t>();
    const std::int64_t classes = input.size(1);
    for (std::int64_t n = 0; n < tc.numel(); ++n) {
      TORCH_CHECK_INDEX(t[n] >= 0 && t[n] <= classes, kMmcvOp, ": target[", n, "] = ", t[n],
                        " is not a class index: expected a value in [0, ", classes, "] (", classes, " = background)");
    }
  }
}

}  // namespace

const char* focal_loss_reduction_name(FocalLossReduction reduction) {
  switch (reduction) {
    case FocalLossReduction::kNone: return "none";
    case FocalLossReduction::kMean: return "mean";
    case FocalLossReduction::kSum: return "sum";
  }
  TORCH_CHECK_VALUE(false, "sigmoid_focal_loss: unknown reduction code ", static_cast<int>(reduction));
}

SigmoidFocalLossParams make_sigmoid_focal_loss_params(double alpha, double gamma, const std::string& reduction) {
  SigmoidFocalLossParams p{FocalLossForm::kTorchvision, alpha, gamma, FocalLossReduction::kNone};
  check_params(p);
  p.reduction = parse_reduction(reduction, kOp);
  return p;
}

SigmoidFocalLossParams make_sigmoid_focal_loss_mmcv_params(double gamma, double alpha, const std::string& reduction) {
  SigmoidFocalLossParams p{FocalLossForm::kMmcv, alpha, gamma, FocalLossReduction::kNone};
  check_params(p);
  p.reduction = parse_reduction(reduction, kMmcvOp);
  return p;
}

at::Tensor sigmoid_focal_loss_forward(const at::Tensor& inputs, const at::Tensor& targets,
                                      const SigmoidFocalLossParams& params) {
  TORCH_CHECK_VALUE(params.form == FocalLossForm::kTorchvision, kOp, ": params of the mmcv form");
  check_params(params);
  check_torchvision_inputs(inputs, targets);
  return forward_impl(inputs, targets, at::Tensor(), params, 0, static_cast<double>(inputs.numel()));
}

at::Tensor sigmoid_focal_loss_backward(const at::Tensor& grad, const at::Tensor& inputs, const at::Tensor& targets,
                                       const SigmoidFocalLossParams& params) {
  TORCH_CHECK_VALUE(params.form == FocalLossForm::kTorchvision, kOp, ": params of the mmcv form");
  check_params(params);
  check_torchvision_inputs(inputs, targets);
  return backward_impl(grad, inputs, targets, at::Tensor(), params, 0, static_cast<double>(inputs.numel()));
}

at::Tensor sigmoid_focal_loss_mmcv_forward(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight,
                                           const SigmoidFocalLossParams& params) {
  TORCH_CHECK_VALUE(params.form == FocalLossForm::kMmcv, kMmcvOp, ": params of the torchvision form");
  check_params(params);
  check_mmcv_inputs(input, target, weight);
  return forward_impl(input, target, weight, params, input.size(1), static_cast<double>(input.size(0)));
}

at::Tensor sigmoid_focal_loss_mmcv_backward(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& target,
                                            const at::Tensor& weight, const SigmoidFocalLossParams& params) {
  TORCH_CHECK_VALUE(params.form == FocalLossForm::kMmcv, kMmcvOp, ": params of the torchvision form");
  check_params(params);
  check_mmcv_inputs(input, target, weight);
  return backward_impl(grad, input, target, weight, params, input.size(1), static_cast<double>(input.size(0)));
}

namespace {

// Shape-only forwards for meta tensors (torch.compile's fake tensors); the kit builds the params first
// (kMakeParams), so their errors come before these checks. The backward ops' Meta is opkit::EmptyLike,
// which checks nothing.
at::Tensor focal_meta(const at::Tensor& inputs, const at::Tensor& targets, const SigmoidFocalLossParams& p) {
  floating_dtype_of(inputs, kOp, "inputs");
  check_same_dtype(kOp, "inputs", inputs, "targets", targets);
  TORCH_CHECK_VALUE(targets.sizes() == inputs.sizes(), kOp, ": targets must have the shape of inputs ",
                    shape_string(inputs.sizes()), "; got ", shape_string(targets.sizes()));
  return p.reduction == FocalLossReduction::kNone ? at::empty(inputs.sizes(), inputs.options())
                                                   : at::empty({}, inputs.options());
}

at::Tensor mmcv_meta(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight,
                     const SigmoidFocalLossParams& p) {
  floating_dtype_of(input, kMmcvOp, "input");
  check_mmcv_shapes(input, target, weight);
  return p.reduction == FocalLossReduction::kNone ? at::empty(input.sizes(), input.options())
                                                   : at::empty({}, input.options());
}

using P = SigmoidFocalLossParams;
using opkit::Field;
using opkit::OptionalTensor;
using opkit::Tensor;
using Reduction = opkit::Str<&P::reduction, &focal_loss_reduction_name>;

// The forward's autograd: saves every tensor argument (an absent weight as an undefined tensor) and calls
// the backward op with grad first; only the first input (the logits) gets a gradient (see
// docs/ops/sigmoid_focal_loss.md).
template <typename Backward>
struct FocalForwardDef : opkit::OpDef<P> {
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kFunction;
  static opkit::TensorList saved(const opkit::TensorList& inputs, const opkit::TensorList&) { return inputs; }
  static opkit::variable_list backward(const opkit::Saved<P>& s, const opkit::variable_list& grads) {
    opkit::TensorList args{grads[0]};
    args.insert(args.end(), s.tensors.begin(), s.tensors.end());
    return {opkit::call<Backward>(args, s.params)};
  }
};

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
