// Self-checks of the box IoU references against values worked out by hand (no GPU, no kernel code).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "detops/reference/box_iou_reference.h"
#include "matrix_rows.h"

namespace detops::reference {
namespace {

const double kPi = std::acos(-1.0);
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

Matrixd boxes(std::initializer_list<std::initializer_list<double>> values) { return rows<4>(values); }

// DetOps' rule for degenerate boxes (the option; the default, torchvision's quotients, is checked by the spec).
double pairwise(BoxIouVariant v, const Matrixd& a, const Matrixd& b, double eps = 1e-7) {
  return box_iou_pairwise(BoxIouParams{v, eps, /*defined_degenerate=*/true}, a, b)(0, 0);
}

TEST(BoxIouReference, OverlappingSquares) {
  // [0,0,2,2] and [1,1,3,3]: intersection 1, union 7, enclosing box 3 x 3, centers (1,1) and (2,2).
  const Matrixd a = boxes({{0, 0, 2, 2}}), b = boxes({{1, 1, 3, 3}});
  EXPECT_NEAR(pairwise(BoxIouVariant::kIoU, a, b), 1.0 / 7, 1e-15);
  EXPECT_NEAR(pairwise(BoxIouVariant::kGIoU, a, b), 1.0 / 7 - 2.0 / 9, 1e-15);
  EXPECT_NEAR(pairwise(BoxIouVariant::kDIoU, a, b), 1.0 / 7 - 2.0 / (18 + 1e-7), 1e-15);
  // Same aspect ratio: v = 0, so CIoU = DIoU.
  EXPECT_NEAR(pairwise(BoxIouVariant::kCIoU, a, b), 1.0 / 7 - 2.0 / (18 + 1e-7), 1e-15);
}

TEST(BoxIouReference, CompleteIouAspectTerm) {
  // [0,0,2,1] and [0,0,1,2]: intersection 1, union 3, centers (1, .5) and (.5, 1), enclosing 2 x 2.
  const Matrixd a = boxes({{0, 0, 2, 1}}), b = boxes({{0, 0, 1, 2}});
  const double iou = 1.0 / 3, diou = iou - 0.5 / (8 + 1e-7);
  const double v = 4 / (kPi * kPi) * std::pow(std::atan(2.0) - std::atan(0.5), 2);
  const double alpha = v / (1 - iou + v + 1e-7);
  EXPECT_NEAR(pairwise(BoxIouVariant::kCIoU, a, b), diou - alpha * v, 1e-15);
  // The loss: 1 - iou' + distance' + alpha' v with the inner eps 1e-7 in iou' and distance', and the
  // loss's eps (here 0.5) only in alpha's denominator (torchvision's complete_box_iou_loss).
  const BoxIouLossParams p{BoxIouVariant::kCIoU, LossReduction::kNone, 0.5};
  const double iou_l = 1 / (3 + 1e-7), dist_l = 0.5 / (8 + 1e-7);
  const double alpha_l = v / (1 - iou_l + v + 0.5);
  EXPECT_NEAR(box_iou_loss_forward(p, a, b)(0), 1 - iou_l + dist_l + alpha_l * v, 1e-15);
}

TEST(BoxIouReference, IdenticalAndDisjointBoxes) {
  const Matrixd a = boxes({{0, 0, 1, 1}}), far = boxes({{2, 0, 3, 1}});
  for (BoxIouVariant v : {BoxIouVariant::kIoU, BoxIouVariant::kGIoU, BoxIouVariant::kDIoU, BoxIouVariant::kCIoU}) {
    EXPECT_DOUBLE_EQ(pairwise(v, a, a), 1.0);
  }
  EXPECT_EQ(pairwise(BoxIouVariant::kIoU, a, far), 0.0);
  EXPECT_NEAR(pairwise(BoxIouVariant::kGIoU, a, far), -1.0 / 3, 1e-15);   // enclosing 3, union 2
  EXPECT_NEAR(pairwise(BoxIouVariant::kDIoU, a, far), -4.0 / (10 + 1e-7), 1e-15);  // rho^2 4, diag^2 10
}

TEST(BoxIouReference, DegenerateBoxesGiveDefinedValuesNotNaN) {
  const Matrixd point = boxes({{1, 1, 1, 1}}), line = boxes({{1, 0, 1, 3}}), box = boxes({{0, 0, 2, 2}});
  const Matrixd inverted_x = boxes({{2, 0, 0, 1}}), zero_width_at_1 = boxes({{1, 0, 1, 1}});
  for (BoxIouVariant v : {BoxIouVariant::kIoU, BoxIouVariant::kGIoU, BoxIouVariant::kDIoU, BoxIouVariant::kCIoU}) {
    // Two identical points: union 0 -> IoU 0; enclosing area 0 -> no GIoU penalty; center distance 0.
    EXPECT_EQ(pairwise(v, point, point), 0.0) << static_cast<int>(v);
    EXPECT_EQ(pairwise(v, line, line), 0.0) << static_cast<int>(v);
    EXPECT_FALSE(std::isnan(pairwise(v, point, box)));
    // Area -2 and 0: union -2 <= 0 -> IoU 0; enclosing width max(0, 1 - 1) = 0 -> no GIoU penalty.
    EXPECT_FALSE(std::isnan(pairwise(v, inverted_x, zero_width_at_1)));
  }
  EXPECT_EQ(pairwise(BoxIouVariant::kIoU, inverted_x, zero_width_at_1), 0.0);
  EXPECT_EQ(pairwise(BoxIouVariant::kGIoU, inverted_x, zero_width_at_1), 0.0);
  // A point inside a box: intersection 0, union 4, enclosing area 4 -> GIoU 0 - 0 = 0.
  EXPECT_EQ(pairwise(BoxIouVariant::kGIoU, point, box), 0.0);
  // eps = 0 and identical points: the diagonal denominator is 0 -> no distance term.
  EXPECT_EQ(pairwise(BoxIouVariant::kDIoU, point, point, 0.0), 0.0);
}

TEST(BoxIouReference, NonFiniteCoordinatesGiveNaN) {
  const Matrixd box = boxes({{0, 0, 2, 2}});
  EXPECT_TRUE(std::isnan(pairwise(BoxIouVariant::kIoU, boxes({{0, 0, kNaN, 2}}), box)));
  EXPECT_TRUE(std::isnan(pairwise(BoxIouVariant::kGIoU, box, boxes({{0, 0, kInf, 2}}))));
  const BoxIouLossParams p{BoxIouVariant::kDIoU, LossReduction::kNone, 1e-7};
  const BoxIouLossGrads g = box_iou_loss_backward(p, boxes({{-kInf, 0, 1, 1}}), box, Vectord::Ones(1));
  EXPECT_TRUE(std::isnan(box_iou_loss_forward(p, boxes({{-kInf, 0, 1, 1}}), box)(0)));
  EXPECT_TRUE(std::isnan(g.boxes1(0, 2)) && std::isnan(g.boxes2(0, 0)));
}

TEST(BoxIouReference, LossReductions) {
  const Matrixd a = boxes({{0, 0, 2, 2}, {0, 0, 1, 1}}), b = boxes({{1, 1, 3, 3}, {0, 0, 1, 1}});
  const double l0 = 1 - 1 / (7 + 1e-7), l1 = 1 - 1 / (1 + 1e-7);
  const Vectord none = box_iou_loss_forward({BoxIouVariant::kIoU, LossReduction::kNone, 1e-7}, a, b);
  ASSERT_EQ(none.size(), 2);
  EXPECT_NEAR(none(0), l0, 1e-15);
  EXPECT_NEAR(none(1), l1, 1e-15);
  EXPECT_NEAR(box_iou_loss_forward({BoxIouVariant::kIoU, LossReduction::kSum, 1e-7}, a, b)(0), l0 + l1, 1e-15);
  EXPECT_NEAR(box_iou_loss_forward({BoxIouVariant::kIoU, LossReduction::kMean, 1e-7}, a, b)(0), (l0 + l1) / 2, 1e-15);
  // The mean of no pairs is 0, not NaN (torchvision returns 0.0 * sum).
  EXPECT_EQ(box_iou_loss_forward({BoxIouVariant::kGIoU, LossReduction::kMean, 1e-7}, Matrixd(0, 4), Matrixd(0, 4))(0), 0.0);
}

TEST(BoxIouReference, IouLossGradientByHand) {
  // a = [0,0,2,2], b = [1,1,3,3], eps = 0: inter = (a.x2 - 1)(a.y2 - 1), union = 8 - inter.
  // d iou / d a.x2 = (d inter * union - inter * d union) / union^2 with d inter = 1, d union = 2 - 1.
  const BoxIouLossParams p{BoxIouVariant::kIoU, LossReduction::kNone, 0.0};
  const BoxIouLossGrads g = box_iou_loss_backward(p, boxes({{0, 0, 2, 2}}), boxes({{1, 1, 3, 3}}), Vectord::Ones(1));
  EXPECT_NEAR(g.boxes1(0, 2), -(1.0 * 7 - 1.0 * 1) / 49, 1e-15);
  EXPECT_NEAR(g.boxes1(0, 3), -(1.0 * 7 - 1.0 * 1) / 49, 1e-15);
  // d / d b.x1: d inter = -(a.y2 - 1) = -1, d union = -2 + 1 = -1.
  EXPECT_NEAR(g.boxes2(0, 0), -(-1.0 * 7 - 1.0 * -1) / 49, 1e-15);
  // Scaled by the upstream gradient and by 1/n for a mean.
  const BoxIouLossGrads m = box_iou_loss_backward({BoxIouVariant::kIoU, LossReduction::kMean, 0.0},
                                                  boxes({{0, 0, 2, 2}, {5, 5, 6, 6}}),
                                                  boxes({{1, 1, 3, 3}, {5, 5, 7, 7}}), Vectord::Constant(1, 3.0));
  EXPECT_NEAR(m.boxes1(0, 2), 3.0 / 2 * -(6.0 / 49), 1e-15);
}

TEST(BoxIouReference, TiedEdgesSplitTheGradient) {
  // a = [0,0,2,2], b = [0,1,3,3]: a.x1 == b.x1, so max(a.x1, b.x1) passes half its gradient to each.
  // inter = 2 * 1, union = 4 + 6 - 2 = 8; d inter / d a.x1 = -0.5 * 1, d union / d a.x1 = -2 + 0.5.
  // d iou / d a.x1 = (-0.5 * 8 - 2 * -1.5) / 64 = -1/64, and the same for b.x1 (d area_b = -2).
  const BoxIouLossParams p{BoxIouVariant::kIoU, LossReduction::kNone, 0.0};
  const BoxIouLossGrads g = box_iou_loss_backward(p, boxes({{0, 0, 2, 2}}), boxes({{0, 1, 3, 3}}), Vectord::Ones(1));
  EXPECT_NEAR(g.boxes1(0, 0), 1.0 / 64, 1e-15);
  EXPECT_NEAR(g.boxes2(0, 0), 1.0 / 64, 1e-15);
}

TEST(BoxIouReference, CompleteIouLossHoldsAlphaConstant) {
  // With alpha held at the point, d loss = d(DIoU loss) + alpha d v. Check d / d a.x2 against central
  // differences of the DIoU loss (inner eps) plus alpha times central differences of v.
  const Matrixd a = boxes({{0, 0, 2, 1}}), b = boxes({{0.5, -0.25, 1.5, 2}});
  const BoxIouLossParams ciou{BoxIouVariant::kCIoU, LossReduction::kNone, 1e-7};
  const BoxIouLossParams diou{BoxIouVariant::kDIoU, LossReduction::kNone, kCiouLossInnerEps};
  const double h = 1e-6;
  Matrixd ap = a, am = a;
  ap(0, 2) += h;
  am(0, 2) -= h;
  auto v_of = [](const Matrixd& x, const Matrixd& y) {
    const double wa = x(0, 2) - x(0, 0), ha = x(0, 3) - x(0, 1), wb = y(0, 2) - y(0, 0), hb = y(0, 3) - y(0, 1);
    return 4 / (kPi * kPi) * std::pow(std::atan(wb / hb) - std::atan(wa / ha), 2);
  };
  const double iou = 1.0 / (2 + 2.25 - 1 + 1e-7), v = v_of(a, b);  // inter 1 x 1, areas 2 and 2.25
  const double alpha = v / (1 - iou + v + 1e-7);
  const double expected = (box_iou_loss_forward(diou, ap, b)(0) - box_iou_loss_forward(diou, am, b)(0)) / (2 * h) +
                          alpha * (v_of(ap, b) - v_of(am, b)) / (2 * h);
  EXPECT_NEAR(box_iou_loss_backward(ciou, a, b, Vectord::Ones(1)).boxes1(0, 2), expected, 1e-8);
  // ... and the alpha_boxes forward at the same point equals the plain forward.
  EXPECT_DOUBLE_EQ(box_iou_loss_forward(ciou, a, b, &a, &b)(0), box_iou_loss_forward(ciou, a, b)(0));
}

}  // namespace
}  // namespace detops::reference
