#pragma once
// Per-element sigmoid focal loss math shared by the CUDA kernels and the CPU implementation, in the
// accumulation type. Framework-free; compiles under nvcc (host and device) and a plain C++ compiler.
//
// With p = sigmoid(x) and t the target (torchvision: any value in [0, 1]; mmcv: 1 for the row's class,
// else 0):
//   ce   = -t log p - (1 - t) log(1 - p) = t softplus(-x) + (1 - t) softplus(x)
//   q    = 1 - p_t = p (1 - t) + (1 - p) t
//   loss = a_t ce q^gamma,  a_t = alpha t + (1 - alpha)(1 - t)  (1 when torchvision's alpha < 0)
// p and 1 - p are both computed from exp(-|x|) (never 1 - p), and log p, log(1 - p) as softplus, so no
// term is lost or becomes log(0) when p rounds to 0 or 1: large logits stay finite in every dtype.
//   d loss / dx = a_t (dce q^gamma + ce gamma q^gamma dq / q),  dce = p (1 - t) - (1 - p) t,
//                 dq = p (1 - p)(1 - 2t);  the second term is 0 when gamma = 0 or q = 0 (its limit).
#include <cmath>
#include <cstdint>

#include "common/macros.h"
#include "common/numeric.h"
#include "sigmoid_focal_loss/sigmoid_focal_loss.h"

namespace detops {

DETOPS_HD float focal_exp(float v) { return expf(v); }
DETOPS_HD double focal_exp(double v) { return exp(v); }
DETOPS_HD float focal_log1p(float v) { return log1pf(v); }
DETOPS_HD double focal_log1p(double v) { return log1p(v); }
DETOPS_HD float focal_pow(float b, float e) { return powf(b, e); }
DETOPS_HD double focal_pow(double b, double e) { return pow(b, e); }

// The constants of one call, in the accumulation type.
template <typename Acc>
struct FocalCoeffs {
  Acc alpha_pos = 1, alpha_neg = 1;  // a_t = alpha_pos t + alpha_neg (1 - t)
  Acc gamma = 2;
  int gamma_kind = 2;  // 0: gamma == 0, 2: gamma == 2 (q * q), 1: any other (pow)
};

template <typename Acc>
FocalCoeffs<Acc> focal_coeffs(const SigmoidFocalLossParams& p) {
  FocalCoeffs<Acc> k;
  if (p.form == FocalLossForm::kMmcv || p.alpha >= 0) {
    k.alpha_pos = static_cast<Acc>(p.alpha);
    k.alpha_neg = static_cast<Acc>(1.0 - p.alpha);
  }
  k.gamma = static_cast<Acc>(p.gamma);
  k.gamma_kind = p.gamma == 0 ? 0 : (p.gamma == 2 ? 2 : 1);
  return k;
}

template <typename Acc>
struct FocalTerms {
  Acc p, pm;  // sigmoid(x), sigmoid(-x) = 1 - p
  Acc ce;     // binary cross-entropy with logits
  Acc q;      // 1 - p_t
  Acc m;      // q^gamma
};

template <typename Acc>
DETOPS_HD FocalTerms<Acc> focal_terms(Acc x, Acc t, const FocalCoeffs<Acc>& k) {
  FocalTerms<Acc> r;
  const Acc ax = x < Acc(0) ? -x : x;
  const Acc e = focal_exp(-ax);  // in (0, 1]; NaN for a NaN logit
  const Acc inv = Acc(1) / (Acc(1) + e);
  const bool nonneg = x >= Acc(0);
  r.p = nonneg ? inv : e * inv;
  r.pm = nonneg ? e * inv : inv;
  const Acc l = focal_log1p(e);
  const Acc softplus_pos = (nonneg ? x : Acc(0)) + l;   // softplus(x)  = -log(1 - p)
  const Acc softplus_neg = (nonneg ? Acc(0) : -x) + l;  // softplus(-x) = -log(p)
  r.ce = t * softplus_neg + (Acc(1) - t) * softplus_pos;
  r.q = r.p * (Acc(1) - t) + r.pm * t;
  r.m = k.gamma_kind == 2 ? r.q * r.q : (k.gamma_kind == 0 ? Acc(1) : focal_pow(r.q, k.gamma));
  return r;
}

template <typename Acc>
DETOPS_HD Acc focal_alpha_t(Acc t, const FocalCoeffs<Acc>& k) {
  return k.alpha_pos * t + k.alpha_neg * (Acc(1) - t);
}

// The loss of one element.
template <typename Acc>
DETOPS_HD Acc focal_loss_value(Acc x, Acc t, const FocalCoeffs<Acc>& k) {
  const FocalTerms<Acc> r = focal_terms(x, t, k);
  return focal_alpha_t(t, k) * r.ce * r.m;
}

// d loss / dx of one element.
template <typename Acc>
DETOPS_HD Acc focal_loss_grad(Acc x, Acc t, const FocalCoeffs<Acc>& k) {
  const FocalTerms<Acc> r = focal_terms(x, t, k);
  const Acc dce = r.p * (Acc(1) - t) - r.pm * t;
  const Acc dq = r.p * r.pm * (Acc(1) - Acc(2) * t);
  Acc dm = Acc(0);
  if (k.gamma_kind == 2) {
    dm = Acc(2) * r.q * dq;
  } else if (k.gamma_kind == 1 && r.q > Acc(0)) {
    dm = k.gamma * r.m * (dq / r.q);
  }
  return focal_alpha_t(t, k) * (dce * r.m + r.ce * dm);
}

// Element i of the torchvision form: (x, t) from the two tensors, weight 1.
// Element i = n * C + c of the mmcv form: t = 1 if target[n] == c else 0, weight[target[n]] when given and
// target[n] < C (rows of the background class C are unweighted). valid is false for a target outside [0, C].
template <typename Acc>
struct FocalElement {
  Acc x, t, w;
  bool valid;
};

template <typename T, typename Acc>
DETOPS_HD FocalElement<Acc> load_focal_element(FocalLossForm form, std::int64_t i, std::int64_t num_classes,
                                               const T* inputs, const void* targets, const T* weight) {
  FocalElement<Acc> el{to_acc<Acc>(inputs[i]), Acc(0), Acc(1), true};
  if (form == FocalLossForm::kTorchvision) {
    el.t = to_acc<Acc>(static_cast<const T*>(targets)[i]);
    return el;
  }
  const std::int64_t n = i / num_classes, c = i - n * num_classes;
  const std::int64_t target = static_cast<const std::int64_t*>(targets)[n];
  if (target < 0 || target > num_classes) {
    el.valid = false;
    return el;
  }
  el.t = target == c ? Acc(1) : Acc(0);
  if (weight != nullptr && target < num_classes) el.w = to_acc<Acc>(weight[target]);
  return el;
}

}  // namespace detops
