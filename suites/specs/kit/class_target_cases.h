#pragma once
// The case kit of the class-target losses (sigmoid_focal_loss_mmcv, softmax_focal_loss): inputs {logits [N, C], int64
// class indices [N], optional per-class weights [C]}, the one case builder that wires a case's op and reference
// sides, the cases both ops list, and the index tensors of their bad inputs. A spec gives its config struct (n,
// classes, reduction, weighted, noncontiguous, stride0_grad, as the ops' schemas name them) and its logits and targets.
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "detops/harness/op_spec.h"
#include "detops/reference/losses.h"
#include "kit/case_list.h"
#include "kit/eigen_bridge.h"
#include "kit/fd_rows.h"
#include "kit/feature_cases.h"

namespace detops::kit {

// A case's inputs as the references take them: in[0] the logits, in[1] the targets, in[2] the weights if any.
inline reference::ClassTargetInputs class_target_inputs(const harness::Tensors& in) {
  reference::ClassTargetInputs out;
  out.input = to_matrix(in[0]);
  const at::Tensor t = in[1].to(at::kCPU).to(at::kLong).contiguous();
  out.target.assign(t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + t.numel());
  if (in.size() > 2) out.weight = to_vector(in[2]);
  return out;
}

// Int64 class indices on d (a bad input's targets).
inline at::Tensor class_indices(const at::Device& d, const std::vector<std::int64_t>& v) {
  return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(d);
}

inline at::TensorOptions i64_on(const at::Device& d) { return at::TensorOptions().dtype(at::kLong).device(d); }

// An op's two entry points and its reference's: the loss (the shape of 'none': RefLoss, a Matrixd or Vectord) and
// its gradient with respect to the logits, taking the upstream gradient as a RefGrad (a Matrixd: [N, C], or [1, 1]
// for a reduction; a Vectord: its elements).
template <typename Params, typename RefLoss, typename RefGrad>
struct ClassTargetLoss {
  at::Tensor (*forward)(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight, const Params&);
  at::Tensor (*backward)(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& target,
                         const at::Tensor& weight, const Params&);
  RefLoss (*reference)(const Params&, const reference::ClassTargetInputs&);
  reference::Matrixd (*reference_grad)(const Params&, const reference::ClassTargetInputs&, const RefGrad& grad);
};

inline at::Tensor from_eigen(const reference::Matrixd& m) { return from_matrix(m); }
inline at::Tensor from_eigen(const reference::Vectord& v) { return from_vector(v); }

// The op's upstream gradient as a reference takes it.
inline void to_eigen(const at::Tensor& grad, bool reduced, reference::Matrixd& out) {
  out = to_matrix(reduced ? grad.reshape({1, 1}) : grad);
}
inline void to_eigen(const at::Tensor& grad, bool, reference::Vectord& out) { out = to_vector(grad.reshape({-1})); }

// The case of cfg over the logits x and targets, weighted (a U[0.25, 1.75) weight per class drawn from gen after
// them) when cfg.weighted: only the logits are differentiable; the op sees the logits with their columns strided
// when cfg.noncontiguous; a reduced value's tolerance scales with the sum (mean) of |row losses|
// (reduced_loss_magnitude); cfg.stride0_grad hands the backward what out.sum().backward() does. NaN logits skip
// gradcheck.
template <typename Params, typename RefLoss, typename RefGrad, typename Config>
harness::CaseData class_target_loss_case(const ClassTargetLoss<Params, RefLoss, RefGrad>& loss, const Params& p,
                                         const Config& cfg, const at::Tensor& x, const at::Tensor& target,
                                         at::Generator& gen, bool nan_logits) {
  using Reduction = decltype(p.reduction);
  harness::CaseData d;
  d.inputs = {x, target};
  if (cfg.weighted) {
    d.inputs.push_back(at::rand({cfg.classes}, gen, at::TensorOptions().dtype(at::kDouble)) * 1.5 + 0.25);
  }
  d.differentiable = {0};
  const bool noncontiguous = cfg.noncontiguous;
  auto input_of = [noncontiguous](const at::Tensor& t) { return noncontiguous ? t.t().contiguous().t() : t; };
  auto weight_of = [](const harness::Tensors& in) { return in.size() > 2 ? in[2] : at::Tensor(); };
  d.op_forward = [loss, p, input_of, weight_of](const harness::Tensors& in) {
    return harness::Tensors{loss.forward(input_of(in[0]), in[1], weight_of(in), p)};
  };
  d.op_backward = [loss, p, input_of, weight_of](const harness::Tensors& in, const harness::Tensors& grad) {
    return harness::Tensors{loss.backward(grad[0], input_of(in[0]), in[1], weight_of(in), p)};
  };
  auto reference = [loss](const Params& q, const harness::Tensors& in) {
    const at::Tensor t = from_eigen(loss.reference(q, class_target_inputs(in)));
    return q.reduction == Reduction::kNone ? t : t.reshape({});
  };
  d.reference_forward = [p, reference](const harness::Tensors& in) { return harness::Tensors{reference(p, in)}; };
  d.reference_forward_magnitude = [p, reference](const harness::Tensors& in) {
    Params none = p;
    none.reduction = Reduction::kNone;
    return harness::Tensors{reduced_loss_magnitude(reference(none, in), p.reduction != Reduction::kNone,
                                                   p.reduction == Reduction::kMean, in[0].size(0))};
  };
  d.reference_backward = [loss, p](const harness::Tensors& in, const harness::Tensors& grad) {
    RefGrad g;
    to_eigen(grad[0], p.reduction != Reduction::kNone, g);
    return harness::Tensors{from_matrix(loss.reference_grad(p, class_target_inputs(in), g))};
  };
  if (cfg.stride0_grad) d.make_grad_output = stride0_grad_output();
  // Row n's loss depends on row n of the logits and target n only; a mean divides by the rows (CaseData::fd_rows).
  d.fd_rows = loss_fd_rows({0, 1}, p.reduction == Reduction::kMean);
  if (nan_logits) d.gradcheck_skip_reason = "NaN logits: nothing to differentiate";
  return d;
}

// The first cases of both losses: 12 rows of 5 classes (the configs' defaults), each reduction, without and with
// weights.
template <typename Config>
void add_class_target_basic_cases(CaseList<Config>& add) {
  using R = decltype(Config::reduction);
  Config c;
  c = {}; add("rows12_classes5_mean", c);
  c = {}; c.reduction = R::kSum; add("rows12_classes5_sum", c);
  c = {}; c.reduction = R::kNone; add("rows12_classes5_none", c);
  c = {}; c.weighted = true; add("weighted_mean", c);
  c = {}; c.weighted = true; c.reduction = R::kSum; add("weighted_sum", c);
  c = {}; c.weighted = true; c.reduction = R::kNone; add("weighted_none", c);
}

// No rows under each reduction ('mean' NaN, 'sum' 0, 'none' empty), strided logits, and a stride-0 grad_output.
template <typename Config>
void add_class_target_layout_cases(CaseList<Config>& add) {
  using R = decltype(Config::reduction);
  Config c;
  c = {}; c.n = 0; c.classes = 4; add("empty_rows_mean_is_nan", c);
  c = {}; c.n = 0; c.classes = 4; c.reduction = R::kSum; add("empty_rows_sum_is_zero", c);
  c = {}; c.n = 0; c.classes = 4; c.reduction = R::kNone; add("empty_rows_none", c);
  c = {}; c.noncontiguous = true; c.classes = 7; c.reduction = R::kNone; add("noncontiguous_input", c);
  c = {}; c.noncontiguous = true; c.classes = 7; c.weighted = true; add("noncontiguous_input_weighted_mean", c);
  c = {}; c.stride0_grad = true; c.reduction = R::kNone; c.weighted = true; add("stride0_grad_output", c);
}

}  // namespace detops::kit
