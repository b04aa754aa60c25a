// Precise RoI Pooling's op spec: seeded cases, how to run the op and the reference (gradients for the
// features and the roi coordinates), bad inputs, determinism and tolerances.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "detops/harness/bench_inputs.h"
#include "detops/harness/bench_spec.h"
#include "detops/harness/eigen_bridge.h"
#include "detops/harness/op_spec.h"
#include "detops/harness/roi_cases.h"
#include "detops/reference/prroi_pool_reference.h"
#include "prroi_pool/prroi_pool_torch.h"

namespace detops {
namespace {

using harness::CaseData;
using harness::Device;
using harness::OpCase;
using harness::OpSpec;
using harness::Tensors;

enum class RoiLayout {
  kRandom,         // inside the image, at least one image pixel wide
  kOutside,        // entirely beyond the map's support: every bin 0
  kPartlyOutside,  // crossing the left and bottom edges of the map
  kStraddling,     // larger than the map on every side
  kInverted,       // x2 < x1 and y2 < y1: every bin 0, no gradient
  kZeroWidth,      // x2 == x1, y2 > y1: every bin 0
  kZeroHeight,     // y2 == y1, x2 > x1
  kZeroSize,       // x2 == x1 and y2 == y1
  kSubPixel,       // 0.05 .. 0.9 map pixels wide and high: bins of 0.004 .. 0.9 px
  kInsideOneCell,  // within one unit cell [q, q + 1] x [r, r + 1] of the map
  kPixelEdges,     // integer map coordinates, sizes multiples of the pooled sizes: every bin edge on a pixel
  kSupportEdges,   // edges exactly on -1 and W (H), where the surface reaches 0, and on 0 and W - 1
  kNaN,            // one NaN coordinate per roi, in each of the four columns
  kInfinite,       // +-inf (every bin 0) and +-1e30 (bins of ~3e29 px) coordinates
  kLarge,          // map coordinates in the thousands around a small map: one bin holds it
  kWholeMap,       // [0, W / s] x [0, H / s]
};

// Batch indices are k mod N + 0.5 unless a case sets otherwise: truncation selects image k mod N, and
// the finite-difference check can perturb column 0 by +-eps without changing the image (derivative 0).
enum class BatchLayout { kSpreadHalf, kAllInFirst, kInteger, kFractional };

enum class Features {
  kUniform,   // uniform in [-1, 1)
  kConstant,  // one value per plane
  kNaN,       // ~10% of the elements NaN
};

struct PrRoiPoolCaseConfig {
  std::int64_t batch = 2, channels = 3, height = 12, width = 15, num_rois = 6;
  PrRoiPoolParams params;
  RoiLayout rois = RoiLayout::kRandom;
  BatchLayout batches = BatchLayout::kSpreadHalf;
  Features features = Features::kUniform;
  bool noncontiguous_input = false;
  bool noncontiguous_rois = false;
  bool stride0_grad = false;
};

at::Tensor make_features(const PrRoiPoolCaseConfig& cfg, at::Generator& gen) {
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor x = at::rand({cfg.batch, cfg.channels, cfg.height, cfg.width}, gen, opts) * 2 - 1;
  switch (cfg.features) {
    case Features::kUniform: break;
    case Features::kConstant:
      x = (at::rand({cfg.batch, cfg.channels, 1, 1}, gen, opts) * 2 - 1).expand_as(x).clone();
      break;
    case Features::kNaN:
      x.masked_fill_(at::rand(x.sizes(), gen, opts) < 0.1, std::numeric_limits<double>::quiet_NaN());
      break;
  }
  return x;
}

// Rois in input-image coordinates (feature size / spatial_scale).
at::Tensor make_rois(const PrRoiPoolCaseConfig& cfg, at::Generator& gen) {
  const double s = cfg.params.spatial_scale;
  const double map_h = static_cast<double>(cfg.height), map_w = static_cast<double>(cfg.width);
  const double img_h = map_h / s, img_w = map_w / s;
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const std::int64_t k = cfg.num_rois;
  const harness::RandomRois random = harness::random_image_rois(k, img_w, img_h, gen);
  const at::Tensor& u = random.u;
  harness::RoiCorners r = random.corners;
  at::Tensor &x1 = r.x1, &y1 = r.y1, &x2 = r.x2, &y2 = r.y2;
  // Integers in [lo, lo + n) as doubles.
  auto integers = [&](double lo, double n) { return at::floor(at::rand({k}, gen, opts) * n) + lo; };
  switch (cfg.rois) {
    case RoiLayout::kRandom: break;
    case RoiLayout::kOutside: harness::move_outside(r, img_w, img_h); break;  // beyond the support (-1, W) x (-1, H)
    case RoiLayout::kPartlyOutside: harness::move_partly_outside(r, img_w, img_h); break;
    case RoiLayout::kStraddling: r = harness::straddling_rois(u, img_w, img_h); break;
    case RoiLayout::kInverted: harness::invert(r); break;
    case RoiLayout::kZeroWidth: x2 = x1.clone(); break;
    case RoiLayout::kZeroHeight: y2 = y1.clone(); break;
    case RoiLayout::kZeroSize: harness::collapse_to_points(r); break;
    case RoiLayout::kSubPixel:
      x2 = x1 + (0.05 + u.select(1, 2) * 0.85) / s;
      y2 = y1 + (0.05 + u.select(1, 3) * 0.85) / s;
      break;
    case RoiLayout::kInsideOneCell: {
      // Cell (r, q) with both in the map's interior; the roi spans [0.1, 0.9] of it at most.
      const at::Tensor q = integers(0, map_w - 1), r = integers(0, map_h - 1);
      const at::Tensor v = at::rand({k, 4}, gen, opts) * 0.4;
      x1 = (q + 0.1 + v.select(1, 0)) / s;
      y1 = (r + 0.1 + v.select(1, 1)) / s;
      x2 = (q + 0.5 + v.select(1, 2)) / s;
      y2 = (r + 0.5 + v.select(1, 3)) / s;
      break;
    }
    case RoiLayout::kPixelEdges: {
      // Map coordinates: start in [-1, size - 2], size a multiple (1..2) of the pooled size.
      const double ph = static_cast<double>(cfg.params.pooled_height), pw = static_cast<double>(cfg.params.pooled_width);
      const at::Tensor xs = integers(-1, map_w - 1), ys = integers(-1, map_h - 1);
      x1 = xs / s;
      y1 = ys / s;
      x2 = (xs + integers(1, 2) * pw) / s;
      y2 = (ys + integers(1, 2) * ph) / s;
      break;
    }
    case RoiLayout::kSupportEdges: {
      r = harness::cycled_rows(k, {{-1, -1, map_w, map_h}, {-2, 0.5, -1, 2.5}, {map_w, 0.5, map_w + 1.5, 2.5},
                                   {0, 0, map_w - 1, map_h - 1}, {-1, map_h - 1, 0.5, map_h}, {1.5, -1.5, 3, -1}}, s);
      break;
    }
    case RoiLayout::kNaN: harness::set_nan_corners(r); break;
    case RoiLayout::kInfinite: r = harness::infinite_rois(k, img_w, img_h); break;
    case RoiLayout::kLarge:  // [-2000, 3000 + ...] x [-1500, 2500 + ...] map px around the map
      x1 = (-2000 - u.select(1, 0) * 100) / s;
      y1 = (-1500 - u.select(1, 1) * 100) / s;
      x2 = (3000 + u.select(1, 2) * 100) / s;
      y2 = (2500 + u.select(1, 3) * 100) / s;
      break;
    case RoiLayout::kWholeMap: r = harness::cycled_rows(k, {{0, 0, img_w, img_h}}); break;
  }
  at::Tensor b = at::arange(k, opts).remainder(static_cast<double>(cfg.batch));
  switch (cfg.batches) {
    case BatchLayout::kSpreadHalf: b = b + 0.5; break;
    case BatchLayout::kAllInFirst: b = at::full({k}, 0.5, opts); break;
    case BatchLayout::kInteger: break;
    case BatchLayout::kFractional: b = b + 0.75; break;
  }
  return harness::stack_rois(b, r);
}

CaseData make_case(const PrRoiPoolCaseConfig& cfg, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  CaseData d;
  const at::Tensor input = make_features(cfg, gen);
  d.inputs = {input, make_rois(cfg, gen)};
  d.differentiable = {0, 1};
  const PrRoiPoolParams p = cfg.params;
  const std::array<std::int64_t, 4> shape{cfg.batch, cfg.channels, cfg.height, cfg.width};
  // Same values, other strides: W-major input (rows of stride 1 along H), rois with row stride 10.
  auto input_view = [cfg](const at::Tensor& x) {
    return cfg.noncontiguous_input ? x.transpose(2, 3).contiguous().transpose(2, 3) : x;
  };
  auto rois_view = [cfg](const at::Tensor& r) {
    return cfg.noncontiguous_rois ? at::cat({r, r}, 1).slice(1, 0, 5) : r;
  };
  d.op_forward = [p, input_view, rois_view](const Tensors& in) {
    return Tensors{prroi_pool_forward(input_view(in[0]), rois_view(in[1]), p)};
  };
  d.op_backward = [p, shape, input_view, rois_view](const Tensors& in, const Tensors& grad) {
    const at::Tensor rois = rois_view(in[1]);
    return Tensors{prroi_pool_backward(grad[0], rois, p, shape), prroi_pool_rois_backward(grad[0], input_view(in[0]), rois, p)};
  };
  d.reference_forward = [p](const Tensors& in) {
    return Tensors{harness::from_tensor4d(reference::prroi_pool_forward(p, harness::to_tensor4d(in[0]), harness::to_matrix(in[1])))};
  };
  d.reference_backward = [p](const Tensors& in, const Tensors& grad) {
    const reference::PrRoiPoolGrads g = reference::prroi_pool_backward(
        p, harness::to_tensor4d(grad[0]), harness::to_tensor4d(in[0]), harness::to_matrix(in[1]));
    return Tensors{harness::from_tensor4d(g.input), harness::from_matrix(g.rois)};
  };
  // An output (and a grad_input element) is a sum with nonnegative weights, so its sum of |terms| is the
  // same function of |input| (|grad_output|). A grad_rois element is a sum over (c, ph, pw) of signed
  // terms; the reference reports their sum of |terms| itself.
  d.reference_forward_magnitude = [fwd = d.reference_forward](const Tensors& in) { return fwd({in[0].abs(), in[1]}); };
  d.reference_backward_magnitude = [p](const Tensors& in, const Tensors& grad) {
    const reference::PrRoiPoolGrads g = reference::prroi_pool_backward(
        p, harness::to_tensor4d(grad[0].abs()), harness::to_tensor4d(in[0]), harness::to_matrix(in[1]));
    return Tensors{harness::from_tensor4d(g.input), harness::from_matrix(g.rois_magnitude)};
  };
  if (cfg.stride0_grad) {
    // What `out.sum().backward()` hands the backward: one value expanded to the output's shape.
    d.make_grad_output = [](const at::Tensor& out, std::uint64_t) { return at::ones({}, out.options()).expand(out.sizes()); };
  }
  if (cfg.features == Features::kNaN) {
    d.gradcheck_skip_reason = "NaN features: NaN outputs make every difference quotient NaN";
  } else if (cfg.rois == RoiLayout::kZeroWidth || cfg.rois == RoiLayout::kZeroHeight) {
    d.gradcheck_skip_reason =
        "a roi of zero width (height) and positive height (width) is where the output jumps from 0 to the "
        "surface's average along a line: no derivative exists there (the op returns 0)";
  } else if (cfg.batches == BatchLayout::kInteger) {
    d.gradcheck_skip_reason =
        "integer batch indices: the image is chosen by truncating rois[:, 0], a step function, so -eps moves a "
        "roi of image n to image n - 1 (or out of range for n = 0)";
  }
  // Bin edges exactly on pixel boundaries (kPixelEdges, kSupportEdges) need no skip: the surface is
  // continuous, so the bin average is continuously differentiable in its edges (only its second
  // derivative jumps there), and central differences agree with the gradient to O(eps).
  return d;
}

std::string scale_name(double scale) { return "s" + std::to_string(static_cast<int>(std::lround(1.0 / scale))); }

std::vector<OpCase> prroi_pool_cases() {
  std::vector<OpCase> cases;
  std::uint64_t seed = 0x9F00'0000;
  auto add = [&](const std::string& name, PrRoiPoolCaseConfig cfg) {
    cases.push_back(OpCase{name, ++seed, [cfg](std::uint64_t s) { return make_case(cfg, s); }, {}});
  };

  // The parameter grid: pooled 1x1, 2x2, 7x7 and 14x14 at spatial_scale 1, 1/4, 1/8, 1/16 and 1/32.
  int n = 0;
  for (std::int64_t ps : {1, 2, 7, 14}) {
    for (double scale : {1.0, 0.25, 0.125, 0.0625, 0.03125}) {
      PrRoiPoolCaseConfig cfg;
      cfg.params = PrRoiPoolParams{scale, ps, ps};
      cfg.height = 10 + n % 5;
      cfg.width = 13 + n % 7;
      ++n;
      add("grid_" + std::to_string(ps) + "x" + std::to_string(ps) + "_" + scale_name(scale), cfg);
    }
  }

  const PrRoiPoolParams box_head{0.25, 7, 7}, mask_head{0.0625, 14, 14};
  PrRoiPoolCaseConfig c;
  c = {}; c.params = {0.5, 3, 5}; add("rectangular_pooled_3x5_scale_half", c);
  c = {}; c.params = {0.3, 2, 7}; add("scale_not_a_power_of_two", c);
  c = {}; c.params = box_head; c.num_rois = 0; add("no_rois", c);
  c = {}; c.params = box_head; c.channels = 0; add("zero_channels", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kOutside; add("rois_outside_map", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kPartlyOutside; add("rois_partly_outside_map", c);
  c = {}; c.params = mask_head; c.rois = RoiLayout::kStraddling; add("roi_larger_than_map", c);
  c = {}; c.params = {1.0, 3, 3}; c.rois = RoiLayout::kStraddling; c.height = 5; c.width = 6; add("roi_larger_than_map_scale1", c);
  c = {}; c.params = {1.0, 2, 3}; c.rois = RoiLayout::kSupportEdges; add("edges_on_support_boundary", c);
  c = {}; c.params = {1.0, 2, 3}; c.rois = RoiLayout::kPixelEdges; c.num_rois = 12; add("edges_on_pixels_scale1", c);
  c = {}; c.params = {0.25, 4, 2}; c.rois = RoiLayout::kPixelEdges; c.num_rois = 12; add("edges_on_pixels_scale_quarter", c);
  c = {}; c.params = {1.0, 2, 2}; c.rois = RoiLayout::kSubPixel; c.num_rois = 12; add("rois_smaller_than_a_pixel", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kSubPixel; c.num_rois = 12; add("rois_smaller_than_a_pixel_7x7", c);
  c = {}; c.params = {0.5, 3, 3}; c.rois = RoiLayout::kInsideOneCell; c.num_rois = 12; add("rois_inside_one_cell", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kInverted; add("inverted_rois", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kZeroWidth; add("zero_width_rois", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kZeroHeight; add("zero_height_rois", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kZeroSize; add("zero_size_rois", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kNaN; add("nan_coordinates", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kInfinite; add("infinite_and_huge_coordinates", c);
  c = {}; c.params = {0.5, 2, 2}; c.rois = RoiLayout::kLarge; c.height = 6; c.width = 7; add("large_rois_around_small_map", c);
  c = {}; c.params = {0.0625, 7, 7}; c.height = c.width = 1; add("feature_map_1x1", c);
  c = {}; c.params = {1.0, 2, 2}; c.height = c.width = 1; c.rois = RoiLayout::kStraddling; add("feature_map_1x1_scale1", c);
  c = {}; c.params = box_head; c.noncontiguous_input = true; add("noncontiguous_input", c);
  c = {}; c.params = box_head; c.noncontiguous_rois = true; add("noncontiguous_rois", c);
  c = {}; c.params = box_head; c.stride0_grad = true; add("stride0_grad_output", c);
  c = {}; c.params = mask_head; c.stride0_grad = true; c.noncontiguous_input = true; add("stride0_grad_noncontiguous_input", c);
  c = {}; c.params = {0.25, 2, 2}; c.channels = 1; c.height = 6; c.width = 7; c.num_rois = 70000;
  add("more_than_65535_rois", c);
  c = {}; c.params = box_head; c.batch = 4; c.num_rois = 12; c.batches = BatchLayout::kAllInFirst; add("all_rois_in_first_image", c);
  c = {}; c.params = box_head; c.batch = 4; c.num_rois = 12; add("rois_spread_over_batch", c);
  c = {}; c.params = box_head; c.batch = 3; c.batches = BatchLayout::kInteger; add("integer_batch_indices", c);
  c = {}; c.params = box_head; c.batch = 3; c.batches = BatchLayout::kFractional; add("fractional_batch_index_truncates", c);
  c = {}; c.params = box_head; c.features = Features::kConstant; add("constant_planes", c);
  c = {}; c.params = {0.25, 3, 3}; c.features = Features::kNaN; add("nan_features", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kWholeMap; add("roi_covers_whole_map", c);
  c = {}; c.params = box_head; c.channels = 64; c.height = 9; c.width = 11; add("many_channels", c);
  // Real-model scale: an FPN P2 level of an 800x1344 image (200x336 at 1/4), box head 7x7; few channels
  // and rois to keep the CPU checks short.
  c = {}; c.params = {0.25, 7, 7}; c.batch = 1; c.channels = 2; c.height = 200; c.width = 336; c.num_rois = 24;
  add("fpn_p2_box_head", c);
  c = {}; c.params = {0.03125, 14, 14}; c.batch = 2; c.channels = 2; c.height = 25; c.width = 42; c.num_rois = 16;
  add("fpn_p5_mask_head", c);
  return cases;
}

// Bad input: each call must raise an error naming the argument.
std::vector<harness::BadInputCase> prroi_pool_bad_inputs() {
  auto f32 = [](const at::Device& d) { return at::TensorOptions().dtype(at::kFloat).device(d); };
  auto good_input = [f32](const at::Device& d) { return at::rand({2, 3, 8, 8}, f32(d)); };
  auto good_rois = [f32](const at::Device& d) {
    return at::tensor({0.0f, 1.0f, 1.0f, 5.0f, 6.0f, 1.0f, 0.0f, 0.0f, 4.0f, 4.0f}, f32(at::kCPU)).view({2, 5}).to(d);
  };
  auto good_grad = [f32](const at::Device& d) { return at::ones({2, 3, 2, 2}, f32(d)); };
  const PrRoiPoolParams p{1.0, 2, 2};
  const std::array<std::int64_t, 4> shape{2, 3, 8, 8};
  std::vector<harness::BadInputCase> bad;
  auto add = [&](std::string name, std::function<void(const at::Device&)> call, std::vector<std::string> words) {
    bad.push_back({std::move(name), std::move(call), std::move(words)});
  };
  add("rois_wrong_columns", [=](const at::Device& d) { prroi_pool_forward(good_input(d), good_rois(d).slice(1, 0, 4), p); },
      {"rois", "[K, 5]"});
  add("rois_1d", [=](const at::Device& d) { prroi_pool_forward(good_input(d), good_rois(d).view({-1}), p); }, {"rois", "[K, 5]"});
  add("input_3d", [=](const at::Device& d) { prroi_pool_forward(good_input(d)[0], good_rois(d), p); }, {"input", "4-D"});
  add("batch_index_out_of_range", [=](const at::Device& d) {
        at::Tensor r = good_rois(d); r[1][0] = 2; prroi_pool_forward(good_input(d), r, p); }, {"rois[1, 0]", "[0, 2)"});
  add("batch_index_negative", [=](const at::Device& d) {
        at::Tensor r = good_rois(d); r[0][0] = -0.5; prroi_pool_forward(good_input(d), r, p); }, {"rois[0, 0]", "[0, 2)"});
  add("batch_index_nan", [=](const at::Device& d) {
        at::Tensor r = good_rois(d); r[1][0] = NAN; prroi_pool_forward(good_input(d), r, p); }, {"rois[1, 0]", "batch index"});
  add("backward_batch_index_out_of_range", [=](const at::Device& d) {
        at::Tensor r = good_rois(d); r[0][0] = 7; prroi_pool_backward(good_grad(d), r, p, shape); }, {"rois[0, 0]", "[0, 2)"});
  add("rois_backward_batch_index_nan", [=](const at::Device& d) {
        at::Tensor r = good_rois(d); r[1][0] = NAN; prroi_pool_rois_backward(good_grad(d), good_input(d), r, p); },
      {"rois[1, 0]", "batch index"});
  add("rois_dtype_mismatch", [=](const at::Device& d) { prroi_pool_forward(good_input(d), good_rois(d).to(at::kDouble), p); },
      {"rois dtype", "input dtype"});
  add("integer_input", [=](const at::Device& d) { prroi_pool_forward(good_input(d).to(at::kInt), good_rois(d).to(at::kInt), p); },
      {"input", "float64, float32, float16 or bfloat16"});
  add("rois_on_other_device", [=](const at::Device& d) {
        prroi_pool_forward(good_input(d), d.is_cpu() ? good_rois(d).to(at::kMeta) : good_rois(at::kCPU), p); },
      {"input and rois", "same device"});
  add("pooled_height_zero", [=](const at::Device& d) { prroi_pool_forward(good_input(d), good_rois(d), {1.0, 0, 2}); },
      {"pooled_height", "positive"});
  add("pooled_width_negative", [=](const at::Device& d) { prroi_pool_forward(good_input(d), good_rois(d), {1.0, 2, -3}); },
      {"pooled_width", "positive"});
  add("spatial_scale_zero", [=](const at::Device& d) { prroi_pool_forward(good_input(d), good_rois(d), {0.0, 2, 2}); },
      {"spatial_scale", "positive finite"});
  add("spatial_scale_negative", [=](const at::Device& d) { prroi_pool_forward(good_input(d), good_rois(d), {-0.25, 2, 2}); },
      {"spatial_scale", "positive finite"});
  add("spatial_scale_nan", [=](const at::Device& d) { prroi_pool_forward(good_input(d), good_rois(d), {NAN, 2, 2}); },
      {"spatial_scale", "positive finite"});
  add("spatial_scale_infinite", [=](const at::Device& d) { prroi_pool_forward(good_input(d), good_rois(d), {INFINITY, 2, 2}); },
      {"spatial_scale", "positive finite"});
  add("empty_feature_map_with_rois", [=](const at::Device& d) {
        prroi_pool_forward(at::rand({2, 3, 0, 8}, f32(d)), good_rois(d), p); }, {"height and width"});
  add("backward_grad_wrong_shape", [=](const at::Device& d) {
        prroi_pool_backward(at::ones({2, 3, 3, 2}, f32(d)), good_rois(d), p, shape); }, {"grad", "[2, 3, 2, 2]"});
  add("backward_negative_input_shape", [=](const at::Device& d) {
        prroi_pool_backward(good_grad(d), good_rois(d), p, {2, -3, 8, 8}); }, {"input shape", "non-negative"});
  add("backward_integer_grad", [=](const at::Device& d) {
        prroi_pool_backward(good_grad(d).to(at::kInt), good_rois(d).to(at::kInt), p, shape); },
      {"grad", "float64, float32, float16 or bfloat16"});
  add("rois_backward_grad_wrong_shape", [=](const at::Device& d) {
        prroi_pool_rois_backward(at::ones({2, 4, 2, 2}, f32(d)), good_input(d), good_rois(d), p); }, {"grad", "[2, 3, 2, 2]"});
  add("rois_backward_input_3d", [=](const at::Device& d) {
        prroi_pool_rois_backward(good_grad(d), good_input(d)[0], good_rois(d), p); }, {"input", "4-D"});
  add("rois_backward_input_dtype_mismatch", [=](const at::Device& d) {
        prroi_pool_rois_backward(good_grad(d), good_input(d).to(at::kDouble), good_rois(d), p); },
      {"input dtype", "grad dtype"});
  add("rois_backward_input_on_other_device", [=](const at::Device& d) {
        prroi_pool_rois_backward(good_grad(d), d.is_cpu() ? good_input(d).to(at::kMeta) : good_input(at::kCPU), good_rois(d), p); },
      {"grad and input", "same device"});
  add("rois_backward_rois_dtype_mismatch", [=](const at::Device& d) {
        prroi_pool_rois_backward(good_grad(d), good_input(d), good_rois(d).to(at::kHalf), p); }, {"rois dtype", "grad dtype"});
  return bad;
}

// Benchmark case (docs/benchmarks.md): the Faster R-CNN box head on the P2 level of an 800x1344 image, as
// IoU-Net uses PrRoIPool. The backward computes both gradients (features and roi coordinates), as training
// with a localization-confidence head does.
std::vector<harness::BenchCase> prroi_pool_benchmarks() {
  const PrRoiPoolParams params{0.25, 7, 7};
  const std::array<std::int64_t, 4> shape{2, 256, 200, 336};
  const std::uint64_t seed = 9701;
  harness::BenchCase bc;
  bc.name = "box_head_1000";
  bc.shape = "x[2,256,200,336] rois[1000,5] 7x7 scale 1/4";
  bc.bytes_note = "fwd: x + rois + output; bwd: grad_output (read twice) + x (read for the roi gradient) + rois + "
                  "grad_input read and written (atomic scatter) + grad_rois";
  bc.dtypes = {std::begin(kAllDTypes), std::end(kAllDTypes)};
  bc.make = [=](DType dtype) {
    const at::Tensor x = harness::bench_randn_cuda({shape.begin(), shape.end()}, dtype, seed);
    const at::Tensor rois = harness::bench_to_cuda(harness::bench_image_rois(1000, shape[0], seed + 1), dtype);
    const at::Tensor out = prroi_pool_forward(x, rois, params);
    const at::Tensor grad = harness::bench_randn_cuda(out.sizes().vec(), dtype, seed + 2);
    harness::BenchInstance inst;
    inst.forward = [x, rois, params] { (void)prroi_pool_forward(x, rois, params); };
    inst.backward = [grad, x, rois, params, shape] {
      (void)prroi_pool_backward(grad, rois, params, shape);
      (void)prroi_pool_rois_backward(grad, x, rois, params);
    };
    inst.bytes_forward = harness::bench_bytes(x) + harness::bench_bytes(rois) + harness::bench_bytes(out);
    inst.bytes_backward = 2 * harness::bench_bytes(grad) + 3 * harness::bench_bytes(x) + 2 * harness::bench_bytes(rois);
    return inst;
  };
  return {bc};
}

OpSpec prroi_pool_spec() {
  OpSpec spec;
  spec.name = "prroi_pool";
  spec.cases = prroi_pool_cases();
  spec.bad_inputs = prroi_pool_bad_inputs();
  spec.valid_call = [](const at::Device& d) {
    // A 4x4 ramp 4h + w, bins [0, 1.5]^2 ... [1.5, 3]^2 inside the map: each is the ramp at its center.
    const auto opts = at::TensorOptions().dtype(at::kFloat).device(d);
    const at::Tensor x = at::arange(16, opts).view({1, 1, 4, 4});
    const at::Tensor rois = at::tensor({0.0f, 0.0f, 0.0f, 3.0f, 3.0f}, opts.device(at::kCPU)).view({1, 5}).to(d);
    const at::Tensor out = prroi_pool_forward(x, rois, PrRoiPoolParams{1.0, 2, 2}).cpu();
    const at::Tensor expected = at::tensor({3.75f, 5.25f, 9.75f, 11.25f}).view({1, 1, 2, 2});
    TORCH_CHECK(at::allclose(out, expected, 1e-6, 1e-6), "prroi_pool: a valid call after the bad one returned wrong values");
  };
  spec.determinism.note =
      "CUDA input backward scatters with atomicAdd, so where bins overlap the summation order (and the last bits "
      "of grad_input) can vary between runs. The CUDA rois backward reduces each roi in one block in a fixed "
      "order, and the forward and the CPU backward are deterministic.";
  spec.benchmarks = prroi_pool_benchmarks();
  return spec;
}

DETOPS_REGISTER_OP_SPEC(prroi_pool_spec);

}  // namespace
}  // namespace detops
