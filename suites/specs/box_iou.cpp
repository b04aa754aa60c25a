// The box IoU family's op specs: the four pairwise ops share one case generator, the four element-wise
// losses another (forward and backward both). Seeded cases (the OPS.md regression cases among
// them), how to run the op and the reference, bad inputs, determinism and tolerances.
#include "kit/spec_prelude.h"

#include "box_iou/box_iou_torch.h"
#include "detops/reference/box_iou_reference.h"
#include "kit/box_cases.h"
#include "kit/fd_rows.h"
#include "kit/feature_cases.h"
#include "kit/half_accumulation.h"

namespace detops {
namespace {

using kit::col;
using kit::from_center_size;
using kit::integer_boxes;
using kit::mixed_degenerate_boxes;
using kit::overlapping_pairs;
using kit::random_boxes;
using kit::uniform;
using kit::with_columns;

// ---------------------------------------------------------------------------------------------------
// Pairwise ops: boxes1 [N, 4] x boxes2 [M, 4] -> [N, M].

enum class PairLayout {
  kRandom, kIdenticalSets, kDisjoint, kNestedAndContaining, kTouchingX, kTouchingY, kTouchingCorner, kSharedEdges,
  kInvertedX, kInvertedY, kInvertedBoth, kZeroWidth, kZeroHeight, kPoints, kIdenticalZeroArea, kMixedDegenerate,
  kNegative, kStraddlingZero, kLarge1e4, kLarge1e6, kSmall, kNaN, kInf, kAnchorsVsGroundTruth, kExtremeAspect,
  kSameCenters, kIntegerGrid, kNearlyIdentical,
};

struct PairwiseCaseConfig {
  PairLayout layout = PairLayout::kRandom;
  std::int64_t n = 7, m = 9;  // layouts that pair boxes2[i] with boxes1[i] use m = n (or 2n)
  double eps = 1e-7;
  bool noncontiguous = false;
  std::vector<std::int64_t> lead1, lead2;  // leading (batch) dimensions of boxes1 and boxes2 (random layout)
  bool one_box = false;                    // boxes1 as one box [4] (n = 1)
  bool stride0_grad = false;
  bool defined = false;                    // DetOps' degenerate-box rule (default: torchvision's quotients)
};

std::pair<at::Tensor, at::Tensor> make_pairwise_boxes(const PairwiseCaseConfig& cfg, at::Generator& gen) {
  const std::int64_t n = cfg.n, m = cfg.m;
  switch (cfg.layout) {
    case PairLayout::kRandom: return {random_boxes(gen, n, 0, 100, 5, 40), random_boxes(gen, m, 0, 100, 5, 40)};
    case PairLayout::kIdenticalSets: {
      const at::Tensor b = random_boxes(gen, n, 0, 100, 5, 40);
      return {b, b.clone()};
    }
    case PairLayout::kDisjoint: {  // boxes2 all lie right of x = 880, boxes1 left of x = 125
      at::Tensor b2 = random_boxes(gen, m, 0, 100, 5, 40);
      b2.select(1, 0).add_(1000);
      b2.select(1, 2).add_(1000);
      return {random_boxes(gen, n, 0, 100, 5, 40), b2};
    }
    case PairLayout::kNestedAndContaining: {  // boxes2[i] inside boxes1[i], boxes2[n + i] around it
      const at::Tensor b = random_boxes(gen, n, 0, 100, 10, 40);
      const at::Tensor cx = (col(b, 0) + col(b, 2)) / 2, cy = (col(b, 1) + col(b, 3)) / 2;
      const at::Tensor w = col(b, 2) - col(b, 0), h = col(b, 3) - col(b, 1);
      const at::Tensor inner = from_center_size(cx, cy, w * uniform(gen, n, 0.2, 0.9), h * uniform(gen, n, 0.2, 0.9));
      const at::Tensor outer = from_center_size(cx, cy, w * uniform(gen, n, 1.1, 2.0), h * uniform(gen, n, 1.1, 2.0));
      return {b, at::cat({inner, outer}, 0)};
    }
    case PairLayout::kTouchingX:
    case PairLayout::kTouchingY:
    case PairLayout::kTouchingCorner: {  // boxes2[i] starts exactly where boxes1[i] ends
      const at::Tensor b = integer_boxes(gen, n, 48, 2, 12);
      const at::Tensor other = integer_boxes(gen, n, 48, 2, 12);
      at::Tensor x1 = col(other, 0), y1 = col(other, 1);
      if (cfg.layout != PairLayout::kTouchingY) x1 = col(b, 2);
      if (cfg.layout != PairLayout::kTouchingX) y1 = col(b, 3);
      if (cfg.layout == PairLayout::kTouchingX) y1 = col(b, 1);
      if (cfg.layout == PairLayout::kTouchingY) x1 = col(b, 0);
      const at::Tensor w = col(other, 2) - col(other, 0), h = col(other, 3) - col(other, 1);
      return {b, with_columns(x1, y1, x1 + w, y1 + h)};
    }
    case PairLayout::kSharedEdges: {  // boxes2[i] shares x1 and y2 with boxes1[i]: ties in max / min
      const at::Tensor b = integer_boxes(gen, n, 48, 2, 12);
      const at::Tensor other = integer_boxes(gen, n, 48, 2, 12);
      return {b, with_columns(col(b, 0), col(other, 1).minimum(col(b, 3) - 1), col(other, 2).maximum(col(b, 0) + 1), col(b, 3))};
    }
    case PairLayout::kInvertedX:
    case PairLayout::kInvertedY:
    case PairLayout::kInvertedBoth: {
      const at::Tensor b2 = random_boxes(gen, m, 0, 100, 5, 40);
      const bool x = cfg.layout != PairLayout::kInvertedY, y = cfg.layout != PairLayout::kInvertedX;
      const at::Tensor inv = with_columns(col(b2, x ? 2 : 0), col(b2, y ? 3 : 1), col(b2, x ? 0 : 2), col(b2, y ? 1 : 3));
      return {random_boxes(gen, n, 0, 100, 5, 40), inv};
    }
    case PairLayout::kZeroWidth:
    case PairLayout::kZeroHeight: {
      const at::Tensor b2 = random_boxes(gen, m, 0, 100, 5, 40);
      const bool w = cfg.layout == PairLayout::kZeroWidth;
      return {random_boxes(gen, n, 0, 100, 5, 40),
              with_columns(col(b2, 0), col(b2, 1), w ? col(b2, 0) : col(b2, 2), w ? col(b2, 3) : col(b2, 1))};
    }
    case PairLayout::kPoints: {  // zero area on both sides: torchvision's 0 / 0
      const at::Tensor p1 = integer_boxes(gen, n, 16, 1, 1), p2 = integer_boxes(gen, m, 16, 1, 1);
      return {with_columns(col(p1, 0), col(p1, 1), col(p1, 0), col(p1, 1)),
              with_columns(col(p2, 0), col(p2, 1), col(p2, 0), col(p2, 1))};
    }
    case PairLayout::kIdenticalZeroArea: {  // points and zero-width / zero-height lines, paired with themselves
      const at::Tensor b = integer_boxes(gen, n, 16, 1, 6);
      at::Tensor x2 = col(b, 2).clone(), y2 = col(b, 3).clone();
      for (std::int64_t i = 0; i < n; ++i) {
        if (i % 3 != 1) x2[i] = b[i][0];
        if (i % 3 != 2) y2[i] = b[i][1];
      }
      const at::Tensor z = with_columns(col(b, 0), col(b, 1), x2, y2);
      return {z, z.clone()};
    }
    case PairLayout::kMixedDegenerate: return {mixed_degenerate_boxes(gen, n), mixed_degenerate_boxes(gen, m)};
    case PairLayout::kNegative: return {random_boxes(gen, n, -200, -50, 5, 40), random_boxes(gen, m, -200, -50, 5, 40)};
    case PairLayout::kStraddlingZero: return {random_boxes(gen, n, -20, 20, 5, 40), random_boxes(gen, m, -20, 20, 5, 40)};
    case PairLayout::kLarge1e4:  // fp16-representable coordinates (< 52,000) whose areas (up to 9e6) overflow fp16
      return {random_boxes(gen, n, 1e4, 5e4, 300, 3000), random_boxes(gen, m, 1e4, 5e4, 300, 3000)};
    case PairLayout::kLarge1e6:  // fp32 territory; fp16 rounds these to inf (the non-finite rule)
      return {random_boxes(gen, n, 1e6, 1.05e6, 1e3, 2e4), random_boxes(gen, m, 1e6, 1.05e6, 1e3, 2e4)};
    case PairLayout::kSmall: return {random_boxes(gen, n, 0, 1, 0.05, 0.4), random_boxes(gen, m, 0, 1, 0.05, 0.4)};
    case PairLayout::kNaN:
    case PairLayout::kInf: {
      at::Tensor b1 = random_boxes(gen, n, 0, 100, 5, 40), b2 = random_boxes(gen, m, 0, 100, 5, 40);
      const double v = cfg.layout == PairLayout::kNaN ? kNaN : kInf;
      b1[0][0] = -v;
      b1[2 % n][2] = v;
      b2[1 % m][3] = v;
      b2[3 % m][1] = -v;
      return {b1, b2};
    }
    case PairLayout::kAnchorsVsGroundTruth: {  // RPN-style anchors (stride 64, 3 ratios) on 800 x 1344
      std::vector<at::Tensor> anchors;
      for (double ratio : {0.5, 1.0, 2.0}) {
        const at::Tensor ys = at::arange(0, 800, 64, f64()) + 32, xs = at::arange(0, 1344, 64, f64()) + 32;
        const std::vector<at::Tensor> grid = at::meshgrid({ys, xs}, "ij");
        const double w = 128 * std::sqrt(1 / ratio), h = 128 * std::sqrt(ratio);
        const at::Tensor cy = grid[0].reshape(-1), cx = grid[1].reshape(-1);
        anchors.push_back(from_center_size(cx, cy, at::full_like(cx, w), at::full_like(cy, h)));
      }
      const at::Tensor cx = uniform(gen, m, 0, 1344), cy = uniform(gen, m, 0, 800);
      return {at::cat(anchors, 0), from_center_size(cx, cy, uniform(gen, m, 20, 400), uniform(gen, m, 20, 400))};
    }
    case PairLayout::kExtremeAspect: {  // w / h from 1/200 to 200
      const at::Tensor c1 = uniform(gen, n, 0, 100), c2 = uniform(gen, n, 0, 100);
      const at::Tensor long_side = uniform(gen, n, 50, 200), short_side = uniform(gen, n, 0.25, 1);
      const at::Tensor wide = from_center_size(c1, c2, long_side, short_side);
      const at::Tensor d1 = uniform(gen, m, 0, 100), d2 = uniform(gen, m, 0, 100);
      const at::Tensor tall = from_center_size(d1, d2, uniform(gen, m, 0.25, 1), uniform(gen, m, 50, 200));
      return {wide, tall};
    }
    case PairLayout::kSameCenters: {  // DIoU's distance term 0 for the paired boxes
      const at::Tensor b = random_boxes(gen, n, 0, 100, 5, 40);
      const at::Tensor cx = (col(b, 0) + col(b, 2)) / 2, cy = (col(b, 1) + col(b, 3)) / 2;
      return {b, from_center_size(cx, cy, uniform(gen, n, 5, 40), uniform(gen, n, 5, 40))};
    }
    case PairLayout::kIntegerGrid: return {integer_boxes(gen, n, 16, 1, 6), integer_boxes(gen, m, 16, 1, 6)};
    case PairLayout::kNearlyIdentical: {
      const at::Tensor b = random_boxes(gen, n, 0, 100, 5, 40);
      return {b, b + (at::rand({n, 4}, gen, f64()) * 2 - 1) * 1e-2};
    }
  }
  throw std::invalid_argument("make_pairwise_boxes: unknown layout");
}

// Finite differences (eps 1e-6) stay away from kinks on continuous random layouts; the others tie, touch,
// are degenerate or non-finite, or are too large for ~400 forward evaluations.
const char* pairwise_gradcheck_skip(const PairwiseCaseConfig& cfg) {
  using L = PairLayout;
  if (cfg.n * cfg.m > 1000000) return "6M pairs: ~400 forward evaluations are too slow; compared with the reference";
  switch (cfg.layout) {
    case L::kIdenticalSets: return "identical boxes: every max / min of a pair ties (the gradient is split, not a derivative)";
    case L::kTouchingX:
    case L::kTouchingY:
    case L::kTouchingCorner: return "touching boxes: the intersection's clamp at 0 sits exactly on its kink";
    case L::kSharedEdges:
    case L::kIntegerGrid: return "integer boxes with shared edges: max / min ties are kinks";
    case L::kNaN:
    case L::kInf: return "non-finite coordinates: nothing to differentiate";
    case L::kInvertedX:
    case L::kInvertedY:
    case L::kInvertedBoth:
    case L::kZeroWidth:
    case L::kZeroHeight:
    case L::kPoints:
    case L::kIdenticalZeroArea:
    case L::kMixedDegenerate: return "degenerate boxes: ties, divisions by 0 (torchvision's) or the kinks of the defined-as-0 terms";
    default: return "";
  }
}

std::vector<std::int64_t> box_shape(const std::vector<std::int64_t>& lead, std::int64_t rows) {
  std::vector<std::int64_t> shape = lead;
  shape.push_back(rows);
  shape.push_back(4);
  return shape;
}

std::int64_t numel_of(const std::vector<std::int64_t>& sizes) {
  std::int64_t p = 1;
  for (const std::int64_t s : sizes) p *= s;
  return p;
}

// Batched and broadcast boxes as the reference takes them: boxes1 [..., N, 4] (or one box [4]) and boxes2
// [..., M, 4] expanded to their broadcast batch, [B, N, 4] and [B, M, 4].
struct PairwiseBatches {
  std::vector<std::int64_t> batch;
  std::int64_t n = 0, m = 0;
  at::Tensor a, b;
};

PairwiseBatches pairwise_batches(const at::Tensor& x, const at::Tensor& y) {
  const at::Tensor x2 = x.dim() == 1 ? x.view({1, 4}) : x;
  PairwiseBatches pb;
  pb.batch = at::infer_size(x2.sizes().slice(0, x2.dim() - 2), y.sizes().slice(0, y.dim() - 2));
  pb.n = x2.size(-2);
  pb.m = y.size(-2);
  const std::int64_t count = numel_of(pb.batch);
  pb.a = x2.expand(box_shape(pb.batch, pb.n)).reshape({count, pb.n, 4});
  pb.b = y.expand(box_shape(pb.batch, pb.m)).reshape({count, pb.m, 4});
  return pb;
}

// The per-batch results stacked into `shape` (zeros when the batch is empty).
at::Tensor stacked(const std::vector<at::Tensor>& parts, std::vector<std::int64_t> shape) {
  return parts.empty() ? at::zeros(shape, f64()) : at::stack(parts).view(shape);
}

// torchvision's quotients on degenerate boxes (the default mode) have eps-sized denominators (and squares of
// them), so gradients up to ~1e17: past float16's 65504, where the op (rightly) rounds them to inf and the fp64
// reference does not. Those cases take an upstream gradient of 2^-44 N(0, 1) (a power of 2: exact in every
// dtype), which keeps every gradient within float16's range; in float16 the others then round to about 0, and
// the case checks where the NaN, the infinities and the large values are.
at::Tensor small_grad_output(const at::Tensor& out, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return (at::randn(out.sizes(), gen, f64()) * std::ldexp(1.0, -44)).to(out.options());
}

at::Tensor reference_pairwise(const BoxIouParams& p, const at::Tensor& x, const at::Tensor& y) {
  const PairwiseBatches pb = pairwise_batches(x, y);
  std::vector<at::Tensor> out;
  for (std::int64_t k = 0; k < pb.a.size(0); ++k) {
    out.push_back(kit::from_matrix(reference::box_iou_pairwise(p, kit::to_matrix(pb.a[k]), kit::to_matrix(pb.b[k]))));
  }
  std::vector<std::int64_t> shape = pb.batch;
  shape.push_back(pb.n);
  shape.push_back(pb.m);
  return stacked(out, shape);
}

Tensors reference_pairwise_backward(const BoxIouParams& p, const at::Tensor& x, const at::Tensor& y, const at::Tensor& grad) {
  const PairwiseBatches pb = pairwise_batches(x, y);
  const at::Tensor g = grad.reshape({pb.a.size(0), pb.n, pb.m});
  std::vector<at::Tensor> g1, g2;
  for (std::int64_t k = 0; k < pb.a.size(0); ++k) {
    const reference::BoxIouGrads r = reference::box_iou_pairwise_backward(p, kit::to_matrix(pb.a[k]),
                                                                          kit::to_matrix(pb.b[k]), kit::to_matrix(g[k]));
    g1.push_back(kit::from_matrix(r.boxes1));
    g2.push_back(kit::from_matrix(r.boxes2));
  }
  return {at::sum_to(stacked(g1, box_shape(pb.batch, pb.n)), x.sizes()),
          at::sum_to(stacked(g2, box_shape(pb.batch, pb.m)), y.sizes())};
}

// CIoU's aspect term v = 4/pi^2 (atan(w1 / h1) - atan(w2 / h2))^2 of every pair, and alpha = v / (1 - iou + v +
// eps) (0 where 1 - iou + v <= 0), in ATen: the finite-difference checks of complete_box_iou differentiate
// DIoU(x) - alpha(x0) * v(x), alpha held at the unperturbed boxes x0 as the backward holds it (torchvision's
// no_grad). Only built for kink-free (non-degenerate) cases.
at::Tensor ciou_v(const at::Tensor& x, const at::Tensor& y) {
  const auto theta = [](const at::Tensor& b) {
    return at::atan((b.select(-1, 2) - b.select(-1, 0)) / (b.select(-1, 3) - b.select(-1, 1)));
  };
  return (theta(x).unsqueeze(-1) - theta(y).unsqueeze(-2)).pow(2) * kCiouAspectScale;
}

at::Tensor ciou_alpha(const at::Tensor& iou, const at::Tensor& v, double eps) {
  const at::Tensor den = 1 - iou + v;
  return at::where(den > 0, v / (den + eps), at::zeros_like(v));
}

// The op's forward and backward of a case over two box tensors. With `noncontiguous` the forward gets boxes1
// with a row stride of 8 and boxes2 column-major (the same values); the backward gets the inputs as they are.
template <typename Params, typename Forward, typename Backward>
void set_box_pair_op(CaseData& d, const Params& p, bool noncontiguous, Forward forward, Backward backward) {
  d.op_forward = [p, noncontiguous, forward](const Tensors& in) {
    at::Tensor x = in[0], y = in[1];
    if (noncontiguous) {
      x = at::cat({x, x}, 1).slice(1, 0, 4);  // row stride 8
      y = y.t().contiguous().t();             // column-major
    }
    return Tensors{forward(x, y, p)};
  };
  d.op_backward = [p, backward](const Tensors& in, const Tensors& grad) {
    auto [g1, g2] = backward(grad[0], in[0], in[1], p);
    return Tensors{g1, g2};
  };
}

// The grad_output of a case: a broadcast (stride-0) one where asked; small_grad_output for degenerate boxes under
// torchvision's quotients (the default mode), whose gradients would otherwise overflow float16.
void set_box_grad_output(CaseData& d, bool stride0_grad, bool defined) {
  if (stride0_grad) d.make_grad_output = kit::stride0_grad_output();
  if (!defined && d.gradcheck_skip_reason.rfind("degenerate", 0) == 0) d.make_grad_output = small_grad_output;
}

CaseData make_pairwise_case(BoxIouVariant variant, const PairwiseCaseConfig& cfg, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  PairwiseCaseConfig flat = cfg;
  flat.n *= numel_of(cfg.lead1);
  flat.m *= numel_of(cfg.lead2);
  auto [b1, b2] = make_pairwise_boxes(flat, gen);
  CaseData d;
  // (Layouts of their own sizes, such as the anchors, have no leading dimensions.)
  if (cfg.one_box) b1 = b1.reshape({4});
  if (!cfg.lead1.empty()) b1 = b1.reshape(box_shape(cfg.lead1, cfg.n));
  if (!cfg.lead2.empty()) b2 = b2.reshape(box_shape(cfg.lead2, cfg.m));
  d.inputs = {b1, b2};
  d.differentiable = {0, 1};
  const BoxIouParams p{variant, cfg.eps, cfg.defined};
  set_box_pair_op(d, p, cfg.noncontiguous, box_iou_pairwise, box_iou_pairwise_backward);
  d.reference_forward = [p](const Tensors& in) { return Tensors{reference_pairwise(p, in[0], in[1])}; };
  d.reference_backward = [p](const Tensors& in, const Tensors& grad) {
    return reference_pairwise_backward(p, in[0], in[1], grad[0]);
  };
  if (variant == BoxIouVariant::kCIoU) {
    const BoxIouParams diou{BoxIouVariant::kDIoU, cfg.eps, cfg.defined}, iou{BoxIouVariant::kIoU, cfg.eps, cfg.defined};
    d.op_gradient_target = [=](const Tensors& x, const Tensors& x0) {
      const at::Tensor alpha0 = ciou_alpha(box_iou_pairwise(x0[0], x0[1], iou), ciou_v(x0[0], x0[1]), cfg.eps);
      return Tensors{box_iou_pairwise(x[0], x[1], diou) - alpha0 * ciou_v(x[0], x[1])};
    };
    d.reference_gradient_target = [=](const Tensors& x, const Tensors& x0) {
      const at::Tensor alpha0 = ciou_alpha(reference_pairwise(iou, x0[0], x0[1]), ciou_v(x0[0], x0[1]), cfg.eps);
      return Tensors{reference_pairwise(diou, x[0], x[1]) - alpha0 * ciou_v(x[0], x[1])};
    };
  }
  d.gradcheck_skip_reason = pairwise_gradcheck_skip(cfg);
  set_box_grad_output(d, cfg.stride0_grad, cfg.defined);
  return d;
}

std::vector<OpCase> pairwise_cases(BoxIouVariant variant) {
  kit::CaseList<PairwiseCaseConfig> add(0xB0C1'0000 + (static_cast<std::uint64_t>(variant) << 12),
                                      [variant](const PairwiseCaseConfig& cfg, std::uint64_t s) { return make_pairwise_case(variant, cfg, s); });
  using L = PairLayout;
  PairwiseCaseConfig c;
  c = {}; add("random_7x9", c);
  c = {}; c.n = c.m = 16; add("random_16x16", c);
  c = {}; c.n = c.m = 1; add("single_pair", c);
  c = {}; c.n = 50; c.m = 3; add("n50_m3", c);
  c = {}; c.n = 3; c.m = 70; add("n3_m70", c);
  c = {}; c.n = 0; c.m = 5; add("empty_boxes1", c);
  c = {}; c.n = 5; c.m = 0; add("empty_boxes2", c);
  c = {}; c.n = 0; c.m = 0; add("empty_both", c);
  c = {}; c.layout = L::kIdenticalSets; c.n = c.m = 12; add("identical_boxes", c);
  c = {}; c.layout = L::kDisjoint; add("disjoint_boxes", c);
  c = {}; c.layout = L::kNestedAndContaining; c.n = 8; c.m = 16; add("nested_and_containing", c);
  c = {}; c.layout = L::kTouchingX; c.n = c.m = 10; add("touching_edges_x", c);
  c = {}; c.layout = L::kTouchingY; c.n = c.m = 10; add("touching_edges_y", c);
  c = {}; c.layout = L::kTouchingCorner; c.n = c.m = 10; add("touching_corners", c);
  c = {}; c.layout = L::kSharedEdges; c.n = c.m = 10; add("shared_edges", c);
  c = {}; c.layout = L::kInvertedX; add("degenerate_inverted_x", c);
  c = {}; c.layout = L::kInvertedY; add("degenerate_inverted_y", c);
  c = {}; c.layout = L::kInvertedBoth; add("degenerate_inverted_both", c);
  c = {}; c.layout = L::kZeroWidth; add("degenerate_zero_width", c);
  c = {}; c.layout = L::kZeroHeight; add("degenerate_zero_height", c);
  c = {}; c.layout = L::kPoints; c.n = 6; c.m = 8; add("zero_area_points", c);
  c = {}; c.layout = L::kIdenticalZeroArea; c.n = c.m = 9; add("identical_zero_area_boxes", c);
  c = {}; c.layout = L::kMixedDegenerate; c.n = 14; c.m = 21; add("mixed_degenerate_and_valid", c);
  c = {}; c.layout = L::kNegative; add("negative_coordinates", c);
  c = {}; c.layout = L::kStraddlingZero; c.n = c.m = 12; add("coordinates_straddling_zero", c);
  c = {}; c.layout = L::kLarge1e4; c.n = 10; c.m = 12; add("large_coordinates_1e4_fp16_area_overflow", c);
  c = {}; c.layout = L::kLarge1e6; c.n = 10; c.m = 12; add("large_coordinates_1e6", c);
  c = {}; c.layout = L::kSmall; c.n = c.m = 12; add("small_coordinates", c);
  c = {}; c.layout = L::kNaN; c.n = 5; c.m = 6; add("nan_coordinates", c);
  c = {}; c.layout = L::kInf; c.n = 5; c.m = 6; add("inf_coordinates", c);
  c = {}; c.layout = L::kAnchorsVsGroundTruth; c.m = 20; add("anchors_vs_ground_truth", c);
  c = {}; c.layout = L::kExtremeAspect; c.n = 8; c.m = 10; add("extreme_aspect_ratios", c);
  c = {}; c.layout = L::kSameCenters; c.n = c.m = 10; add("same_centers", c);
  c = {}; c.layout = L::kIntegerGrid; c.n = 20; c.m = 24; add("integer_grid_ties", c);
  c = {}; c.layout = L::kNearlyIdentical; c.n = c.m = 10; add("nearly_identical", c);
  c = {}; c.n = 33; c.m = 129; add("tile_edges_33x129", c);
  c = {}; c.n = 64; c.m = 256; add("whole_tiles_64x256", c);
  c = {}; c.n = 1; c.m = 5000; add("one_row_5000_columns", c);
  c = {}; c.n = 5000; c.m = 1; add("rows_5000_one_column", c);
  c = {}; c.n = 17; c.m = 23; c.noncontiguous = true; add("noncontiguous_inputs", c);
  c = {}; c.n = 3000; c.m = 2000; add("large_3000x2000", c);
  c = {}; c.layout = L::kIdenticalZeroArea; c.n = c.m = 6; c.eps = 0; add("eps_zero_identical_zero_area", c);
  c = {}; c.n = c.m = 12; c.eps = 0.5; add("eps_half", c);
  c = {}; c.n = 4; c.m = 5; c.lead1 = {2, 1}; c.lead2 = {3}; add("batched_broadcast_2x1_by_3", c);
  c = {}; c.n = 5; c.m = 6; c.lead1 = {3}; add("batched_boxes1_shared_boxes2", c);
  c = {}; c.n = 5; c.m = 6; c.lead2 = {2, 2}; add("batched_boxes2_shared_boxes1", c);
  c = {}; c.n = 4; c.m = 5; c.lead1 = {0}; add("batch_dimension_zero", c);
  c = {}; c.n = 1; c.m = 7; c.one_box = true; add("one_box_form", c);
  c = {}; c.n = 9; c.m = 11; c.stride0_grad = true; add("stride0_grad_output", c);
  // The degenerate layouts again under DetOps' rule (defined_degenerate); above they get torchvision's NaN / inf.
  const std::pair<const char*, PairLayout> degenerate[] = {
      {"inverted_x", L::kInvertedX}, {"inverted_y", L::kInvertedY}, {"inverted_both", L::kInvertedBoth},
      {"zero_width", L::kZeroWidth}, {"zero_height", L::kZeroHeight}, {"zero_area_points", L::kPoints},
      {"mixed_degenerate_and_valid", L::kMixedDegenerate}};
  for (const auto& [name, layout] : degenerate) {
    c = {}; c.layout = layout; c.defined = true; add(std::string("defined_degenerate_") + name, c);
  }
  c = {}; c.layout = L::kIdenticalZeroArea; c.n = c.m = 9; c.defined = true; add("defined_degenerate_identical_zero_area", c);
  c = {}; c.layout = L::kIdenticalZeroArea; c.n = c.m = 6; c.eps = 0; c.defined = true;
  add("defined_degenerate_eps_zero_identical_zero_area", c);
  return std::move(add.cases);
}

// ---------------------------------------------------------------------------------------------------
// Losses: boxes1 [N, 4], boxes2 [N, 4] -> [N] or a scalar, with a backward.

// Gradient-check cases keep every max / min comparison of a pair (x1 with x1, y1 with y1, x2 with x2,
// y2 with y2: both the intersection and the enclosing box), the overlap tests (intersection width and
// height against 0) and every side length at least this far from a tie, so central differences with
// eps 1e-6 never straddle a kink.
constexpr double kKinkMargin = 1e-3;

at::Tensor kink_free_rows(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor iw = at::minimum(col(a, 2), col(b, 2)) - at::maximum(col(a, 0), col(b, 0));
  const at::Tensor ih = at::minimum(col(a, 3), col(b, 3)) - at::maximum(col(a, 1), col(b, 1));
  return ((a - b).abs() > kKinkMargin).all(1) & (iw.abs() > kKinkMargin) & (ih.abs() > kKinkMargin) &
         (col(a, 2) - col(a, 0) > kKinkMargin) & (col(a, 3) - col(a, 1) > kKinkMargin) &
         (col(b, 2) - col(b, 0) > kKinkMargin) & (col(b, 3) - col(b, 1) > kKinkMargin);
}

enum class LossLayout {
  // Kink-free (gradient-checked):
  kOverlapping, kDisjoint, kNested, kContaining, kSameCenters, kSameAspect, kNearlyTouching, kNearlyIdentical,
  kNegative, kStraddlingZero, kLarge1e4, kLarge1e6, kSmall, kExtremeAspect,
  // Ties, touching, degenerate, non-finite (not gradient-checked):
  kIdentical, kTouchingX, kTouchingCorner, kSharedEdges, kInvertedX, kInvertedBoth, kZeroWidth, kPoints,
  kIdenticalZeroArea, kMixedDegenerate, kNaN, kInf, kIntegerGrid,
};

bool kink_free_layout(LossLayout l) { return static_cast<int>(l) <= static_cast<int>(LossLayout::kExtremeAspect); }

const char* kink_reason(LossLayout l) {
  switch (l) {
    case LossLayout::kIdentical: return "identical boxes: every max / min ties (the gradient is split, not a derivative)";
    case LossLayout::kTouchingX:
    case LossLayout::kTouchingCorner: return "touching boxes: the overlap test sits exactly on its kink";
    case LossLayout::kSharedEdges:
    case LossLayout::kIntegerGrid: return "integer boxes with shared edges: max / min ties are kinks";
    case LossLayout::kNaN:
    case LossLayout::kInf: return "non-finite coordinates: nothing to differentiate";
    default: return "degenerate boxes (inverted or zero extents): ties, divisions by 0 or the kinks of the definition";
  }
}

std::pair<at::Tensor, at::Tensor> loss_candidates(LossLayout layout, at::Generator& gen, std::int64_t n) {
  switch (layout) {
    case LossLayout::kOverlapping: return overlapping_pairs(gen, n, 0, 100, 5, 40);
    case LossLayout::kDisjoint: {  // boxes2 right of boxes1 by a gap in [0.5, 20]
      const at::Tensor a = random_boxes(gen, n, 0, 100, 5, 40), b = random_boxes(gen, n, 0, 100, 5, 40);
      const at::Tensor shift = col(a, 2) - col(b, 0) + uniform(gen, n, 0.5, 20);
      return {a, with_columns(col(b, 0) + shift, col(b, 1), col(b, 2) + shift, col(b, 3))};
    }
    case LossLayout::kNested:
    case LossLayout::kContaining: {  // one box strictly inside the other
      const at::Tensor a = random_boxes(gen, n, 0, 100, 10, 40);
      const at::Tensor cx = (col(a, 0) + col(a, 2)) / 2, cy = (col(a, 1) + col(a, 3)) / 2;
      const at::Tensor w = col(a, 2) - col(a, 0), h = col(a, 3) - col(a, 1);
      const at::Tensor fw = uniform(gen, n, 0.3, 0.8), fh = uniform(gen, n, 0.3, 0.8);
      const at::Tensor ox = (at::rand({n}, gen, f64()) * 2 - 1) * (1 - fw) * w * 0.4;
      const at::Tensor oy = (at::rand({n}, gen, f64()) * 2 - 1) * (1 - fh) * h * 0.4;
      const at::Tensor inner = from_center_size(cx + ox, cy + oy, w * fw, h * fh);
      if (layout == LossLayout::kNested) return {a, inner};
      return {inner, a};
    }
    case LossLayout::kSameCenters: {
      const at::Tensor a = random_boxes(gen, n, 0, 100, 5, 40);
      const at::Tensor cx = (col(a, 0) + col(a, 2)) / 2, cy = (col(a, 1) + col(a, 3)) / 2;
      return {a, from_center_size(cx, cy, uniform(gen, n, 5, 40), uniform(gen, n, 5, 40))};
    }
    case LossLayout::kSameAspect: {  // CIoU's v = 0
      const auto [a, b] = overlapping_pairs(gen, n, 0, 100, 5, 40);
      const at::Tensor s = uniform(gen, n, 0.5, 1.5);
      const at::Tensor cx = (col(b, 0) + col(b, 2)) / 2, cy = (col(b, 1) + col(b, 3)) / 2;
      return {a, from_center_size(cx, cy, (col(a, 2) - col(a, 0)) * s, (col(a, 3) - col(a, 1)) * s)};
    }
    case LossLayout::kNearlyTouching: {  // gaps of 0.005 .. 0.02 in x
      const at::Tensor a = random_boxes(gen, n, 0, 100, 5, 40);
      const at::Tensor h = col(a, 3) - col(a, 1);
      const at::Tensor x1 = col(a, 2) + uniform(gen, n, 0.005, 0.02), y1 = col(a, 1) + h * uniform(gen, n, -0.5, 0.5);
      return {a, with_columns(x1, y1, x1 + uniform(gen, n, 5, 40), y1 + uniform(gen, n, 5, 40))};
    }
    case LossLayout::kNearlyIdentical: {  // every coordinate moved by 0.002 .. 0.01
      const at::Tensor a = random_boxes(gen, n, 0, 100, 5, 40);
      const at::Tensor sign = at::randint(0, 2, {n, 4}, gen, f64()) * 2 - 1;
      return {a, a + sign * (at::rand({n, 4}, gen, f64()) * 8e-3 + 2e-3)};
    }
    case LossLayout::kNegative: return overlapping_pairs(gen, n, -200, -50, 5, 40);
    case LossLayout::kStraddlingZero: return overlapping_pairs(gen, n, -20, 20, 5, 40);
    case LossLayout::kLarge1e4: return overlapping_pairs(gen, n, 1e4, 5e4, 300, 3000);
    case LossLayout::kLarge1e6: return overlapping_pairs(gen, n, 1e6, 1.05e6, 1e3, 2e4);
    case LossLayout::kSmall: return overlapping_pairs(gen, n, 0, 4, 0.5, 2);
    case LossLayout::kExtremeAspect: {  // a wide box against a tall one, w / h up to 200
      const at::Tensor cx = uniform(gen, n, 0, 100), cy = uniform(gen, n, 0, 100);
      const at::Tensor wide = from_center_size(cx, cy, uniform(gen, n, 50, 200), uniform(gen, n, 0.25, 1));
      const at::Tensor tall = from_center_size(cx + uniform(gen, n, -10, 10), cy + uniform(gen, n, -10, 10),
                                               uniform(gen, n, 0.25, 1), uniform(gen, n, 50, 200));
      return {wide, tall};
    }
    case LossLayout::kIdentical: {
      const at::Tensor a = random_boxes(gen, n, 0, 100, 5, 40);
      return {a, a.clone()};
    }
    case LossLayout::kTouchingX:
    case LossLayout::kTouchingCorner: {
      const at::Tensor a = integer_boxes(gen, n, 48, 2, 12), o = integer_boxes(gen, n, 48, 2, 12);
      const at::Tensor x1 = col(a, 2), y1 = layout == LossLayout::kTouchingX ? col(a, 1) : col(a, 3);
      return {a, with_columns(x1, y1, x1 + col(o, 2) - col(o, 0), y1 + col(o, 3) - col(o, 1))};
    }
    case LossLayout::kSharedEdges: {
      const at::Tensor a = integer_boxes(gen, n, 48, 2, 12), o = integer_boxes(gen, n, 48, 2, 12);
      return {a, with_columns(col(a, 0), col(o, 1).minimum(col(a, 3) - 1), col(o, 2).maximum(col(a, 0) + 1), col(a, 3))};
    }
    case LossLayout::kInvertedX:
    case LossLayout::kInvertedBoth: {
      const auto [a, b] = overlapping_pairs(gen, n, 0, 100, 5, 40);
      const bool y = layout == LossLayout::kInvertedBoth;
      return {a, with_columns(col(b, 2), col(b, y ? 3 : 1), col(b, 0), col(b, y ? 1 : 3))};
    }
    case LossLayout::kZeroWidth: {
      const auto [a, b] = overlapping_pairs(gen, n, 0, 100, 5, 40);
      return {a, with_columns(col(b, 0), col(b, 1), col(b, 0), col(b, 3))};
    }
    case LossLayout::kPoints: {
      const at::Tensor p = integer_boxes(gen, n, 16, 1, 1), q = integer_boxes(gen, n, 16, 1, 1);
      return {with_columns(col(p, 0), col(p, 1), col(p, 0), col(p, 1)), with_columns(col(q, 0), col(q, 1), col(q, 0), col(q, 1))};
    }
    case LossLayout::kIdenticalZeroArea: {
      const at::Tensor b = integer_boxes(gen, n, 16, 1, 6);
      at::Tensor x2 = col(b, 2).clone(), y2 = col(b, 3).clone();
      for (std::int64_t i = 0; i < n; ++i) {
        if (i % 3 != 1) x2[i] = b[i][0];
        if (i % 3 != 2) y2[i] = b[i][1];
      }
      const at::Tensor z = with_columns(col(b, 0), col(b, 1), x2, y2);
      return {z, z.clone()};
    }
    case LossLayout::kMixedDegenerate: return {mixed_degenerate_boxes(gen, n), mixed_degenerate_boxes(gen, n)};
    case LossLayout::kNaN:
    case LossLayout::kInf: {
      auto [a, b] = overlapping_pairs(gen, n, 0, 100, 5, 40);
      const double v = layout == LossLayout::kNaN ? kNaN : kInf;
      a[0][0] = -v;
      a[2 % n][2] = v;
      b[1 % n][3] = v;
      b[3 % n][1] = -v;
      return {a, b};
    }
    case LossLayout::kIntegerGrid: return {integer_boxes(gen, n, 16, 1, 6), integer_boxes(gen, n, 16, 1, 6)};
  }
  throw std::invalid_argument("loss_candidates: unknown layout");
}

// Pairs of the layout; for kink-free layouts, rows that come too close to a kink are drawn again.
std::pair<at::Tensor, at::Tensor> make_loss_boxes(LossLayout layout, at::Generator& gen, std::int64_t n) {
  auto [a, b] = loss_candidates(layout, gen, n);
  if (!kink_free_layout(layout) || n == 0) return {a, b};
  for (int round = 0; round < 100; ++round) {
    const at::Tensor bad = kink_free_rows(a, b).logical_not().nonzero().reshape(-1);
    if (bad.numel() == 0) return {a, b};
    auto [a2, b2] = loss_candidates(layout, gen, bad.numel());
    a.index_put_({bad}, a2);
    b.index_put_({bad}, b2);
  }
  throw std::logic_error("make_loss_boxes: could not draw kink-free pairs");
}

struct LossCaseConfig {
  LossLayout layout = LossLayout::kOverlapping;
  std::int64_t n = 16;
  LossReduction reduction = LossReduction::kNone;
  double eps = 1e-7;
  bool noncontiguous = false;
  bool stride0_grad = false;
  bool defined = false;  // DetOps' degenerate-box rule (default: torchvision's quotients)
};

at::Tensor reference_loss_tensor(const BoxIouLossParams& p, const reference::Vectord& v) {
  const at::Tensor t = kit::from_vector(v);
  return p.reduction == LossReduction::kNone ? t : t.reshape({});
}

CaseData make_loss_case(BoxIouVariant variant, const LossCaseConfig& cfg, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto [b1, b2] = make_loss_boxes(cfg.layout, gen, cfg.n);
  CaseData d;
  d.inputs = {b1, b2};
  d.differentiable = {0, 1};
  const BoxIouLossParams p{variant, cfg.reduction, cfg.eps, cfg.defined};
  set_box_pair_op(d, p, cfg.noncontiguous, box_iou_loss_forward, box_iou_loss_backward);
  d.reference_forward = [p](const Tensors& in) {
    return Tensors{reference_loss_tensor(p, reference::box_iou_loss_forward(p, kit::to_matrix(in[0]), kit::to_matrix(in[1])))};
  };
  d.reference_backward = [p](const Tensors& in, const Tensors& grad) {
    const reference::BoxIouLossGrads g = reference::box_iou_loss_backward(
        p, kit::to_matrix(in[0]), kit::to_matrix(in[1]), kit::to_vector(grad[0].reshape({-1})));
    return Tensors{kit::from_matrix(g.boxes1), kit::from_matrix(g.boxes2)};
  };
  if (variant == BoxIouVariant::kCIoU) {
    // The backward holds alpha constant (torchvision computes it under no_grad): the finite-difference
    // checks differentiate the loss with alpha fixed at the unperturbed boxes.
    d.op_gradient_target = [p](const Tensors& x, const Tensors& x0) {
      return Tensors{complete_box_iou_loss_alpha_at(x[0], x[1], x0[0], x0[1], p)};
    };
    d.reference_gradient_target = [p](const Tensors& x, const Tensors& x0) {
      const reference::Matrixd a0 = kit::to_matrix(x0[0]), b0 = kit::to_matrix(x0[1]);
      return Tensors{reference_loss_tensor(
          p, reference::box_iou_loss_forward(p, kit::to_matrix(x[0]), kit::to_matrix(x[1]), &a0, &b0))};
    };
  }
  if (!kink_free_layout(cfg.layout)) d.gradcheck_skip_reason = kink_reason(cfg.layout);
  set_box_grad_output(d, cfg.stride0_grad, cfg.defined);
  // Pair i's loss depends on row i of both boxes only; a mean divides by the pairs (CaseData::fd_rows).
  d.fd_rows = kit::loss_fd_rows({0, 1}, cfg.reduction == LossReduction::kMean);
  return d;
}

std::vector<OpCase> loss_cases(BoxIouVariant variant) {
  kit::CaseList<LossCaseConfig> add(0xB0C2'0000 + (static_cast<std::uint64_t>(variant) << 12),
                                  [variant](const LossCaseConfig& cfg, std::uint64_t s) { return make_loss_case(variant, cfg, s); });
  using L = LossLayout;
  constexpr LossReduction kMean = LossReduction::kMean, kSum = LossReduction::kSum;
  LossCaseConfig c;
  c = {}; add("overlapping_none", c);
  c = {}; c.reduction = kMean; add("overlapping_mean", c);
  c = {}; c.reduction = kSum; add("overlapping_sum", c);
  c = {}; c.n = 1; add("single_pair", c);
  c = {}; c.n = 33; add("overlapping_33_pairs", c);
  c = {}; c.layout = L::kDisjoint; add("disjoint_none", c);
  c = {}; c.layout = L::kDisjoint; c.reduction = kMean; add("disjoint_mean", c);
  c = {}; c.layout = L::kNested; add("nested_boxes2_inside", c);
  c = {}; c.layout = L::kContaining; add("containing_boxes1_inside", c);
  c = {}; c.layout = L::kSameCenters; add("same_centers", c);
  c = {}; c.layout = L::kSameAspect; add("same_aspect_ratio", c);
  c = {}; c.layout = L::kNearlyTouching; add("nearly_touching", c);
  c = {}; c.layout = L::kNearlyIdentical; add("nearly_identical", c);
  c = {}; c.layout = L::kNegative; add("negative_coordinates", c);
  c = {}; c.layout = L::kStraddlingZero; add("coordinates_straddling_zero", c);
  c = {}; c.layout = L::kLarge1e4; add("large_coordinates_1e4_fp16_area_overflow", c);
  c = {}; c.layout = L::kLarge1e4; c.reduction = kSum; add("large_coordinates_1e4_sum", c);
  c = {}; c.layout = L::kLarge1e6; add("large_coordinates_1e6", c);
  c = {}; c.layout = L::kSmall; add("small_coordinates", c);
  c = {}; c.layout = L::kExtremeAspect; add("extreme_aspect_ratios", c);
  c = {}; c.n = 70000; add("many_pairs_70000_none", c);
  c = {}; c.n = 70000; c.reduction = kMean; add("many_pairs_70000_mean", c);
  c = {}; c.n = 70000; c.reduction = kSum; add("many_pairs_70000_sum", c);
  c = {}; c.noncontiguous = true; add("noncontiguous_inputs", c);
  c = {}; c.stride0_grad = true; add("stride0_grad_output", c);
  c = {}; c.eps = 0; add("eps_zero", c);
  c = {}; c.eps = 0.5; add("eps_half", c);
  c = {}; c.n = 0; add("empty_none", c);
  c = {}; c.n = 0; c.reduction = kMean; add("empty_mean", c);
  c = {}; c.n = 0; c.reduction = kSum; add("empty_sum", c);
  c = {}; c.layout = L::kIdentical; add("identical_boxes", c);
  c = {}; c.layout = L::kIdentical; c.reduction = kMean; add("identical_boxes_mean", c);
  c = {}; c.layout = L::kTouchingX; add("touching_edges_x", c);
  c = {}; c.layout = L::kTouchingCorner; add("touching_corners", c);
  c = {}; c.layout = L::kSharedEdges; add("shared_edges", c);
  c = {}; c.layout = L::kInvertedX; add("degenerate_inverted_x", c);
  c = {}; c.layout = L::kInvertedBoth; add("degenerate_inverted_both", c);
  c = {}; c.layout = L::kZeroWidth; add("degenerate_zero_width", c);
  c = {}; c.layout = L::kPoints; add("zero_area_points", c);
  c = {}; c.layout = L::kIdenticalZeroArea; c.n = 9; add("identical_zero_area_boxes", c);
  c = {}; c.layout = L::kMixedDegenerate; c.n = 21; add("mixed_degenerate_and_valid", c);
  c = {}; c.layout = L::kNaN; add("nan_coordinates", c);
  c = {}; c.layout = L::kInf; c.reduction = kSum; add("inf_coordinates_sum", c);
  c = {}; c.layout = L::kIntegerGrid; c.n = 24; add("integer_grid_ties", c);
  // Sums of thousands of terms (kit/half_accumulation.h): 2 * 4096 overlapping pairs, losses 0..~1.5 (~0.6 on
  // average); the running sum of an fp16 (bf16) accumulator stalls near 2048 (256) of the true ~5000.
  c = {}; c.n = 2 * kit::kHalfAccumulationTerms; c.reduction = kSum; add("half_accumulation_sum_8192_pairs", c);
  c = {}; c.n = 2 * kit::kHalfAccumulationTerms; c.reduction = kMean; add("half_accumulation_mean_8192_pairs", c);
  // The degenerate layouts again under DetOps' rule (defined_degenerate); above they get torchvision's NaN / inf.
  const std::pair<const char*, LossLayout> degenerate[] = {
      {"inverted_x", L::kInvertedX}, {"inverted_both", L::kInvertedBoth}, {"zero_width", L::kZeroWidth},
      {"zero_area_points", L::kPoints}, {"mixed_degenerate_and_valid", L::kMixedDegenerate}};
  for (const auto& [name, layout] : degenerate) {
    c = {}; c.layout = layout; c.n = layout == L::kMixedDegenerate ? 21 : 16; c.defined = true;
    add(std::string("defined_degenerate_") + name, c);
  }
  c = {}; c.layout = L::kIdenticalZeroArea; c.n = 9; c.defined = true; add("defined_degenerate_identical_zero_area", c);
  c = {}; c.layout = L::kPoints; c.reduction = kSum; c.eps = 0; c.defined = true; add("defined_degenerate_points_eps_zero_sum", c);
  c = {}; c.layout = L::kPoints; c.reduction = kSum; c.eps = 0; add("zero_area_points_eps_zero_sum", c);
  return std::move(add.cases);
}

// ---------------------------------------------------------------------------------------------------
// Bad inputs and valid calls.

using kit::f32_on;
using kit::other_device;

at::Tensor good_boxes(const at::Device& d, std::int64_t n) {
  return (at::arange(n * 4, at::TensorOptions().dtype(at::kFloat)).view({n, 4}) * at::tensor({1.0f, 1.0f, 2.0f, 2.0f}) +
          at::tensor({0.0f, 0.0f, 1.0f, 1.0f}))
      .to(d);
}

// Bad inputs follow torchvision 0.26's exception types (docs/ops/box_iou.md, Errors); the messages name the
// argument and what was expected. Inputs torchvision accepts (integer and mixed dtypes, batched boxes, any
// eps) are cases of suites/python/test_box_iou.py and suites/peer/test_dropin_boxes.py, not bad inputs.
std::vector<BadInputCase> pairwise_bad_inputs(BoxIouVariant v) {
  const BoxIouParams p{v, 1e-7};
  kit::BadInputs bad;
  bad.add("boxes1_five_columns", [=](const at::Device& d) { box_iou_pairwise(at::zeros({3, 5}, f32_on(d)), good_boxes(d, 2), p); },
          {"boxes1", "[..., N, 4]", "[3, 5]"});
  bad.add("boxes2_three_columns", [=](const at::Device& d) { box_iou_pairwise(good_boxes(d, 3), at::zeros({2, 3}, f32_on(d)), p); },
          {"boxes2", "[..., M, 4]", "[2, 3]"});
  bad.add("boxes2_one_dimensional", [=](const at::Device& d) { box_iou_pairwise(good_boxes(d, 3), good_boxes(d, 2).view({-1}), p); },
          {"boxes2", "[..., M, 4]", "[8]"});
  bad.add("batch_dimensions_do_not_broadcast", [=](const at::Device& d) {
        box_iou_pairwise(good_boxes(d, 6).view({2, 3, 4}), good_boxes(d, 6).view({3, 2, 4}), p); },
          {"boxes1 [2]", "boxes2 [3]", "broadcast"});
  bad.add("complex_boxes", [=](const at::Device& d) {
        box_iou_pairwise(good_boxes(d, 3).to(at::kComplexFloat), good_boxes(d, 2).to(at::kComplexFloat), p); },
          {"boxes1 and boxes2", "real"});
  if (v == BoxIouVariant::kIoU || v == BoxIouVariant::kGIoU) {
    bad.add("bool_boxes", [=](const at::Device& d) { box_iou_pairwise(good_boxes(d, 3).to(at::kBool), good_boxes(d, 2).to(at::kBool), p); },
            {"boxes1 and boxes2", "bool"});
  }
  bad.add("boxes2_on_other_device", [=](const at::Device& d) { box_iou_pairwise(good_boxes(d, 3), other_device(good_boxes(d, 2), d), p); },
          {"boxes1 and boxes2", "same device"});
  bad.add("backward_grad_wrong_shape", [=](const at::Device& d) {
        box_iou_pairwise_backward(at::ones({3, 3}, f32_on(d)), good_boxes(d, 3), good_boxes(d, 2), p); },
          {"grad", "output's shape [3, 2]", "[3, 3]"});
  bad.add("backward_grad_dtype_mismatch", [=](const at::Device& d) {
        box_iou_pairwise_backward(at::ones({3, 2}, f32_on(d).dtype(at::kHalf)), good_boxes(d, 3).to(at::kHalf),
                                  good_boxes(d, 2).to(at::kHalf), p); },
          {"grad dtype", "Half", "must be the output's dtype, Float"});
  return std::move(bad.cases);
}

std::vector<BadInputCase> loss_bad_inputs(BoxIouVariant v) {
  const BoxIouLossParams p{v, LossReduction::kNone, 1e-7};
  const BoxIouLossParams mean{v, LossReduction::kMean, 1e-7};
  kit::BadInputs bad;
  bad.add("boxes1_five_columns", [=](const at::Device& d) { box_iou_loss_forward(at::zeros({2, 5}, f32_on(d)), good_boxes(d, 2), p); },
          {"boxes1", "[..., 4]", "[2, 5]"});
  bad.add("boxes2_zero_dimensional", [=](const at::Device& d) { box_iou_loss_forward(good_boxes(d, 2), at::zeros({}, f32_on(d)), p); },
          {"boxes2", "[..., 4]", "[]"});
  bad.add("different_box_counts", [=](const at::Device& d) { box_iou_loss_forward(good_boxes(d, 3), good_boxes(d, 2), p); },
          {"boxes1 [3]", "boxes2 [2]", "broadcast"});
  bad.add("boxes2_broadcasts_beyond_boxes1", [=](const at::Device& d) { box_iou_loss_forward(good_boxes(d, 1), good_boxes(d, 3), p); },
          {"boxes2 [3, 4]", "broadcast to boxes1's shape [1, 4]"});
  bad.add("boxes2_on_other_device", [=](const at::Device& d) { box_iou_loss_forward(good_boxes(d, 2), other_device(good_boxes(d, 2), d), p); },
          {"boxes1 and boxes2", "same device"});
  bad.add("invalid_reduction", [=](const at::Device&) { make_box_iou_loss_params(v, "average", 1e-7); },
          {"Invalid Value for arg 'reduction'", "'average'", "'none', 'mean', 'sum'"});
  bad.add("backward_grad_wrong_shape", [=](const at::Device& d) {
        box_iou_loss_backward(at::ones({3}, f32_on(d)), good_boxes(d, 2), good_boxes(d, 2), p); }, {"grad", "[2]", "[3]"});
  bad.add("backward_grad_not_scalar_for_mean", [=](const at::Device& d) {
        box_iou_loss_backward(at::ones({2}, f32_on(d)), good_boxes(d, 2), good_boxes(d, 2), mean); }, {"grad", "0-d", "'mean'"});
  bad.add("backward_grad_dtype_mismatch", [=](const at::Device& d) {
        box_iou_loss_backward(at::ones({2}, f32_on(d).dtype(at::kHalf)), good_boxes(d, 2).to(at::kHalf),
                              good_boxes(d, 2).to(at::kHalf), p); },
          {"grad dtype", "Half", "must be the loss's dtype, Float"});
  return std::move(bad.cases);
}

// [0, 0, 2, 2] against [1, 1, 3, 3]: intersection 1, union 7, enclosing 3 x 3, centers sqrt(2) apart,
// same aspect ratio (CIoU's v = 0). The expected values are worked out by hand.
double expected_overlapping_squares(BoxIouVariant v) {
  switch (v) {
    case BoxIouVariant::kIoU: return 1.0 / 7;
    case BoxIouVariant::kGIoU: return 1.0 / 7 - 2.0 / 9;
    case BoxIouVariant::kDIoU:
    case BoxIouVariant::kCIoU: return 1.0 / 7 - 2.0 / 18;
  }
  return kNaN;
}

void check_valid_value(const char* op, const at::Tensor& got, double expected) {
  const double value = got.cpu().to(at::kDouble).reshape({-1})[0].item<double>();
  TORCH_CHECK(std::abs(value - expected) < 1e-5, op, ": a valid call after the bad one returned ", value, ", expected ",
              expected);
}

at::Tensor overlapping_square(const at::Device& d, float offset) {
  return at::tensor({offset, offset, offset + 2.0f, offset + 2.0f}, at::TensorOptions().dtype(at::kFloat)).view({1, 4}).to(d);
}

// Benchmark cases (docs/benchmarks.md): pairwise on 4000 x 4000 boxes of an 800x1344 image (proposals
// against anchors or ground truth); losses with reduction "sum" on 240,000 (prediction, target) pairs,
// the order of a detector's positive anchors per batch.
std::vector<harness::BenchCase> pairwise_benchmarks(BoxIouVariant v) {
  const BoxIouParams params{v, 1e-7};
  const std::uint64_t seed = 9401 + 10 * static_cast<std::uint64_t>(v);
  auto make = [=](DType dtype) {
    const at::Tensor b1 = harness::bench_to_cuda(harness::bench_image_boxes(4000, seed), dtype);
    const at::Tensor b2 = harness::bench_to_cuda(harness::bench_image_boxes(4000, seed + 1), dtype);
    const at::Tensor out = box_iou_pairwise(b1, b2, params);
    const at::Tensor grad = at::ones_like(out);
    harness::BenchInstance inst;
    inst.forward = [b1, b2, params] { (void)box_iou_pairwise(b1, b2, params); };
    inst.backward = [grad, b1, b2, params] { (void)box_iou_pairwise_backward(grad, b1, b2, params); };
    inst.bytes_forward = kit::bench_bytes({b1, b2, out});
    inst.bytes_backward = kit::bench_bytes({grad, b1, b2, b1, b2});
    return inst;
  };
  return {kit::bench_case("boxes_4000x4000", "boxes1[4000,4] boxes2[4000,4] -> [4000,4000]",
                          "fwd: boxes1 + boxes2 + output (fp32 for fp16/bf16 boxes); bwd: grad + boxes1 + boxes2 + "
                          "grad_boxes1 + grad_boxes2", make)};
}

std::vector<harness::BenchCase> loss_benchmarks(BoxIouVariant v) {
  const BoxIouLossParams params = make_box_iou_loss_params(v, "sum", 1e-7);
  const std::uint64_t seed = 9501 + 10 * static_cast<std::uint64_t>(v);
  const std::int64_t pairs = 240000;
  auto make = [=](DType dtype) {
    const auto [targets, predictions] = harness::bench_box_pairs(pairs, seed);
    const at::Tensor b1 = harness::bench_to_cuda(predictions, dtype);
    const at::Tensor b2 = harness::bench_to_cuda(targets, dtype);
    const at::Tensor out = box_iou_loss_forward(b1, b2, params);
    const at::Tensor grad = at::ones({}, out.options());
    harness::BenchInstance inst;
    inst.forward = [b1, b2, params] { (void)box_iou_loss_forward(b1, b2, params); };
    inst.backward = [grad, b1, b2, params] { (void)box_iou_loss_backward(grad, b1, b2, params); };
    inst.bytes_forward = kit::bench_bytes({b1, b2, out});
    inst.bytes_backward = kit::bench_bytes({grad, b1, b2, b1, b2});  // b1 and b2 are the same size
    return inst;
  };
  return {kit::bench_case("pairs_240000_sum", "boxes1[240000,4] boxes2[240000,4] reduction sum",
                          "fwd: boxes1 + boxes2 + the 0-d loss; bwd: grad (0-d) + boxes1 + boxes2 + grad_boxes1 + grad_boxes2",
                          make)};
}

OpSpec pairwise_spec(BoxIouVariant v) {
  OpSpec spec = kit::op_spec(box_iou_pairwise_op_name(v), pairwise_cases(v), pairwise_bad_inputs(v));
  spec.valid_call = [v](const at::Device& d) {
    check_valid_value(box_iou_pairwise_op_name(v),
                      box_iou_pairwise(overlapping_square(d, 0), overlapping_square(d, 1), {v, 1e-7}),
                      expected_overlapping_squares(v));
  };
  spec.determinism.backward_cuda = true;
  spec.determinism.note =
      "every output element is computed and written by one thread; each box's gradient is one thread's (CPU: one "
      "loop's) sum over the other boxes in a fixed order, then a fixed shuffle / shared-memory tree (no atomics)";
  spec.benchmarks = pairwise_benchmarks(v);
  return spec;
}

OpSpec loss_spec(BoxIouVariant v) {
  OpSpec spec = kit::op_spec(box_iou_loss_op_name(v), loss_cases(v), loss_bad_inputs(v));
  spec.valid_call = [v](const at::Device& d) {
    check_valid_value(box_iou_loss_op_name(v),
                      box_iou_loss_forward(overlapping_square(d, 0), overlapping_square(d, 1), {v, LossReduction::kMean, 1e-7}),
                      1 - expected_overlapping_squares(v));
  };
  spec.determinism.backward_cuda = true;
  spec.determinism.note =
      "every per-pair loss and gradient is computed and written by one thread (no atomics); the 'mean' and 'sum' "
      "reductions sum the fp32 / fp64 per-pair losses with ATen's sum, whose order is fixed for a given size and "
      "device";
  spec.benchmarks = loss_benchmarks(v);
  return spec;
}

OpSpec box_iou_spec() { return pairwise_spec(BoxIouVariant::kIoU); }
OpSpec generalized_box_iou_spec() { return pairwise_spec(BoxIouVariant::kGIoU); }
OpSpec distance_box_iou_spec() { return pairwise_spec(BoxIouVariant::kDIoU); }
OpSpec complete_box_iou_spec() { return pairwise_spec(BoxIouVariant::kCIoU); }
OpSpec iou_loss_spec() { return loss_spec(BoxIouVariant::kIoU); }
OpSpec generalized_box_iou_loss_spec() { return loss_spec(BoxIouVariant::kGIoU); }
OpSpec distance_box_iou_loss_spec() { return loss_spec(BoxIouVariant::kDIoU); }
OpSpec complete_box_iou_loss_spec() { return loss_spec(BoxIouVariant::kCIoU); }

DETOPS_REGISTER_OP_SPEC(box_iou_spec);
DETOPS_REGISTER_OP_SPEC(generalized_box_iou_spec);
DETOPS_REGISTER_OP_SPEC(distance_box_iou_spec);
DETOPS_REGISTER_OP_SPEC(complete_box_iou_spec);
DETOPS_REGISTER_OP_SPEC(iou_loss_spec);
DETOPS_REGISTER_OP_SPEC(generalized_box_iou_loss_spec);
DETOPS_REGISTER_OP_SPEC(distance_box_iou_loss_spec);
DETOPS_REGISTER_OP_SPEC(complete_box_iou_loss_spec);

}  // namespace
}  // namespace detops
