#include "detops/reference/softmax_focal_loss_reference.h"

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
Dual operator-(Dual a, double b) { return {a.v - b, a.d}; }
Dual operator-(Dual a, Dual b) { return {a.v - b.v, a.d - b.d}; }
Dual operator*(Dual a, Dual b) { return {a.v * b.v, a.d * b.v + a.v * b.d}; }
Dual operator*(double s, Dual a) { return {s * a.v, s * a.d}; }
Dual operator/(Dual a, Dual b) { return {a.v / b.v, (a.d * b.v - a.v * b.d) / (b.v * b.v)}; }
Dual exp(Dual a) {
  const double e = std::exp(a.v);
  return {e, e * a.d};
}
Dual log(Dual a) { return {std::log(a.v), a.d / a.v}; }
// d(a^g) = g a^(g-1) da; 0 along a direction that leaves a unchanged (also where a^(g-1) is infinite).
Dual pow(Dual a, double g) {
  if (g == 0) return {1, 0};
  return {std::pow(a.v, g), a.d == 0 ? 0.0 : g * std::pow(a.v, g - 1) * a.d};
}
double value_of(Dual a) { return a.v; }
double value_of(double a) { return a; }

using std::exp;
using std::log;
using std::pow;

// The loss of one row with target class t (unweighted), from the definition:
//   p_c = exp(x_c) / sum_j exp(x_j)      (evaluated as exp(x_c - m) / sum_j exp(x_j - m), m = max_j x_j, a
//                                         constant shift that leaves p unchanged and keeps exp from overflowing)
//   log p_t = (x_t - m) - log sum_j exp(x_j - m)
//   1 - p_t = sum_{c != t} p_c
//   loss = -alpha (1 - p_t)^gamma log p_t
template <typename S>
S row_loss(const std::vector<S>& x, std::int64_t t, double alpha, double gamma) {
  double m = value_of(x[0]);
  for (const S& v : x) m = value_of(v) > m ? value_of(v) : m;
  S total{}, others{};
  for (std::size_t c = 0; c < x.size(); ++c) {
    const S e = exp(x[c] - m);
    total = total + e;
    if (static_cast<std::int64_t>(c) != t) others = others + e;
  }
  const S log_pt = (x[static_cast<std::size_t>(t)] - m) - log(total);
  const S one_minus_pt = others / total;
  return -alpha * (pow(one_minus_pt, gamma) * log_pt);
}

// Row n's target class, or -1 for an ignored row; throws for a target of C or more.
std::int64_t row_target(const std::vector<std::int64_t>& target, Eigen::Index n, Eigen::Index classes) {
  const std::int64_t t = target[static_cast<std::size_t>(n)];
  if (t >= classes) throw std::invalid_argument("softmax_focal_loss reference: target >= C");
  return t < 0 ? -1 : t;
}

double row_weight(const Vectord* weight, std::int64_t t) { return weight != nullptr ? (*weight)(t) : 1.0; }

double mean_scale(const SoftmaxFocalLossParams& p, Eigen::Index rows) {
  if (p.reduction != SoftmaxFocalLossReduction::kMean) return 1.0;
  return rows == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / static_cast<double>(rows);
}

}  // namespace

Vectord softmax_focal_loss_forward(const SoftmaxFocalLossParams& params, const Matrixd& input,
                                   const std::vector<std::int64_t>& target, const Vectord* weight) {
  const Eigen::Index rows = input.rows(), classes = input.cols();
  Vectord loss = Vectord::Zero(rows);
  for (Eigen::Index n = 0; n < rows; ++n) {
    const std::int64_t t = row_target(target, n, classes);
    if (t < 0) continue;
    std::vector<double> x(static_cast<std::size_t>(classes));
    for (Eigen::Index c = 0; c < classes; ++c) x[static_cast<std::size_t>(c)] = input(n, c);
    loss(n) = row_weight(weight, t) * row_loss(x, t, params.alpha, params.gamma);
  }
  if (params.reduction == SoftmaxFocalLossReduction::kNone) return loss;
  Vectord out(1);
  out(0) = rows == 0 ? 0.0 : loss.sum();
  out(0) *= mean_scale(params, rows);
  return out;
}

Matrixd softmax_focal_loss_backward(const SoftmaxFocalLossParams& params, const Matrixd& input,
                                    const std::vector<std::int64_t>& target, const Vectord* weight,
                                    const Vectord& grad) {
  const Eigen::Index rows = input.rows(), classes = input.cols();
  const bool reduce = params.reduction != SoftmaxFocalLossReduction::kNone;
  const double scale = mean_scale(params, rows);
  Matrixd out = Matrixd::Zero(rows, classes);
  for (Eigen::Index n = 0; n < rows; ++n) {
    const std::int64_t t = row_target(target, n, classes);
    if (t < 0) continue;
    const double g = (reduce ? grad(0) * scale : grad(n)) * row_weight(weight, t);
    std::vector<Dual> x(static_cast<std::size_t>(classes));
    for (Eigen::Index c = 0; c < classes; ++c) x[static_cast<std::size_t>(c)] = {input(n, c), 0.0};
    for (Eigen::Index c = 0; c < classes; ++c) {
      x[static_cast<std::size_t>(c)].d = 1.0;
      out(n, c) = g * row_loss(x, t, params.alpha, params.gamma).d;
      x[static_cast<std::size_t>(c)].d = 0.0;
    }
  }
  return out;
}

}  // namespace detops::reference
