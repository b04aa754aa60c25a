#include "detops/reference/box_iou_reference.h"

#include <unsupported/Eigen/AutoDiff>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace detops::reference {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A scalar that carries d/d(the 8 coordinates of one pair): boxes1[i] then boxes2[i], x1 y1 x2 y2 each.
using Dual = Eigen::AutoDiffScalar<Eigen::Matrix<double, 8, 1>>;

double value_of(double x) { return x; }
double value_of(const Dual& x) { return x.value(); }

// CIoU's aspect angle atan(w / h) (+-pi/2 for h = 0, w != 0); its derivative is (h dw - w dh) / (w^2 + h^2),
// which stays finite at h = 0.
double aspect_angle(double w, double h) { return std::atan(w / h); }
Dual aspect_angle(const Dual& w, const Dual& h) {
  const double wv = w.value(), hv = h.value();
  return Dual(std::atan(wv / hv), (hv * w.derivatives() - wv * h.derivatives()) / (wv * wv + hv * hv));
}

// max and min; at a tie the value is the same and the derivative the mean of both (torch.maximum's rule).
template <typename S>
S larger(const S& a, const S& b) {
  if (a > b) return a;
  if (b > a) return b;
  return S((a + b) * 0.5);
}

template <typename S>
S smaller(const S& a, const S& b) {
  if (a < b) return a;
  if (b < a) return b;
  return S((a + b) * 0.5);
}

// num / (den + eps), defined as 0 when den <= 0 (only degenerate boxes give den <= 0).
template <typename S>
S ratio_or_zero(const S& num, const S& den, double eps) {
  if (value_of(den) > 0) return S(num / (den + eps));
  return S(0.0);
}

template <typename S>
struct Box {
  S x1, y1, x2, y2;
};

Box<double> box_row(const Matrixd& m, Eigen::Index i) { return {m(i, 0), m(i, 1), m(i, 2), m(i, 3)}; }

bool finite(const Box<double>& b) {
  return std::isfinite(b.x1) && std::isfinite(b.y1) && std::isfinite(b.x2) && std::isfinite(b.y2);
}

// The pieces of the losses for one pair, with `e` the eps of the union and diagonal denominators:
//   iou       = inter / (union + e)                       inter only where both overlap extents are > 0
//   penalty   = (c - union) / (c + e)                     c: enclosing area, extents not clamped
//   distance  = rho^2 / (cw^2 + ch^2 + e)                 rho: distance between the centers
// each 0 when its denominator without e is <= 0;
//   v         = 4/pi^2 (atan(wb / hb) - atan(wa / ha))^2  0 when either box has w = h = 0
template <typename S>
struct LossParts {
  S iou, penalty, distance, v;
};

template <typename S>
LossParts<S> loss_parts(double e, const Box<S>& a, const Box<S>& b) {
  const S wa = a.x2 - a.x1, ha = a.y2 - a.y1, wb = b.x2 - b.x1, hb = b.y2 - b.y1;
  const S iw = smaller(a.x2, b.x2) - larger(a.x1, b.x1);
  const S ih = smaller(a.y2, b.y2) - larger(a.y1, b.y1);
  const S inter = (value_of(iw) > 0 && value_of(ih) > 0) ? S(iw * ih) : S(0.0);
  const S uni = wa * ha + wb * hb - inter;
  const S cw = larger(a.x2, b.x2) - smaller(a.x1, b.x1);
  const S ch = larger(a.y2, b.y2) - smaller(a.y1, b.y1);
  const S c = cw * ch;
  const S dx = (a.x1 + a.x2) * 0.5 - (b.x1 + b.x2) * 0.5;
  const S dy = (a.y1 + a.y2) * 0.5 - (b.y1 + b.y2) * 0.5;
  const double pi = std::acos(-1.0);
  const bool aspects = !(value_of(wa) == 0 && value_of(ha) == 0) && !(value_of(wb) == 0 && value_of(hb) == 0);
  LossParts<S> p;
  p.iou = ratio_or_zero(inter, uni, e);
  p.penalty = ratio_or_zero(S(c - uni), c, e);
  p.distance = ratio_or_zero(S(dx * dx + dy * dy), S(cw * cw + ch * ch), e);
  if (aspects) {
    const S dtheta = aspect_angle(wb, hb) - aspect_angle(wa, ha);
    p.v = S(dtheta * dtheta * (4.0 / (pi * pi)));
  } else {
    p.v = S(0.0);
  }
  return p;
}

// The eps of the union and diagonal denominators: the loss's eps, except CIoU's fixed inner eps
// (torchvision's complete_box_iou_loss calls _diou_iou_loss without its eps).
double inner_eps(const BoxIouLossParams& p) { return p.variant == BoxIouVariant::kCIoU ? kCiouLossInnerEps : p.eps; }

// CIoU's alpha = v / (1 - iou + v + eps), a constant for the gradient.
double ciou_alpha(const BoxIouLossParams& p, const Box<double>& a, const Box<double>& b) {
  const LossParts<double> q = loss_parts(inner_eps(p), a, b);
  return ratio_or_zero(q.v, 1.0 - q.iou + q.v, p.eps);
}

template <typename S>
S pair_loss(const BoxIouLossParams& p, const Box<S>& a, const Box<S>& b, double alpha) {
  const LossParts<S> q = loss_parts(inner_eps(p), a, b);
  switch (p.variant) {
    case BoxIouVariant::kIoU: return S(1.0 - q.iou);
    case BoxIouVariant::kGIoU: return S(1.0 - q.iou + q.penalty);
    case BoxIouVariant::kDIoU: return S(1.0 - q.iou + q.distance);
    case BoxIouVariant::kCIoU: return S(1.0 - q.iou + q.distance + q.v * alpha);
  }
  throw std::invalid_argument("box_iou reference: unknown variant");
}

void check_pair_shapes(const Matrixd& boxes1, const Matrixd& boxes2, bool same_rows) {
  if (boxes1.cols() != 4 || boxes2.cols() != 4) throw std::invalid_argument("box_iou reference: boxes must be [*, 4]");
  if (same_rows && boxes1.rows() != boxes2.rows()) {
    throw std::invalid_argument("box_iou reference: loss boxes must have the same number of rows");
  }
}

}  // namespace

Matrixd box_iou_pairwise(const BoxIouParams& p, const Matrixd& boxes1, const Matrixd& boxes2) {
  check_pair_shapes(boxes1, boxes2, false);
  const double pi = std::acos(-1.0);
  Matrixd out(boxes1.rows(), boxes2.rows());
  for (Eigen::Index i = 0; i < boxes1.rows(); ++i) {
    const Box<double> a = box_row(boxes1, i);
    for (Eigen::Index j = 0; j < boxes2.rows(); ++j) {
      const Box<double> b = box_row(boxes2, j);
      if (!finite(a) || !finite(b)) {
        out(i, j) = kNaN;
        continue;
      }
      const double wa = a.x2 - a.x1, ha = a.y2 - a.y1, wb = b.x2 - b.x1, hb = b.y2 - b.y1;
      // Intersection: its extents clamped at 0 (torchvision's pairwise ops).
      const double iw = std::max(0.0, std::min(a.x2, b.x2) - std::max(a.x1, b.x1));
      const double ih = std::max(0.0, std::min(a.y2, b.y2) - std::max(a.y1, b.y1));
      const double inter = iw * ih;
      const double uni = wa * ha + wb * hb - inter;
      const double iou = uni > 0 ? inter / uni : 0.0;
      // The enclosing box, its extents clamped at 0 as well.
      const double cw = std::max(0.0, std::max(a.x2, b.x2) - std::min(a.x1, b.x1));
      const double ch = std::max(0.0, std::max(a.y2, b.y2) - std::min(a.y1, b.y1));
      const double rho2 = std::pow((a.x1 + a.x2) / 2 - (b.x1 + b.x2) / 2, 2) + std::pow((a.y1 + a.y2) / 2 - (b.y1 + b.y2) / 2, 2);
      const double diag = cw * cw + ch * ch;
      const double diou = iou - (diag > 0 ? rho2 / (diag + p.eps) : 0.0);
      switch (p.variant) {
        case BoxIouVariant::kIoU: out(i, j) = iou; break;
        case BoxIouVariant::kGIoU: {
          const double c = cw * ch;
          out(i, j) = iou - (c > 0 ? (c - uni) / c : 0.0);
          break;
        }
        case BoxIouVariant::kDIoU: out(i, j) = diou; break;
        case BoxIouVariant::kCIoU: {
          const bool aspects = !(wa == 0 && ha == 0) && !(wb == 0 && hb == 0);
          const double v = aspects ? 4 / (pi * pi) * std::pow(std::atan(wa / ha) - std::atan(wb / hb), 2) : 0.0;
          const double den = 1 - iou + v;
          out(i, j) = diou - (den > 0 ? v / (den + p.eps) : 0.0) * v;
          break;
        }
      }
    }
  }
  return out;
}

Vectord box_iou_loss_forward(const BoxIouLossParams& p, const Matrixd& boxes1, const Matrixd& boxes2,
                             const Matrixd* alpha_boxes1, const Matrixd* alpha_boxes2) {
  check_pair_shapes(boxes1, boxes2, true);
  const Eigen::Index n = boxes1.rows();
  Vectord loss(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const Box<double> a = box_row(boxes1, i), b = box_row(boxes2, i);
    const Box<double> a0 = alpha_boxes1 != nullptr ? box_row(*alpha_boxes1, i) : a;
    const Box<double> b0 = alpha_boxes2 != nullptr ? box_row(*alpha_boxes2, i) : b;
    const bool ciou = p.variant == BoxIouVariant::kCIoU;
    if (!finite(a) || !finite(b) || (ciou && (!finite(a0) || !finite(b0)))) {
      loss(i) = kNaN;
      continue;
    }
    loss(i) = pair_loss(p, a, b, ciou ? ciou_alpha(p, a0, b0) : 0.0);
  }
  switch (p.reduction) {
    case LossReduction::kNone: return loss;
    case LossReduction::kSum: return Vectord::Constant(1, loss.sum());
    case LossReduction::kMean: return Vectord::Constant(1, n > 0 ? loss.sum() / static_cast<double>(n) : 0.0);
  }
  throw std::invalid_argument("box_iou reference: unknown reduction");
}

BoxIouLossGrads box_iou_loss_backward(const BoxIouLossParams& p, const Matrixd& boxes1, const Matrixd& boxes2,
                                      const Vectord& grad) {
  check_pair_shapes(boxes1, boxes2, true);
  const Eigen::Index n = boxes1.rows();
  const bool reduced = p.reduction != LossReduction::kNone;
  if (grad.size() != (reduced ? 1 : n)) throw std::invalid_argument("box_iou reference: grad has the wrong size");
  BoxIouLossGrads g{Matrixd::Zero(n, 4), Matrixd::Zero(n, 4)};
  for (Eigen::Index i = 0; i < n; ++i) {
    // The upstream gradient of pair i's loss: grad[i], or the reduction's grad (divided by n for a mean).
    double upstream = reduced ? grad(0) : grad(i);
    if (p.reduction == LossReduction::kMean) upstream /= static_cast<double>(n);
    const Box<double> a = box_row(boxes1, i), b = box_row(boxes2, i);
    if (!finite(a) || !finite(b)) {
      g.boxes1.row(i).setConstant(kNaN);
      g.boxes2.row(i).setConstant(kNaN);
      continue;
    }
    const Box<Dual> da{Dual(a.x1, 8, 0), Dual(a.y1, 8, 1), Dual(a.x2, 8, 2), Dual(a.y2, 8, 3)};
    const Box<Dual> db{Dual(b.x1, 8, 4), Dual(b.y1, 8, 5), Dual(b.x2, 8, 6), Dual(b.y2, 8, 7)};
    const double alpha = p.variant == BoxIouVariant::kCIoU ? ciou_alpha(p, a, b) : 0.0;
    const Dual loss = pair_loss(p, da, db, alpha);
    for (int k = 0; k < 4; ++k) {
      g.boxes1(i, k) = upstream * loss.derivatives()(k);
      g.boxes2(i, k) = upstream * loss.derivatives()(4 + k);
    }
  }
  return g;
}

}  // namespace detops::reference
