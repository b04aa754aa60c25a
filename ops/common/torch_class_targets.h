#pragma once
// The bindings of mmcv's class-target losses (sigmoid_focal_loss_mmcv, softmax_focal_loss): logits [N, C], int64
// class indices [N], an optional per-class weight [C] in the logits' dtype. The shape / dtype / device checks,
// the CPU check of the target values, the CUDA launch whose kernels record the first row with an invalid target
// (read back here and raised), and the two schema ops of such a loss (ClassTargetLossOps). ATen-facing: included
// by bindings only.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/torch_op_kit.h"
#include "common/torch_utils.h"

namespace detops {

// Which target values an op accepts: [0, C) plus C itself when `background` (sigmoid: C is the background
// class), and any negative value when `negative_ignored` (softmax: mmcv's kernels skip rows with a negative
// label). `min_classes`: the least C the op accepts. `row_losses`: reduction 'none' gives one loss per row, [N]
// (softmax), instead of one per logit, [N, C] (sigmoid).
struct ClassTargets {
  const char* op;
  bool background = false;
  bool negative_ignored = false;
  std::int64_t min_classes = 0;
  bool row_losses = false;

  // The shape of reduction 'none''s loss for input [N, C].
  std::vector<std::int64_t> none_shape(const at::Tensor& input) const {
    return row_losses ? std::vector<std::int64_t>{input.size(0)} : input.sizes().vec();
  }

  void check_index(std::int64_t row, std::int64_t value, std::int64_t classes) const {
    const bool ok = (value >= 0 || negative_ignored) && (background ? value <= classes : value < classes);
    TORCH_CHECK_INDEX(ok, op, ": target[", row, "] = ", value, " is not a class index: expected a value in [0, ", classes,
                      background ? "]" : ")", background ? " (" : "", background ? std::to_string(classes) : "",
                      background ? " = background)" : "", negative_ignored ? " (or a negative value for an ignored row)" : "");
  }

  // Shapes, dtypes and devices (the Meta kernels' checks too); for CPU targets, their values (CUDA targets are
  // checked by the kernels, see run).
  void check_inputs(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight) const {
    floating_dtype_of(input, op, "input");
    TORCH_CHECK_VALUE(input.dim() == 2, op, ": input must be a 2-D tensor [N, C] of logits; got shape ",
                      shape_string(input.sizes()));
    TORCH_CHECK_VALUE(input.size(1) >= min_classes, op, ": input must have at least ",
                      min_classes == 1 ? std::string("one class") : std::to_string(min_classes) + " classes", " (C >= ",
                      min_classes, "); got shape ", shape_string(input.sizes()));
    TORCH_CHECK_TYPE(target.scalar_type() == at::kLong, op, ": target must be an int64 tensor of class indices; got ",
                     target.scalar_type());
    TORCH_CHECK_VALUE(target.dim() == 1 && target.size(0) == input.size(0), op, ": target must have shape [",
                      input.size(0), "] (one class index per row of input); got shape ", shape_string(target.sizes()));
    check_same_device(op, "input", input, "target", target);
    if (weight.defined()) {
      TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == input.size(1), op, ": weight must have shape [",
                        input.size(1), "] (one weight per class); got shape ", shape_string(weight.sizes()));
      check_same_device(op, "input", input, "weight", weight);
      check_same_dtype(op, "input", input, "weight", weight);
    }
    if (target.is_cpu()) {
      const at::Tensor tc = target.contiguous();
      const std::int64_t* t = tc.data_ptr<std::int64_t>();
      for (std::int64_t n = 0; n < tc.numel(); ++n) check_index(n, t[n], input.size(1));
    }
  }

  // The launcher (CUDA) or the CPU implementation over args, on x's device (`arg` names x in messages). The
  // kernels record the first row whose target is invalid in args.first_invalid_row; it is read back and raised.
  template <typename P, typename A>
  void run(const char* arg, const at::Tensor& x, const at::Tensor& tc, std::int64_t classes, const P& p, A& args,
           Launcher<P, A>* launch, CpuEntry<P, A>* cpu) const {
    const DType dtype = floating_dtype_of(x, op, arg);
    run_on_device(
        op, arg, x,
        [&](cudaStream_t stream) {
          FirstInvalidRow invalid(tc, stream);
          args.first_invalid_row = invalid.get();
          launch(p, args, dtype, stream);
          const std::int64_t row = invalid.read();
          if (row >= 0) check_index(row, tc[row].item<std::int64_t>(), classes);
        },
        [&] { cpu(p, args, dtype, aten_parallel_for()); });
  }
};

// "<a><b><c>" in a constexpr char array: the schemas of ops that differ only in their name.
template <std::size_t N>
struct SchemaText {
  char text[N] = {};
};

constexpr std::size_t text_length(const char* s) {
  std::size_t n = 0;
  while (s[n] != '\0') ++n;
  return n;
}

template <std::size_t N>
constexpr SchemaText<N> join_text(const char* a, const char* b, const char* c) {
  SchemaText<N> out;
  std::size_t i = 0;
  for (const char* s : {a, b, c}) {
    for (std::size_t j = 0; s[j] != '\0'; ++j) out.text[i++] = s[j];
  }
  return out;
}

// The op kit definitions (docs/op-kit.md) of an mmcv class-target loss named Targets.op, with mmcv's arguments,
// order and defaults:
//   <op>(Tensor input, Tensor target, float gamma=2.0, float alpha=0.25, Tensor? weight=None, str reduction="mean")
// computed by Forward(input, target, weight, params), differentiable for input only through
//   _<op>_backward(Tensor grad, Tensor input, Tensor target, float gamma, float alpha, Tensor? weight, str reduction)
// computed by Backward(grad, input, target, weight, params) and differentiable once. MakeParams(gamma, alpha,
// reduction) builds P. Meta: the forward's checks (Targets.check_inputs), then an empty loss (Targets.none_shape).
template <const ClassTargets& Targets, typename P, auto MakeParams, auto Forward, auto Backward>
struct ClassTargetLossOps {
  using Reduction = opkit::Str<&P::reduction, &reduction_name<decltype(P::reduction)>>;

  static constexpr const char* kForwardArgs =
      "(Tensor input, Tensor target, float gamma=2.0, float alpha=0.25, Tensor? weight=None, "
      "str reduction=\"mean\") -> Tensor";
  static constexpr const char* kBackwardArgs =
      "_backward(Tensor grad, Tensor input, Tensor target, float gamma, float alpha, Tensor? weight, "
      "str reduction) -> Tensor";
  static constexpr auto kForwardSchema =
      join_text<text_length(Targets.op) + text_length(kForwardArgs) + 1>("", Targets.op, kForwardArgs);
  static constexpr auto kBackwardSchema =
      join_text<1 + text_length(Targets.op) + text_length(kBackwardArgs) + 1>("_", Targets.op, kBackwardArgs);

  static at::Tensor meta(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight, const P& p) {
    Targets.check_inputs(input, target, weight);
    return p.reduction == decltype(P::reduction)::kNone ? at::empty(Targets.none_shape(input), input.options())
                                                        : at::empty({}, input.options());
  }

  struct BackwardDef : opkit::OpDef<P> {
    static constexpr const char* kSchema = kBackwardSchema.text;
    using Args = opkit::Args<opkit::Tensor, opkit::Tensor, opkit::Tensor, opkit::Field<&P::gamma>,
                             opkit::Field<&P::alpha>, opkit::OptionalTensor, Reduction>;
    static constexpr auto kMakeParams = MakeParams;
    static constexpr auto kCompute = Backward;
    static constexpr opkit::Autograd kAutograd = opkit::Autograd::kOnce;
    static constexpr opkit::EmptyLike<1> kMeta{};  // the logits' shape; the scalars unchecked
    static constexpr const char* kOpName = Targets.op;
  };

  // Only the logits get a gradient (opkit::GradFirstThenInputs calls BackwardDef(grad, input, target, weight)).
  struct ForwardDef : opkit::GradFirstThenInputs<P, BackwardDef> {
    static constexpr const char* kSchema = kForwardSchema.text;
    using Args = opkit::Args<opkit::Tensor, opkit::Tensor, opkit::Field<&P::gamma>, opkit::Field<&P::alpha>,
                             opkit::OptionalTensor, Reduction>;
    static constexpr auto kMakeParams = MakeParams;
    static constexpr auto kCompute = Forward;
    static constexpr auto kMeta = &meta;
  };
};

}  // namespace detops
