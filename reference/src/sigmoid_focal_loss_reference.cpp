#include "detops/reference/sigmoid_focal_loss_reference.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace detops::reference {
namespace {

// A value and its derivative with respect to one logit.
struct Dual {
  double v = 0, d = 0;
};

Dual operator+(Dual a, Dual b) { return {a.v + b.v, a.d + b.d}; }
Dual operator-(Dual a) { return {-a.v, -a.d}; }
Dual operator*(Dual a, Dual b) { return {a.v * b.v, a.d * b.v + a.v * b.d}; }
Dual operator*(double s, Dual a) { return {s * a.v, s * a.d}; }
Dual exp(Dual a) {
  const double e = std::exp(a.v);
  return {e, e * a.d};
}
Dual log1p(Dual a) { return {std::log1p(a.v), a.d / (1 + a.v)}; }
Dual pow(Dual a, double g) {
  if (g == 0) return {1, 0};
  return {std::pow(a.v, g), g * std::pow(a.v, g - 1) * a.d};
}
double value_of(Dual a) { return a.v; }
double value_of(double a) { return a; }

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

double reduce_scale(const SigmoidFocalLossParams& p, double denominator) {
  if (p.reduction != FocalLossReduction::kMean) return 1.0;
  return denominator == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / denominator;
}

// (t, weight) of element (n, c) of the mmcv form.
void mmcv_element(const std::vector<std::int64_t>& target, const Vectord* weight, Eigen::Index classes,
                  Eigen::Index n, Eigen::Index c, double& t, double& w) {
  const std::int64_t k = target[static_cast<size_t>(n)];
  if (k < 0 || k > classes) throw std::invalid_argument("sigmoid_focal_loss_mmcv reference: target out of [0, C]");
  t = k == c ? 1.0 : 0.0;
  w = (weight != nullptr && k < classes) ? (*weight)(k) : 1.0;
}

}  // namespace

Vectord sigmoid_focal_loss_forward(const SigmoidFocalLossParams& params, const Vectord& inputs,
                                   const Vectord& targets) {
  const Eigen::Index n = inputs.size();
  Vectord loss(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    loss(i) = focal_element(inputs(i), targets(i), alpha_t(params, targets(i)), params.gamma);
  }
  if (params.reduction == FocalLossReduction::kNone) return loss;
  Vectord out(1);
  out(0) = loss.sum() * reduce_scale(params, static_cast<double>(n));
  if (n == 0 && params.reduction == FocalLossReduction::kSum) out(0) = 0;
  return out;
}

Vectord sigmoid_focal_loss_backward(const SigmoidFocalLossParams& params, const Vectord& inputs,
                                    const Vectord& targets, const Vectord& grad) {
  const Eigen::Index n = inputs.size();
  const bool reduce = params.reduction != FocalLossReduction::kNone;
  const double scale = reduce_scale(params, static_cast<double>(n));
  Vectord out(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const double g = reduce ? grad(0) * scale : grad(i);
    const Dual l = focal_element(Dual{inputs(i), 1.0}, targets(i), alpha_t(params, targets(i)), params.gamma);
    out(i) = g * l.d;
  }
  return out;
}

Matrixd sigmoid_focal_loss_mmcv_forward(const SigmoidFocalLossParams& params, const Matrixd& input,
                                        const std::vector<std::int64_t>& target, const Vectord* weight) {
  const Eigen::Index rows = input.rows(), classes = input.cols();
  Matrixd loss(rows, classes);
  for (Eigen::Index r = 0; r < rows; ++r) {
    for (Eigen::Index c = 0; c < classes; ++c) {
      double t = 0, w = 1;
      mmcv_element(target, weight, classes, r, c, t, w);
      loss(r, c) = w * focal_element(input(r, c), t, alpha_t(params, t), params.gamma);
    }
  }
  if (params.reduction == FocalLossReduction::kNone) return loss;
  Matrixd out(1, 1);
  out(0, 0) = loss.sum() * reduce_scale(params, static_cast<double>(rows));
  if (rows == 0 && params.reduction == FocalLossReduction::kSum) out(0, 0) = 0;
  return out;
}

Matrixd sigmoid_focal_loss_mmcv_backward(const SigmoidFocalLossParams& params, const Matrixd& input,
                                         const std::vector<std::int64_t>& target, const Vectord* weight,
                                         const Matrixd& grad) {
  const Eigen::Index rows = input.rows(), classes = input.cols();
  const bool reduce = params.reduction != FocalLossReduction::kNone;
  const double scale = reduce_scale(params, static_cast<double>(rows));
  Matrixd out(rows, classes);
  for (Eigen::Index r = 0; r < rows; ++r) {
    for (Eigen::Index c = 0; c < classes; ++c) {
      double t = 0, w = 1;
      mmcv_element(target, weight, classes, r, c, t, w);
      const double g = reduce ? grad(0, 0) * scale : grad(r, c);
      const Dual l = focal_element(Dual{input(r, c), 1.0}, t, alpha_t(params, t), params.gamma);
      out(r, c) = g * w * l.d;
    }
  }
  return out;
}

}  // namespace detops::reference
