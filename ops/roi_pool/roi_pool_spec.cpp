// RoIPool's op spec: seeded cases (the OPS.md regression cases among them), how to run the op and the
// reference, bad inputs, determinism and tolerances.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "detops/harness/eigen_bridge.h"
#include "detops/harness/bench_inputs.h"
#include "detops/harness/op_spec.h"
#include "detops/harness/roi_cases.h"
#include "detops/reference/roi_pool_reference.h"
#include "roi_pool/roi_pool_torch.h"

namespace detops {
namespace {

using harness::CaseData;
using harness::Device;
using harness::OpCase;
using harness::OpSpec;
using harness::Tensors;

enum class RoiLayout {
  kRandom,         // inside the image, at least one image pixel wide
  kOutside,        // entirely beyond the map's edges
  kPartlyOutside,  // crossing the left and bottom edges: the bins beyond them are empty
  kStraddling,     // larger than the map on every side: the outer bins are empty
  kDegenerate,     // x2 < x1 and y2 < y1: one pixel
  kZeroSize,       // x2 == x1, y2 == y1: one pixel
  kNaN,            // one NaN coordinate in each of the first four rois, one per column
  kInfinite,       // +-inf and +-1e30 coordinates (clamped to +-kRoiPoolCoordinateLimit)
  kWholeMap,
  kHalfway,        // every scaled coordinate is an exact half (k + 0.5, k of both signs)
};
using BatchLayout = harness::RoiBatchLayout;

// Feature values. Every layout starts from the same grid: each H x W plane holds a seeded random
// permutation of H*W evenly spaced values, spacing max(2 / (H*W - 1), 1e-3), centred on a seeded
// per-plane offset in [-1, 1). So any two values of one plane (hence of one bin) differ by >= 1e-3 and
// the fp64 finite-difference check (eps 1e-6) never crosses a kink of the max. In fp16 and bf16 the
// rounded values may tie; the reference sees the same rounded values, so the first-maximum rule must
// agree exactly there too.
enum class Features {
  kDistinct,     // the grid as described
  kNegative,     // the grid shifted below -0.25: the max of negatives, not 0
  kTies,         // values in {-1, 0, 1}: bins with several equal maxima
  kConstant,     // one value per plane: every element of every bin ties
  kNearHundred,  // spacing 1e-3 around 100: distinct in fp64/fp32, ties after fp16 (1/16) and bf16 (1/2) rounding
  kNaNMixed,     // ~15% of the elements NaN
  kNaNPlane,     // channel 0 all NaN; NaNs scattered elsewhere
  kInfinities,   // channel 0 with scattered +inf and -inf; channel 1 all -inf
};

struct RoiPoolCaseConfig {
  std::int64_t batch = 2, channels = 3, height = 12, width = 15, num_rois = 6;
  RoiPoolParams params;
  RoiLayout rois = RoiLayout::kRandom;
  BatchLayout batches = BatchLayout::kSpread;
  Features features = Features::kDistinct;
  bool noncontiguous_input = false;
  bool noncontiguous_rois = false;
  bool stride0_grad = false;
};

at::Tensor make_features(const RoiPoolCaseConfig& cfg, at::Generator& gen) {
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const std::int64_t planes = cfg.batch * cfg.channels, hw = cfg.height * cfg.width;
  at::Tensor x = at::empty({planes, hw}, opts);
  const double spacing = hw > 1 ? std::max(2.0 / static_cast<double>(hw - 1), 1e-3) : 1.0;
  const bool hundred = cfg.features == Features::kNearHundred;
  for (std::int64_t i = 0; i < planes; ++i) {
    const at::Tensor perm = at::randperm(hw, gen, opts);
    const double offset = at::rand({1}, gen, opts).item<double>() * 2 - 1;
    const double step = hundred ? 1e-3 : spacing;
    x[i] = (perm - static_cast<double>(hw - 1) / 2) * step + (hundred ? 100.0 : offset);
  }
  x = x.view({cfg.batch, cfg.channels, cfg.height, cfg.width});
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  switch (cfg.features) {
    case Features::kDistinct:
    case Features::kNearHundred: break;
    case Features::kNegative: x = x - x.amax() - 0.25; break;
    case Features::kTies: x = at::floor(at::rand(x.sizes(), gen, opts) * 3) - 1; break;
    case Features::kConstant: x = (at::rand({cfg.batch, cfg.channels, 1, 1}, gen, opts) * 2 - 1).expand_as(x).clone(); break;
    case Features::kNaNMixed: x.masked_fill_(at::rand(x.sizes(), gen, opts) < 0.15, nan); break;
    case Features::kNaNPlane:
      x.masked_fill_(at::rand(x.sizes(), gen, opts) < 0.1, nan);
      x.select(1, 0).fill_(nan);
      break;
    case Features::kInfinities: {
      const at::Tensor u = at::rand({cfg.batch, cfg.height, cfg.width}, gen, opts);
      x.select(1, 0).masked_fill_(u < 0.05, inf);
      x.select(1, 0).masked_fill_(u > 0.95, -inf);
      x.select(1, 1).fill_(-inf);
      break;
    }
  }
  return x;
}

// Bin edges as the kernels compute them in type F (float for fp32/fp16/bf16, double for fp64), clipped
// to the map; {} when a coordinate is NaN (the roi pools nothing).
template <typename F>
std::vector<std::int64_t> bin_edges(const double* roi, const RoiPoolCaseConfig& cfg) {
  const F scale = static_cast<F>(cfg.params.spatial_scale);
  const F limit = static_cast<F>(kRoiPoolCoordinateLimit);
  std::int64_t c[4];
  for (int i = 0; i < 4; ++i) {
    const F r = std::round(static_cast<F>(roi[i + 1]) * scale);
    if (std::isnan(r)) return {};
    c[i] = static_cast<std::int64_t>(std::min(std::max(r, -limit), limit));
  }
  const F bin_w = static_cast<F>(std::max<std::int64_t>(c[2] - c[0] + 1, 1)) / static_cast<F>(cfg.params.pooled_width);
  const F bin_h = static_cast<F>(std::max<std::int64_t>(c[3] - c[1] + 1, 1)) / static_cast<F>(cfg.params.pooled_height);
  auto clip = [](std::int64_t v, std::int64_t n) { return std::min(std::max<std::int64_t>(v, 0), n); };
  std::vector<std::int64_t> e;
  for (std::int64_t i = 0; i < cfg.params.pooled_height; ++i) {
    e.push_back(clip(static_cast<std::int64_t>(std::floor(static_cast<F>(i) * bin_h)) + c[1], cfg.height));
    e.push_back(clip(static_cast<std::int64_t>(std::ceil(static_cast<F>(i + 1) * bin_h)) + c[1], cfg.height));
  }
  for (std::int64_t j = 0; j < cfg.params.pooled_width; ++j) {
    e.push_back(clip(static_cast<std::int64_t>(std::floor(static_cast<F>(j) * bin_w)) + c[0], cfg.width));
    e.push_back(clip(static_cast<std::int64_t>(std::ceil(static_cast<F>(j + 1) * bin_w)) + c[0], cfg.width));
  }
  return e;
}

// The reference computes bin edges in fp64; fp32, fp16 and bf16 compute them in fp32, as torchvision
// does for fp32. The two differ for some roi sizes (for example 7 * fl32(31 / 7) != 31), where torchvision
// fp32 and fp64 disagree as well (suites/python/test_roi_pool.py checks both against torchvision there).
// The harness compares every dtype with the one fp64 reference, so its cases use rois whose edges agree
// in both precisions after rounding to each dtype: a roi that does not is widened by one map pixel (and
// its start moved by 0.1 px) until it does.
void make_edges_unambiguous(at::Tensor& rois, const RoiPoolCaseConfig& cfg, const std::string& case_name) {
  const double step = 1.0 / cfg.params.spatial_scale;
  const at::ScalarType rounded_types[] = {at::kFloat, at::kHalf, at::kBFloat16};
  auto round_to = [](const at::Tensor& t, at::ScalarType type) { return t.to(type).to(at::kDouble).contiguous(); };
  std::vector<at::Tensor> rounded;  // every roi rounded to each dtype at once; a widened row is redone alone
  for (at::ScalarType t : rounded_types) rounded.push_back(round_to(rois, t));
  for (std::int64_t k = 0; k < rois.size(0); ++k) {
    for (int attempt = 0;; ++attempt) {
      bool agree = true;
      for (const at::Tensor& r : rounded) {
        const double* row = r.data_ptr<double>() + k * 5;
        agree = agree && bin_edges<float>(row, cfg) == bin_edges<double>(row, cfg);
      }
      if (agree) break;
      if (attempt == 64) {
        throw std::logic_error("roi_pool case " + case_name + ": roi " + std::to_string(k) +
                               " has bin edges that differ between fp32 and fp64 and cannot be widened out of it");
      }
      rois[k][1] += 0.1 * step;
      rois[k][2] += 0.1 * step;
      rois[k][3] += 1.1 * step;
      rois[k][4] += 1.1 * step;
      for (size_t i = 0; i < rounded.size(); ++i) rounded[i][k] = round_to(rois[k], rounded_types[i]);
    }
  }
}

// Rois in input-image coordinates (feature size / spatial_scale).
at::Tensor make_rois(const RoiPoolCaseConfig& cfg, at::Generator& gen, const std::string& case_name) {
  const double s = cfg.params.spatial_scale;
  const double img_h = static_cast<double>(cfg.height) / s, img_w = static_cast<double>(cfg.width) / s;
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const std::int64_t k = cfg.num_rois;
  const harness::RandomRois random = harness::random_image_rois(k, img_w, img_h, gen);
  harness::RoiCorners r = random.corners;
  switch (cfg.rois) {
    case RoiLayout::kRandom: break;
    case RoiLayout::kOutside: harness::move_outside(r, img_w, img_h); break;
    case RoiLayout::kPartlyOutside: harness::move_partly_outside(r, img_w, img_h); break;
    case RoiLayout::kStraddling: r = harness::straddling_rois(random.u, img_w, img_h); break;
    case RoiLayout::kDegenerate: harness::invert(r); break;
    case RoiLayout::kZeroSize: harness::collapse_to_points(r); break;
    case RoiLayout::kNaN: harness::set_nan_corners(r); break;
    case RoiLayout::kInfinite: r = harness::infinite_rois(k, img_w, img_h); break;
    case RoiLayout::kWholeMap: r = harness::cycled_rows(k, {{0, 0, img_w, img_h}}); break;
    case RoiLayout::kHalfway: {
      // k + 0.5 with k in [-3, size + 2]: round half away from zero sends 2.5 to 3 and -2.5 to -3, where
      // round-half-to-even would give 2 and -2.
      auto halves = [&](double size) {
        return (at::floor(at::rand({k}, gen, opts) * (size + 6)) - 3 + 0.5) / s;
      };
      r.x1 = halves(static_cast<double>(cfg.width));
      r.y1 = halves(static_cast<double>(cfg.height));
      r.x2 = halves(static_cast<double>(cfg.width));
      r.y2 = halves(static_cast<double>(cfg.height));
      break;
    }
  }
  at::Tensor rois = harness::stack_rois(harness::roi_batch_column(cfg.batches, k, cfg.batch), r);
  make_edges_unambiguous(rois, cfg, case_name);
  return rois;
}

at::Tensor index_tensor(const reference::Index4d& t) {
  at::Tensor out = at::empty({t.dimension(0), t.dimension(1), t.dimension(2), t.dimension(3)}, at::kLong);
  std::copy_n(t.data(), t.size(), out.data_ptr<std::int64_t>());
  return out;
}

bool has_nonfinite_features(Features f) {
  return f == Features::kNaNMixed || f == Features::kNaNPlane || f == Features::kInfinities;
}

CaseData make_case(const RoiPoolCaseConfig& cfg, const std::string& name, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  CaseData d;
  const at::Tensor input = make_features(cfg, gen);
  d.inputs = {input, make_rois(cfg, gen, name)};
  d.differentiable = {0};
  const RoiPoolParams p = cfg.params;
  const std::array<std::int64_t, 4> shape{cfg.batch, cfg.channels, cfg.height, cfg.width};
  d.op_forward = [p, cfg](const Tensors& in) {
    at::Tensor x = in[0], rois = in[1];
    if (cfg.noncontiguous_input) x = x.transpose(2, 3).contiguous().transpose(2, 3);  // same values, W-major strides
    if (cfg.noncontiguous_rois) rois = at::cat({rois, rois}, 1).slice(1, 0, 5);    // row stride 10
    auto [output, argmax] = roi_pool_forward(x, rois, p);
    return Tensors{output, argmax};
  };
  // The op's backward consumes the op's own argmax; the reference recomputes its own from the input.
  d.op_backward = [p, shape](const Tensors& in, const Tensors& grad) {
    const auto fwd = roi_pool_forward(in[0], in[1], p);
    return Tensors{roi_pool_backward(grad[0], in[1], std::get<1>(fwd), p, shape)};
  };
  d.reference_forward = [p](const Tensors& in) {
    const reference::RoiPoolResult r = reference::roi_pool_forward(p, harness::to_tensor4d(in[0]), harness::to_matrix(in[1]));
    return Tensors{harness::from_tensor4d(r.output), index_tensor(r.argmax)};
  };
  d.reference_backward = [p](const Tensors& in, const Tensors& grad) {
    return Tensors{harness::from_tensor4d(reference::roi_pool_backward(
        p, harness::to_tensor4d(grad[0]), harness::to_tensor4d(in[0]), harness::to_matrix(in[1])))};
  };
  // A grad_input element is a plain sum of grad_output elements, so its sum of |terms| is the same
  // backward applied to |grad_output|.
  d.reference_backward_magnitude = [bwd = d.reference_backward](const Tensors& in, const Tensors& grad) {
    return bwd(in, {grad[0].abs(), grad[1]});
  };
  // argmax is an integer output with no gradient: its grad_output is zero, so it adds exactly nothing to
  // the finite-difference check's directional value.
  d.make_grad_output = [stride0 = cfg.stride0_grad](const at::Tensor& out, std::uint64_t s) {
    if (!out.is_floating_point()) return at::zeros_like(out);
    // What `out.sum().backward()` hands the backward: one value expanded to the output's shape.
    if (stride0) return at::ones({}, out.options()).expand(out.sizes());
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(s);
    return at::randn(out.sizes(), g, at::TensorOptions().dtype(at::kDouble)).to(out.options());
  };
  if (cfg.features == Features::kTies || cfg.features == Features::kConstant) {
    d.gradcheck_skip_reason = "tied maxima are kinks of the max: central differences there are one-sided";
  } else if (has_nonfinite_features(cfg.features)) {
    d.gradcheck_skip_reason = "NaN or infinite features: NaN/inf outputs make every difference quotient NaN";
  }
  // NaN roi coordinates are no reason to skip: they only produce empty bins (0, argmax -1).
  return d;
}

std::string scale_name(double scale) { return "s" + std::to_string(static_cast<int>(std::lround(1.0 / scale))); }

std::vector<OpCase> roi_pool_cases() {
  std::vector<OpCase> cases;
  std::uint64_t seed = 0x2B00'0000;
  auto add = [&](const std::string& name, RoiPoolCaseConfig cfg, std::map<Device, std::string> skip = {}) {
    cases.push_back(OpCase{name, ++seed, [cfg, name](std::uint64_t s) { return make_case(cfg, name, s); }, std::move(skip)});
  };

  // The parameter grid: pooled 1x1, 7x7 and 14x14 at spatial_scale 1, 1/4, 1/8, 1/16 and 1/32.
  int n = 0;
  for (std::int64_t ps : {1, 7, 14}) {
    for (double scale : {1.0, 0.25, 0.125, 0.0625, 0.03125}) {
      RoiPoolCaseConfig cfg;
      cfg.params = RoiPoolParams{scale, ps, ps};
      cfg.height = 10 + n % 5;
      cfg.width = 13 + n % 7;
      ++n;
      add("grid_" + std::to_string(ps) + "x" + std::to_string(ps) + "_" + scale_name(scale), cfg);
    }
  }

  const RoiPoolParams box_head{0.25, 7, 7}, mask_head{0.0625, 14, 14};
  RoiPoolCaseConfig c;
  c = {}; c.params = {0.5, 3, 5}; add("rectangular_pooled_3x5_scale_half", c);
  c = {}; c.params = {0.3, 2, 7}; add("scale_not_a_power_of_two", c);
  c = {}; c.params = box_head; c.num_rois = 0; add("no_rois", c);
  c = {}; c.params = box_head; c.channels = 0; add("zero_channels", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kOutside; add("rois_outside_map", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kPartlyOutside; add("rois_partly_outside_map", c);
  c = {}; c.params = mask_head; c.rois = RoiLayout::kStraddling; add("empty_bins_roi_larger_than_map", c);
  c = {}; c.params = {1.0, 14, 14}; c.rois = RoiLayout::kStraddling; c.height = 6; c.width = 5; add("empty_bins_scale1_small_map", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kDegenerate; add("degenerate_rois", c);
  c = {}; c.params = {1.0, 2, 3}; c.rois = RoiLayout::kDegenerate; add("degenerate_rois_scale1", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kZeroSize; add("zero_size_rois", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kNaN; add("nan_coordinates", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kInfinite; add("infinite_and_huge_coordinates", c);
  c = {}; c.params = {1.0, 1, 1}; c.rois = RoiLayout::kInfinite; add("infinite_coordinates_1x1", c);
  c = {}; c.params = {0.25, 3, 3}; c.rois = RoiLayout::kHalfway; c.num_rois = 16; add("round_half_away_from_zero", c);
  c = {}; c.params = {1.0, 4, 4}; c.rois = RoiLayout::kHalfway; c.num_rois = 16; add("round_half_away_from_zero_scale1", c);
  c = {}; c.params = {0.0625, 7, 7}; c.height = c.width = 1; add("feature_map_1x1", c);
  c = {}; c.params = {1.0, 2, 2}; c.height = c.width = 1; add("feature_map_1x1_scale1", c);
  c = {}; c.params = box_head; c.noncontiguous_input = true; add("noncontiguous_input", c);
  c = {}; c.params = box_head; c.noncontiguous_rois = true; add("noncontiguous_rois", c);
  c = {}; c.params = box_head; c.stride0_grad = true; add("stride0_grad_output", c);
  c = {}; c.params = mask_head; c.stride0_grad = true; c.noncontiguous_input = true; add("stride0_grad_noncontiguous_input", c);
  c = {}; c.params = {0.25, 2, 2}; c.channels = 1; c.height = 6; c.width = 7; c.num_rois = 70000;
  add("more_than_65535_rois", c);
  c = {}; c.params = box_head; c.batch = 4; c.num_rois = 12; c.batches = BatchLayout::kAllInFirst; add("all_rois_in_first_image", c);
  c = {}; c.params = box_head; c.batch = 4; c.num_rois = 12; add("rois_spread_over_batch", c);
  c = {}; c.params = box_head; c.batch = 3; c.batches = BatchLayout::kFractional; add("fractional_batch_index_truncates", c);
  c = {}; c.params = box_head; c.features = Features::kTies; add("ties_first_max_wins", c);
  c = {}; c.params = {1.0, 2, 2}; c.features = Features::kTies; c.rois = RoiLayout::kWholeMap; add("ties_whole_map_bins", c);
  c = {}; c.params = box_head; c.features = Features::kConstant; add("constant_planes_all_tie", c);
  c = {}; c.params = box_head; c.features = Features::kNegative; add("negative_values_only", c);
  c = {}; c.params = {0.25, 2, 2}; c.features = Features::kNegative; c.rois = RoiLayout::kStraddling; add("negative_values_with_empty_bins", c);
  c = {}; c.params = {0.125, 3, 3}; c.features = Features::kNearHundred; add("half_precision_rounding_ties", c);
  c = {}; c.params = {1.0, 1, 1}; c.features = Features::kNearHundred; c.rois = RoiLayout::kWholeMap; add("half_precision_rounding_ties_whole_map", c);
  c = {}; c.params = {0.25, 2, 2}; c.features = Features::kNaNMixed; add("nan_features_mixed", c);
  c = {}; c.params = box_head; c.features = Features::kNaNPlane; add("nan_features_whole_plane", c);
  c = {}; c.params = {0.25, 3, 3}; c.features = Features::kInfinities; add("infinite_features", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kWholeMap; add("roi_covers_whole_map", c);
  c = {}; c.params = {0.25, 7, 7}; c.channels = 64; c.height = 9; c.width = 11; add("many_channels", c);
  // Real-model scale: an FPN P2 level of an 800x1344 image (200x336 at 1/4), box head 7x7.
  c = {}; c.params = {0.25, 7, 7}; c.batch = 1; c.channels = 4; c.height = 200; c.width = 336; c.num_rois = 64;
  add("fpn_p2_box_head", c);
  c = {}; c.params = {0.03125, 14, 14}; c.batch = 2; c.channels = 2; c.height = 25; c.width = 42; c.num_rois = 16;
  add("fpn_p5_mask_head", c);
  return cases;
}

// Bad input: each call must raise an error naming the argument.
std::vector<harness::BadInputCase> roi_pool_bad_inputs() {
  auto f32 = [](const at::Device& d) { return at::TensorOptions().dtype(at::kFloat).device(d); };
  auto good_input = [f32](const at::Device& d) { return at::rand({2, 3, 8, 8}, f32(d)); };
  auto good_rois = [f32](const at::Device& d) {
    return at::tensor({0.0f, 1.0f, 1.0f, 5.0f, 6.0f, 1.0f, 0.0f, 0.0f, 4.0f, 4.0f}, f32(at::kCPU)).view({2, 5}).to(d);
  };
  auto good_argmax = [](const at::Device& d) {
    return at::zeros({2, 3, 2, 2}, at::TensorOptions().dtype(at::kInt).device(d));
  };
  const RoiPoolParams p{1.0, 2, 2};
  const std::array<std::int64_t, 4> shape{2, 3, 8, 8};
  std::vector<harness::BadInputCase> bad;
  auto add = [&](std::string name, std::function<void(const at::Device&)> call, std::vector<std::string> words) {
    bad.push_back({std::move(name), std::move(call), std::move(words)});
  };
  add("rois_wrong_columns", [=](const at::Device& d) { roi_pool_forward(good_input(d), good_rois(d).slice(1, 0, 4), p); },
      {"rois", "[K, 5]"});
  add("rois_1d", [=](const at::Device& d) { roi_pool_forward(good_input(d), good_rois(d).view({-1}), p); }, {"rois", "[K, 5]"});
  add("input_3d", [=](const at::Device& d) { roi_pool_forward(good_input(d)[0], good_rois(d), p); }, {"input", "4-D"});
  add("batch_index_out_of_range", [=](const at::Device& d) {
        at::Tensor r = good_rois(d); r[1][0] = 2; roi_pool_forward(good_input(d), r, p); }, {"rois[1, 0]", "[0, 2)"});
  add("batch_index_negative", [=](const at::Device& d) {
        at::Tensor r = good_rois(d); r[0][0] = -1; roi_pool_forward(good_input(d), r, p); }, {"rois[0, 0]", "[0, 2)"});
  add("batch_index_nan", [=](const at::Device& d) {
        at::Tensor r = good_rois(d); r[1][0] = NAN; roi_pool_forward(good_input(d), r, p); }, {"rois[1, 0]", "batch index"});
  add("backward_batch_index_out_of_range", [=](const at::Device& d) {
        at::Tensor r = good_rois(d); r[0][0] = 7;
        roi_pool_backward(at::ones({2, 3, 2, 2}, f32(d)), r, good_argmax(d), p, shape); }, {"rois[0, 0]", "[0, 2)"});
  add("rois_dtype_mismatch", [=](const at::Device& d) { roi_pool_forward(good_input(d), good_rois(d).to(at::kDouble), p); },
      {"rois dtype", "input dtype"});
  add("integer_input", [=](const at::Device& d) { roi_pool_forward(good_input(d).to(at::kInt), good_rois(d).to(at::kInt), p); },
      {"input", "float64, float32, float16 or bfloat16"});
  add("rois_on_other_device", [=](const at::Device& d) {
        roi_pool_forward(good_input(d), d.is_cpu() ? good_rois(d).to(at::kMeta) : good_rois(at::kCPU), p); },
      {"input and rois", "same device"});
  add("pooled_height_zero", [=](const at::Device& d) { roi_pool_forward(good_input(d), good_rois(d), {1.0, 0, 2}); },
      {"pooled_height", "positive"});
  add("pooled_width_negative", [=](const at::Device& d) { roi_pool_forward(good_input(d), good_rois(d), {1.0, 2, -3}); },
      {"pooled_width", "positive"});
  add("spatial_scale_zero", [=](const at::Device& d) { roi_pool_forward(good_input(d), good_rois(d), {0.0, 2, 2}); },
      {"spatial_scale"});
  add("spatial_scale_nan", [=](const at::Device& d) { roi_pool_forward(good_input(d), good_rois(d), {NAN, 2, 2}); },
      {"spatial_scale"});
  add("empty_feature_map_with_rois", [=](const at::Device& d) {
        roi_pool_forward(at::rand({2, 3, 0, 8}, f32(d)), good_rois(d), p); }, {"height and width"});
  // 65536 x 32768 elements per plane: argmax (int32) could not address them. Expanded from one element,
  // so nothing is allocated before the check.
  add("plane_too_large_for_int32_argmax", [=](const at::Device& d) {
        roi_pool_forward(at::zeros({1, 1, 1, 1}, f32(d)).expand({2, 1, 65536, 32768}), good_rois(d), p); },
      {"height * width", "2147483647", "int32"});
  add("backward_grad_wrong_shape", [=](const at::Device& d) {
        roi_pool_backward(at::ones({2, 3, 3, 2}, f32(d)), good_rois(d), good_argmax(d), p, shape); }, {"grad", "[2, 3, 2, 2]"});
  add("backward_argmax_int64", [=](const at::Device& d) {
        roi_pool_backward(at::ones({2, 3, 2, 2}, f32(d)), good_rois(d), good_argmax(d).to(at::kLong), p, shape); },
      {"argmax", "int32"});
  add("backward_argmax_wrong_shape", [=](const at::Device& d) {
        roi_pool_backward(at::ones({2, 3, 2, 2}, f32(d)), good_rois(d), good_argmax(d).view({2, 3, 4, 1}), p, shape); },
      {"argmax", "[2, 3, 2, 2]"});
  add("backward_argmax_on_other_device", [=](const at::Device& d) {
        roi_pool_backward(at::ones({2, 3, 2, 2}, f32(d)), good_rois(d),
                          d.is_cpu() ? good_argmax(d).to(at::kMeta) : good_argmax(at::kCPU), p, shape); },
      {"grad and argmax", "same device"});
  add("backward_argmax_out_of_range", [=](const at::Device& d) {
        at::Tensor a = good_argmax(d); a[1][2][0][1] = 64;
        roi_pool_backward(at::ones({2, 3, 2, 2}, f32(d)), good_rois(d), a, p, shape); },
      {"argmax[1, 2, 0, 1] = 64", "[0, H * W = 64)"});
  add("backward_argmax_below_minus_one", [=](const at::Device& d) {
        at::Tensor a = good_argmax(d); a[0][1][1][0] = -2;
        roi_pool_backward(at::ones({2, 3, 2, 2}, f32(d)), good_rois(d), a, p, shape); },
      {"argmax[0, 1, 1, 0] = -2", "-1"});
  return bad;
}

// Benchmark case (docs/benchmarks.md): the Faster R-CNN box head on the P2 level of an 800x1344 image.
std::vector<harness::BenchCase> roi_pool_benchmarks() {
  const RoiPoolParams params{0.25, 7, 7};
  const std::array<std::int64_t, 4> shape{2, 256, 200, 336};
  const std::uint64_t seed = 9101;
  harness::BenchCase bc;
  bc.name = "box_head_1000";
  bc.shape = "x[2,256,200,336] rois[1000,5] 7x7 scale 1/4";
  bc.bytes_note = "fwd: x + rois + output + argmax (int32); bwd: grad_output + argmax + rois + grad_input read and "
                  "written (atomic scatter)";
  bc.dtypes = {std::begin(kAllDTypes), std::end(kAllDTypes)};
  bc.make = [=](DType dtype) {
    const at::Tensor x = harness::bench_randn_cuda({shape.begin(), shape.end()}, dtype, seed);
    const at::Tensor rois = harness::bench_to_cuda(harness::bench_image_rois(1000, shape[0], seed + 1), dtype);
    const auto [out, argmax] = roi_pool_forward(x, rois, params);
    const at::Tensor grad = harness::bench_randn_cuda(out.sizes().vec(), dtype, seed + 2);
    harness::BenchInstance inst;
    inst.forward = [x, rois, params] { (void)roi_pool_forward(x, rois, params); };
    inst.backward = [grad, rois, argmax = argmax, params, shape] { (void)roi_pool_backward(grad, rois, argmax, params, shape); };
    inst.bytes_forward = harness::bench_bytes(x) + harness::bench_bytes(rois) + harness::bench_bytes(out) +
                         harness::bench_bytes(argmax);
    inst.bytes_backward = harness::bench_bytes(grad) + harness::bench_bytes(argmax) + harness::bench_bytes(rois) +
                          2 * harness::bench_bytes(x);
    return inst;
  };
  return {bc};
}

OpSpec roi_pool_spec() {
  OpSpec spec;
  spec.name = "roi_pool";
  spec.cases = roi_pool_cases();
  spec.bad_inputs = roi_pool_bad_inputs();
  spec.valid_call = [](const at::Device& d) {
    const auto opts = at::TensorOptions().dtype(at::kFloat).device(d);
    const at::Tensor x = at::arange(16, opts).view({1, 1, 4, 4});
    const at::Tensor rois = at::tensor({0.0f, 0.0f, 0.0f, 3.0f, 3.0f}, opts.device(at::kCPU)).view({1, 5}).to(d);
    const auto [out, argmax] = roi_pool_forward(x, rois, RoiPoolParams{1.0, 2, 2});
    const at::Tensor expected = at::tensor({5.0f, 7.0f, 13.0f, 15.0f}).view({1, 1, 2, 2});
    TORCH_CHECK(at::equal(out.cpu(), expected) && at::equal(argmax.cpu().to(at::kFloat), expected),
                "roi_pool: a valid call after the bad one returned wrong values");
  };
  spec.determinism.note =
      "CUDA backward scatters with atomicAdd, so where several bins share a max element the summation order "
      "(and the last bits of grad_input) can vary between runs; the forward and the CPU backward (channels in "
      "parallel, each summed in a fixed order) are deterministic.";
  spec.benchmarks = roi_pool_benchmarks();
  return spec;
}

DETOPS_REGISTER_OP_SPEC(roi_pool_spec);

}  // namespace
}  // namespace detops
