#pragma once
// Per-element box IoU math shared by the CUDA kernels and the CPU implementation: the pairwise values
// and the element-wise losses with their gradients. Framework-free; compiles under nvcc (host and
// device) and under a plain C++ compiler. The definition, degenerate boxes included, is in
// docs/ops/box_iou.md. Every function takes the degenerate-box mode, `defined`: false gives torchvision's
// quotients (and, in the gradients, its autograd's) as they are, NaN and +-inf included; true is DetOps' rule,
// under which a quotient num / (den + eps) is 0 when den <= 0 and a box without an extent has no aspect.
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

// max(w, 0) * max(h, 0), torchvision's clamp then product, for extents that are not NaN (differences of finite
// coordinates): w * h when both are positive, else 0, or NaN where a clamped 0 meets an extent that overflowed to
// +inf (0 * inf). Comparisons instead of the clamps: fp64 has no max instruction, and each clamp compiled as a
// NaN-propagating maximum costs about eight (the fp64 pairwise IoU was 8 % slower with them).
template <typename Acc>
DETOPS_HD Acc clamped_area(Acc w, Acc h) {
  if (w > Acc(0) && h > Acc(0)) return w * h;
  const Acc inf = std::numeric_limits<Acc>::infinity();
  return (w == inf || h == inf) ? box_iou_quiet_nan<Acc>() : Acc(0);
}

template <typename Acc>
DETOPS_HD Acc box_iou_atan(Acc v) {
#if defined(__CUDA_ARCH__)
  return atan(v);
#else
  return std::atan(v);
#endif
}

// num / (den + eps) (torchvision), or under DetOps' rule (`defined`) 0 when den <= 0: a den <= 0 only arises
// from degenerate boxes (inverted, or of zero extent), and eps must not turn it into an eps-sized denominator
// and a huge quotient. box_quotient is the same without eps (torchvision adds none there: num / den).
template <typename Acc>
DETOPS_HD Acc box_ratio(Acc num, Acc den, Acc eps, bool defined) {
  return defined && !(den > Acc(0)) ? Acc(0) : num / (den + eps);
}

template <typename Acc>
DETOPS_HD Acc box_quotient(Acc num, Acc den, bool defined) {
  return defined && !(den > Acc(0)) ? Acc(0) : num / den;
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

template <typename Acc>
struct BoxCoords {
  Acc x1, y1, x2, y2;
};

// The corners of a pair's intersection (the larger x1 / y1, the smaller x2 / y2) and of its enclosing box
// (the smaller x1 / y1, the larger x2 / y2), with their derivatives with respect to box a.
template <typename Acc>
struct BoxPairPicks {
  Pick<Acc> ix1, iy1, ix2, iy2, cx1, cy1, cx2, cy2;
};

template <typename Acc>
DETOPS_HD BoxPairPicks<Acc> box_pair_picks(const BoxCoords<Acc>& a, const BoxCoords<Acc>& b) {
  return {pick_max(a.x1, b.x1), pick_max(a.y1, b.y1), pick_min(a.x2, b.x2), pick_min(a.y2, b.y2),
          pick_min(a.x1, b.x1), pick_min(a.y1, b.y1), pick_max(a.x2, b.x2), pick_max(a.y2, b.y2)};
}

// The adjoints (d out / d q) of the quantities a pair's value is built from: intersection extents
// iw = ix2 - ix1, ih = iy2 - iy1, enclosing extents cw = cx2 - cx1, ch = cy2 - cy1 (both before any clamp or
// mask), center offsets dx = ((a.x1 - b.x1) + (a.x2 - b.x2)) / 2, dy, and the widths and heights.
template <typename Acc>
struct BoxAdjoints {
  Acc iw, ih, cw, ch, dx, dy, aw, ah, bw, bh;
};

template <typename Acc>
struct BoxPairGrad {
  Acc a[4];  // d out / d (x1, y1, x2, y2) of the box of boxes1
  Acc b[4];  // d out / d (x1, y1, x2, y2) of the box of boxes2
};

// g's share of a pick's gradient: all of it, half (a tie) or none, as a mask (torch's masked_fill: none is 0
// even for an infinite or NaN g).
template <typename Acc>
DETOPS_HD Acc pick_share(Acc g, Acc share) {
  return share > Acc(0) ? g * share : Acc(0);
}

// The adjoints carried to the 8 coordinates through the picks (a max / min tie split equally).
template <typename Acc>
DETOPS_HD BoxPairGrad<Acc> box_coordinate_grads(const BoxAdjoints<Acc>& d, const BoxPairPicks<Acc>& k) {
  const Acc hx = Acc(0.5) * d.dx, hy = Acc(0.5) * d.dy;
  const auto a = [](Acc g, const Pick<Acc>& p) { return pick_share(g, p.da); };
  const auto b = [](Acc g, const Pick<Acc>& p) { return pick_share(g, Acc(1) - p.da); };
  BoxPairGrad<Acc> r;
  r.a[0] = -a(d.iw, k.ix1) - a(d.cw, k.cx1) + hx - d.aw;
  r.b[0] = -b(d.iw, k.ix1) - b(d.cw, k.cx1) - hx - d.bw;
  r.a[1] = -a(d.ih, k.iy1) - a(d.ch, k.cy1) + hy - d.ah;
  r.b[1] = -b(d.ih, k.iy1) - b(d.ch, k.cy1) - hy - d.bh;
  r.a[2] = a(d.iw, k.ix2) + a(d.cw, k.cx2) + hx + d.aw;
  r.b[2] = b(d.iw, k.ix2) + b(d.cw, k.cx2) - hx + d.bw;
  r.a[3] = a(d.ih, k.iy2) + a(d.ch, k.cy2) + hy + d.ah;
  r.b[3] = b(d.ih, k.iy2) + b(d.ch, k.cy2) - hy + d.bh;
  return r;
}

template <typename Acc>
DETOPS_HD BoxPairGrad<Acc> box_pair_grad_nan() {
  BoxPairGrad<Acc> r;
  for (int c = 0; c < 4; ++c) r.a[c] = r.b[c] = box_iou_quiet_nan<Acc>();
  return r;
}

// CIoU's aspect angle atan(w / h): +-pi/2 for h == 0 (atan(+-inf)). Under DetOps' rule a box with w == h == 0
// has no aspect ratio (has_aspect false: the pair's v is 0); torchvision's atan(0 / 0) is NaN.
template <typename Acc>
DETOPS_HD bool box_has_aspect(Acc w, Acc h, bool defined) {
  return !(defined && w == Acc(0) && h == Acc(0));
}

template <typename Acc>
DETOPS_HD Acc box_aspect_angle(Acc w, Acc h, bool defined) {
  return box_has_aspect(w, h, defined) ? box_iou_atan(w / h) : Acc(0);
}

// g_w, g_h += the adjoints of w and h through theta = atan(w / h), given theta's g. DetOps' rule: (h g, -w g) /
// (w^2 + h^2), finite at h = 0; torchvision's autograd: atan's g / (r^2 + 1), then r = w / h's quotient rule
// (NaN at h = 0).
template <typename Acc>
DETOPS_HD void box_aspect_grad(Acc g, Acc w, Acc h, bool defined, Acc& g_w, Acc& g_h) {
  if (defined) {
    const Acc r2 = w * w + h * h;
    g_w += g * h / r2;
    g_h -= g * w / r2;
  } else {
    // g_r / h as one quotient g / ((r^2 + 1) h), and g_r r / h = (g_r / h) r: the same NaN and infinity cases (h = 0
    // gives NaN; r overflowing gives 0 and NaN as torch's) with two divisions (r is the forward's) instead of four.
    const Acc r = w / h, gw = g / ((r * r + Acc(1)) * h);
    g_w += gw;
    g_h -= gw * r;
  }
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
  bool has_aspect; // CIoU only: box_has_aspect
};

template <BoxIouVariant V, typename T, typename Acc>
DETOPS_HD BoxGeometry<Acc> box_geometry(const T* box, bool defined) {
  BoxGeometry<Acc> g;
  g.x1 = to_acc<Acc>(box[0]);
  g.y1 = to_acc<Acc>(box[1]);
  g.x2 = to_acc<Acc>(box[2]);
  g.y2 = to_acc<Acc>(box[3]);
  g.finite = is_finite(g.x1) && is_finite(g.y1) && is_finite(g.x2) && is_finite(g.y2);
  const Acc w = g.x2 - g.x1, h = g.y2 - g.y1;
  g.area = w * h;
  g.has_aspect = box_has_aspect(w, h, defined);
  g.theta = V == BoxIouVariant::kCIoU ? box_aspect_angle(w, h, defined) : Acc(0);
  return g;
}

// torchvision.ops.box_iou / generalized_box_iou / distance_box_iou / complete_box_iou of one pair, in
// torchvision's order of operations (clamped extents, inter / union, ...), degenerate boxes by `defined`. NaN
// when a coordinate of either box is not finite.
template <BoxIouVariant V, typename Acc>
DETOPS_HD Acc box_iou_pairwise_value(const BoxGeometry<Acc>& a, const BoxGeometry<Acc>& b, Acc eps, bool defined) {
  if (!(a.finite && b.finite)) return box_iou_quiet_nan<Acc>();
  const Acc iw = (a.x2 < b.x2 ? a.x2 : b.x2) - (a.x1 > b.x1 ? a.x1 : b.x1);
  const Acc ih = (a.y2 < b.y2 ? a.y2 : b.y2) - (a.y1 > b.y1 ? a.y1 : b.y1);
  const Acc inter = clamped_area(iw, ih);
  const Acc uni = a.area + b.area - inter;
  const Acc iou = box_quotient(inter, uni, defined);
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
      return iou - box_quotient(c - uni, c, defined);
    } else {
      // Center offsets as sums of differences: exact for nearby coordinates, unlike (x1 + x2) / 2.
      const Acc dx = ((a.x1 - b.x1) + (a.x2 - b.x2)) * Acc(0.5);
      const Acc dy = ((a.y1 - b.y1) + (a.y2 - b.y2)) * Acc(0.5);
      const Acc diou = iou - box_ratio(dx * dx + dy * dy, cw * cw + ch * ch, eps, defined);
      if constexpr (V == BoxIouVariant::kDIoU) {
        return diou;
      } else {
        const Acc dtheta = a.theta - b.theta;
        const Acc v = (a.has_aspect && b.has_aspect) ? static_cast<Acc>(kCiouAspectScale) * (dtheta * dtheta) : Acc(0);
        return diou - box_ratio(v, Acc(1) - iou + v, eps, defined) * v;
      }
    }
  }
}

// g * d value / d (a, b) of one pair: reverse mode through box_iou_pairwise_value in the order of torch's
// autograd through torchvision's formulas, and with its conventions where the value is not differentiable:
// a max / min tie splits the gradient equally (torch.maximum / torch.minimum), a clamp at 0 passes it where
// its input is >= 0 (so touching boxes, with an intersection width of exactly 0, get a gradient through the
// width), CIoU's alpha is a constant (torchvision's no_grad). With `defined`, terms defined as 0 contribute
// nothing; without, a division by 0 gives what torch's gives (NaN, +-inf). All NaN when a coordinate is not
// finite. Every box's area enters once per pair, as its sum over pairs would.
template <BoxIouVariant V, typename Acc>
DETOPS_HD BoxPairGrad<Acc> box_iou_pairwise_grad(const BoxGeometry<Acc>& a, const BoxGeometry<Acc>& b, Acc eps,
                                                 Acc g, bool defined) {
  if (!(a.finite && b.finite)) return box_pair_grad_nan<Acc>();
  const BoxPairPicks<Acc> k = box_pair_picks<Acc>({a.x1, a.y1, a.x2, a.y2}, {b.x1, b.y1, b.x2, b.y2});
  const Acc aw = a.x2 - a.x1, ah = a.y2 - a.y1, bw = b.x2 - b.x1, bh = b.y2 - b.y1;
  const Acc iw_raw = k.ix2.value - k.ix1.value, ih_raw = k.iy2.value - k.iy1.value;
  const Acc iw = iw_raw > Acc(0) ? iw_raw : Acc(0), ih = ih_raw > Acc(0) ? ih_raw : Acc(0);
  const Acc inter = iw * ih, uni = a.area + b.area - inter;
  const bool iou_term = !defined || uni > Acc(0);
  const Acc iou = iou_term ? inter / uni : Acc(0);
  BoxAdjoints<Acc> d{};
  Acc g_uni = 0;
  if constexpr (V != BoxIouVariant::kIoU) {
    const Acc cw_raw = k.cx2.value - k.cx1.value, ch_raw = k.cy2.value - k.cy1.value;
    const Acc cw = cw_raw > Acc(0) ? cw_raw : Acc(0), ch = ch_raw > Acc(0) ? ch_raw : Acc(0);
    Acc g_cw = 0, g_ch = 0;
    if constexpr (V == BoxIouVariant::kGIoU) {
      const Acc c = cw * ch;
      if (!defined || c > Acc(0)) {  // - (c - union) / c
        const Acc g_num = -g / c, g_c = g_num + g * (((c - uni) / c) / c);
        g_uni -= g_num;
        g_cw = g_c * ch;
        g_ch = g_c * cw;
      }
    } else {
      const Acc diag = cw * cw + ch * ch;
      if (!defined || diag > Acc(0)) {  // - rho2 / (diag + eps), rho2 = dx^2 + dy^2
        const Acc dx = ((a.x1 - b.x1) + (a.x2 - b.x2)) * Acc(0.5), dy = ((a.y1 - b.y1) + (a.y2 - b.y2)) * Acc(0.5);
        const Acc den = diag + eps;
        const Acc g_rho2 = -g / den, g_den = g * (((dx * dx + dy * dy) / den) / den);
        d.dx = g_rho2 * (Acc(2) * dx);
        d.dy = g_rho2 * (Acc(2) * dy);
        g_cw = g_den * (Acc(2) * cw);
        g_ch = g_den * (Acc(2) * ch);
      }
      if constexpr (V == BoxIouVariant::kCIoU) {
        if (a.has_aspect && b.has_aspect) {  // - alpha * 4/pi^2 (theta_a - theta_b)^2, alpha constant
          const Acc dtheta = a.theta - b.theta, v = static_cast<Acc>(kCiouAspectScale) * (dtheta * dtheta);
          const Acc alpha = box_ratio(v, Acc(1) - iou + v, eps, defined);
          const Acc g_dtheta = ((-g * alpha) * static_cast<Acc>(kCiouAspectScale)) * (Acc(2) * dtheta);
          box_aspect_grad(g_dtheta, aw, ah, defined, d.aw, d.ah);
          box_aspect_grad(-g_dtheta, bw, bh, defined, d.bw, d.bh);
        }
      }
    }
    d.cw = cw_raw >= Acc(0) ? g_cw : Acc(0);
    d.ch = ch_raw >= Acc(0) ? g_ch : Acc(0);
  }
  Acc g_inter = 0;
  if (iou_term) {  // iou = inter / union
    g_inter = g / uni;
    g_uni += -g * (iou / uni);
  }
  // union = aw * ah + bw * bh - inter; inter = max(iw, 0) * max(ih, 0)
  d.aw += g_uni * ah;
  d.ah += g_uni * aw;
  d.bw += g_uni * bh;
  d.bh += g_uni * bw;
  g_inter -= g_uni;
  d.iw = iw_raw >= Acc(0) ? g_inter * ih : Acc(0);
  d.ih = ih_raw >= Acc(0) ? g_inter * iw : Acc(0);
  return box_coordinate_grads(d, k);
}

// ---------------------------------------------------------------------------------------------------
// Element-wise losses ([N, 4] x [N, 4] -> [N]) and their gradients.

template <typename T, typename Acc>
DETOPS_HD BoxCoords<Acc> load_box(const T* box) {
  return {to_acc<Acc>(box[0]), to_acc<Acc>(box[1]), to_acc<Acc>(box[2]), to_acc<Acc>(box[3])};
}

template <typename Acc>
DETOPS_HD bool box_coords_finite(const BoxCoords<Acc>& b) {
  return is_finite(b.x1) && is_finite(b.y1) && is_finite(b.x2) && is_finite(b.y2);
}

// The forward quantities of one loss pair (a = boxes1[i], b = boxes2[i]), kept for the backward. The quotients
// follow the mode `defined` (box_ratio: 0 for a denominator <= 0 under DetOps' rule).
template <typename Acc>
struct BoxIouLossTerms {
  BoxPairPicks<Acc> k;           // intersection and enclosing corners
  Acc aw, ah, bw, bh;            // widths and heights (negative for inverted boxes)
  Acc iw, ih;                    // intersection extents (<= 0 when the boxes do not overlap)
  bool overlap;                  // iw > 0 && ih > 0 (torchvision's mask)
  Acc inter, uni, d_u, iou;      // d_u = union + eps; iou = inter / d_u
  bool iou_term;                 // iou is a quotient (not DetOps' 0 for union <= 0)
  Acc cw, ch;                    // enclosing extents, not clamped (as torchvision's losses)
  Acc c, d_c, penalty;           // GIoU: enclosing area, c + eps, (c - union) / d_c
  Acc dx, dy, rho2;              // DIoU, CIoU: center offsets, squared center distance
  Acc diag, d_d, distance;       // cw^2 + ch^2, diag + eps, rho2 / d_d
  bool has_aspect;               // CIoU: both boxes have an aspect (box_has_aspect)
  Acc theta_a, theta_b, v;       // CIoU: atan(w / h) per box; v = 4/pi^2 (theta_b - theta_a)^2
};

// eps of the union and diagonal denominators: the loss's eps, except CIoU's fixed inner eps.
template <BoxIouVariant V>
DETOPS_HD double box_iou_loss_inner_eps(double eps) {
  return V == BoxIouVariant::kCIoU ? kCiouLossInnerEps : eps;
}

template <BoxIouVariant V, typename Acc>
DETOPS_HD BoxIouLossTerms<Acc> box_iou_loss_terms(const BoxCoords<Acc>& a, const BoxCoords<Acc>& b, Acc eps,
                                                  bool defined) {
  BoxIouLossTerms<Acc> t{};
  t.k = box_pair_picks(a, b);
  t.aw = a.x2 - a.x1;
  t.ah = a.y2 - a.y1;
  t.bw = b.x2 - b.x1;
  t.bh = b.y2 - b.y1;
  t.iw = t.k.ix2.value - t.k.ix1.value;
  t.ih = t.k.iy2.value - t.k.iy1.value;
  t.overlap = t.iw > Acc(0) && t.ih > Acc(0);
  t.inter = t.overlap ? t.iw * t.ih : Acc(0);
  t.uni = t.aw * t.ah + t.bw * t.bh - t.inter;
  t.d_u = t.uni + eps;
  t.iou_term = !defined || t.uni > Acc(0);
  t.iou = t.iou_term ? t.inter / t.d_u : Acc(0);
  if constexpr (V != BoxIouVariant::kIoU) {
    t.cw = t.k.cx2.value - t.k.cx1.value;
    t.ch = t.k.cy2.value - t.k.cy1.value;
  }
  if constexpr (V == BoxIouVariant::kGIoU) {
    t.c = t.cw * t.ch;
    t.d_c = t.c + eps;
    t.penalty = box_ratio(t.c - t.uni, t.c, eps, defined);
  }
  if constexpr (V == BoxIouVariant::kDIoU || V == BoxIouVariant::kCIoU) {
    t.dx = ((a.x1 - b.x1) + (a.x2 - b.x2)) * Acc(0.5);
    t.dy = ((a.y1 - b.y1) + (a.y2 - b.y2)) * Acc(0.5);
    t.rho2 = t.dx * t.dx + t.dy * t.dy;
    t.diag = t.cw * t.cw + t.ch * t.ch;
    t.d_d = t.diag + eps;
    t.distance = box_ratio(t.rho2, t.diag, eps, defined);
  }
  if constexpr (V == BoxIouVariant::kCIoU) {
    t.has_aspect = box_has_aspect(t.aw, t.ah, defined) && box_has_aspect(t.bw, t.bh, defined);
    t.theta_a = box_aspect_angle(t.aw, t.ah, defined);
    t.theta_b = box_aspect_angle(t.bw, t.bh, defined);
    const Acc dtheta = t.theta_b - t.theta_a;
    t.v = t.has_aspect ? static_cast<Acc>(kCiouAspectScale) * (dtheta * dtheta) : Acc(0);
  }
  return t;
}

// CIoU's alpha = v / (1 - iou + v + eps) (DetOps' rule: 0 when 1 - iou + v <= 0), with the loss's own eps.
template <typename Acc>
DETOPS_HD Acc ciou_alpha(const BoxIouLossTerms<Acc>& t, Acc eps, bool defined) {
  return box_ratio(t.v, Acc(1) - t.iou + t.v, eps, defined);
}

// The loss of one pair from its terms, with CIoU's alpha given.
template <BoxIouVariant V, typename Acc>
DETOPS_HD Acc box_iou_loss_of_terms(const BoxIouLossTerms<Acc>& t, Acc alpha) {
  if constexpr (V == BoxIouVariant::kIoU) {
    return Acc(1) - t.iou;
  } else if constexpr (V == BoxIouVariant::kGIoU) {
    return Acc(1) - (t.iou - t.penalty);
  } else if constexpr (V == BoxIouVariant::kDIoU) {
    return Acc(1) - t.iou + t.distance;
  } else {
    return Acc(1) - t.iou + t.distance + alpha * t.v;
  }
}

// The loss of one pair, CIoU's alpha computed from (alpha_a, alpha_b): the finite-difference checks hold alpha at
// the unperturbed boxes, as torchvision's no_grad does.
template <BoxIouVariant V, typename Acc>
DETOPS_HD Acc box_iou_loss_value(const BoxIouLossParams& p, const BoxCoords<Acc>& a, const BoxCoords<Acc>& b,
                                 const BoxCoords<Acc>& alpha_a, const BoxCoords<Acc>& alpha_b, bool defined) {
  if (!(box_coords_finite(a) && box_coords_finite(b))) return box_iou_quiet_nan<Acc>();
  const Acc eps = static_cast<Acc>(box_iou_loss_inner_eps<V>(p.eps));
  const BoxIouLossTerms<Acc> t = box_iou_loss_terms<V, Acc>(a, b, eps, defined);
  Acc alpha = 0;
  if constexpr (V == BoxIouVariant::kCIoU) {
    if (!(box_coords_finite(alpha_a) && box_coords_finite(alpha_b))) return box_iou_quiet_nan<Acc>();
    alpha = ciou_alpha(box_iou_loss_terms<V, Acc>(alpha_a, alpha_b, eps, defined), static_cast<Acc>(p.eps), defined);
  }
  return box_iou_loss_of_terms<V>(t, alpha);
}

// The same with CIoU's alpha from the pair itself (no alpha boxes, as in every call but the finite-difference
// checks): the pair's terms are computed once, the same values as box_iou_loss_value(p, a, b, a, b, defined).
template <BoxIouVariant V, typename Acc>
DETOPS_HD Acc box_iou_loss_value(const BoxIouLossParams& p, const BoxCoords<Acc>& a, const BoxCoords<Acc>& b,
                                 bool defined) {
  if (!(box_coords_finite(a) && box_coords_finite(b))) return box_iou_quiet_nan<Acc>();
  const Acc eps = static_cast<Acc>(box_iou_loss_inner_eps<V>(p.eps));
  const BoxIouLossTerms<Acc> t = box_iou_loss_terms<V, Acc>(a, b, eps, defined);
  Acc alpha = 0;
  if constexpr (V == BoxIouVariant::kCIoU) alpha = ciou_alpha(t, static_cast<Acc>(p.eps), defined);
  return box_iou_loss_of_terms<V>(t, alpha);
}

// g * d loss / d (a, b) of one pair, by reverse-mode differentiation of box_iou_loss_terms in the order of
// torch's autograd through torchvision's losses. Where the loss has a kink (a max / min tie) the gradient is
// split equally; outside the overlap mask the intersection contributes nothing; CIoU's alpha is a constant;
// terms defined as 0 (DetOps' rule) contribute nothing. All NaN when a coordinate is not finite.
template <BoxIouVariant V, typename Acc>
DETOPS_HD BoxPairGrad<Acc> box_iou_loss_grad(const BoxIouLossParams& p, const BoxCoords<Acc>& a,
                                             const BoxCoords<Acc>& b, Acc g, bool defined) {
  if (!(box_coords_finite(a) && box_coords_finite(b))) return box_pair_grad_nan<Acc>();
  const Acc eps = static_cast<Acc>(box_iou_loss_inner_eps<V>(p.eps));
  const BoxIouLossTerms<Acc> t = box_iou_loss_terms<V, Acc>(a, b, eps, defined);
  BoxAdjoints<Acc> d{};  // the enclosing extents enter unclamped, so d.cw / d.ch are their adjoints as they are
  const Acc g_iou = -g;
  Acc g_uni = 0, g_inter = 0;
  if constexpr (V == BoxIouVariant::kGIoU) {
    if (!defined || t.c > Acc(0)) {  // penalty = (c - union) / (c + eps)
      const Acc g_num = g / t.d_c, g_c = g_num + -g * (t.penalty / t.d_c);
      g_uni -= g_num;
      d.cw = g_c * t.ch;
      d.ch = g_c * t.cw;
    }
  }
  if constexpr (V == BoxIouVariant::kDIoU || V == BoxIouVariant::kCIoU) {
    if (!defined || t.diag > Acc(0)) {  // distance = rho^2 / (cw^2 + ch^2 + eps)
      const Acc g_rho2 = g / t.d_d, g_d = -g * (t.distance / t.d_d);
      d.dx = g_rho2 * (Acc(2) * t.dx);
      d.dy = g_rho2 * (Acc(2) * t.dy);
      d.cw = g_d * (Acc(2) * t.cw);
      d.ch = g_d * (Acc(2) * t.ch);
    }
  }
  if constexpr (V == BoxIouVariant::kCIoU) {
    // + alpha * v with alpha constant: d v / d theta_b = 2 * 4/pi^2 * (theta_b - theta_a) = -d v / d theta_a.
    if (t.has_aspect) {
      const Acc alpha = ciou_alpha(t, static_cast<Acc>(p.eps), defined);
      const Acc g_theta_b = ((g * alpha) * static_cast<Acc>(kCiouAspectScale)) * (Acc(2) * (t.theta_b - t.theta_a));
      box_aspect_grad(g_theta_b, t.bw, t.bh, defined, d.bw, d.bh);
      box_aspect_grad(-g_theta_b, t.aw, t.ah, defined, d.aw, d.ah);
    }
  }
  if (t.iou_term) {  // iou = inter / (union + eps)
    g_inter += g_iou / t.d_u;
    g_uni += -g_iou * (t.iou / t.d_u);
  }
  // union = aw * ah + bw * bh - inter; inter = iw * ih inside the overlap mask
  d.aw += g_uni * t.ah;
  d.ah += g_uni * t.aw;
  d.bw += g_uni * t.bh;
  d.bh += g_uni * t.bw;
  g_inter -= g_uni;
  if (t.overlap) {
    d.iw = g_inter * t.ih;
    d.ih = g_inter * t.iw;
  }
  return box_coordinate_grads(d, t.k);
}

}  // namespace detops
