#pragma once
// What the loss references share (sigmoid_focal_loss in both forms, softmax_focal_loss): the inputs of a
// class-target loss, the scale of a 'mean' reduction, and the dual number whose forward-mode differentiation of
// each loss's forward gives its gradient (not a hand-derived formula). Plain C++ and Eigen, like every reference.
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "detops/reference/tensor.h"

namespace detops::reference {

// A class-target loss's inputs: logits [N, C], one class index per row (the values each op accepts: its
// reference's header), optional per-class weights [C].
struct ClassTargetInputs {
  Matrixd input;
  std::vector<std::int64_t> target;
  std::optional<Vectord> weight;

  const Vectord* weight_or_null() const { return weight ? &*weight : nullptr; }
};

// The factor of a reduction's sum: 1 / denominator for 'mean' (NaN for a mean of nothing), else 1.
template <typename Reduction>
double reduction_scale(Reduction reduction, double denominator) {
  if (reduction != Reduction::kMean) return 1.0;
  return denominator == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / denominator;
}

// A value and its derivative with respect to one logit.
struct Dual {
  double v = 0, d = 0;
};

inline Dual operator+(Dual a, Dual b) { return {a.v + b.v, a.d + b.d}; }
inline Dual operator-(Dual a) { return {-a.v, -a.d}; }
inline Dual operator-(Dual a, double b) { return {a.v - b, a.d}; }
inline Dual operator-(Dual a, Dual b) { return {a.v - b.v, a.d - b.d}; }
inline Dual operator*(Dual a, Dual b) { return {a.v * b.v, a.d * b.v + a.v * b.d}; }
inline Dual operator*(double s, Dual a) { return {s * a.v, s * a.d}; }
inline Dual operator/(Dual a, Dual b) { return {a.v / b.v, (a.d * b.v - a.v * b.d) / (b.v * b.v)}; }
inline Dual exp(Dual a) {
  const double e = std::exp(a.v);
  return {e, e * a.d};
}
inline Dual log(Dual a) { return {std::log(a.v), a.d / a.v}; }
inline Dual log1p(Dual a) { return {std::log1p(a.v), a.d / (1 + a.v)}; }
// d(a^g) = g a^(g-1) da; 0 along a direction that leaves a unchanged (also where a^(g-1) is infinite).
inline Dual pow(Dual a, double g) {
  if (g == 0) return {1, 0};
  return {std::pow(a.v, g), a.d == 0 ? 0.0 : g * std::pow(a.v, g - 1) * a.d};
}
inline double value_of(Dual a) { return a.v; }
inline double value_of(double a) { return a; }

}  // namespace detops::reference
