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
DETOPS_HD float focal_pow(float b, float e) { return powf(b, e); }
DETOPS_HD double focal_pow(double b, double e) { return pow(b, e); }

// 1 / d for d in [1, 2]. fp32 on the device: the hardware's approximate reciprocal and one Newton step
// (within 1 ulp, without the general division's range checks and slow path, which d never needs).
DETOPS_HD float focal_recip(float d) {
#ifdef __CUDA_ARCH__
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  return fmaf(r, fmaf(-d, r, 1.0f), r);
#else
  return 1.0f / d;
#endif
}
DETOPS_HD double focal_recip(double d) { return 1.0 / d; }

// log(1 + e) for e in [0, 1] (e = exp(-|x|)). fp32: 2 atanh(s) with s = e / (2 + e) in [0, 1/3], as
// 2s (1 + z/3 + z^2/5 + ... + z^7/15), z = s^2 <= 1/9; the first omitted term is below 2e-9 of the sum.
// 2s is formed as e / (1 + e/2), exact for tiny and subnormal e. Within 3.5 ulp of log1p over all of
// [0, 1] (checked exhaustively against double on the host), relative down to e = 0; nothing cancels. It
// costs a third of the general log1pf, which handles every argument. fp64: log1p.
DETOPS_HD float focal_log1p_unit(float e) {
  const float s2 = e * focal_recip(fmaf(0.5f, e, 1.0f));
  const float z = 0.25f * s2 * s2;
  float r = 1.0f / 15;
  r = fmaf(r, z, 1.0f / 13);
  r = fmaf(r, z, 1.0f / 11);
  r = fmaf(r, z, 1.0f / 9);
  r = fmaf(r, z, 1.0f / 7);
  r = fmaf(r, z, 1.0f / 5);
  r = fmaf(r, z, 1.0f / 3);
  r = fmaf(r, z, 1.0f);
  return s2 * r;
}
DETOPS_HD double focal_log1p_unit(double e) { return log1p(e); }

// Gamma as a compile-time choice for the hot kernels: kGammaTwo (RetinaNet's default; q^gamma = q * q, no
// branch) or kGammaAny (read from the coefficients at run time: 0, 2 or pow).
inline constexpr int kGammaAny = -1;
inline constexpr int kGammaTwo = 2;

// The constants of one call, in the accumulation type.
template <typename Acc>
struct FocalCoeffs {
  Acc alpha_pos = 1, alpha_neg = 1;  // a_t = alpha_pos t + alpha_neg (1 - t)
  Acc gamma = 2;
  int gamma_kind = 2;  // 0: gamma == 0, 2: gamma == 2 (q * q), 1: any other (pow)

  FocalCoeffs() = default;
  explicit FocalCoeffs(const SigmoidFocalLossParams& p) {
    if (p.form == FocalLossForm::kMmcv || p.alpha >= 0) {
      alpha_pos = static_cast<Acc>(p.alpha);
      alpha_neg = static_cast<Acc>(1.0 - p.alpha);
    }
    gamma = static_cast<Acc>(p.gamma);
    gamma_kind = p.gamma == 0 ? 0 : (p.gamma == 2 ? 2 : 1);
  }
};

template <typename Acc>
FocalCoeffs<Acc> focal_coeffs(const SigmoidFocalLossParams& p) {
  return FocalCoeffs<Acc>(p);
}

template <typename Acc>
struct FocalTerms {
  Acc p, pm;  // sigmoid(x), sigmoid(-x) = 1 - p
  Acc ce;     // binary cross-entropy with logits
  Acc q;      // 1 - p_t
  Acc m;      // q^gamma
};

template <typename Acc, int Gamma = kGammaAny>
DETOPS_HD FocalTerms<Acc> focal_terms(Acc x, Acc t, const FocalCoeffs<Acc>& k) {
  FocalTerms<Acc> r;
  const Acc ax = x < Acc(0) ? -x : x;
  const Acc e = focal_exp(-ax);  // in [0, 1]; NaN for a NaN logit
  const Acc inv = focal_recip(Acc(1) + e);
  const bool nonneg = x >= Acc(0);
  r.p = nonneg ? inv : e * inv;
  r.pm = nonneg ? e * inv : inv;
  const Acc l = focal_log1p_unit(e);
  const Acc softplus_pos = (nonneg ? x : Acc(0)) + l;   // softplus(x)  = -log(1 - p)
  const Acc softplus_neg = (nonneg ? Acc(0) : -x) + l;  // softplus(-x) = -log(p)
  r.ce = t * softplus_neg + (Acc(1) - t) * softplus_pos;
  r.q = r.p * (Acc(1) - t) + r.pm * t;
  if (Gamma == kGammaTwo || k.gamma_kind == 2) {
    r.m = r.q * r.q;
  } else {
    r.m = k.gamma_kind == 0 ? Acc(1) : focal_pow(r.q, k.gamma);
  }
  return r;
}

template <typename Acc>
DETOPS_HD Acc focal_alpha_t(Acc t, const FocalCoeffs<Acc>& k) {
  return k.alpha_pos * t + k.alpha_neg * (Acc(1) - t);
}

// The loss of one element. Gamma: kGammaTwo only where k.gamma_kind == 2.
template <typename Acc, int Gamma = kGammaAny>
DETOPS_HD Acc focal_loss_value(Acc x, Acc t, const FocalCoeffs<Acc>& k) {
  const FocalTerms<Acc> r = focal_terms<Acc, Gamma>(x, t, k);
  return focal_alpha_t(t, k) * r.ce * r.m;
}

// d loss / dx of one element.
template <typename Acc, int Gamma = kGammaAny>
DETOPS_HD Acc focal_loss_grad(Acc x, Acc t, const FocalCoeffs<Acc>& k) {
  const FocalTerms<Acc> r = focal_terms<Acc, Gamma>(x, t, k);
  const Acc dce = r.p * (Acc(1) - t) - r.pm * t;
  const Acc dq = r.p * r.pm * (Acc(1) - Acc(2) * t);
  Acc dm = Acc(0);
  if (Gamma == kGammaTwo || k.gamma_kind == 2) {
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
