#include "detops/reference/sigmoid_focal_loss_reference.h"

#include <cmath>
#include <stdexcept>

namespace detops::reference {
namespace {

using std::exp;
using std::log1p;
using std::pow;

// softplus(z) = log(1 + e^z), written so that e^z never overflows.
template <typename S>
S softplus(S z) {
  if (value_of(z) > 0) return z + log1p(exp(-z));
  return log1p(exp(z));
}

// The loss of one element, from the definition:
//   log p = -softplus(-x), log(1 - p) = -softplus(x)      (p = sigmoid(x))
//   ce = -(t log p + (1 - t) log(1 - p))
//   1 - p_t = 1 - (p t + (1 - p)(1 - t)) = p (1 - t) + (1 - p) t
//   loss = a_t ce (1 - p_t)^gamma
template <typename S>
S focal_element(S x, double t, double a_t, double gamma) {
  const S log_p = -softplus(-x);
  const S log_1mp = -softplus(x);
  const S p = exp(log_p), one_minus_p = exp(log_1mp);
  const S ce = -(t * log_p + (1 - t) * log_1mp);
  const S one_minus_pt = (1 - t) * p + t * one_minus_p;
  return a_t * (ce * pow(one_minus_pt, gamma));
}

// torchvision: a_t = alpha t + (1 - alpha)(1 - t), or 1 when alpha < 0; mmcv: always the alpha form.
double alpha_t(const SigmoidFocalLossParams& p, double t) {
  if (p.form == FocalLossForm::kTorchvision && p.alpha < 0) return 1.0;
  return p.alpha * t + (1 - p.alpha) * (1 - t);
}

// (t, weight) of element (n, c) of the mmcv form.
void mmcv_element(const ClassTargetInputs& in, Eigen::Index n, Eigen::Index c, double& t, double& w) {
  const Eigen::Index classes = in.input.cols();
  const std::int64_t k = in.target[static_cast<size_t>(n)];
  if (k < 0 || k > classes) throw std::invalid_argument("sigmoid_focal_loss_mmcv reference: target out of [0, C]");
  t = k == c ? 1.0 : 0.0;
  w = (in.weight && k < classes) ? (*in.weight)(k) : 1.0;
}

// The loss of each element of the logits `x` (any Eigen container): element(i, t, w) gives element i's target and
// weight; 'none' returns them in x's shape, a reduction one element (the sum times reduction_scale).
template <typename X, typename Element>
X forward(const SigmoidFocalLossParams& params, const X& x, double denominator, Element element) {
  X loss(x.rows(), x.cols());
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    double t = 0, w = 1;
    element(i, t, w);
    loss(i) = w * focal_element(x(i), t, alpha_t(params, t), params.gamma);
  }
  if (params.reduction == FocalLossReduction::kNone) return loss;
  X out(1, 1);
  out(0) = loss.sum() * reduction_scale(params.reduction, denominator);
  return out;
}

// The gradient with respect to the logits `x` of <grad, forward(x)> (grad: x's shape for 'none', else one
// element), by the dual number of each element's loss.
template <typename X, typename Element>
X backward(const SigmoidFocalLossParams& params, const X& x, double denominator, const X& grad, Element element) {
  const bool reduce = params.reduction != FocalLossReduction::kNone;
  const double scale = reduction_scale(params.reduction, denominator);
  X out(x.rows(), x.cols());
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    double t = 0, w = 1;
    element(i, t, w);
    const double g = reduce ? grad(0) * scale : grad(i);
    const Dual l = focal_element(Dual{x(i), 1.0}, t, alpha_t(params, t), params.gamma);
    out(i) = g * w * l.d;
  }
  return out;
}

}  // namespace

Vectord sigmoid_focal_loss_forward(const SigmoidFocalLossParams& params, const Vectord& inputs,
                                   const Vectord& targets) {
  return forward(params, inputs, static_cast<double>(inputs.size()),
                 [&](Eigen::Index i, double& t, double&) { t = targets(i); });
}

Vectord sigmoid_focal_loss_backward(const SigmoidFocalLossParams& params, const Vectord& inputs,
                                    const Vectord& targets, const Vectord& grad) {
  return backward(params, inputs, static_cast<double>(inputs.size()), grad,
                  [&](Eigen::Index i, double& t, double&) { t = targets(i); });
}

Matrixd sigmoid_focal_loss_mmcv_forward(const SigmoidFocalLossParams& params, const ClassTargetInputs& in) {
  const Eigen::Index classes = in.input.cols();
  return forward(params, in.input, static_cast<double>(in.input.rows()), [&](Eigen::Index i, double& t, double& w) {
    mmcv_element(in, i / classes, i % classes, t, w);
  });
}

Matrixd sigmoid_focal_loss_mmcv_backward(const SigmoidFocalLossParams& params, const ClassTargetInputs& in,
                                         const Matrixd& grad) {
  const Eigen::Index classes = in.input.cols();
  return backward(params, in.input, static_cast<double>(in.input.rows()), grad,
                  [&](Eigen::Index i, double& t, double& w) { mmcv_element(in, i / classes, i % classes, t, w); });
}

}  // namespace detops::reference
