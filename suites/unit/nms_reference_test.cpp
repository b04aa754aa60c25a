// Self-checks of the NMS reference and of its validity check, against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "detops/reference/nms_reference.h"

namespace detops::reference {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

NmsBoxes make(std::vector<double> boxes, std::vector<double> scores, std::vector<std::int64_t> classes = {}) {
  NmsBoxes b;
  b.boxes = std::move(boxes);
  b.scores = std::move(scores);
  b.classes = std::move(classes);
  return b;
}

TEST(NmsReference, IouOfOverlappingSquaresIsOneSeventh) {
  // [0,0,2,2] and [1,1,3,3]: intersection 1, union 4 + 4 - 1 = 7.
  const NmsBoxes b = make({0, 0, 2, 2, 1, 1, 3, 3}, {1, 0});
  EXPECT_DOUBLE_EQ(nms_reference_iou(b, 0, 1), 1.0 / 7.0);
  EXPECT_DOUBLE_EQ(nms_reference_iou(b, 1, 0), 1.0 / 7.0);
}

TEST(NmsReference, DegenerateAndNonFiniteBoxesFollowTheQuotient) {
  const NmsBoxes b = make({0, 0, 10, 10,                  // 0: normal
                           10, 0, 20, 10,                 // 1: touches 0 along x = 10
                           8, 2, 2, 8,                    // 2: inverted in x, inside 0
                           2, 2, 2, 8,                    // 3: zero width
                           kNaN, 0, 10, 10,               // 4: NaN x1, otherwise identical to 0
                           -INFINITY, -INFINITY, INFINITY, INFINITY,  // 5: infinite
                           -INFINITY, -INFINITY, INFINITY, INFINITY,  // 6: infinite (inf - inf in the union)
                           3, 3, 3, 3},                   // 7: a point
                          {1, 1, 1, 1, 1, 1, 1, 1});
  // No overlap: 0 / (100 + 100), 0 / (100 - 36), 0 / (100 + 0).
  for (int other = 1; other <= 3; ++other) EXPECT_EQ(nms_reference_iou(b, 0, other), 0.0) << other;
  // 100 / (100 + inf - 100) = 0.
  EXPECT_EQ(nms_reference_iou(b, 0, 5), 0.0);
  // A NaN coordinate makes the union NaN; inf / (inf + inf - inf) and 0 / 0 are NaN.
  EXPECT_TRUE(std::isnan(nms_reference_iou(b, 0, 4)));
  EXPECT_TRUE(std::isnan(nms_reference_iou(b, 5, 6)));
  EXPECT_TRUE(std::isnan(nms_reference_iou(b, 7, 7)));
  EXPECT_DOUBLE_EQ(nms_reference_iou(b, 0, 0), 1.0);
}

TEST(NmsReference, NegativeThresholdSuppressesEveryDefinedIouButNotNaN) {
  // 0 [0,0,10,10] .9; 1 [20,20,30,30] .8 (disjoint: IoU 0 > -0.5); 2 [3,3,3,3] .7 (a point: 0 / 100 = 0
  // with box 0); 3 NaN x1 .6 (IoU NaN with everything: never suppressed).
  const NmsBoxes b = make({0, 0, 10, 10, 20, 20, 30, 30, 3, 3, 3, 3, kNaN, 0, 10, 10}, {0.9, 0.8, 0.7, 0.6});
  EXPECT_EQ(nms_reference(b, -0.5), (std::vector<std::int64_t>{0, 3}));
  // Above 1 and NaN: nothing is suppressed.
  EXPECT_EQ(nms_reference(b, 1.5), (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(nms_reference(b, kNaN), (std::vector<std::int64_t>{0, 1, 2, 3}));
}

TEST(NmsReference, FloatIouOfOneFifthExceedsTheDoubleThreshold) {
  // [0,0,5,5] and [0,0,5,1]: IoU 5 / 25 = 0.2 exactly; [0,0,5,5] and [0,0,5,4]: 20 / 25 = 0.8. In double the
  // IoU equals the threshold (kept); held in float it is 0.2f = 0.200000003 and 0.8f = 0.800000012, above
  // the double thresholds 0.2 and 0.8 (suppressed), as torchvision's CPU kernel decides for float32 boxes.
  const NmsBoxes fifth = make({0, 0, 5, 5, 0, 0, 5, 1}, {0.9, 0.8});
  EXPECT_EQ(nms_reference(fifth, 0.2, NmsIouPrecision::kDouble), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(nms_reference(fifth, 0.2, NmsIouPrecision::kFloat), (std::vector<std::int64_t>{0}));
  const NmsBoxes four_fifths = make({0, 0, 5, 5, 0, 0, 5, 4}, {0.9, 0.8});
  EXPECT_EQ(nms_reference(four_fifths, 0.8, NmsIouPrecision::kDouble), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(nms_reference(four_fifths, 0.8, NmsIouPrecision::kFloat), (std::vector<std::int64_t>{0}));
  // 0.5 is exact in float: equal, kept in both.
  const NmsBoxes half = make({0, 0, 4, 4, 0, 0, 4, 2}, {0.9, 0.8});
  EXPECT_EQ(nms_reference(half, 0.5, NmsIouPrecision::kFloat), (std::vector<std::int64_t>{0, 1}));
}

TEST(NmsReference, BoxesOfDifferentClassesAreNeverCompared) {
  const NmsBoxes b = make({0, 0, 10, 10, 0, 0, 10, 10}, {1, 0.5}, {3, 4});
  EXPECT_TRUE(std::isnan(nms_reference_iou(b, 0, 1)));
  EXPECT_EQ(nms_reference(b, 0.5), (std::vector<std::int64_t>{0, 1}));
  // Not even below 0, where every defined IoU suppresses.
  EXPECT_EQ(nms_reference(b, -0.5), (std::vector<std::int64_t>{0, 1}));
}

TEST(NmsReference, RankingPutsNaNFirstAndKeepsIndexOrderForTies) {
  const NmsBoxes b = make(std::vector<double>(6 * 4, 0.0), {0.5, kNaN, 0.9, -0.0, 0.5, 0.0});
  EXPECT_EQ(nms_reference_ranking(b), (std::vector<std::int64_t>{1, 2, 0, 4, 3, 5}));
}

TEST(NmsReference, GreedySuppressionByHand) {
  // A [0,0,10,10] .9, B [1,1,11,11] .8 (IoU 81/119 = 0.68 with A), C [20,20,30,30] .7 (disjoint).
  const NmsBoxes b = make({1, 1, 11, 11, 20, 20, 30, 30, 0, 0, 10, 10}, {0.8, 0.7, 0.9});
  EXPECT_EQ(nms_reference(b, 0.5), (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(nms_reference(b, 0.7), (std::vector<std::int64_t>{2, 0, 1}));
}

TEST(NmsReference, SuppressedBoxDoesNotSuppress) {
  // A [0,0,10,10], B [3,0,13,10], C [6,0,16,10]: IoU(A,B) = IoU(B,C) = 70/130, IoU(A,C) = 40/160.
  const NmsBoxes b = make({0, 0, 10, 10, 3, 0, 13, 10, 6, 0, 16, 10}, {3, 2, 1});
  EXPECT_EQ(nms_reference(b, 0.5), (std::vector<std::int64_t>{0, 2}));
}

TEST(NmsReference, IouExactlyAtThresholdDoesNotSuppress) {
  // [0,0,4,4] and [0,0,4,2]: IoU 8 / 16 = 0.5 exactly.
  const NmsBoxes b = make({0, 0, 4, 4, 0, 0, 4, 2}, {1, 0.5});
  EXPECT_EQ(nms_reference(b, 0.5), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(nms_reference(b, 0.4999), (std::vector<std::int64_t>{0}));
}

TEST(NmsReference, EmptyInput) { EXPECT_TRUE(nms_reference(make({}, {}), 0.5).empty()); }

class NmsValidityTest : public ::testing::Test {
 protected:
  // 0: [0,0,10,10] .9; 1: [1,1,11,11] .8 (IoU 0.68 with 0); 2: [20,20,30,30] .7; the valid keep is {0, 2}.
  NmsBoxes b = make({0, 0, 10, 10, 1, 1, 11, 11, 20, 20, 30, 30}, {0.9, 0.8, 0.7});
};

TEST_F(NmsValidityTest, AcceptsTheGreedyResult) { EXPECT_EQ(check_nms_validity(b, {0, 2}, 0.5, 1e-6).violations, 0); }

TEST_F(NmsValidityTest, RejectsAKeptBoxThatAnEarlierKeptBoxSuppresses) {
  const NmsValidity v = check_nms_validity(b, {0, 1, 2}, 0.5, 1e-6);
  EXPECT_EQ(v.violations, 1);
  ASSERT_FALSE(v.reports.empty());
  EXPECT_NE(v.reports[0].find("kept box 1 overlaps the earlier kept box 0"), std::string::npos) << v.reports[0];
}

TEST_F(NmsValidityTest, RejectsASuppressedBoxWithoutSuppressor) {
  const NmsValidity v = check_nms_validity(b, {0}, 0.5, 1e-6);
  EXPECT_EQ(v.violations, 1);
  EXPECT_NE(v.reports.at(0).find("box 2 was suppressed"), std::string::npos) << v.reports[0];
}

TEST_F(NmsValidityTest, RejectsBadIndicesDuplicatesAndOrder) {
  EXPECT_GE(check_nms_validity(b, {0, 2, 3}, 0.5, 1e-6).violations, 1);
  EXPECT_GE(check_nms_validity(b, {0, -1, 2}, 0.5, 1e-6).violations, 1);
  EXPECT_GE(check_nms_validity(b, {0, 2, 2}, 0.5, 1e-6).violations, 1);
  EXPECT_GE(check_nms_validity(b, {2, 0}, 0.5, 1e-6).violations, 1);
}

TEST_F(NmsValidityTest, ASuppressorMustScoreAtLeastAsHigh) {
  // Box 1 suppressed "by" box 0 is fine; with scores swapped, keep {0, 2} says 1 (now .9) lost to 0 (.8).
  NmsBoxes swapped = b;
  std::swap(swapped.scores[0], swapped.scores[1]);
  EXPECT_GE(check_nms_validity(swapped, {0, 2}, 0.5, 1e-6).violations, 1);
}

TEST(NmsValidity, ToleranceDecidesNearTheThreshold) {
  // [0,0,100,100] and [s,0,100+s,100]: IoU (100-s)/(100+s).
  auto pair = [](double iou) {
    const double s = 100.0 * (1 - iou) / (1 + iou);
    return make({0, 0, 100, 100, s, 0, 100 + s, 100}, {1, 0.5});
  };
  // IoU threshold + 1e-7: both kept is within a 1e-6 tolerance, but not within 1e-9.
  EXPECT_EQ(check_nms_validity(pair(0.5 + 1e-7), {0, 1}, 0.5, 1e-6).violations, 0);
  EXPECT_EQ(check_nms_validity(pair(0.5 + 1e-7), {0, 1}, 0.5, 1e-9).violations, 1);
  // IoU threshold - 1e-7: suppressing box 1 is within 1e-6, but not within 1e-9.
  EXPECT_EQ(check_nms_validity(pair(0.5 - 1e-7), {0}, 0.5, 1e-6).violations, 0);
  EXPECT_EQ(check_nms_validity(pair(0.5 - 1e-7), {0}, 0.5, 1e-9).violations, 1);
}

TEST(NmsReference, MarginAndDistinctScores) {
  const NmsBoxes b = make({0, 0, 4, 4, 0, 0, 4, 2, 10, 10, 12, 12}, {1, 0.5, 0.25});
  EXPECT_DOUBLE_EQ(nms_threshold_margin(b, 0.4), 0.1);  // pair (0, 1) at IoU 0.5; others 0 (margin 0.4)
  EXPECT_TRUE(nms_scores_distinct(b));
  EXPECT_FALSE(nms_scores_distinct(make({0, 0, 1, 1, 0, 0, 1, 1}, {1, 1})));
  EXPECT_FALSE(nms_scores_distinct(make({0, 0, 1, 1, 0, 0, 1, 1}, {1, kNaN})));
}

}  // namespace
}  // namespace detops::reference
