#pragma once
// Per-row softmax focal loss math shared by the CUDA kernels and the CPU implementation, in the accumulation
// type. Framework-free; compiles under nvcc (host and device) and a plain C++ compiler.
//
// Row statistics, relative to the row's maximum m (so no exp overflows; m includes x_t):
//   e_c = exp(x_c - m),  e_t = exp(x_t - m) in (0, 1],  so = sum_{c != t} e_c,  s = e_t + so >= 1
//   p_t = e_t / s,  q = 1 - p_t = so / s            (q from the other classes: no cancellation as p_t -> 1)
//   log p_t = -log1p(so / e_t)  when so <= e_t (p_t >= 1/2: exact as q -> 0),  else (x_t - m) - log(s)
// never log of a rounded probability, so p_t rounding to 0 or 1 in any dtype loses nothing.
// With r = log(p_t) / q (-> -1 as q -> 0; -1 when q is exactly 0):
//   loss          = -alpha q^gamma log p_t = -alpha q^(gamma + 1) r
//   d loss / dx_t =  alpha q^gamma (gamma p_t log p_t / q - 1) q = alpha q^(gamma + 1) (gamma p_t r - 1) =: D
//   d loss / dx_c = -D e_c / so  (c != t; 0 when so = 0)
// (d loss / dx_c = alpha q^gamma (gamma p_t r - 1)(delta_tc - p_c), mmcv's backward, with (1 - p_t) = q and
// p_c / q = e_c / so.) Written with q^(gamma + 1), every term has its limit as q -> 0 for any gamma > -1.
#include <cmath>
#include <cstdint>

#include "common/macros.h"
#include "common/numeric.h"
#include "softmax_focal_loss/softmax_focal_loss.h"

namespace detops {

DETOPS_HD float sfl_exp(float v) { return expf(v); }
DETOPS_HD double sfl_exp(double v) { return exp(v); }
DETOPS_HD float sfl_log(float v) { return logf(v); }
DETOPS_HD double sfl_log(double v) { return log(v); }
DETOPS_HD float sfl_log1p(float v) { return log1pf(v); }
DETOPS_HD double sfl_log1p(double v) { return log1p(v); }
DETOPS_HD float sfl_pow(float b, float e) { return powf(b, e); }
DETOPS_HD double sfl_pow(double b, double e) { return pow(b, e); }

// The constants of one call (SoftmaxFocalCoeffs<Acc>(params)), in the accumulation type.
template <typename Acc>
struct SoftmaxFocalCoeffs {
  Acc alpha = Acc(0.25);
  Acc gamma = Acc(2);
  int gamma_kind = 2;  // 0: gamma == 0 (q^(gamma+1) = q), 2: gamma == 2 (q * q * q), 1: any other (pow)

  SoftmaxFocalCoeffs() = default;
  explicit SoftmaxFocalCoeffs(const SoftmaxFocalLossParams& p)
      : alpha(static_cast<Acc>(p.alpha)), gamma(static_cast<Acc>(p.gamma)),
        gamma_kind(p.gamma == 0 ? 0 : (p.gamma == 2 ? 2 : 1)) {}
};

// Online softmax: adds exp(x - m) to the running sum s (whose terms are relative to m), first raising m to x
// (and rescaling s) when x > m. A NaN x makes s NaN.
template <typename Acc>
DETOPS_HD void softmax_online_add(Acc& m, Acc& s, Acc x) {
  if (x > m) {
    s = s * sfl_exp(m - x) + Acc(1);
    m = x;
  } else {
    s += sfl_exp(x - m);
  }
}

// One row's loss (alpha included, weight not), d loss / dx_t and the factor of e_c in d loss / dx_c (c != t).
template <typename Acc>
struct SoftmaxFocalRow {
  Acc loss;
  Acc d_target;  // D
  Acc d_other;   // -D / so (0 when so = 0): d loss / dx_c = d_other * e_c
};

// zt = x_t - m <= 0 (m the row's maximum), so = sum_{c != t} exp(x_c - m).
template <typename Acc>
DETOPS_HD SoftmaxFocalRow<Acc> softmax_focal_row(Acc zt, Acc so, const SoftmaxFocalCoeffs<Acc>& k) {
  const Acc et = sfl_exp(zt);
  const Acc s = et + so;
  const Acc q = so / s;
  const Acc p = et / s;
  const Acc logp = so <= et ? -sfl_log1p(so / et) : zt - sfl_log(s);
  const Acc r = q == Acc(0) ? Acc(-1) : logp / q;  // NaN stays NaN
  Acc q1;  // q^(gamma + 1)
  if (k.gamma_kind == 2) {
    q1 = q * q * q;
  } else if (k.gamma_kind == 0) {
    q1 = q;
  } else {
    q1 = sfl_pow(q, k.gamma + Acc(1));
  }
  SoftmaxFocalRow<Acc> row;
  row.loss = -k.alpha * q1 * r;
  row.d_target = k.alpha * q1 * (k.gamma * p * r - Acc(1));
  row.d_other = so == Acc(0) ? Acc(0) : -row.d_target / so;
  return row;
}

// Row n's target class and weight. kind: 0 a class in [0, C) (w = weight[t] or 1), -1 ignored (t < 0: loss and
// gradient 0, weight not read), 1 invalid (t >= C: the caller reports it).
template <typename Acc>
struct SoftmaxFocalTarget {
  std::int64_t t;
  Acc w;
  int kind;
};

template <typename T, typename Acc>
DETOPS_HD SoftmaxFocalTarget<Acc> load_softmax_focal_target(std::int64_t n, std::int64_t classes,
                                                            const std::int64_t* target, const T* weight) {
  const std::int64_t t = target[n];
  if (t < 0) return {t, Acc(0), -1};
  if (t >= classes) return {t, Acc(0), 1};
  return {t, weight != nullptr ? to_acc<Acc>(weight[t]) : Acc(1), 0};
}

// A row is processed by a group of g.size threads, thread g.rank taking classes rank, rank + size, ...; g.max(v)
// and g.sum(v) return the group's maximum and sum of v in every thread of the group. The CUDA kernels' groups are
// a warp or a block; the CPU's is one thread (SerialRow).
struct SerialRow {
  int rank = 0, size = 1;
  template <typename Acc>
  DETOPS_HD Acc max(Acc v) const { return v; }
  template <typename Acc>
  DETOPS_HD Acc sum(Acc v) const { return v; }
};

// The row's maximum m and so = sum_{c != t} exp(x_c - m), in every thread of the group.
template <typename T, typename Acc, typename Group>
DETOPS_HD void softmax_focal_row_stats(const Group& g, const T* x, std::int64_t classes, std::int64_t t, Acc& m,
                                       Acc& so) {
  Acc ml = to_acc<Acc>(x[t]), sl = Acc(0);
  for (std::int64_t c = g.rank; c < classes; c += g.size) {
    if (c != t) softmax_online_add(ml, sl, to_acc<Acc>(x[c]));
  }
  m = g.max(ml);
  so = g.sum(sl * sfl_exp(ml - m));
}

// Row n's weighted loss, in every thread of the group (0 for an ignored or invalid row; kind says which).
template <typename T, typename Acc, typename Group>
DETOPS_HD Acc softmax_focal_row_loss(const Group& g, const SoftmaxFocalCoeffs<Acc>& k, std::int64_t n,
                                     std::int64_t classes, const T* input, const std::int64_t* target, const T* weight,
                                     int& kind) {
  const SoftmaxFocalTarget<Acc> tg = load_softmax_focal_target<T, Acc>(n, classes, target, weight);
  kind = tg.kind;
  if (tg.kind != 0) return Acc(0);
  const T* x = input + n * classes;
  Acc m, so;
  softmax_focal_row_stats(g, x, classes, tg.t, m, so);
  return tg.w * softmax_focal_row(to_acc<Acc>(x[tg.t]) - m, so, k).loss;
}

// Writes the group's elements of row n of grad_input: upstream * d (weighted loss_n) / dx (zeros for an ignored or
// invalid row; kind says which).
template <typename T, typename Acc, typename Group>
DETOPS_HD void softmax_focal_row_grad(const Group& g, const SoftmaxFocalCoeffs<Acc>& k, std::int64_t n,
                                      std::int64_t classes, Acc upstream, const T* input, const std::int64_t* target,
                                      const T* weight, T* grad_input, int& kind) {
  const SoftmaxFocalTarget<Acc> tg = load_softmax_focal_target<T, Acc>(n, classes, target, weight);
  kind = tg.kind;
  const T* x = input + n * classes;
  T* gx = grad_input + n * classes;
  if (tg.kind != 0) {
    for (std::int64_t c = g.rank; c < classes; c += g.size) gx[c] = from_acc<T>(Acc(0));
    return;
  }
  Acc m, so;
  softmax_focal_row_stats(g, x, classes, tg.t, m, so);
  const SoftmaxFocalRow<Acc> row = softmax_focal_row(to_acc<Acc>(x[tg.t]) - m, so, k);
  const Acc d_target = upstream * tg.w * row.d_target, d_other = upstream * tg.w * row.d_other;
  for (std::int64_t c = g.rank; c < classes; c += g.size) {
    gx[c] = from_acc<T>(c == tg.t ? d_target : d_other * sfl_exp(to_acc<Acc>(x[c]) - m));
  }
}

}  // namespace detops
