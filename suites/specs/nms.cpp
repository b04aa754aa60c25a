// The op specs of nms and batched_nms: seeded cases (the OPS.md regression cases among them), how to
// run the op and the reference, how a keep list is judged, bad inputs and determinism.
//
// Judging. NMS output is discrete, and near the threshold a float32 IoU and a double IoU can disagree,
// so each case says how its keep list is judged:
// - kExact: the scores are distinct and every same-class pair's IoU (on the inputs rounded to the
//   dtype under test) is more than the IoU tolerance away from the threshold. Then any implementation
//   whose IoU error is within the tolerance must return the reference's keep list exactly. The judge
//   verifies this premise on the rounded inputs; a case that does not meet it is an error.
// - kExactTies: as kExact, but scores may tie (equal scores, NaN scores, -0 and +0): the definition ranks
//   equal scores in index order (a stable sort), and so does the reference, so the keep list is still exact.
//   Only DetOps defines that order (torchvision does not): these cases never compare with torchvision.
// - kExactByConstruction: the keep list is exact for a reason the margin test cannot see, stated at
//   the case (IoUs exactly at the threshold: exact in every precision, or 1/5 and 4/5, which float holds
//   above the double threshold; IoU 0 of touching boxes at threshold 0; identical boxes; thresholds
//   outside [0, 1]). Compared exactly, without the margin test, with the reference's IoU held in the
//   implementation's precision.
// - kValidity: boundary cases (IoU = threshold +- 1e-5, equal scores, identical boxes with equal
//   scores, NaN scores, rounding-heavy coordinates): every kept box has no earlier kept box with
//   IoU > threshold + tol, every suppressed box has a kept box of at least its score with
//   IoU > threshold - tol, indices are distinct and in range, and scores never increase along the list.
// The IoU tolerance tol is 1e-12 for fp64 boxes and 2e-6 for fp32, fp16 and bf16 boxes, whose IoU is
// computed in fp32 from coordinates exact in fp32: a few fp32 roundings of a quotient <= 1 (about
// 4e-7 in the worst case), with room to spare.
#include "kit/spec_prelude.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>

#include "detops/reference/nms_reference.h"
#include "nms/nms_torch.h"

namespace detops {
namespace {

using harness::CompareResult;
using harness::Outcome;
using reference::NmsBoxes;

double iou_tolerance(DType dtype) { return dtype == DType::kFloat64 ? 1e-12 : 2e-6; }

enum class Judge { kExact, kExactTies, kExactByConstruction, kValidity };

enum class Layout {
  kGrid,            // integer boxes in [lo, lo + 256)^2, sizes 8..64, accepted only away from the threshold
  kGridClustered,   // the same around a few integer centres: many suppressing pairs
  kDisjoint,        // a row of separated boxes: all kept
  kIdentical,       // one box repeated
  kAtThreshold,     // pairs whose IoU is exactly the threshold: 0.5 or 0.25 (exact in any precision), 0.2 or 0.8
                    // (1/5 and 4/5: above the double threshold once rounded to float)
  kTouching,        // boxes sharing edges: IoU exactly 0
  kBoundary,        // pairs with IoU = threshold +- 1e-5
  kBoundaryChain,   // chains in which each box sits near the threshold with the next
  kGreedyChain,     // A suppresses B, B would suppress C, so C is kept
  kChains,          // `clusters` chains interleaved in index order, each a run of 8 x 8 boxes 2 apart
  kAreaOverflow,    // 38 jittered 300 x 300 boxes: areas past fp16's 65504
  kNearlyIdentical, // two nearly identical boxes with scores 0 and 1
  kInverted,        // grid boxes with some x1 > x2 or y1 > y2
  kZeroArea,        // grid boxes with some points and lines
  kNaNBoxes,        // grid boxes with some NaN coordinates
  kInfBoxes,        // grid boxes with some +-inf coordinates
  kRandom,          // real-valued boxes in an 800 x 1344 image: some pairs near the threshold
  kClustered,       // real-valued clusters of jittered boxes (proposals around objects)
  kLarge,           // coordinates up to 1e4 (heavy rounding in bf16), or 1e5 (inf in fp16)
};

enum class Scores {
  kDistinct,      // a permutation of values exact in every dtype
  kUniform,       // uniform in [0, 1): ties after fp16 / bf16 rounding
  kEqual,         // all 0.5
  kFewLevels,     // three levels
  kNaNMixed,      // distinct, with some NaN
  kSignedZeros,   // -0.0, 0.0 and negatives
  kZeroAndOne,    // 0 and 1 (the nearly-identical regression)
  kSorted,        // distinct, already decreasing
  kReversed,      // distinct, increasing
};

struct NmsCaseConfig {
  Layout layout = Layout::kGrid;
  Scores scores = Scores::kDistinct;
  Judge judge = Judge::kExact;
  std::int64_t n = 100;
  double threshold = 0.5;
  std::int64_t classes = 0;        // batched_nms: class ids drawn from [class_base, class_base + classes)
  std::int64_t class_base = 0;
  bool int32_idxs = false;
  double coordinate_shift = 0;     // added to every coordinate
  double large_extent = 1e4;       // kLarge
  std::int64_t chunk_bytes = 0;    // > 0: NmsParams::mask_chunk_bytes
  bool scan_in_global = false;     // NmsParams::scan_removed_in_shared = false (the CUDA path past ~1.6M boxes)
  bool noncontiguous = false;
  std::int64_t clusters = 0;       // kClustered
};

using Rng = std::mt19937_64;

double uniform(Rng& rng, double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }
std::int64_t randint(Rng& rng, std::int64_t lo, std::int64_t hi) {  // [lo, hi]
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

// Distinct values exact in fp16 and bf16 (8 significant bits, exponents within fp16's normal range),
// in a seeded random order.
std::vector<double> distinct_scores(std::int64_t n, Rng& rng) {
  if (n > 128 * 24) throw std::invalid_argument("distinct_scores: at most 3072 values");
  std::vector<double> s(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) s[k] = (1.0 + static_cast<double>(k % 128) / 128.0) * std::ldexp(1.0, static_cast<int>(k / 128) - 12);
  std::shuffle(s.begin(), s.end(), rng);
  return s;
}

struct Built {
  std::vector<double> boxes;  // [n * 4]
  std::vector<std::int64_t> classes;
};

// Class ids for n boxes (empty when the op is plain nms).
std::vector<std::int64_t> draw_classes(const NmsCaseConfig& cfg, std::int64_t n, Rng& rng) {
  std::vector<std::int64_t> c;
  if (cfg.classes <= 0) return c;
  for (std::int64_t i = 0; i < n; ++i) c.push_back(cfg.class_base + randint(rng, 0, cfg.classes - 1));
  return c;
}

// Appends integer grid boxes. For kExact cases each is accepted only when its IoU with every earlier
// same-class box is more than 1e-3 away from the threshold (so the keep list is exact in every dtype:
// integers <= 256 in magnitude are exact in bf16).
void add_grid_boxes(Built& b, const NmsCaseConfig& cfg, std::int64_t count, Rng& rng, bool clustered) {
  std::vector<std::array<std::int64_t, 2>> centres;
  for (int k = 0; k < 6; ++k) centres.push_back({randint(rng, 40, 200), randint(rng, 40, 200)});
  const std::int64_t lo = cfg.coordinate_shift == 0 ? 0 : static_cast<std::int64_t>(cfg.coordinate_shift);
  const std::int64_t target = static_cast<std::int64_t>(b.boxes.size() / 4) + count;
  int attempts = 0;
  while (static_cast<std::int64_t>(b.boxes.size() / 4) < target) {
    if (++attempts > 200000) throw std::runtime_error("nms spec: could not place grid boxes away from the threshold");
    std::int64_t x1, y1, w, h;
    if (clustered) {
      const auto& c = centres[static_cast<std::size_t>(randint(rng, 0, 5))];
      w = randint(rng, 20, 40);
      h = randint(rng, 20, 40);
      x1 = c[0] - w / 2 + randint(rng, -4, 4);
      y1 = c[1] - h / 2 + randint(rng, -4, 4);
    } else {
      w = randint(rng, 8, 64);
      h = randint(rng, 8, 64);
      x1 = randint(rng, 0, 255 - w);
      y1 = randint(rng, 0, 255 - h);
    }
    const std::int64_t cls = cfg.classes > 0 ? cfg.class_base + randint(rng, 0, cfg.classes - 1) : 0;
    NmsBoxes probe;
    probe.boxes = b.boxes;
    probe.boxes.insert(probe.boxes.end(), {double(lo + x1), double(lo + y1), double(lo + x1 + w), double(lo + y1 + h)});
    probe.scores.assign(probe.boxes.size() / 4, 0.0);
    const std::int64_t last = static_cast<std::int64_t>(probe.scores.size()) - 1;
    bool clear = true;
    const bool exact = cfg.judge == Judge::kExact || cfg.judge == Judge::kExactTies;
    for (std::int64_t j = 0; j < last && clear && exact; ++j) {
      if (cfg.classes > 0 && b.classes[j] != cls) continue;
      clear = std::abs(reference::nms_reference_iou(probe, j, last) - cfg.threshold) > 1e-3;
    }
    if (!clear) continue;
    b.boxes = std::move(probe.boxes);
    if (cfg.classes > 0) b.classes.push_back(cls);
  }
}

void push_box(Built& b, double x1, double y1, double x2, double y2) { b.boxes.insert(b.boxes.end(), {x1, y1, x2, y2}); }

// Real-valued boxes (proposal-like): centres in an 800 x 1344 image, log-uniform sizes 8..256.
void add_random_box(Built& b, Rng& rng, double cx, double cy, double w, double h) {
  push_box(b, cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2);
  (void)rng;
}

Built build_boxes(const NmsCaseConfig& cfg, Rng& rng) {
  Built b;
  const std::int64_t n = cfg.n;
  switch (cfg.layout) {
    case Layout::kGrid: add_grid_boxes(b, cfg, n, rng, false); return b;
    case Layout::kGridClustered: add_grid_boxes(b, cfg, n, rng, true); return b;
    case Layout::kDisjoint:
      for (std::int64_t i = 0; i < n; ++i) push_box(b, 12.0 * (i % 16), 12.0 * (i / 16), 12.0 * (i % 16) + 10, 12.0 * (i / 16) + 10);
      break;
    case Layout::kIdentical:
      for (std::int64_t i = 0; i < n; ++i) push_box(b, 10, 20, 74, 52);
      break;
    case Layout::kAtThreshold:
      // [x, 0, x+s, s] and [x, 0, x+s, k]: intersection s*k, union s*s, IoU k/s exactly. s = 4: k = 2 gives
      // 0.5 and k = 1 gives 0.25, exact in every precision: strict '>' keeps both boxes of each pair.
      // s = 5: k = 1 gives 1/5 and k = 4 gives 4/5, which float rounds up (0.2f = 0.200000003, 0.8f =
      // 0.800000012): held in float (fp32, fp16, bf16 boxes) the IoU exceeds the double threshold 0.2 / 0.8
      // and the second box is suppressed, as torchvision's CPU kernel does; held in double (fp64) it equals
      // the threshold and both are kept.
      for (std::int64_t i = 0; i < n / 2; ++i) {
        const bool fifths = cfg.threshold == 0.2 || cfg.threshold == 0.8;
        const double x = 10.0 * i, side = fifths ? 5 : 4;
        const double k = fifths ? (cfg.threshold == 0.2 ? 1 : 4) : (cfg.threshold == 0.25 ? 1 : 2);
        push_box(b, x, 0, x + side, side);
        push_box(b, x, 0, x + side, k);
      }
      break;
    case Layout::kTouching:
      for (std::int64_t i = 0; i < n; ++i) push_box(b, 8.0 * (i % 8), 8.0 * (i / 8), 8.0 * (i % 8) + 8, 8.0 * (i / 8) + 8);
      break;
    case Layout::kBoundary:
      // Pairs [0,0,100,100] and [s,0,100+s,100] shifted apart, IoU (100-s)/(100+s) = t for
      // s = 100(1-t)/(1+t), with t = threshold +- 1e-5 (alternating).
      for (std::int64_t i = 0; i < n / 2; ++i) {
        const double t = cfg.threshold + (i % 2 == 0 ? 1e-5 : -1e-5);
        const double s = 100.0 * (1 - t) / (1 + t), x = 300.0 * i;
        push_box(b, x, 0, x + 100, 100);
        push_box(b, x + s, 0, x + 100 + s, 100);
      }
      break;
    case Layout::kBoundaryChain:
      // Runs of 4 boxes, each shifted from the previous so that consecutive IoUs are threshold +- 1e-5.
      for (std::int64_t i = 0; i < n / 4; ++i) {
        double x = 1000.0 * i;
        for (int k = 0; k < 4; ++k) {
          push_box(b, x, 0, x + 100, 100);
          const double t = cfg.threshold + (((i + k) % 2 == 0) ? 1e-5 : -1e-5);
          x += 100.0 * (1 - t) / (1 + t);
        }
      }
      break;
    case Layout::kGreedyChain:
      // [0,0,10,10], [3,0,13,10], [6,0,16,10]: IoUs 70/130 (A,B), 70/130 (B,C), 40/160 (A,C). At 0.5 with
      // scores A > B > C, A suppresses B and C is kept (B, suppressed, does not suppress).
      for (std::int64_t i = 0; i < n / 3; ++i) {
        const double y = 20.0 * i;
        push_box(b, 0, y, 10, y + 10);
        push_box(b, 3, y, 13, y + 10);
        push_box(b, 6, y, 16, y + 10);
      }
      break;
    case Layout::kAreaOverflow:
      for (std::int64_t i = 0; i < n; ++i) {
        const double dx = static_cast<double>(randint(rng, -2, 2)), dy = static_cast<double>(randint(rng, -2, 2));
        push_box(b, 100 + dx, 100 + dy, 400 + dx, 400 + dy);
      }
      break;
    case Layout::kChains: {
      // Box p is element k = p / C of chain c = p % C: [2k, 10(c % 25)] + [8, 8], chains of a group of 25
      // side by side, groups shifted right past the longest chain. Consecutive elements overlap 6 x 8
      // (IoU 0.6), elements two apart 4 x 8 (IoU 1/3), three apart 2 x 8 (1/7), chains and groups not at all:
      // at 0.5, with scores falling along the chain, every other element is kept, each suppression decided
      // by the one before it, and each element of a chain is C positions after the previous one in rank.
      // Coordinates stay below 256 (exact in bf16) for the sizes used.
      const std::int64_t chains = std::max<std::int64_t>(1, cfg.clusters);
      const std::int64_t longest = (n + chains - 1) / chains;
      const double group_width = 2.0 * static_cast<double>(longest) + 10;
      for (std::int64_t p = 0; p < n; ++p) {
        const std::int64_t c = p % chains, k = p / chains;
        const double x = static_cast<double>(c / 25) * group_width + 2.0 * static_cast<double>(k);
        const double y = 10.0 * static_cast<double>(c % 25);
        push_box(b, x, y, x + 8, y + 8);
      }
      break;
    }
    case Layout::kNearlyIdentical:
      push_box(b, 10, 10, 50, 50);
      push_box(b, 10, 10, 50, 50.001);
      break;
    case Layout::kInverted:
    case Layout::kZeroArea:
    case Layout::kNaNBoxes:
    case Layout::kInfBoxes: {
      add_grid_boxes(b, cfg, n, rng, true);
      for (std::int64_t i = 0; i < n; i += 3) {
        double* p = b.boxes.data() + 4 * i;
        switch (cfg.layout) {
          case Layout::kInverted:
            if (i % 2 == 0) std::swap(p[0], p[2]);
            if (i % 5 != 0) std::swap(p[1], p[3]);
            break;
          case Layout::kZeroArea:
            p[2] = p[0];
            if (i % 2 == 0) p[3] = p[1];
            break;
          case Layout::kNaNBoxes: p[i % 4] = kNaN; break;
          case Layout::kInfBoxes: p[i % 4] = (i % 2 == 0 ? 1 : -1) * ((i % 4 < 2) ? -kInf : kInf); break;
          default: break;
        }
      }
      return b;
    }
    case Layout::kRandom:
      for (std::int64_t i = 0; i < n; ++i) {
        add_random_box(b, rng, uniform(rng, 0, 1344), uniform(rng, 0, 800), std::exp(uniform(rng, std::log(8.0), std::log(256.0))),
                       std::exp(uniform(rng, std::log(8.0), std::log(256.0))));
      }
      break;
    case Layout::kClustered: {
      const std::int64_t clusters = std::max<std::int64_t>(1, cfg.clusters);
      std::vector<std::array<double, 4>> objects;
      for (std::int64_t c = 0; c < clusters; ++c) {
        objects.push_back({uniform(rng, 0, 1344), uniform(rng, 0, 800), std::exp(uniform(rng, std::log(12.0), std::log(300.0))),
                           std::exp(uniform(rng, std::log(12.0), std::log(300.0)))});
      }
      for (std::int64_t i = 0; i < n; ++i) {
        const auto& o = objects[static_cast<std::size_t>(randint(rng, 0, clusters - 1))];
        add_random_box(b, rng, o[0] + o[2] * uniform(rng, -0.08, 0.08), o[1] + o[3] * uniform(rng, -0.08, 0.08),
                       o[2] * uniform(rng, 0.85, 1.18), o[3] * uniform(rng, 0.85, 1.18));
      }
      break;
    }
    case Layout::kLarge:
      for (std::int64_t i = 0; i < n; ++i) {
        const double e = cfg.large_extent;
        add_random_box(b, rng, uniform(rng, 0, e), uniform(rng, 0, e), uniform(rng, 0.02 * e, 0.2 * e), uniform(rng, 0.02 * e, 0.2 * e));
      }
      break;
  }
  if (cfg.coordinate_shift != 0) {
    for (double& v : b.boxes) v += cfg.coordinate_shift;
  }
  b.classes = draw_classes(cfg, static_cast<std::int64_t>(b.boxes.size() / 4), rng);
  return b;
}

std::vector<double> build_scores(const NmsCaseConfig& cfg, std::int64_t n, Rng& rng) {
  std::vector<double> s;
  switch (cfg.scores) {
    case Scores::kDistinct: return distinct_scores(n, rng);
    case Scores::kSorted:
    case Scores::kReversed:
      s = distinct_scores(n, rng);
      std::sort(s.begin(), s.end());
      if (cfg.scores == Scores::kSorted) std::reverse(s.begin(), s.end());
      return s;
    case Scores::kUniform:
      for (std::int64_t i = 0; i < n; ++i) s.push_back(uniform(rng, 0, 1));
      return s;
    case Scores::kEqual: return std::vector<double>(static_cast<std::size_t>(n), 0.5);
    case Scores::kFewLevels:
      for (std::int64_t i = 0; i < n; ++i) s.push_back(0.25 * static_cast<double>(randint(rng, 1, 3)));
      return s;
    case Scores::kNaNMixed:
      s = distinct_scores(n, rng);
      for (std::int64_t i = 0; i < n; i += 4) s[i] = kNaN;
      return s;
    case Scores::kSignedZeros:
      for (std::int64_t i = 0; i < n; ++i) s.push_back(i % 3 == 0 ? -0.0 : (i % 3 == 1 ? 0.0 : -0.25 * static_cast<double>(randint(rng, 1, 4))));
      return s;
    case Scores::kZeroAndOne:
      for (std::int64_t i = 0; i < n; ++i) s.push_back(i % 2 == 0 ? 0.0 : 1.0);
      return s;
  }
  return s;
}

NmsBoxes to_reference(const Tensors& in, bool batched) {
  NmsBoxes r;
  const at::Tensor boxes = in[0].contiguous(), scores = in[1].contiguous();
  r.boxes.assign(boxes.data_ptr<double>(), boxes.data_ptr<double>() + boxes.numel());
  r.scores.assign(scores.data_ptr<double>(), scores.data_ptr<double>() + scores.numel());
  if (batched) {
    const at::Tensor c = in[2].to(at::kLong).contiguous();
    r.classes.assign(c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel());
  }
  return r;
}

std::vector<std::int64_t> to_vector(const at::Tensor& keep) {
  const at::Tensor k = keep.to(at::kCPU).to(at::kLong).contiguous();
  return std::vector<std::int64_t>(k.data_ptr<std::int64_t>(), k.data_ptr<std::int64_t>() + k.numel());
}

std::string list_text(const std::vector<std::int64_t>& v, std::size_t from) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = from; i < v.size() && i < from + 8; ++i) os << (i > from ? ", " : "") << v[i];
  if (v.size() > from + 8) os << ", ...";
  os << ']';
  return os.str();
}

CompareResult judge(const NmsCaseConfig& cfg, bool batched, const Tensors& in, const Tensors& out, const Tensors& ref,
                    DType dtype) {
  CompareResult r;
  r.dtype = "int64";
  r.tolerance = {iou_tolerance(dtype), 0};
  const NmsBoxes boxes = to_reference(in, batched);
  const std::vector<std::int64_t> got = to_vector(out.at(0));
  r.numel = static_cast<std::int64_t>(got.size());
  r.shape = {r.numel};
  const double tol = iou_tolerance(dtype);
  if (out.at(0).scalar_type() != at::kLong) {
    r.outcome = Outcome::kMismatch;
    r.message = "keep must be int64; got " + std::string(c10::toString(out.at(0).scalar_type()));
    return r;
  }
  if (cfg.judge == Judge::kValidity) {
    const reference::NmsValidity v = reference::check_nms_validity(boxes, got, cfg.threshold, tol);
    r.mismatches = v.violations;
    std::ostringstream os;
    os << "validity (IoU tolerance " << tol << "): " << got.size() << " kept";
    if (!ref.empty()) os << " (the double-IoU reference: " << ref.at(0).numel() << ")";
    if (v.violations > 0) {
      r.outcome = Outcome::kMismatch;
      os << "; " << v.violations << " violation(s): ";
      for (std::size_t i = 0; i < v.reports.size(); ++i) os << (i ? "; " : "") << v.reports[i];
    }
    r.message = os.str();
    return r;
  }
  if (cfg.judge == Judge::kExact || cfg.judge == Judge::kExactTies) {
    const double margin = reference::nms_threshold_margin(boxes, cfg.threshold);
    const bool distinct = cfg.judge == Judge::kExactTies || reference::nms_scores_distinct(boxes);
    if (!distinct || !(margin > tol)) {
      std::ostringstream os;
      os << "the case is declared exact, but on these inputs the scores are "
         << (distinct ? (cfg.judge == Judge::kExactTies ? "allowed to tie" : "distinct") : "not distinct")
         << " and the smallest |IoU - threshold| is "
         << margin << " (must exceed " << tol << "): fix the case";
      r.outcome = Outcome::kError;
      r.message = os.str();
      return r;
    }
  }
  // The reference with the IoU held as the implementation holds it (float for fp32 / fp16 / bf16 boxes),
  // so that IoUs exactly at a threshold float cannot represent are decided as torchvision's CPU kernel
  // decides them (`ref` holds the double-IoU keep list; the validity judge above needs neither).
  const std::vector<std::int64_t> want = reference::nms_reference(
      boxes, cfg.threshold,
      dtype == DType::kFloat64 ? reference::NmsIouPrecision::kDouble : reference::NmsIouPrecision::kFloat);
  std::size_t first = 0;
  while (first < got.size() && first < want.size() && got[first] == want[first]) ++first;
  if (first == got.size() && first == want.size()) {
    r.message = "exact: " + std::to_string(got.size()) + " kept, equal to the reference";
    return r;
  }
  r.outcome = Outcome::kMismatch;
  r.mismatches = 1 + static_cast<std::int64_t>(std::max(got.size(), want.size()) - first - 1);
  r.worst_index = static_cast<std::int64_t>(first);
  const reference::NmsValidity v = reference::check_nms_validity(boxes, got, cfg.threshold, tol);
  std::ostringstream os;
  os << "exact: keep differs from the reference at position " << first << ": got " << list_text(got, first)
     << ", expected " << list_text(want, first) << " (" << got.size() << " vs " << want.size() << " kept); validity "
     << (v.violations == 0 ? "holds" : "fails: " + (v.reports.empty() ? std::string() : v.reports.front()));
  r.message = os.str();
  return r;
}

CaseData make_case(const NmsCaseConfig& cfg, bool batched, std::uint64_t seed) {
  Rng rng(seed);
  NmsCaseConfig c = cfg;
  if (batched && c.classes <= 0) c.classes = 3;
  if (!batched) c.classes = 0;
  Built b = build_boxes(c, rng);
  const std::int64_t n = static_cast<std::int64_t>(b.boxes.size() / 4);
  const std::vector<double> scores = build_scores(c, n, rng);
  CaseData d;
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  d.inputs.push_back(at::from_blob(b.boxes.data(), {n, 4}, f64).clone());
  d.inputs.push_back(at::from_blob(const_cast<double*>(scores.data()), {n}, f64).clone());
  if (batched) {
    at::Tensor cls = at::from_blob(b.classes.data(), {n}, at::TensorOptions().dtype(at::kLong)).clone();
    d.inputs.push_back(c.int32_idxs ? cls.to(at::kInt) : cls);
  }
  NmsParams params;
  params.iou_threshold = c.threshold;
  if (c.chunk_bytes > 0) params.mask_chunk_bytes = c.chunk_bytes;
  params.scan_removed_in_shared = !c.scan_in_global;
  const bool noncontiguous = c.noncontiguous;
  d.op_forward = [params, batched, noncontiguous](const Tensors& in) -> Tensors {
    at::Tensor boxes = in[0], scores = in[1];
    if (noncontiguous) {
      // boxes as columns 1..4 of a [N, 6] tensor, scores every other element of a [2N] tensor
      at::Tensor wide = at::zeros({boxes.size(0), 6}, boxes.options());
      wide.narrow(1, 1, 4).copy_(boxes);
      boxes = wide.narrow(1, 1, 4);
      at::Tensor spread = at::zeros({2 * scores.size(0)}, scores.options());
      spread.slice(0, 0, 2 * scores.size(0), 2).copy_(scores);
      scores = spread.slice(0, 0, 2 * scores.size(0), 2);
    }
    return {batched ? batched_nms_forward(boxes, scores, in[2], params) : nms_forward(boxes, scores, params)};
  };
  const double threshold = c.threshold;
  d.reference_forward = [threshold, batched](const Tensors& in) -> Tensors {
    const std::vector<std::int64_t> keep = reference::nms_reference(to_reference(in, batched), threshold);
    return {at::tensor(at::ArrayRef<std::int64_t>(keep), at::TensorOptions().dtype(at::kLong))};
  };
  d.judge_forward = [c, batched](const Tensors& in, const Tensors& out, const Tensors& ref, DType dtype) {
    return std::vector<CompareResult>{judge(c, batched, in, out, ref, dtype)};
  };
  d.gradcheck_skip_reason = "NMS has no gradient";
  return d;
}

struct NamedConfig {
  std::string name;
  NmsCaseConfig cfg;
};

// Cases shared by nms and batched_nms (batched_nms draws 3 classes unless the case says otherwise).
std::vector<NamedConfig> common_configs() {
  using L = Layout;
  using S = Scores;
  using J = Judge;
  std::vector<NamedConfig> v;
  auto add = [&](std::string name, NmsCaseConfig c) { v.push_back({std::move(name), c}); };
  NmsCaseConfig c;
  c = {}; c.n = 2; c.layout = L::kGrid; add("two_boxes", c);
  c = {}; c.n = 0; add("empty", c);
  c = {}; c.n = 1; add("single_box", c);
  c = {}; c.n = 64; add("grid_64_threshold_0_5", c);
  c = {}; c.n = 200; c.threshold = 0.3; add("grid_200_threshold_0_3", c);
  c = {}; c.n = 200; c.threshold = 0.7; add("grid_200_threshold_0_7", c);
  c = {}; c.n = 256; c.threshold = 0.9; add("grid_256_threshold_0_9", c);
  c = {}; c.n = 250; c.layout = L::kGridClustered; add("clustered_grid_250", c);
  c = {}; c.n = 250; c.layout = L::kGridClustered; c.threshold = 0.3; add("clustered_grid_250_threshold_0_3", c);
  // Threshold 0: any overlap of positive area suppresses; disjoint and touching pairs (IoU exactly 0 in
  // any precision: integer coordinates, zero overlap width) do not.
  c = {}; c.n = 200; c.layout = L::kGridClustered; c.threshold = 0.0; c.judge = J::kExactByConstruction;
  add("clustered_grid_threshold_0", c);
  c = {}; c.n = 64; c.layout = L::kTouching; c.threshold = 0.0; c.judge = J::kExactByConstruction;
  add("touching_threshold_0", c);
  // Threshold 1: no IoU exceeds 1 (identical boxes give exactly 1 in any precision): all kept.
  c = {}; c.n = 40; c.layout = L::kIdentical; c.threshold = 1.0; c.judge = J::kExactByConstruction;
  add("identical_threshold_1", c);
  c = {}; c.n = 150; c.layout = L::kDisjoint; add("disjoint_all_kept", c);
  // Identical boxes: IoU exactly 1 in any precision; only the best is kept.
  c = {}; c.n = 50; c.layout = L::kIdentical; c.judge = J::kExactByConstruction; c.classes = 1;  // batched_nms: one class, so the regression keeps its meaning
  add("identical_boxes", c);
  c = {}; c.n = 40; c.layout = L::kAtThreshold; c.threshold = 0.5; c.judge = J::kExactByConstruction;
  add("iou_exactly_threshold_0_5", c);
  c = {}; c.n = 40; c.layout = L::kAtThreshold; c.threshold = 0.25; c.judge = J::kExactByConstruction;
  add("iou_exactly_threshold_0_25", c);
  // IoU exactly 1/5 and 4/5 of integer boxes: float's IoU (0.2f, 0.8f) is above the double threshold, so
  // fp32 / fp16 / bf16 boxes suppress and fp64 boxes keep, as torchvision's CPU kernel decides.
  c = {}; c.n = 40; c.layout = L::kAtThreshold; c.threshold = 0.2; c.judge = J::kExactByConstruction;
  add("iou_exactly_one_fifth_threshold_0_2", c);
  c = {}; c.n = 40; c.layout = L::kAtThreshold; c.threshold = 0.8; c.judge = J::kExactByConstruction;
  add("iou_exactly_four_fifths_threshold_0_8", c);
  // Thresholds outside [0, 1], as torchvision takes them. Below 0 every pair with a defined IoU (0 for
  // disjoint or zero-area pairs, in any precision) suppresses, and a NaN IoU (a NaN coordinate, 0 / 0 of
  // two zero-area boxes) never does; above 1 or NaN nothing is suppressed.
  c = {}; c.n = 120; c.layout = L::kGridClustered; c.threshold = -0.5; c.judge = J::kExactByConstruction;
  add("threshold_negative", c);
  c = {}; c.n = 120; c.layout = L::kZeroArea; c.threshold = -0.5; c.judge = J::kExactByConstruction;
  add("zero_area_boxes_threshold_negative", c);
  c = {}; c.n = 120; c.layout = L::kNaNBoxes; c.threshold = -0.5; c.judge = J::kExactByConstruction;
  add("nan_coordinates_threshold_negative", c);
  c = {}; c.n = 120; c.layout = L::kGridClustered; c.threshold = 1.5; c.judge = J::kExactByConstruction;
  add("threshold_above_one", c);
  c = {}; c.n = 120; c.layout = L::kGridClustered; c.threshold = std::numeric_limits<double>::quiet_NaN();
  c.judge = J::kExactByConstruction;
  add("threshold_nan", c);
  c = {}; c.n = 40; c.layout = L::kBoundary; c.judge = J::kValidity; add("boundary_plus_minus_1e5", c);
  c = {}; c.n = 40; c.layout = L::kBoundary; c.threshold = 0.7; c.judge = J::kValidity;
  add("boundary_plus_minus_1e5_threshold_0_7", c);
  c = {}; c.n = 40; c.layout = L::kBoundaryChain; c.judge = J::kValidity; add("boundary_chains", c);
  c = {}; c.n = 30; c.layout = L::kGreedyChain; c.scores = S::kSorted; add("greedy_chain_suppressed_does_not_suppress", c);
  c = {}; c.n = 200; c.layout = L::kGridClustered; c.scores = S::kEqual; c.judge = J::kValidity; add("equal_scores", c);
  c = {}; c.n = 30; c.layout = L::kIdentical; c.scores = S::kEqual; c.judge = J::kValidity;
  c.classes = 1;  // batched_nms: one class, so the regression keeps its meaning
  add("identical_boxes_equal_scores", c);
  c = {}; c.n = 300; c.layout = L::kRandom; c.scores = S::kFewLevels; c.judge = J::kValidity; add("few_score_levels", c);
  // OPS.md: fp16 areas overflowed (300 x 300 > 65504) and 37 boxes were kept instead of 1. Jitter of
  // +-2 keeps every IoU above 0.97.
  c = {}; c.n = 38; c.layout = L::kAreaOverflow; c.classes = 1;  // batched_nms: one class, so the regression keeps its meaning
  add("fp16_area_overflow_38_boxes", c);
  // OPS.md: two nearly identical boxes with scores 0 and 1 were both kept. In fp16 / bf16 the two boxes
  // round to the same box (IoU exactly 1); in fp32 / fp64 IoU is 0.99998.
  c = {}; c.n = 2; c.layout = L::kNearlyIdentical; c.scores = S::kZeroAndOne; c.judge = J::kExactByConstruction;
  c.classes = 1;  // batched_nms: one class, so the regression keeps its meaning
  add("nearly_identical_scores_0_and_1", c);
  c = {}; c.n = 120; c.layout = L::kInverted; add("inverted_boxes", c);
  c = {}; c.n = 120; c.layout = L::kZeroArea; add("zero_area_boxes", c);
  c = {}; c.n = 120; c.layout = L::kNaNBoxes; add("nan_coordinates", c);
  c = {}; c.n = 120; c.layout = L::kInfBoxes; add("inf_coordinates", c);
  c = {}; c.n = 120; c.layout = L::kGridClustered; c.scores = S::kNaNMixed; c.judge = J::kValidity; add("nan_scores", c);
  c = {}; c.n = 120; c.layout = L::kGridClustered; c.scores = S::kSignedZeros; c.judge = J::kValidity;
  add("signed_zero_and_negative_scores", c);
  c = {}; c.n = 150; c.layout = L::kGridClustered; c.coordinate_shift = -128; add("negative_coordinates", c);
  c = {}; c.n = 300; c.layout = L::kLarge; c.large_extent = 1e4; c.judge = J::kValidity; add("coordinates_to_1e4", c);
  c = {}; c.n = 300; c.layout = L::kLarge; c.large_extent = 1e5; c.judge = J::kValidity;
  add("coordinates_to_1e5_inf_in_fp16", c);
  c = {}; c.n = 63; add("grid_63_boxes", c);
  c = {}; c.n = 65; add("grid_65_boxes", c);
  c = {}; c.n = 129; c.layout = L::kGridClustered; add("clustered_grid_129_boxes", c);
  c = {}; c.n = 200; c.layout = L::kGridClustered; c.scores = S::kSorted; add("scores_already_sorted", c);
  c = {}; c.n = 200; c.layout = L::kGridClustered; c.scores = S::kReversed; add("scores_increasing", c);
  c = {}; c.n = 150; c.layout = L::kGridClustered; c.noncontiguous = true; add("noncontiguous_inputs", c);
  // The CUDA mask in chunks of one 64-row block (every chunk boundary exercised).
  c = {}; c.n = 300; c.layout = L::kGridClustered; c.chunk_bytes = 1; add("chunked_one_row_block_per_chunk", c);
  c = {}; c.n = 3000; c.layout = L::kClustered; c.clusters = 200; c.scores = S::kUniform; c.chunk_bytes = 8 << 10;
  c.judge = J::kValidity; add("chunked_3000_boxes", c);
  // The CUDA scan resolves a 64-row block by visiting only its kept rows that suppress something in the
  // block, and removes later rows through list entries: greedy chains (A suppresses B, B would suppress C but
  // is removed, so C is kept), within a row block, across row blocks and across chunks of one row block.
  c = {}; c.n = 64; c.layout = L::kChains; c.clusters = 1; c.scores = S::kSorted;
  add("chain_of_64_in_one_row_block", c);
  c = {}; c.n = 120; c.layout = L::kChains; c.clusters = 1; c.scores = S::kSorted;
  add("chain_of_120_across_row_blocks", c);
  c = {}; c.n = 120; c.layout = L::kChains; c.clusters = 1; c.scores = S::kReversed;
  add("chain_of_120_scores_increasing", c);
  c = {}; c.n = 200; c.layout = L::kChains; c.clusters = 2; c.scores = S::kSorted; add("chains_2_of_100", c);
  c = {}; c.n = 1000; c.layout = L::kChains; c.clusters = 37; c.scores = S::kSorted; add("chains_37_interleaved", c);
  // Element k of each of 64 chains in row block k: every suppression crosses a row block (and, one row
  // block per chunk, a chunk).
  c = {}; c.n = 2048; c.layout = L::kChains; c.clusters = 64; c.scores = S::kSorted; c.chunk_bytes = 1;
  add("chains_64_interleaved_chunked", c);
  c = {}; c.n = 2047; c.layout = L::kChains; c.clusters = 64; c.scores = S::kSorted; c.chunk_bytes = 1;
  add("chains_64_interleaved_2047_chunked", c);
  c = {}; c.n = 1000; c.layout = L::kChains; c.clusters = 37; c.scores = S::kDistinct; c.chunk_bytes = 1;
  add("chains_37_random_scores_chunked", c);
  c = {}; c.n = 2048; c.layout = L::kChains; c.clusters = 64; c.scores = S::kSorted; c.scan_in_global = true;
  add("chains_64_interleaved_scan_in_global_memory", c);
  // Row-block edges: N = 63, 64, 65, 127, 128 (129: clustered_grid_129_boxes) with suppression.
  c = {}; c.n = 63; c.layout = L::kGridClustered; add("clustered_grid_63_boxes", c);
  c = {}; c.n = 64; c.layout = L::kGridClustered; add("clustered_grid_64_boxes", c);
  c = {}; c.n = 65; c.layout = L::kGridClustered; add("clustered_grid_65_boxes", c);
  c = {}; c.n = 127; c.layout = L::kGridClustered; add("clustered_grid_127_boxes", c);
  c = {}; c.n = 128; c.layout = L::kGridClustered; add("clustered_grid_128_boxes", c);
  c = {}; c.n = 129; c.layout = L::kGridClustered; c.chunk_bytes = 1; add("clustered_grid_129_boxes_chunked", c);
  // Identical boxes (IoU exactly 1): only the first is kept. 3000 of them give row block 0 more list entries
  // (64 x 46) than the scan stages, so the rest are read from global memory.
  c = {}; c.n = 129; c.layout = L::kIdentical; c.judge = J::kExactByConstruction; c.classes = 1;
  add("identical_boxes_129", c);
  c = {}; c.n = 3000; c.layout = L::kIdentical; c.judge = J::kExactByConstruction; c.classes = 1;
  add("identical_boxes_3000", c);
  c = {}; c.n = 3000; c.layout = L::kIdentical; c.judge = J::kExactByConstruction; c.classes = 1; c.scan_in_global = true;
  add("identical_boxes_3000_scan_in_global_memory", c);
  c = {}; c.n = 1000; c.layout = L::kIdentical; c.judge = J::kExactByConstruction; c.classes = 1; c.chunk_bytes = 1;
  add("identical_boxes_1000_chunked", c);
  c = {}; c.n = 1000; c.layout = L::kDisjoint; c.chunk_bytes = 1; add("disjoint_1000_all_kept_chunked", c);
  // Ties ranked in index order (the definition's stable sort), judged exactly against the reference.
  c = {}; c.n = 300; c.layout = L::kGridClustered; c.scores = S::kEqual; c.judge = J::kExactTies;
  add("equal_scores_exact_index_order", c);
  c = {}; c.n = 1024; c.layout = L::kChains; c.clusters = 64; c.scores = S::kEqual; c.judge = J::kExactTies;
  c.chunk_bytes = 1; add("equal_scores_chains_chunked", c);
  c = {}; c.n = 300; c.layout = L::kGridClustered; c.scores = S::kFewLevels; c.judge = J::kExactTies;
  add("few_score_levels_exact_index_order", c);
  c = {}; c.n = 300; c.layout = L::kGridClustered; c.scores = S::kNaNMixed; c.judge = J::kExactTies; c.chunk_bytes = 1;
  add("nan_scores_first_exact_chunked", c);
  c = {}; c.n = 300; c.layout = L::kGridClustered; c.scores = S::kSignedZeros; c.judge = J::kExactTies;
  add("signed_zero_scores_exact_index_order", c);
  c = {}; c.n = 300; c.layout = L::kNaNBoxes; c.chunk_bytes = 1; add("nan_coordinates_chunked", c);
  c = {}; c.n = 3000; c.layout = L::kClustered; c.clusters = 200; c.scores = S::kUniform; c.chunk_bytes = 8 << 10;
  c.scan_in_global = true; c.judge = J::kValidity; add("chunked_3000_boxes_scan_in_global_memory", c);
  c = {}; c.n = 2000; c.layout = L::kRandom; c.scores = S::kUniform; c.judge = J::kValidity; add("random_2000", c);
  c = {}; c.n = 5000; c.layout = L::kClustered; c.clusters = 300; c.threshold = 0.7; c.scores = S::kUniform;
  c.judge = J::kValidity; add("clustered_5000_threshold_0_7", c);
  c = {}; c.n = 20000; c.layout = L::kClustered; c.clusters = 800; c.scores = S::kUniform; c.judge = J::kValidity;
  add("clustered_20000", c);
  // 100,000 boxes (torchvision's whole mask would take 1.25 GB): 1000 objects with 100 proposals each.
  c = {}; c.n = 100000; c.layout = L::kClustered; c.clusters = 1000; c.scores = S::kUniform; c.judge = J::kValidity;
  add("clustered_100000", c);
  return v;
}

std::vector<NamedConfig> batched_only_configs() {
  using L = Layout;
  using J = Judge;
  std::vector<NamedConfig> v;
  auto add = [&](std::string name, NmsCaseConfig c) { v.push_back({std::move(name), c}); };
  NmsCaseConfig c;
  c = {}; c.n = 256; c.classes = 80; add("grid_256_80_classes", c);
  c = {}; c.n = 200; c.layout = L::kGridClustered; c.classes = 1; add("one_class", c);
  c = {}; c.n = 200; c.layout = L::kGridClustered; c.classes = 5; c.class_base = -7; add("negative_class_ids", c);
  c = {}; c.n = 200; c.layout = L::kGridClustered; c.classes = 4; c.class_base = std::int64_t{1} << 40;
  add("class_ids_beyond_int32", c);
  c = {}; c.n = 200; c.layout = L::kGridClustered; c.classes = 6; c.int32_idxs = true; add("int32_idxs", c);
  // Identical boxes, a different class each: all kept.
  c = {}; c.n = 50; c.layout = L::kIdentical; c.classes = 1000000; c.judge = J::kValidity; add("identical_boxes_many_classes", c);
  // The coordinate-offset trick adds class * (max coordinate + 1) to the boxes: ~1e5 for 80 classes of
  // an 800 x 1344 image, far past fp16's precision (and wrong for negative coordinates). Not used here.
  c = {}; c.n = 4000; c.layout = L::kClustered; c.clusters = 300; c.classes = 80; c.scores = Scores::kUniform;
  c.judge = J::kValidity; add("image_boxes_80_classes", c);
  c = {}; c.n = 4000; c.layout = L::kClustered; c.clusters = 300; c.classes = 80; c.coordinate_shift = -700;
  c.scores = Scores::kUniform; c.judge = J::kValidity; add("negative_image_boxes_80_classes", c);
  c = {}; c.n = 20000; c.layout = L::kClustered; c.clusters = 1000; c.classes = 80; c.scores = Scores::kUniform;
  c.judge = J::kValidity; add("lvis_like_20000_80_classes", c);
  return v;
}

at::Tensor two_boxes(const at::Device& d) {
  return at::tensor({0.0f, 0.0f, 10.0f, 10.0f, 1.0f, 1.0f, 11.0f, 11.0f}, at::TensorOptions().dtype(at::kFloat)).view({2, 4}).to(d);
}
at::Tensor two_scores(const at::Device& d) { return at::tensor({0.5f, 0.9f}, at::TensorOptions().dtype(at::kFloat)).to(d); }
at::Tensor two_idxs(const at::Device& d) { return at::zeros({2}, at::TensorOptions().dtype(at::kLong)).to(d); }
using kit::other_device;
NmsParams with_threshold(double t) {
  NmsParams p;
  p.iou_threshold = t;
  return p;
}

std::vector<BadInputCase> bad_inputs(bool batched) {
  using Call = std::function<void(const at::Device&)>;
  std::vector<BadInputCase> bad;
  auto run = [batched](const at::Tensor& b, const at::Tensor& s, const at::Tensor& i, const NmsParams& p) {
    if (batched) {
      batched_nms_forward(b, s, i, p);
    } else {
      nms_forward(b, s, p);
    }
  };
  auto add = [&](std::string name, Call call, std::vector<std::string> words) {
    bad.push_back({std::move(name), std::move(call), std::move(words)});
  };
  const NmsParams p = with_threshold(0.5);
  add("boxes_five_columns", [=](const at::Device& d) { run(at::zeros({2, 5}, two_boxes(d).options()), two_scores(d), two_idxs(d), p); },
      {"boxes", "[N, 4]", "[2, 5]"});
  add("boxes_one_dimensional", [=](const at::Device& d) { run(two_boxes(d).view({-1}), two_scores(d), two_idxs(d), p); },
      {"boxes", "[N, 4]", "[8]"});
  add("scores_wrong_length", [=](const at::Device& d) { run(two_boxes(d), at::ones({3}, two_scores(d).options()), two_idxs(d), p); },
      {"scores", "[N]", "N = 2", "[3]"});
  add("scores_two_dimensional", [=](const at::Device& d) { run(two_boxes(d), two_scores(d).view({2, 1}), two_idxs(d), p); },
      {"scores", "1-D", "[2, 1]"});
  add("integer_boxes", [=](const at::Device& d) { run(two_boxes(d).to(at::kInt), two_scores(d), two_idxs(d), p); },
      {"boxes", "float64, float32, float16 or bfloat16"});
  add("integer_scores", [=](const at::Device& d) { run(two_boxes(d), two_scores(d).to(at::kLong), two_idxs(d), p); },
      {"scores", "float64, float32, float16 or bfloat16"});
  add("scores_on_other_device", [=](const at::Device& d) { run(two_boxes(d), other_device(two_scores(d), d), two_idxs(d), p); },
      {"boxes and scores", "same device"});
  if (batched) {
    add("idxs_wrong_length", [=](const at::Device& d) { run(two_boxes(d), two_scores(d), at::zeros({5}, two_idxs(d).options()), p); },
        {"idxs", "[N]", "N = 2", "[5]"});
    add("idxs_on_other_device", [=](const at::Device& d) { run(two_boxes(d), two_scores(d), other_device(two_idxs(d), d), p); },
        {"boxes and idxs", "same device"});
  }
  return bad;
}

// Benchmark cases (docs/benchmarks.md): MEASURE.md's NMS sizes at IoU 0.5 (1k / 5k / 20k / 100k boxes),
// an RPN level (2000 proposals at IoU 0.7) and, for batched_nms, 20k boxes of 80 classes (LVIS-like final
// NMS). Boxes are bench_image_boxes (sizes 16..640 px in an 800 x 1344 image); scores uniform in [0, 1).
std::vector<harness::BenchCase> nms_benchmarks(bool batched) {
  struct Size {
    const char* name;
    std::int64_t n;
    double threshold;
    std::int64_t classes;
  };
  const std::vector<Size> sizes =
      batched ? std::vector<Size>{{"boxes_5000_80_classes", 5000, 0.5, 80}, {"boxes_20000_80_classes", 20000, 0.5, 80}}
              : std::vector<Size>{{"rpn_2000_iou_0_7", 2000, 0.7, 0},
                                  {"boxes_1000", 1000, 0.5, 0},
                                  {"boxes_5000", 5000, 0.5, 0},
                                  {"boxes_20000", 20000, 0.5, 0},
                                  {"boxes_100000", 100000, 0.5, 0}};
  std::vector<harness::BenchCase> out;
  std::uint64_t seed = batched ? 9601 : 9501;
  for (const Size& z : sizes) {
    const std::uint64_t s = seed += 10;
    auto make = [z, s, batched](DType dtype) {
      const at::Tensor boxes = harness::bench_to_cuda(harness::bench_image_boxes(z.n, s), dtype);
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(s + 1);
      const at::Tensor scores = harness::bench_to_cuda(at::rand({z.n}, gen, at::TensorOptions().dtype(at::kDouble)), dtype);
      const at::Tensor idxs =
          at::randint(z.classes > 0 ? z.classes : 1, {z.n}, gen, at::TensorOptions().dtype(at::kLong)).cuda();
      NmsParams params;
      params.iou_threshold = z.threshold;
      const at::Tensor keep = batched ? batched_nms_forward(boxes, scores, idxs, params) : nms_forward(boxes, scores, params);
      harness::BenchInstance inst;
      inst.forward = [boxes, scores, idxs, params, batched] {
        (void)(batched ? batched_nms_forward(boxes, scores, idxs, params) : nms_forward(boxes, scores, params));
      };
      inst.bytes_forward = kit::bench_bytes({boxes, scores, keep, batched ? idxs : at::Tensor()});
      return inst;
    };
    out.push_back(kit::bench_case(z.name,
                                  "boxes[" + std::to_string(z.n) + ",4] IoU " + std::to_string(z.threshold).substr(0, 3) +
                                      (batched ? ", " + std::to_string(z.classes) + " classes" : std::string()),
                                  "boxes + scores (+ idxs) read once, the keep list (int64) written once", make));
  }
  return out;
}

OpSpec make_spec(bool batched) {
  OpSpec spec;
  spec.name = batched ? "batched_nms" : "nms";
  std::uint64_t seed = batched ? 95000 : 90000;
  std::vector<NamedConfig> configs = common_configs();
  if (batched) {
    const std::vector<NamedConfig> extra = batched_only_configs();
    configs.insert(configs.end(), extra.begin(), extra.end());
  }
  for (const NamedConfig& nc : configs) {
    const NmsCaseConfig cfg = nc.cfg;
    spec.cases.push_back(OpCase{nc.name, ++seed, [cfg, batched](std::uint64_t s) { return make_case(cfg, batched, s); }, {}});
  }
  spec.bad_inputs = bad_inputs(batched);
  spec.has_backward = false;
  spec.valid_call = [batched](const at::Device& d) {
    // [0,0,10,10] and [1,1,11,11] (IoU 81/119) with scores 0.5 and 0.9: only box 1 is kept.
    const at::Tensor keep = batched ? batched_nms_forward(two_boxes(d), two_scores(d), two_idxs(d), with_threshold(0.5))
                                    : nms_forward(two_boxes(d), two_scores(d), with_threshold(0.5));
    const std::vector<std::int64_t> k = to_vector(keep);
    TORCH_CHECK(k.size() == 1 && k[0] == 1, "nms: a valid call after the bad one returned ", list_text(k, 0),
                ", expected [1]");
  };
  spec.determinism.backward_cpu = spec.determinism.backward_cuda = true;
  spec.determinism.note =
      "forward only. CUDA: a stable radix sort, then mask words each computed by one thread and one sequential "
      "scan; list entries are appended in any order, but they are only OR-ed, so the keep list is the same every run";
  spec.benchmarks = nms_benchmarks(batched);
  return spec;
}

OpSpec nms_spec() { return make_spec(false); }
OpSpec batched_nms_spec() { return make_spec(true); }

DETOPS_REGISTER_OP_SPEC(nms_spec);
DETOPS_REGISTER_OP_SPEC(batched_nms_spec);

}  // namespace
}  // namespace detops
