// NMS reference in double from the definition (docs/ops/nms.md).
#include "detops/reference/nms_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>

namespace detops::reference {
namespace {

bool same_class(const NmsBoxes& in, std::int64_t a, std::int64_t b) {
  return in.classes.empty() || in.classes[a] == in.classes[b];
}

// Rank order of two scores: NaN above everything, then by value.
bool ranks_above(double a, double b) {
  if (std::isnan(a)) return !std::isnan(b);
  if (std::isnan(b)) return false;
  return a > b;
}

bool ranks_at_or_above(double a, double b) { return !ranks_above(b, a); }

// The class of box a as a key of the per-class lists below (0 for every box without classes). Boxes of different
// classes are never compared (their IoU is NaN, which exceeds no threshold), so a box need only be held against the
// kept boxes of its own class: the same decisions as against every kept box, without the NaN comparisons, which made
// a batched case of 100,000 boxes in 3 classes cost three times its one-class twin.
std::int64_t class_key(const NmsBoxes& in, std::int64_t a) { return in.classes.empty() ? 0 : in.classes[a]; }

}  // namespace

double nms_reference_iou(const NmsBoxes& in, std::int64_t a, std::int64_t b) {
  // Boxes of different classes are never compared: NaN exceeds no threshold, negative ones included.
  if (!same_class(in, a, b)) return std::numeric_limits<double>::quiet_NaN();
  const double* p = in.boxes.data() + 4 * a;
  const double* q = in.boxes.data() + 4 * b;
  // Overlap extent along each axis: the gap between the larger left edge and the smaller right edge.
  const double left = std::max(p[0], q[0]), right = std::min(p[2], q[2]);
  const double top = std::max(p[1], q[1]), bottom = std::min(p[3], q[3]);
  // Clamped at 0; `> 0.0 ? : 0.0` also sends a NaN extent to 0.
  const double width = right - left > 0.0 ? right - left : 0.0;
  const double height = bottom - top > 0.0 ? bottom - top : 0.0;
  const double area_p = (p[2] - p[0]) * (p[3] - p[1]);
  const double area_q = (q[2] - q[0]) * (q[3] - q[1]);
  const double intersection = width * height;
  return intersection / (area_p + area_q - intersection);
}

std::vector<std::int64_t> nms_reference_ranking(const NmsBoxes& in) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(in.size()));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int64_t a, std::int64_t b) { return ranks_above(in.scores[a], in.scores[b]); });
  return order;
}

std::vector<std::int64_t> nms_reference(const NmsBoxes& in, double iou_threshold, NmsIouPrecision precision) {
  std::vector<std::int64_t> kept;
  std::map<std::int64_t, std::vector<std::int64_t>> kept_of_class;  // the same boxes, per class
  for (const std::int64_t candidate : nms_reference_ranking(in)) {
    std::vector<std::int64_t>& same = kept_of_class[class_key(in, candidate)];
    const bool suppressed = std::any_of(same.begin(), same.end(), [&](std::int64_t k) {
      const double iou = nms_reference_iou(in, k, candidate);
      const double held = precision == NmsIouPrecision::kFloat ? static_cast<double>(static_cast<float>(iou)) : iou;
      return held > iou_threshold;
    });
    if (!suppressed) {
      kept.push_back(candidate);
      same.push_back(candidate);
    }
  }
  return kept;
}

NmsValidity check_nms_validity(const NmsBoxes& in, const std::vector<std::int64_t>& keep, double iou_threshold,
                               double tol, std::size_t max_reports) {
  NmsValidity v;
  auto report = [&](const std::string& what) {
    ++v.violations;
    if (v.reports.size() < max_reports) v.reports.push_back(what);
  };
  const std::int64_t n = in.size();
  std::vector<char> is_kept(static_cast<std::size_t>(n), 0);
  std::vector<std::int64_t> valid_keep;
  for (std::size_t pos = 0; pos < keep.size(); ++pos) {
    const std::int64_t k = keep[pos];
    if (k < 0 || k >= n) {
      report("keep[" + std::to_string(pos) + "] = " + std::to_string(k) + " is not a box index in [0, " +
             std::to_string(n) + ")");
      continue;
    }
    if (is_kept[k]) {
      report("box " + std::to_string(k) + " is kept twice");
      continue;
    }
    if (!valid_keep.empty() && ranks_above(in.scores[k], in.scores[valid_keep.back()])) {
      std::ostringstream os;
      os << "keep is not ordered by decreasing score: box " << k << " (score " << in.scores[k] << ") follows box "
         << valid_keep.back() << " (score " << in.scores[valid_keep.back()] << ")";
      report(os.str());
    }
    is_kept[k] = 1;
    valid_keep.push_back(k);
  }
  // The kept boxes per class, in keep order: the pairs of different classes have IoU NaN and pass both tests below.
  std::map<std::int64_t, std::vector<std::int64_t>> kept_of_class;
  for (std::size_t pos = 0; pos < valid_keep.size(); ++pos) {
    std::vector<std::int64_t>& same = kept_of_class[class_key(in, valid_keep[pos])];
    for (const std::int64_t earlier : same) {
      const double iou = nms_reference_iou(in, earlier, valid_keep[pos]);
      if (iou > iou_threshold + tol) {
        std::ostringstream os;
        os.precision(17);
        os << "kept box " << valid_keep[pos] << " overlaps the earlier kept box " << earlier
           << " with IoU " << iou << " > threshold " << iou_threshold << " + " << tol;
        report(os.str());
        break;
      }
    }
    same.push_back(valid_keep[pos]);
  }
  const std::vector<std::int64_t> none;
  for (std::int64_t j = 0; j < n; ++j) {
    if (is_kept[j]) continue;
    const auto found = kept_of_class.find(class_key(in, j));
    const std::vector<std::int64_t>& same = found == kept_of_class.end() ? none : found->second;
    const bool has_suppressor = std::any_of(same.begin(), same.end(), [&](std::int64_t k) {
      return ranks_at_or_above(in.scores[k], in.scores[j]) && nms_reference_iou(in, k, j) > iou_threshold - tol;
    });
    if (!has_suppressor) {
      report("box " + std::to_string(j) + " was suppressed, but no kept box of at least its score overlaps it with "
             "IoU > threshold - tol");
    }
  }
  return v;
}

double nms_threshold_margin(const NmsBoxes& in, double iou_threshold) {
  double margin = std::numeric_limits<double>::infinity();
  for (std::int64_t a = 0; a < in.size(); ++a) {
    for (std::int64_t b = a + 1; b < in.size(); ++b) {
      if (!same_class(in, a, b)) continue;
      margin = std::min(margin, std::abs(nms_reference_iou(in, a, b) - iou_threshold));
    }
  }
  return margin;
}

bool nms_scores_distinct(const NmsBoxes& in) {
  std::vector<double> s = in.scores;
  if (std::any_of(s.begin(), s.end(), [](double x) { return std::isnan(x); })) return false;
  std::sort(s.begin(), s.end());
  return std::adjacent_find(s.begin(), s.end()) == s.end();
}

}  // namespace detops::reference
