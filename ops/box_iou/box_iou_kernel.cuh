#pragma once
// Per-element box IoU math shared by the CUDA kernels and the CPU implementation: the pairwise values
// and the element-wise losses with their gradients. Framework-free; compiles under nvcc (host and
// device) and under a plain C++ compiler. The definition, degenerate boxes included, is in
// docs/ops/box_iou.md; every quotient num / (den + eps) below is defined as 0 when den <= 0.
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "box_iou/box_iou.h"
#include "common/macros.h"
#include "common/numeric.h"

namespace detops {

template <BoxIouVariant V>
using BoxIouVariantTag = std::integral_constant<BoxIouVariant, V>;

// dispatch_box_iou_variant(variant, op_name, fn): calls fn(BoxIouVariantTag<V>{}); loud on anything else.
template <typename Fn>
decltype(auto) dispatch_box_iou_variant(BoxIouVariant variant, const char* op_name, Fn&& fn) {
  switch (variant) {
    case BoxIouVariant::kIoU: return fn(BoxIouVariantTag<BoxIouVariant::kIoU>{});
    case BoxIouVariant::kGIoU: return fn(BoxIouVariantTag<BoxIouVariant::kGIoU>{});
    case BoxIouVariant::kDIoU: return fn(BoxIouVariantTag<BoxIouVariant::kDIoU>{});
    case BoxIouVariant::kCIoU: return fn(BoxIouVariantTag<BoxIouVariant::kCIoU>{});
  }
  throw std::invalid_argument(std::string(op_name) + ": unknown box IoU variant code " +
                              std::to_string(static_cast<int>(variant)));
}

template <typename Acc>
DETOPS_HD Acc box_iou_quiet_nan() {
  return std::numeric_limits<Acc>::quiet_NaN();
}

template <typename Acc>
DETOPS_HD Acc box_iou_atan(Acc v) {
#if defined(__CUDA_ARCH__)
  return atan(v);
#else
  return std::atan(v);
#endif
}

// num / (den + eps) when den > 0, else 0. A den <= 0 only arises from degenerate boxes (inverted, or of
// zero extent); eps (>= 0) must not turn such a den into an eps-sized denominator and a huge quotient.
template <typename Acc>
DETOPS_HD Acc regularized_ratio(Acc num, Acc den, Acc eps) {
  return den > Acc(0) ? num / (den + eps) : Acc(0);
}

// The larger (smaller) of a and b, and its derivative with respect to a (the derivative with respect to
// b is 1 - da). At a tie the gradient is split equally, as torch.maximum / torch.minimum do.
template <typename Acc>
struct Pick {
  Acc value;
  Acc da;
};

template <typename Acc>
DETOPS_HD Pick<Acc> pick_max(Acc a, Acc b) {
  if (a > b) return {a, Acc(1)};
  if (b > a) return {b, Acc(0)};
  return {a, Acc(0.5)};
}

template <typename Acc>
DETOPS_HD Pick<Acc> pick_min(Acc a, Acc b) {
  if (a < b) return {a, Acc(1)};
  if (b < a) return {b, Acc(0)};
  return {a, Acc(0.5)};
}

// CIoU's aspect angle atan(w / h): +-pi/2 for h == 0 (atan(+-inf)); has_aspect is false for
// w == h == 0, which has no aspect ratio, and the pair's v is then 0.
template <typename Acc>
DETOPS_HD bool box_has_aspect(Acc w, Acc h) {
  return !(w == Acc(0) && h == Acc(0));
}

template <typename Acc>
DETOPS_HD Acc box_aspect_angle(Acc w, Acc h) {
  return box_has_aspect(w, h) ? box_iou_atan(w / h) : Acc(0);
}

// ---------------------------------------------------------------------------------------------------
// Pairwise values ([N, 4] x [M, 4] -> [N, M]).

// One box prepared for many pairs: coordinates in Acc, area, CIoU's aspect angle. A plain aggregate
// (no member initializers) so it can live in __shared__ memory.
template <typename Acc>
struct BoxGeometry {
  Acc x1, y1, x2, y2;
  Acc area;        // (x2 - x1) * (y2 - y1): negative when exactly one side is inverted
  Acc theta;       // atan(w / h), CIoU only
  bool finite;     // all four coordinates finite
  bool has_aspect; // not w == h == 0, CIoU only
};

template <BoxIouVariant V, typename T, typename Acc>
DETOPS_HD BoxGeometry<Acc> box_geometry(const T* box) {
  BoxGeometry<Acc> g;
  g.x1 = to_acc<Acc>(box[0]);
  g.y1 = to_acc<Acc>(box[1]);
  g.x2 = to_acc<Acc>(box[2]);
  g.y2 = to_acc<Acc>(box[3]);
  g.finite = is_finite(g.x1) && is_finite(g.y1) && is_finite(g.x2) && is_finite(g.y2);
  const Acc w = g.x2 - g.x1, h = g.y2 - g.y1;
  g.area = w * h;
  g.has_aspect = box_has_aspect(w, h);
  g.theta = V == BoxIouVariant::kCIoU ? box_aspect_angle(w, h) : Acc(0);
  return g;
}

// torchvision.ops.box_iou / generalized_box_iou / distance_box_iou / complete_box_iou of one pair, with
// the degenerate-box rules of docs/ops/box_iou.md. NaN when a coordinate of either box is not finite.
template <BoxIouVariant V, typename Acc>
DETOPS_HD Acc box_iou_pairwise_value(const BoxGeometry<Acc>& a, const BoxGeometry<Acc>& b, Acc eps) {
  if (!(a.finite && b.finite)) return box_iou_quiet_nan<Acc>();
  const Acc iw = (a.x2 < b.x2 ? a.x2 : b.x2) - (a.x1 > b.x1 ? a.x1 : b.x1);
  const Acc ih = (a.y2 < b.y2 ? a.y2 : b.y2) - (a.y1 > b.y1 ? a.y1 : b.y1);
  const Acc inter = (iw > Acc(0) && ih > Acc(0)) ? iw * ih : Acc(0);
  const Acc uni = a.area + b.area - inter;
  const Acc iou = regularized_ratio(inter, uni, Acc(0));
  if constexpr (V == BoxIouVariant::kIoU) {
    return iou;
  } else {
    // The enclosing box, its extents clamped at 0 as torchvision's pairwise ops do.
    const Acc cw_raw = (a.x2 > b.x2 ? a.x2 : b.x2) - (a.x1 < b.x1 ? a.x1 : b.x1);
    const Acc ch_raw = (a.y2 > b.y2 ? a.y2 : b.y2) - (a.y1 < b.y1 ? a.y1 : b.y1);
    const Acc cw = cw_raw > Acc(0) ? cw_raw : Acc(0);
    const Acc ch = ch_raw > Acc(0) ? ch_raw : Acc(0);
    if constexpr (V == BoxIouVariant::kGIoU) {
      const Acc c = cw * ch;
      return iou - regularized_ratio(c - uni, c, Acc(0));
    } else {
      // Center offsets as sums of differences: exact for nearby coordinates, unlike (x1 + x2) / 2.
      const Acc dx = ((a.x1 - b.x1) + (a.x2 - b.x2)) * Acc(0.5);
      const Acc dy = ((a.y1 - b.y1) + (a.y2 - b.y2)) * Acc(0.5);
      const Acc diou = iou - regularized_ratio(dx * dx + dy * dy, cw * cw + ch * ch, eps);
      if constexpr (V == BoxIouVariant::kDIoU) {
        return diou;
      } else {
        const Acc dtheta = a.theta - b.theta;
        const Acc v = (a.has_aspect && b.has_aspect) ? static_cast<Acc>(kCiouAspectScale) * dtheta * dtheta : Acc(0);
        const Acc alpha = regularized_ratio(v, Acc(1) - iou + v, eps);
        return diou - alpha * v;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Element-wise losses ([N, 4] x [N, 4] -> [N]) and their gradients.

template <typename Acc>
struct BoxCoords {
  Acc x1, y1, x2, y2;
};

template <typename T, typename Acc>
DETOPS_HD BoxCoords<Acc> load_box(const T* box) {
  return {to_acc<Acc>(box[0]), to_acc<Acc>(box[1]), to_acc<Acc>(box[2]), to_acc<Acc>(box[3])};
}

template <typename Acc>
DETOPS_HD bool box_coords_finite(const BoxCoords<Acc>& b) {
  return is_finite(b.x1) && is_finite(b.y1) && is_finite(b.x2) && is_finite(b.y2);
}

// The forward quantities of one loss pair (a = boxes1[i], b = boxes2[i]), kept for the backward.
template <typename Acc>
struct BoxIouLossTerms {
  Pick<Acc> ix1, iy1, ix2, iy2;  // intersection corners: max of the x1 / y1, min of the x2 / y2
  Pick<Acc> cx1, cy1, cx2, cy2;  // enclosing corners: min of the x1 / y1, max of the x2 / y2
  Acc aw, ah, bw, bh;            // widths and heights (negative for inverted boxes)
  Acc iw, ih;                    // intersection extents (<= 0 when the boxes do not overlap)
  bool overlap;                  // iw > 0 && ih > 0 (torchvision's mask)
  Acc inter, uni, d_u, iou;      // d_u = union + eps; iou = inter / d_u (0 when union <= 0)
  Acc cw, ch;                    // enclosing extents, not clamped (as torchvision's losses)
  Acc c, d_c, penalty;           // GIoU: enclosing area, c + eps, (c - union) / d_c (0 when c <= 0)
  Acc dx, dy, rho2;              // DIoU, CIoU: center offsets, squared center distance
  Acc diag, d_d, distance;       // cw^2 + ch^2, diag + eps, rho2 / d_d (0 when diag <= 0)
  bool has_aspect;               // CIoU: neither box has w == h == 0
  Acc theta_a, theta_b, v;       // CIoU: atan(w / h) per box; v = 4/pi^2 (theta_b - theta_a)^2
};

// eps of the union and diagonal denominators: the loss's eps, except CIoU's fixed inner eps.
template <BoxIouVariant V>
DETOPS_HD double box_iou_loss_inner_eps(double eps) {
  return V == BoxIouVariant::kCIoU ? kCiouLossInnerEps : eps;
}

template <BoxIouVariant V, typename Acc>
DETOPS_HD BoxIouLossTerms<Acc> box_iou_loss_terms(const BoxCoords<Acc>& a, const BoxCoords<Acc>& b, Acc eps) {
  BoxIouLossTerms<Acc> t{};
  t.ix1 = pick_max(a.x1, b.x1);
  t.iy1 = pick_max(a.y1, b.y1);
  t.ix2 = pick_min(a.x2, b.x2);
  t.iy2 = pick_min(a.y2, b.y2);
  t.aw = a.x2 - a.x1;
  t.ah = a.y2 - a.y1;
  t.bw = b.x2 - b.x1;
  t.bh = b.y2 - b.y1;
  t.iw = t.ix2.value - t.ix1.value;
  t.ih = t.iy2.value - t.iy1.value;
  t.overlap = t.iw > Acc(0) && t.ih > Acc(0);
  t.inter = t.overlap ? t.iw * t.ih : Acc(0);
  t.uni = t.aw * t.ah + t.bw * t.bh - t.inter;
  t.d_u = t.uni + eps;
  t.iou = t.uni > Acc(0) ? t.inter / t.d_u : Acc(0);
  if constexpr (V != BoxIouVariant::kIoU) {
    t.cx1 = pick_min(a.x1, b.x1);
    t.cy1 = pick_min(a.y1, b.y1);
    t.cx2 = pick_max(a.x2, b.x2);
    t.cy2 = pick_max(a.y2, b.y2);
    t.cw = t.cx2.value - t.cx1.value;
    t.ch = t.cy2.value - t.cy1.value;
  }
  if constexpr (V == BoxIouVariant::kGIoU) {
    t.c = t.cw * t.ch;
    t.d_c = t.c + eps;
    t.penalty = t.c > Acc(0) ? (t.c - t.uni) / t.d_c : Acc(0);
  }
  if constexpr (V == BoxIouVariant::kDIoU || V == BoxIouVariant::kCIoU) {
    t.dx = ((a.x1 - b.x1) + (a.x2 - b.x2)) * Acc(0.5);
    t.dy = ((a.y1 - b.y1) + (a.y2 - b.y2)) * Acc(0.5);
    t.rho2 = t.dx * t.dx + t.dy * t.dy;
    t.diag = t.cw * t.cw + t.ch * t.ch;
    t.d_d = t.diag + eps;
    t.distance = t.diag > Acc(0) ? t.rho2 / t.d_d : Acc(0);
  }
  if constexpr (V == BoxIouVariant::kCIoU) {
    t.has_aspect = box_has_aspect(t.aw, t.ah) && box_has_aspect(t.bw, t.bh);
    t.theta_a = box_aspect_angle(t.aw, t.ah);
    t.theta_b = box_aspect_angle(t.bw, t.bh);
    const Acc dtheta = t.theta_b - t.theta_a;
    t.v = t.has_aspect ? static_cast<Acc>(kCiouAspectScale) * dtheta * dtheta : Acc(0);
  }
  return t;
}

// CIoU's alpha = v / (1 - iou + v + eps) (0 when 1 - iou + v <= 0), with the loss's own eps.
template <typename Acc>
DETOPS_HD Acc ciou_alpha(const BoxIouLossTerms<Acc>& t, Acc eps) {
  return regularized_ratio(t.v, Acc(1) - t.iou + t.v, eps);
}

// The loss of one pair. For CIoU, alpha is computed from (alpha_a, alpha_b), normally (a, b) itself.
template <BoxIouVariant V, typename Acc>
DETOPS_HD Acc box_iou_loss_value(const BoxIouLossParams& p, const BoxCoords<Acc>& a, const BoxCoords<Acc>& b,
                                 const BoxCoords<Acc>& alpha_a, const BoxCoords<Acc>& alpha_b) {
  if (!(box_coords_finite(a) && box_coords_finite(b))) return box_iou_quiet_nan<Acc>();
  const Acc eps = static_cast<Acc>(box_iou_loss_inner_eps<V>(p.eps));
  const BoxIouLossTerms<Acc> t = box_iou_loss_terms<V, Acc>(a, b, eps);
  if constexpr (V == BoxIouVariant::kIoU) {
    return Acc(1) - t.iou;
  } else if constexpr (V == BoxIouVariant::kGIoU) {
    return Acc(1) - t.iou + t.penalty;
  } else if constexpr (V == BoxIouVariant::kDIoU) {
    return Acc(1) - t.iou + t.distance;
  } else {
    if (!(box_coords_finite(alpha_a) && box_coords_finite(alpha_b))) return box_iou_quiet_nan<Acc>();
    const BoxIouLossTerms<Acc> t0 = box_iou_loss_terms<V, Acc>(alpha_a, alpha_b, eps);
    return Acc(1) - t.iou + t.distance + ciou_alpha(t0, static_cast<Acc>(p.eps)) * t.v;
  }
}

template <typename Acc>
struct BoxPairGrad {
  Acc a[4];  // d loss / d (x1, y1, x2, y2) of boxes1[i]
  Acc b[4];  // d loss / d (x1, y1, x2, y2) of boxes2[i]
};

// g * d loss / d (a, b) of one pair, by reverse-mode differentiation of box_iou_loss_terms. Where the
// loss has a kink (a max / min tie) the gradient is split equally; outside the overlap mask the
// intersection contributes nothing; CIoU's alpha is a constant. All NaN when a coordinate is not finite.
template <BoxIouVariant V, typename Acc>
DETOPS_HD BoxPairGrad<Acc> box_iou_loss_grad(const BoxIouLossParams& p, const BoxCoords<Acc>& a,
                                             const BoxCoords<Acc>& b, Acc g) {
  BoxPairGrad<Acc> r{};
  if (!(box_coords_finite(a) && box_coords_finite(b))) {
    for (int k = 0; k < 4; ++k) r.a[k] = r.b[k] = box_iou_quiet_nan<Acc>();
    return r;
  }
  const Acc eps = static_cast<Acc>(box_iou_loss_inner_eps<V>(p.eps));
  const BoxIouLossTerms<Acc> t = box_iou_loss_terms<V, Acc>(a, b, eps);
  // Adjoints of the intermediate quantities.
  const Acc g_iou = -g;
  Acc g_uni = 0, g_inter = 0, g_cw = 0, g_ch = 0, g_dx = 0, g_dy = 0;
  Acc g_aw = 0, g_ah = 0, g_bw = 0, g_bh = 0;
  if constexpr (V == BoxIouVariant::kGIoU) {
    if (t.c > Acc(0)) {  // penalty = (c - union) / (c + eps)
      const Acc g_c = g * (Acc(1) - t.penalty) / t.d_c;
      g_uni -= g / t.d_c;
      g_cw += g_c * t.ch;
      g_ch += g_c * t.cw;
    }
  }
  if constexpr (V == BoxIouVariant::kDIoU || V == BoxIouVariant::kCIoU) {
    if (t.diag > Acc(0)) {  // distance = rho^2 / (cw^2 + ch^2 + eps)
      const Acc g_rho2 = g / t.d_d;
      const Acc g_d = -g * t.distance / t.d_d;
      g_dx += Acc(2) * t.dx * g_rho2;
      g_dy += Acc(2) * t.dy * g_rho2;
      g_cw += Acc(2) * t.cw * g_d;
      g_ch += Acc(2) * t.ch * g_d;
    }
  }
  if constexpr (V == BoxIouVariant::kCIoU) {
    // + alpha * v with alpha constant: d v / d theta_b = 2 * 4/pi^2 * (theta_b - theta_a) = -d v / d theta_a.
    if (t.has_aspect) {
      const Acc alpha = ciou_alpha(t, static_cast<Acc>(p.eps));
      const Acc g_theta_b = g * alpha * Acc(2) * static_cast<Acc>(kCiouAspectScale) * (t.theta_b - t.theta_a);
      // d atan(w / h) / dw = h / (w^2 + h^2), d / dh = -w / (w^2 + h^2); w^2 + h^2 > 0 here.
      const Acc ra = t.aw * t.aw + t.ah * t.ah, rb = t.bw * t.bw + t.bh * t.bh;
      g_aw -= g_theta_b * t.ah / ra;
      g_ah += g_theta_b * t.aw / ra;
      g_bw += g_theta_b * t.bh / rb;
      g_bh -= g_theta_b * t.bw / rb;
    }
  }
  if (t.uni > Acc(0)) {  // iou = inter / (union + eps)
    g_inter += g_iou / t.d_u;
    g_uni -= g_iou * t.iou / t.d_u;
  }
  // union = aw * ah + bw * bh - inter
  g_aw += g_uni * t.ah;
  g_ah += g_uni * t.aw;
  g_bw += g_uni * t.bh;
  g_bh += g_uni * t.bw;
  g_inter -= g_uni;
  Acc g_iw = 0, g_ih = 0;
  if (t.overlap) {  // inter = iw * ih
    g_iw = g_inter * t.ih;
    g_ih = g_inter * t.iw;
  }
  // iw = ix2 - ix1 with ix1 = max(x1), ix2 = min(x2); cw = cx2 - cx1 with cx1 = min(x1), cx2 = max(x2);
  // dx = ((a.x1 - b.x1) + (a.x2 - b.x2)) / 2; aw = a.x2 - a.x1; likewise for y.
  const Acc g_ix1 = -g_iw, g_ix2 = g_iw, g_iy1 = -g_ih, g_iy2 = g_ih;
  const Acc g_cx1 = -g_cw, g_cx2 = g_cw, g_cy1 = -g_ch, g_cy2 = g_ch;
  const Acc hx = Acc(0.5) * g_dx, hy = Acc(0.5) * g_dy;
  r.a[0] = g_ix1 * t.ix1.da + g_cx1 * t.cx1.da + hx - g_aw;
  r.b[0] = g_ix1 * (Acc(1) - t.ix1.da) + g_cx1 * (Acc(1) - t.cx1.da) - hx - g_bw;
  r.a[1] = g_iy1 * t.iy1.da + g_cy1 * t.cy1.da + hy - g_ah;
  r.b[1] = g_iy1 * (Acc(1) - t.iy1.da) + g_cy1 * (Acc(1) - t.cy1.da) - hy - g_bh;
  r.a[2] = g_ix2 * t.ix2.da + g_cx2 * t.cx2.da + hx + g_aw;
  r.b[2] = g_ix2 * (Acc(1) - t.ix2.da) + g_cx2 * (Acc(1) - t.cx2.da) - hx + g_bw;
  r.a[3] = g_iy2 * t.iy2.da + g_cy2 * t.cy2.da + hy + g_ah;
  r.b[3] = g_iy2 * (Acc(1) - t.iy2.da) + g_cy2 * (Acc(1) - t.cy2.da) - hy + g_bh;
  return r;
}

}  // namespace detops
