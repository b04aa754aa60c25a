// Softmax focal loss as a torch op: torch.ops.detops.softmax_focal_loss (the argument names, order and defaults
// of mmcv.ops.softmax_focal_loss) with a fused backward op that is differentiable once. target and weight get
// no gradient. Registered with the op kit (docs/op-kit.md).
#include "softmax_focal_loss/softmax_focal_loss_torch.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <cmath>

#include "common/torch_class_targets.h"

namespace detops {
namespace {

constexpr const char* kOp = "softmax_focal_loss";
using R = SoftmaxFocalLossReduction;

void check_params(const SoftmaxFocalLossParams& p) {
  TORCH_CHECK_VALUE(std::isfinite(p.gamma), kOp, ": Invalid gamma value: ", p.gamma, ". gamma must be finite");
  TORCH_CHECK_VALUE(std::isfinite(p.alpha), kOp, ": Invalid alpha value: ", p.alpha, ". alpha must be finite");
}

// Targets in [0, C), negative ones marking ignored rows (mmcv's kernels skip label < 0); C >= 1.
constexpr ClassTargets kTargets{kOp, /*background=*/false, /*negative_ignored=*/true, /*min_classes=*/1};

// The loss of input's rows: [N] for 'none', else 0-d; 'mean''s scale; a weight's data.
at::Tensor empty_loss(const at::Tensor& input, const SoftmaxFocalLossParams& p) {
  return p.reduction == R::kNone ? at::empty({input.size(0)}, input.options()) : at::empty({}, input.options());
}
double mean_scale(const SoftmaxFocalLossParams& p, std::int64_t rows) {
  return p.reduction == R::kMean ? 1.0 / static_cast<double>(rows) : 1.0;
}
at::Tensor contiguous_or_undefined(const at::Tensor& t) { return t.defined() ? t.contiguous() : at::Tensor(); }
const void* data_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

template <typename A>
void run(const at::Tensor& x, const at::Tensor& tc, const SoftmaxFocalLossParams& p, A& args,
         Launcher<SoftmaxFocalLossParams, A>* launch, CpuEntry<SoftmaxFocalLossParams, A>* cpu) {
  kTargets.run("input", x, tc, x.size(1), p, args, launch, cpu);
}

}  // namespace

SoftmaxFocalLossParams make_softmax_focal_loss_params(double gamma, double alpha, const std::string& reduction) {
  SoftmaxFocalLossParams p{gamma, alpha};
  check_params(p);
  p.reduction = parse_reduction<R>(kOp, reduction);
  return p;
}

// No rows: 'none' is empty, 'sum' 0, 'mean' NaN (mmcv's sum / 0).
at::Tensor softmax_focal_loss_forward(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight,
                                      const SoftmaxFocalLossParams& params) {
  check_params(params);
  kTargets.check_inputs(input, target, weight);
  const std::int64_t rows = input.size(0);
  const bool reduce = params.reduction != R::kNone;
  if (rows == 0 && reduce) return at::full({}, params.reduction == R::kMean ? std::nan("") : 0.0, input.options());
  at::Tensor out = empty_loss(input, params), partials;
  if (rows == 0) return out;
  const at::Tensor xc = input.contiguous(), tc = target.contiguous(), wc = contiguous_or_undefined(weight);
  SoftmaxFocalLossForwardArgs args{rows, input.size(1), xc.data_ptr(), tc.data_ptr(), data_or_null(wc), out.data_ptr()};
  if (reduce) {
    partials = at::empty({softmax_focal_loss_chunk_count(rows)},
                         input.options().dtype(accumulation_scalar_type(input.scalar_type())));
    args.partials = partials.data_ptr();
    args.scale = mean_scale(params, rows);
  }
  run(xc, tc, params, args, &launch_softmax_focal_loss_forward, &run_softmax_focal_loss_forward_cpu);
  return out;
}

// The upstream gradient: a scalar or an expanded (stride 0) tensor is read through stride 0, any other through
// stride 1 (contiguous, copied if need be).
at::Tensor softmax_focal_loss_backward(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& target,
                                       const at::Tensor& weight, const SoftmaxFocalLossParams& params) {
  check_params(params);
  kTargets.check_inputs(input, target, weight);
  check_same_device(kOp, "input", input, "grad", grad);
  TORCH_CHECK_TYPE(grad.scalar_type() == input.scalar_type(), kOp, ": grad dtype (", grad.scalar_type(),
                   ") must be the loss's dtype, ", input.scalar_type());
  const bool reduce = params.reduction != R::kNone;
  const std::int64_t rows = input.size(0);
  check_loss_grad(kOp, grad, {rows}, reduce, reduction_name(params.reduction));
  at::Tensor grad_input = at::empty(input.sizes(), input.options());
  if (input.numel() == 0) return grad_input;
  const at::Tensor xc = input.contiguous(), tc = target.contiguous(), wc = contiguous_or_undefined(weight);
  const bool stride0 = reduce || grad.stride(0) == 0;
  const at::Tensor g = stride0 ? grad : grad.contiguous();
  SoftmaxFocalLossBackwardArgs args{rows, input.size(1), g.data_ptr(), stride0 ? 0 : 1, mean_scale(params, rows),
                                    xc.data_ptr(), tc.data_ptr(), data_or_null(wc), grad_input.data_ptr()};
  run(xc, tc, params, args, &launch_softmax_focal_loss_backward, &run_softmax_focal_loss_backward_cpu);
  return grad_input;
}

namespace {

// The shape-only forward for meta tensors (torch.compile's fake tensors), after the kit built the params
// (kMakeParams) and with the same checks. The backward op's Meta is opkit::EmptyLike, which checks nothing.
at::Tensor softmax_focal_meta(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight,
                              const SoftmaxFocalLossParams& p) {
  kTargets.check_inputs(input, target, weight);
  return empty_loss(input, p);
}

using P = SoftmaxFocalLossParams;
using opkit::Field;
using opkit::OptionalTensor;
using opkit::Tensor;
using Reduction = opkit::Str<&P::reduction, &reduction_name<SoftmaxFocalLossReduction>>;

// The backward op: differentiable once; Meta is an empty tensor like the logits (the scalars unchecked).
struct Backward : opkit::OpDef<P> {
  static constexpr const char* kSchema =
      "_softmax_focal_loss_backward(Tensor grad, Tensor input, Tensor target, float gamma, float alpha, "
      "Tensor? weight, str reduction) -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Tensor, Field<&P::gamma>, Field<&P::alpha>, OptionalTensor, Reduction>;
  static constexpr auto kMakeParams = &make_softmax_focal_loss_params;  // (gamma, alpha, reduction)
  static constexpr auto kCompute = &softmax_focal_loss_backward;
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kOnce;
  static constexpr opkit::EmptyLike<1> kMeta{};
  static constexpr const char* kOpName = kOp;
};

// Autograd: only the logits get a gradient (opkit::GradFirstThenInputs calls Backward(grad, input, target,
// weight, params)).
struct Forward : opkit::GradFirstThenInputs<P, Backward> {
  static constexpr const char* kSchema =
      "softmax_focal_loss(Tensor input, Tensor target, float gamma=2.0, float alpha=0.25, Tensor? weight=None, "
      "str reduction=\"mean\") -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Field<&P::gamma>, Field<&P::alpha>, OptionalTensor, Reduction>;
  static constexpr auto kMakeParams = &make_softmax_focal_loss_params;
  static constexpr auto kCompute = &softmax_focal_loss_forward;
  static constexpr auto kMeta = &softmax_focal_meta;
};

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) { detops::opkit::define<detops::Forward, detops::Backward>(m); }
