#pragma once
// NMS reference in double, written from the definition (docs/ops/nms.md), and the validity check used
// where a keep list cannot be compared exactly (pairs whose IoU sits within rounding of the threshold,
// equal scores). Shares nothing with the kernels but the parameter struct.
#include <cstdint>
#include <string>
#include <vector>

#include "nms/nms_params.h"

namespace detops::reference {

struct NmsBoxes {
  std::vector<double> boxes;           // [N * 4] (x1, y1, x2, y2)
  std::vector<double> scores;          // [N]
  std::vector<std::int64_t> classes;   // [N] for batched NMS; empty: one class
  std::int64_t size() const { return static_cast<std::int64_t>(scores.size()); }
};

// IoU of boxes a and b of `in` from the definition (torchvision's formula): the overlap extents clamped at
// 0 (NaN counts as 0), then intersection / (area_a + area_b - intersection) as it is, so +-0 for pairs
// that do not overlap, NaN for a NaN coordinate or a 0 / 0; NaN across classes (never compared: no threshold,
// not even a negative one, is exceeded).
double nms_reference_iou(const NmsBoxes& in, std::int64_t a, std::int64_t b);

// The precision the implementation under test holds the IoU in before comparing it, exactly, with the
// double threshold: double for fp64 boxes, float for fp32, fp16 and bf16 boxes. The reference computes
// the IoU in double and, for kFloat, rounds it to float first, so an IoU of exactly 1/5 (0.2f, above the
// double 0.2) exceeds a threshold of 0.2 there, as in torchvision's CPU kernel.
enum class NmsIouPrecision { kDouble, kFloat };

// The ranking: decreasing score, NaN first, equal scores in index order.
std::vector<std::int64_t> nms_reference_ranking(const NmsBoxes& in);

// Greedy NMS: walk the ranking; a box is kept when no box kept before it has IoU > threshold with it (the
// IoU held in `precision`).
std::vector<std::int64_t> nms_reference(const NmsBoxes& in, double iou_threshold,
                                        NmsIouPrecision precision = NmsIouPrecision::kDouble);

// Whether `keep` is a valid NMS result for `in`, judging IoUs near the threshold with tolerance `tol`:
// - every entry is a distinct index in [0, N), and scores never increase along `keep` (NaN first);
// - no kept box has an earlier kept box with IoU > threshold + tol (it should have been suppressed);
// - every suppressed box has a kept box ranked at or above its score with IoU > threshold - tol.
// Returns the violations in words (empty: valid), at most `max_reports` of them, plus their count.
struct NmsValidity {
  std::int64_t violations = 0;
  std::vector<std::string> reports;
};
NmsValidity check_nms_validity(const NmsBoxes& in, const std::vector<std::int64_t>& keep, double iou_threshold,
                               double tol, std::size_t max_reports = 5);

// The smallest |IoU - threshold| over all same-class pairs (infinity when there are none): when it
// exceeds the IoU error of an implementation and the scores are distinct, that implementation's keep
// list must equal nms_reference's exactly.
double nms_threshold_margin(const NmsBoxes& in, double iou_threshold);

// Whether all scores are distinct numbers (no ties, no NaN).
bool nms_scores_distinct(const NmsBoxes& in);

}  // namespace detops::reference
