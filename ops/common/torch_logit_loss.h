#pragma once
// The torch side of the logit losses (common/logit_loss.h: sigmoid_focal_loss in both forms, softmax_focal_loss),
// written once: the forward's result, workspace and args; the backward's checks of grad, its view of the upstream
// gradient and its args. ATen-facing: included by bindings only.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/logit_loss.h"
#include "common/torch_utils.h"

namespace detops {

// A loss over logits x: n losses (0 only when x is empty), returned shaped none_shape by 'none'; `classes` for
// class-index targets (else 0); 'mean' divides their sum by `denominator`.
struct LogitLossExtent {
  std::int64_t n = 0;
  std::int64_t classes = 0;
  std::vector<std::int64_t> none_shape;
  double denominator = 1.0;
};

// The scale of 'mean' (1 / denominator); 1 for 'none' and 'sum'.
template <typename Reduction>
double mean_scale(Reduction reduction, double denominator) {
  return reduction == Reduction::kMean ? 1.0 / denominator : 1.0;
}

// The tensors a logit loss's launch reads: x, target and weight (undefined when absent), contiguous (copies where
// need be).
struct LogitLossInputs {
  at::Tensor x, target, weight;
  LogitLossInputs(const at::Tensor& x, const at::Tensor& target, const at::Tensor& weight)
      : x(x.contiguous()), target(target.contiguous()), weight(weight.defined() ? weight.contiguous() : at::Tensor()) {}
  const void* weight_data() const { return weight.defined() ? weight.data_ptr() : nullptr; }
};

// The forward of a logit loss with `reduction` over x's logits: the result in x's dtype ('none': e.none_shape,
// else 0-d) and args over LogitLossInputs, with, for 'mean' / 'sum', the accumulation-type partial sums of
// `chunks` chunks and mean_scale. run(inputs, args) computes it. No losses: 'none' is empty, 'sum' 0, 'mean' NaN
// (torchvision's mean of nothing, mmcv's sum / 0), and run is not called.
template <typename Reduction, typename Run>
at::Tensor logit_loss_forward(const at::Tensor& x, const at::Tensor& target, const at::Tensor& weight,
                              Reduction reduction, const LogitLossExtent& e, std::int64_t chunks, Run&& run) {
  const bool reduce = reduction != Reduction::kNone;
  if (e.n == 0 && reduce) return at::full({}, reduction == Reduction::kMean ? std::nan("") : 0.0, x.options());
  at::Tensor out = reduce ? at::empty({}, x.options()) : at::empty(e.none_shape, x.options());
  if (e.n == 0) return out;
  const LogitLossInputs in(x, target, weight);
  LogitLossForwardArgs args{e.n, e.classes, in.x.data_ptr(), in.target.data_ptr(), in.weight_data(), out.data_ptr()};
  at::Tensor partials;
  if (reduce) {
    partials = at::empty({chunks}, x.options().dtype(accumulation_scalar_type(x.scalar_type())));
    args.partials = partials.data_ptr();
    args.scale = mean_scale(reduction, e.denominator);
  }
  run(in, args);
  return out;
}

// The backward of a logit loss: grad on x's device (x named x_name in messages), in the loss's dtype (x's) and
// shape (check_loss_grad); the gradient like x (contiguous) and args over LogitLossInputs, the upstream gradient
// read through stride 0 when it is 0-d or expanded (all strides 0), else contiguous (a copy if need be) through
// stride 1, scaled by mean_scale. run(inputs, args) computes it; not called for an empty x.
template <typename Reduction, typename Run>
at::Tensor logit_loss_backward(const char* op, const char* x_name, const at::Tensor& grad, const at::Tensor& x,
                               const at::Tensor& target, const at::Tensor& weight, Reduction reduction,
                               const LogitLossExtent& e, Run&& run) {
  check_same_device(op, x_name, x, "grad", grad);
  TORCH_CHECK_TYPE(grad.scalar_type() == x.scalar_type(), op, ": grad dtype (", grad.scalar_type(),
                   ") must be the loss's dtype, ", x.scalar_type());
  const bool reduce = reduction != Reduction::kNone;
  check_loss_grad(op, grad, e.none_shape, reduce, reduction_name(reduction));
  at::Tensor grad_input = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return grad_input;
  const LogitLossInputs in(x, target, weight);
  const auto strides = grad.strides();
  const bool stride0 = reduce || std::all_of(strides.begin(), strides.end(), [](std::int64_t s) { return s == 0; });
  const at::Tensor g = stride0 ? grad : grad.contiguous();
  LogitLossBackwardArgs args{e.n, e.classes, {g.data_ptr(), stride0 ? 0 : 1, mean_scale(reduction, e.denominator)},
                             in.x.data_ptr(), in.target.data_ptr(), in.weight_data(), grad_input.data_ptr()};
  run(in, args);
  return grad_input;
}

}  // namespace detops
