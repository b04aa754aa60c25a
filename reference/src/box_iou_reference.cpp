#include "detops/reference/box_iou_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

namespace detops::reference {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------------------------------
// Reverse-mode automatic differentiation of one pair's value: a Wengert list. Each operation records its
// operands and its local partial derivatives; the gradient then flows back from the output in reverse order
// (each node's adjoint times each local partial, summed into its operands). The local partials are torch
// autograd's: x / y gives 1 / y and -(x / y) / y, x * y gives y and x, atan(x) gives 1 / (x^2 + 1). So a
// division by 0 gives what torch's backward gives (NaN, +-inf), and an operand that a max / min / clamp does
// not pick gets nothing at all (torch's mask), not 0 times an adjoint.

class Tape {
 public:
  // A pair's value takes at most 51-60 operations (CIoU's, the longest: a capacity of 50 throws on the random and
  // degenerate pairs of a test driver, 60 does not); push() throws past this many.
  static constexpr int kCapacity = 256;

  void clear() { size_ = 0; }
  int push(int a, double da, int b, double db) {
    if (size_ == kCapacity) throw std::length_error("box_iou reference: a pair's tape is longer than its capacity");
    nodes_[size_] = {a, b, da, db};
    return size_++;
  }
  // d out / d node for every node, the output's adjoint seeded with `seed`. Only the output's ancestors
  // pass theirs on (as in torch's graph): a value computed but not used leaves no trace, whatever its partials.
  // Fixed arrays, not vectors: a pair's tape is tens of nodes, and 6 million pairs spent most of their time
  // growing and filling vectors.
  const double* adjoints(int out, double seed) {
    std::fill(adj_, adj_ + size_, 0.0);
    std::fill(reached_, reached_ + size_, false);
    adj_[out] = seed;
    reached_[out] = true;
    for (int n = out; n >= 0; --n) {
      if (!reached_[n]) continue;
      const Node& e = nodes_[n];
      if (e.a >= 0) {
        adj_[e.a] += adj_[n] * e.da;
        reached_[e.a] = true;
      }
      if (e.b >= 0) {
        adj_[e.b] += adj_[n] * e.db;
        reached_[e.b] = true;
      }
    }
    return adj_;
  }

 private:
  struct Node {
    int a, b;  // operands (-1: none or a constant)
    double da, db;
  };
  Node nodes_[kCapacity];
  double adj_[kCapacity];
  bool reached_[kCapacity];
  int size_ = 0;
};

// A value on a tape (id >= 0) or a constant (id -1).
struct Rev {
  double v = 0.0;
  int id = -1;
  Tape* tape = nullptr;
  Rev() = default;
  Rev(double value) : v(value) {}  // NOLINT: constants convert implicitly, as in the templated code below
  Rev(double value, int node, Tape* t) : v(value), id(node), tape(t) {}
};

Rev node(double value, const Rev& x, double dx, const Rev& y = Rev(), double dy = 0.0) {
  Tape* t = x.tape != nullptr ? x.tape : y.tape;
  if (t == nullptr) return Rev(value);
  return Rev(value, t->push(x.id, dx, y.id, dy), t);
}

Rev operator+(const Rev& x, const Rev& y) { return node(x.v + y.v, x, 1.0, y, 1.0); }
Rev operator-(const Rev& x, const Rev& y) { return node(x.v - y.v, x, 1.0, y, -1.0); }
Rev operator*(const Rev& x, const Rev& y) { return node(x.v * y.v, x, y.v, y, x.v); }
Rev operator/(const Rev& x, const Rev& y) { return node(x.v / y.v, x, 1.0 / y.v, y, -(x.v / y.v) / y.v); }
bool operator>(const Rev& x, const Rev& y) { return x.v > y.v; }
bool operator<(const Rev& x, const Rev& y) { return x.v < y.v; }
Rev atan(const Rev& x) { return node(std::atan(x.v), x, 1.0 / (x.v * x.v + 1.0)); }

double value_of(double x) { return x; }
double value_of(const Rev& x) { return x.v; }

// CIoU's aspect angle atan(w / h) (+-pi/2 for h = 0, w != 0). Under DetOps' rule (`defined`) a box with w = h
// = 0 has no aspect (the caller's v is 0), and the derivative is (h dw - w dh) / (w^2 + h^2), finite at h = 0;
// torchvision's is atan's of w / h's (NaN at h = 0, and atan(0 / 0) is NaN).
double aspect_angle(double w, double h, bool) { return std::atan(w / h); }
Rev aspect_angle(const Rev& w, const Rev& h, bool defined) {
  if (!defined) return atan(w / h);
  const double r2 = w.v * w.v + h.v * h.v;
  return node(std::atan(w.v / h.v), w, h.v / r2, h, -w.v / r2);
}

template <typename S>
bool has_aspect(const S& w, const S& h, bool defined) {
  return !(defined && value_of(w) == 0 && value_of(h) == 0);
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

// clamp(x, min=0) with torch's derivative, which passes where x >= 0.
template <typename S>
S clamp0(const S& x) {
  return value_of(x) >= 0 ? x : S(0.0);
}

// num / (den + eps) (torchvision), or under DetOps' rule (`defined`) 0 when den <= 0 (only degenerate boxes give
// den <= 0). quotient: the same without eps (torchvision adds none there).
template <typename S>
S ratio(const S& num, const S& den, double eps, bool defined) {
  if (defined && !(value_of(den) > 0)) return S(0.0);
  return S(num / (den + eps));
}

template <typename S>
S quotient(const S& num, const S& den, bool defined) {
  if (defined && !(value_of(den) > 0)) return S(0.0);
  return S(num / den);
}

template <typename S>
struct Box {
  S x1, y1, x2, y2;
};

Box<double> box_row(const Matrixd& m, Eigen::Index i) { return {m(i, 0), m(i, 1), m(i, 2), m(i, 3)}; }

bool finite(const Box<double>& b) {
  return std::isfinite(b.x1) && std::isfinite(b.y1) && std::isfinite(b.x2) && std::isfinite(b.y2);
}

// The pair's 8 coordinates as the leaves of a fresh tape (ids 0..7: boxes1's x1 y1 x2 y2, then boxes2's).
std::pair<Box<Rev>, Box<Rev>> leaves(Tape& t, const Box<double>& a, const Box<double>& b) {
  t.clear();
  const auto leaf = [&t](double v) { return Rev(v, t.push(-1, 0.0, -1, 0.0), &t); };
  Box<Rev> ra{leaf(a.x1), leaf(a.y1), leaf(a.x2), leaf(a.y2)};
  Box<Rev> rb{leaf(b.x1), leaf(b.y1), leaf(b.x2), leaf(b.y2)};
  return {ra, rb};
}

// The 8 partials of `out` (seeded with `seed`); 0 when out is a constant.
void partials(Tape& t, const Rev& out, double seed, double (&d)[8]) {
  if (out.id < 0) {
    for (double& x : d) x = 0.0;
    return;
  }
  const double* adj = t.adjoints(out.id, seed);
  for (int k = 0; k < 8; ++k) d[k] = adj[k];
}

// The pieces of one pair, with `e` the eps of the diagonal denominator (and, for the losses, of the union and
// enclosing-area denominators):
//   iou       = inter / union (+ e for the losses)        intersection extents clamped at 0 (pairwise) or
//                                                          inter 0 unless both are > 0 (losses' mask)
//   penalty   = (c - union) / c (+ e for the losses)      c: enclosing area; pairwise extents clamped at 0
//   distance  = rho^2 / (cw^2 + ch^2 + e)                 rho: distance between the centers
//   v         = 4/pi^2 (atan(wa / ha) - atan(wb / hb))^2
// each quotient 0 when its denominator without e is <= 0 and v 0 when a box has w = h = 0, under DetOps' rule.
// Only the pieces `variant` uses are computed (penalty: GIoU; distance: DIoU and CIoU; v: CIoU); the others stay 0.
template <typename S>
struct Parts {
  S iou, penalty, distance, v;
};

template <typename S>
Parts<S> parts(BoxIouVariant variant, bool pairwise, double e, bool defined, const Box<S>& a, const Box<S>& b) {
  const S wa = a.x2 - a.x1, ha = a.y2 - a.y1, wb = b.x2 - b.x1, hb = b.y2 - b.y1;
  S iw = smaller(a.x2, b.x2) - larger(a.x1, b.x1);
  S ih = smaller(a.y2, b.y2) - larger(a.y1, b.y1);
  S inter(0.0);
  if (pairwise) {
    iw = clamp0(iw);
    ih = clamp0(ih);
    inter = iw * ih;
  } else if (value_of(iw) > 0 && value_of(ih) > 0) {
    inter = iw * ih;
  }
  const S uni = wa * ha + wb * hb - inter;
  Parts<S> p;
  p.iou = pairwise ? quotient(inter, uni, defined) : ratio(inter, uni, e, defined);
  p.penalty = S(0.0);
  p.distance = S(0.0);
  p.v = S(0.0);
  if (variant == BoxIouVariant::kIoU) return p;
  // The enclosing box's extents (pairwise: clamped at 0, as torchvision's generalized / distance_box_iou clamp).
  S cw = larger(a.x2, b.x2) - smaller(a.x1, b.x1);
  S ch = larger(a.y2, b.y2) - smaller(a.y1, b.y1);
  if (pairwise) {
    cw = clamp0(cw);
    ch = clamp0(ch);
  }
  if (variant == BoxIouVariant::kGIoU) {
    const S c = cw * ch;
    p.penalty = pairwise ? quotient(S(c - uni), c, defined) : ratio(S(c - uni), c, e, defined);
    return p;
  }
  const S dx = (a.x1 + a.x2) * 0.5 - (b.x1 + b.x2) * 0.5;
  const S dy = (a.y1 + a.y2) * 0.5 - (b.y1 + b.y2) * 0.5;
  p.distance = ratio(S(dx * dx + dy * dy), S(cw * cw + ch * ch), e, defined);
  if (variant == BoxIouVariant::kCIoU && has_aspect(wa, ha, defined) && has_aspect(wb, hb, defined)) {
    const double pi = std::acos(-1.0);
    const S dtheta = aspect_angle(wa, ha, defined) - aspect_angle(wb, hb, defined);
    p.v = S(dtheta * dtheta * (4.0 / (pi * pi)));
  }
  return p;
}

// The losses' eps of the union and diagonal denominators: the loss's eps, except CIoU's fixed inner eps
// (torchvision's complete_box_iou_loss calls _diou_iou_loss without its eps).
double inner_eps(const BoxIouLossParams& p) { return p.variant == BoxIouVariant::kCIoU ? kCiouLossInnerEps : p.eps; }

// CIoU's alpha = v / (1 - iou + v + eps), a constant for the gradient (0 when 1 - iou + v <= 0 under DetOps'
// rule).
double ciou_alpha(const BoxIouLossParams& p, const Box<double>& a, const Box<double>& b) {
  const Parts<double> q = parts(BoxIouVariant::kCIoU, false, inner_eps(p), p.defined_degenerate, a, b);
  return ratio(q.v, 1.0 - q.iou + q.v, p.eps, p.defined_degenerate);
}

double pair_alpha(const BoxIouParams& p, const Box<double>& a, const Box<double>& b) {
  const Parts<double> q = parts(BoxIouVariant::kCIoU, true, p.eps, p.defined_degenerate, a, b);
  return ratio(q.v, 1.0 - q.iou + q.v, p.eps, p.defined_degenerate);
}

template <typename S>
S pair_loss(const BoxIouLossParams& p, const Box<S>& a, const Box<S>& b, double alpha) {
  const Parts<S> q = parts(p.variant, false, inner_eps(p), p.defined_degenerate, a, b);
  switch (p.variant) {
    case BoxIouVariant::kIoU: return S(1.0 - q.iou);
    case BoxIouVariant::kGIoU: return S(1.0 - (q.iou - q.penalty));
    case BoxIouVariant::kDIoU: return S(1.0 - q.iou + q.distance);
    case BoxIouVariant::kCIoU: return S(1.0 - q.iou + q.distance + q.v * alpha);
  }
  throw std::invalid_argument("box_iou reference: unknown variant");
}

// The pairwise values (torchvision's box_iou, generalized_box_iou, distance_box_iou, complete_box_iou) of one
// pair; CIoU = iou - distance - alpha v with alpha a constant given by the caller.
template <typename S>
S pair_value(const BoxIouParams& p, const Box<S>& a, const Box<S>& b, double alpha) {
  const Parts<S> q = parts(p.variant, true, p.eps, p.defined_degenerate, a, b);
  switch (p.variant) {
    case BoxIouVariant::kIoU: return q.iou;
    case BoxIouVariant::kGIoU: return S(q.iou - q.penalty);
    case BoxIouVariant::kDIoU: return S(q.iou - q.distance);
    case BoxIouVariant::kCIoU: return S(q.iou - q.distance - q.v * alpha);
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
  Matrixd out(boxes1.rows(), boxes2.rows());
  for (Eigen::Index i = 0; i < boxes1.rows(); ++i) {
    for (Eigen::Index j = 0; j < boxes2.rows(); ++j) {
      const Box<double> a = box_row(boxes1, i), b = box_row(boxes2, j);
      if (!finite(a) || !finite(b)) {
        out(i, j) = kNaN;
        continue;
      }
      out(i, j) = pair_value(p, a, b, p.variant == BoxIouVariant::kCIoU ? pair_alpha(p, a, b) : 0.0);
    }
  }
  return out;
}

BoxIouGrads box_iou_pairwise_backward(const BoxIouParams& p, const Matrixd& boxes1, const Matrixd& boxes2,
                                      const Matrixd& grad) {
  check_pair_shapes(boxes1, boxes2, false);
  if (grad.rows() != boxes1.rows() || grad.cols() != boxes2.rows()) {
    throw std::invalid_argument("box_iou reference: grad must be [N, M]");
  }
  BoxIouGrads g{Matrixd::Zero(boxes1.rows(), 4), Matrixd::Zero(boxes2.rows(), 4)};
  Tape tape;
  double d[8];
  for (Eigen::Index i = 0; i < boxes1.rows(); ++i) {
    for (Eigen::Index j = 0; j < boxes2.rows(); ++j) {
      const Box<double> a = box_row(boxes1, i), b = box_row(boxes2, j);
      if (!finite(a) || !finite(b)) {
        g.boxes1.row(i).array() += kNaN;
        g.boxes2.row(j).array() += kNaN;
        continue;
      }
      const auto [ra, rb] = leaves(tape, a, b);
      partials(tape, pair_value(p, ra, rb, p.variant == BoxIouVariant::kCIoU ? pair_alpha(p, a, b) : 0.0), grad(i, j), d);
      for (int k = 0; k < 4; ++k) {
        g.boxes1(i, k) += d[k];
        g.boxes2(j, k) += d[4 + k];
      }
    }
  }
  return g;
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
  Tape tape;
  double d[8];
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
    const auto [ra, rb] = leaves(tape, a, b);
    const double alpha = p.variant == BoxIouVariant::kCIoU ? ciou_alpha(p, a, b) : 0.0;
    partials(tape, pair_loss(p, ra, rb, alpha), upstream, d);
    for (int k = 0; k < 4; ++k) {
      g.boxes1(i, k) = d[k];
      g.boxes2(i, k) = d[4 + k];
    }
  }
  return g;
}

}  // namespace detops::reference
