// RoIPool's op spec: seeded cases (the OPS.md regression cases among them), how to run the op and the
// reference, bad inputs, determinism and tolerances.
#include "kit/spec_prelude.h"

#include <algorithm>

#include "detops/harness/checks.h"
#include "detops/harness/compare.h"
#include "detops/reference/roi_pool_reference.h"
#include "kit/feature_cases.h"
#include "kit/half_accumulation.h"
#include "kit/roi_case_runs.h"
#include "kit/roi_cases.h"
#include "roi_pool/roi_pool_torch.h"

namespace detops {
namespace {

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
using BatchLayout = kit::RoiBatchLayout;

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
  // Bins around torchvision's start of the max, -FLT_MAX (7 channels): 0 all NaN; 1 all -inf; 2 NaN and -inf
  // only; 3 values below -FLT_MAX only (-inf outside fp64); 4 half NaN, half the grid (many small bins all
  // NaN, many mixed); 5 one element in 8 from the grid, the rest -FLT_MAX, -1e300, -inf and NaN in equal
  // shares; 6 the grid. -FLT_MAX is exact in fp32 and -inf in fp16 and bf16.
  kAroundFltMax,
};

// The memory format the op gets the input in. CUDA's forward reads the map channels last (the NHWC kernel) when
// it is channels last, or when there are at least map / 8 outputs (common/roi_nhwc.h), else channels first.
enum class InputFormat {
  kAsIs,                    // contiguous (or kit::w_major with noncontiguous_input)
  kChannelsLast,            // channels-last memory format: the NHWC kernel without a copy
  kChannelsLastMisaligned,  // the same one element into its buffer: not 16-byte aligned, so element loads
};

struct RoiPoolCaseConfig : kit::RoiCaseShape {
  RoiPoolParams params;
  RoiLayout rois = RoiLayout::kRandom;
  BatchLayout batches = BatchLayout::kSpread;
  Features features = Features::kDistinct;
  InputFormat format = InputFormat::kAsIs;
  bool half_accumulation_grad = false;  // grad_output from kit::half_accumulation_grad_output (positive)
};

// x with the case's memory format (and strides: noncontiguous_input).
at::Tensor formatted_input(const at::Tensor& x, const RoiPoolCaseConfig& cfg) {
  if (cfg.noncontiguous_input) return kit::w_major(x);
  if (cfg.format == InputFormat::kChannelsLast) return x.contiguous(at::MemoryFormat::ChannelsLast);
  if (cfg.format == InputFormat::kChannelsLastMisaligned) {
    const at::Tensor nhwc = x.permute({0, 2, 3, 1});
    at::Tensor view = at::empty({x.numel() + 1}, x.options()).narrow(0, 1, x.numel()).view(nhwc.sizes());
    view.copy_(nhwc);
    return view.permute({0, 3, 1, 2});
  }
  return x;
}

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
    case Features::kConstant: x = kit::constant_planes(x, gen); break;
    case Features::kNaNMixed: kit::sprinkle_nan(x, 0.15, gen); break;
    case Features::kNaNPlane:
      kit::sprinkle_nan(x, 0.1, gen);
      x.select(1, 0).fill_(nan);
      break;
    case Features::kInfinities: {
      const at::Tensor u = at::rand({cfg.batch, cfg.height, cfg.width}, gen, opts);
      x.select(1, 0).masked_fill_(u < 0.05, inf);
      x.select(1, 0).masked_fill_(u > 0.95, -inf);
      x.select(1, 1).fill_(-inf);
      break;
    }
    case Features::kAroundFltMax: {
      if (cfg.channels != 7) throw std::logic_error("roi_pool: kAroundFltMax features need 7 channels");
      const double flt_max = static_cast<double>(std::numeric_limits<float>::max());
      const at::Tensor u = at::rand({cfg.batch, 3, cfg.height, cfg.width}, gen, opts);
      x.select(1, 0).fill_(nan);
      x.select(1, 1).fill_(-inf);
      x.select(1, 2).copy_(at::where(u.select(1, 0) < 0.5, at::full_like(u.select(1, 0), nan), -inf));
      x.select(1, 3).mul_(1e299).sub_(4e300);  // the grid (|x| <= 2) moved into [-4.2e300, -3.8e300]
      x.select(1, 4).masked_fill_(u.select(1, 1) < 0.5, nan);
      const at::Tensor v = u.select(1, 2), c5 = x.select(1, 5);
      c5.masked_fill_((v >= 0.125) & (v < 0.34375), -flt_max);
      c5.masked_fill_((v >= 0.34375) & (v < 0.5625), -1e300);
      c5.masked_fill_((v >= 0.5625) & (v < 0.78125), -inf);
      c5.masked_fill_(v >= 0.78125, nan);
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
  const kit::RandomRois random = kit::random_image_rois(k, img_w, img_h, gen);
  kit::RoiCorners r = random.corners;
  switch (cfg.rois) {
    case RoiLayout::kRandom: break;
    case RoiLayout::kOutside: kit::move_outside(r, img_w, img_h); break;
    case RoiLayout::kPartlyOutside: kit::move_partly_outside(r, img_w, img_h); break;
    case RoiLayout::kStraddling: r = kit::straddling_rois(random.u, img_w, img_h); break;
    case RoiLayout::kDegenerate: kit::invert(r); break;
    case RoiLayout::kZeroSize: kit::collapse_to_points(r); break;
    case RoiLayout::kNaN: kit::set_nan_corners(r); break;
    case RoiLayout::kInfinite: r = kit::infinite_rois(k, img_w, img_h); break;
    case RoiLayout::kWholeMap: r = kit::cycled_rows(k, {{0, 0, img_w, img_h}}); break;
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
  at::Tensor rois = kit::stack_rois(kit::roi_batch_column(cfg.batches, k, cfg.batch), r);
  make_edges_unambiguous(rois, cfg, case_name);
  return rois;
}

at::Tensor index_tensor(const reference::Index4d& t) {
  at::Tensor out = at::empty({t.dimension(0), t.dimension(1), t.dimension(2), t.dimension(3)}, at::kLong);
  std::copy_n(t.data(), t.size(), out.data_ptr<std::int64_t>());
  return out;
}

bool has_nonfinite_features(Features f) {
  return f == Features::kNaNMixed || f == Features::kNaNPlane || f == Features::kInfinities ||
         f == Features::kAroundFltMax;
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
    const at::Tensor x = formatted_input(in[0], cfg);
    const at::Tensor rois = cfg.noncontiguous_rois ? kit::row_stride_10(in[1]) : in[1];
    if (cfg.format != InputFormat::kAsIs && in[0].numel() > 0 && !x.is_contiguous(at::MemoryFormat::ChannelsLast)) {
      throw std::logic_error("roi_pool case: the input was to be channels last");
    }
    auto [output, argmax] = roi_pool_forward(x, rois, p);
    return Tensors{output, argmax};
  };
  // The op's backward consumes the op's own argmax (from an input of the case's format); the reference recomputes
  // its own from the input.
  d.op_backward = [p, shape, cfg](const Tensors& in, const Tensors& grad) {
    const auto fwd = roi_pool_forward(cfg.format == InputFormat::kAsIs ? in[0] : formatted_input(in[0], cfg), in[1], p);
    return Tensors{roi_pool_backward(grad[0], in[1], std::get<1>(fwd), p, shape)};
  };
  d.reference_forward = [p](const Tensors& in) {
    const reference::RoiPoolResult r = reference::roi_pool_forward(p, kit::to_tensor4d(in[0]), kit::to_matrix(in[1]));
    return Tensors{kit::from_tensor4d(r.output), index_tensor(r.argmax)};
  };
  // The reference's output is in fp64; the op stores its output in the dtype under test, where the default's
  // -FLT_MAX (a bin without values above it) is -inf for fp16 and bf16. So the output is compared with the
  // reference's rounded to that dtype, which changes nothing else (every other output is an input value of
  // that dtype, or 0), with the harness's tolerance; argmax exactly.
  d.judge_forward = [](const Tensors&, const Tensors& out, const Tensors& ref, DType dtype) {
    const at::Tensor rounded = ref[0].to(harness::scalar_type_of(dtype)).to(at::kDouble);
    return std::vector<harness::CompareResult>{
        harness::compare_tensors(out[0], rounded, harness::default_tolerance(dtype)),
        harness::compare_tensors(out[1], ref[1], harness::Tolerance{})};
  };
  d.reference_backward = [p](const Tensors& in, const Tensors& grad) {
    return Tensors{kit::from_tensor4d(reference::roi_pool_backward(
        p, kit::to_tensor4d(grad[0]), kit::to_tensor4d(in[0]), kit::to_matrix(in[1])))};
  };
  // A grad_input element is a plain sum of grad_output elements, so its sum of |terms| is the same
  // backward applied to |grad_output|.
  d.reference_backward_magnitude = kit::abs_grad_magnitude(d.reference_backward);
  // argmax is an integer output with no gradient: its grad_output is zero, so it adds exactly nothing to
  // the finite-difference check's directional value.
  d.make_grad_output = [stride0 = cfg.stride0_grad](const at::Tensor& out, std::uint64_t s) {
    if (!out.is_floating_point()) return at::zeros_like(out);
    if (stride0) return kit::stride0_grad_output()(out, s);
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(s);
    return at::randn(out.sizes(), g, at::TensorOptions().dtype(at::kDouble)).to(out.options());
  };
  if (cfg.half_accumulation_grad) d.make_grad_output = kit::half_accumulation_grad_output();
  if (cfg.features == Features::kTies || cfg.features == Features::kConstant) {
    d.gradcheck_skip_reason = "tied maxima are kinks of the max: central differences there are one-sided";
  } else if (has_nonfinite_features(cfg.features)) {
    d.gradcheck_skip_reason = "NaN or infinite features: NaN/inf outputs make every difference quotient NaN";
  }
  // NaN roi coordinates are no reason to skip: they only produce empty bins (0, argmax -1).
  return d;
}

std::vector<OpCase> roi_pool_cases() {
  kit::CaseList<RoiPoolCaseConfig> add(0x2B00'0000, make_case);
  kit::add_pooled_scale_grid(add, {1, 7, 14});
  const RoiPoolParams box_head{0.25, 7, 7}, mask_head{0.0625, 14, 14};
  kit::add_pooling_basic_cases(add, box_head);
  RoiPoolCaseConfig c;
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
  kit::add_stride_and_batch_cases(add, box_head, mask_head, RoiPoolParams{0.25, 2, 2});
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
  kit::add_pooling_map_size_cases(add, box_head, /*p2_channels=*/4, /*p2_rois=*/64);
  // Sums of thousands of terms (kit/half_accumulation.h): the backward adds every roi's gradient to the
  // bin's max element. 4096 rois over the whole map, 2x2 bins: each plane's four bin maxima receive 4096
  // positive grad_output values (0.5..1) each, ~3000 in all: an fp16 / bf16 accumulator stalls.
  c = {}; c.params = {1.0, 2, 2}; c.batch = 1; c.channels = 2; c.height = 6; c.width = 7; c.num_rois = kit::kHalfAccumulationTerms;
  c.rois = RoiLayout::kWholeMap; c.half_accumulation_grad = true; add("half_accumulation_overlapping_rois_backward", c);
  // Both ways of starting a bin's max (RoiPoolParams::exact_max): torchvision's default, from -FLT_MAX, and the
  // exact max, on bins of NaN only, -inf only, NaN and -inf, values below -FLT_MAX (fp64), exactly -FLT_MAX
  // (fp32, fp64), mixed NaN, and in fp16 / bf16 (-FLT_MAX stored as -inf). Forward, argmax and the backward's
  // routing (no gradient for argmax -1) against the reference; the first cases of each mode pool whole maps,
  // so every channel's bin is of one kind.
  for (bool exact : {false, true}) {
    const std::string mode = exact ? "_exact_max" : "_torchvision_max";
    auto around = [&](RoiPoolParams p, std::int64_t rois) {
      c = {};
      c.params = p;
      c.params.exact_max = exact;
      c.channels = 7;
      c.num_rois = rois;
      c.features = Features::kAroundFltMax;
    };
    around({1.0, 1, 1}, 4); c.rois = RoiLayout::kWholeMap; add("around_flt_max_whole_map" + mode, c);
    around({0.25, 3, 3}, 6); add("around_flt_max_bins" + mode, c);
    around({1.0, 4, 4}, 10); add("around_flt_max_small_bins_scale1" + mode, c);
  }
  c = {}; c.params = {0.25, 2, 2, true}; c.features = Features::kNaNMixed; add("nan_features_mixed_exact_max", c);
  c = {}; c.params = box_head; c.params.exact_max = true; c.features = Features::kNaNPlane;
  add("nan_features_whole_plane_exact_max", c);
  c = {}; c.params = {0.25, 3, 3, true}; c.features = Features::kInfinities; add("infinite_features_exact_max", c);
  // CUDA's channels-last forward (roi_pool/roi_pool_nhwc.cuh). Most cases above take it through the copy (at least map
  // / 8 outputs: 7x7 over the default map is 882 outputs for 1080 elements); those with 1x1 to 2x3 bins and
  // fpn_p2_box_head stay channels first. The NHWC kernel scans a bin with a subgroup of P lanes per pixel (P = 1, 2, 4
  // or 8 lanes of 16 bytes: the fewest covering the channels) and holds 256 / P bins per block: 3 channels are one
  // partial lane (P = 1: several rois per block); 13, 24 and 37 other subgroup sizes and partial lanes, 37 two or three
  // channel tiles (fp32, fp64) and a 14x14 roi split over several blocks; channel counts not a multiple of the lane (3,
  // 13, 37) and a misaligned map take element loads, 8 and 24 channels 16-byte ones. A channels-last input runs the
  // kernel without the copy at any size, so the value cases of the channels-first ones (ties, NaN / -inf with both
  // starts of the max, empty bins, bins wider than the kernel's unroll of 4 pixels) run again with one.
  const InputFormat nhwc = InputFormat::kChannelsLast;
  c = {}; c.params = box_head; c.format = nhwc; add("channels_last_input", c);
  c = {}; c.params = box_head; c.channels = 8; c.format = nhwc; add("channels_last_input_8_channels", c);
  c = {}; c.params = box_head; c.channels = 8; c.format = InputFormat::kChannelsLastMisaligned;
  add("channels_last_input_misaligned", c);
  c = {}; c.params = box_head; c.channels = 13; c.num_rois = 40; add("many_rois_13_channels_small_map", c);
  c = {}; c.params = {0.25, 5, 4}; c.channels = 24; c.num_rois = 20; c.height = 17; c.width = 21;
  c.rois = RoiLayout::kPartlyOutside; add("partly_outside_map_24_channels", c);
  c = {}; c.params = {0.25, 14, 14}; c.channels = 37; c.height = 30; c.width = 41; c.num_rois = 5;
  add("pooled_14x14_37_channels", c);
  c = {}; c.params = mask_head; c.channels = 37; c.rois = RoiLayout::kStraddling; c.format = nhwc;
  add("empty_bins_37_channels_channels_last", c);
  c = {}; c.params = {1.0, 1, 1}; c.channels = 13; c.height = 20; c.width = 23; c.rois = RoiLayout::kWholeMap;
  c.format = nhwc; add("whole_map_1x1_13_channels_channels_last", c);
  c = {}; c.params = {0.25, 2, 3}; c.channels = 3; c.height = 26; c.width = 19; c.num_rois = 3; c.format = nhwc;
  add("wide_bins_channels_last", c);
  c = {}; c.params = {1.0, 2, 2}; c.features = Features::kTies; c.rois = RoiLayout::kWholeMap; c.format = nhwc;
  add("ties_whole_map_bins_channels_last", c);
  c = {}; c.params = {1.0, 1, 1}; c.channels = 13; c.features = Features::kNearHundred; c.rois = RoiLayout::kWholeMap;
  c.format = nhwc; add("half_precision_rounding_ties_whole_map_channels_last", c);
  c = {}; c.params = {0.25, 2, 2}; c.channels = 13; c.features = Features::kNaNMixed; c.format = nhwc;
  add("nan_features_mixed_channels_last", c);
  c = {}; c.params = {0.25, 2, 2, true}; c.channels = 13; c.features = Features::kNaNMixed; c.format = nhwc;
  add("nan_features_mixed_exact_max_channels_last", c);
  c = {}; c.params = {0.25, 2, 2}; c.features = Features::kNegative; c.rois = RoiLayout::kStraddling; c.format = nhwc;
  add("negative_values_with_empty_bins_channels_last", c);
  for (bool exact : {false, true}) {
    c = {}; c.params = {1.0, 1, 1}; c.params.exact_max = exact; c.channels = 7; c.num_rois = 4;
    c.features = Features::kAroundFltMax; c.rois = RoiLayout::kWholeMap; c.format = nhwc;
    add(std::string("around_flt_max_whole_map") + (exact ? "_exact_max" : "_torchvision_max") + "_channels_last", c);
  }
  // The same starts through 16-byte loads (8 channels): 1-pixel bins of NaN only (scale 1, 4x4 bins) and a plane
  // of -inf (kInfinities' channel 1).
  for (bool exact : {false, true}) {
    c = {}; c.params = {1.0, 4, 4}; c.params.exact_max = exact; c.channels = 8; c.num_rois = 10;
    c.features = Features::kNaNMixed; c.format = nhwc;
    const std::string mode = exact ? "_exact_max" : "_torchvision_max";
    add("nan_features_small_bins_8_channels" + mode + "_channels_last", c);
  }
  c = {}; c.params = {0.25, 3, 3, true}; c.channels = 8; c.features = Features::kInfinities; c.format = nhwc;
  add("infinite_features_exact_max_8_channels_channels_last", c);
  return std::move(add.cases);
}

// Bad input: each call must raise an error naming the argument.
std::vector<harness::BadInputCase> roi_pool_bad_inputs() {
  auto f32 = kit::f32_on;
  auto good_input = [f32](const at::Device& d) { return at::rand({2, 3, 8, 8}, f32(d)); };
  auto good_rois = kit::good_rois;
  auto good_argmax = [](const at::Device& d) {
    return at::zeros({2, 3, 2, 2}, at::TensorOptions().dtype(at::kInt).device(d));
  };
  const RoiPoolParams p{1.0, 2, 2};
  const std::array<std::int64_t, 4> shape{2, 3, 8, 8};
  kit::BadInputs bad;
  kit::RoiOpBadInputs op;
  op.empty_grid_accepted = true;
  op.forward = [p](const at::Tensor& x, const at::Tensor& rois, kit::RoiParamFault fault) {
    roi_pool_forward(x, rois, kit::with_fault(p, fault));
  };
  op.backward = [=](const at::Tensor& grad, const at::Tensor& rois) {
    roi_pool_backward(grad, rois, good_argmax(grad.device()), p, shape);
  };
  kit::add_roi_op_bad_inputs(bad, op);
  auto add = [&](std::string name, kit::BadCall call, std::vector<std::string> words) {
    bad.add(std::move(name), std::move(call), std::move(words));
  };
  add("spatial_scale_nan", [=](const at::Device& d) { roi_pool_forward(good_input(d), good_rois(d), {NAN, 2, 2}); },
      {"spatial_scale"});
  // The first invalid roi as CUDA's channels-last kernel reports it (lowest index of several): a channels-last input,
  // and 40 rois over the 8 x 8 map (map / 8 outputs and more: the copy path).
  auto rois_with_batch = [f32](const at::Device& d, std::int64_t k, std::vector<std::pair<std::int64_t, double>> set) {
    at::Tensor r = at::tensor({0.0f, 1.0f, 1.0f, 5.0f, 6.0f}, f32(at::kCPU)).view({1, 5}).repeat({k, 1});
    for (const auto& [row, value] : set) r[row][0] = value;
    return r.to(d);
  };
  add("batch_index_out_of_range_channels_last", [=](const at::Device& d) {
        roi_pool_forward(good_input(d).contiguous(at::MemoryFormat::ChannelsLast),
                         rois_with_batch(d, 4, {{3, -1.0}, {1, 2.0}}), p); },
      {"rois[1, 0]", "[0, 2)"});
  add("batch_index_invalid_many_rois", [=](const at::Device& d) {
        roi_pool_forward(good_input(d), rois_with_batch(d, 40, {{17, NAN}, {5, 3.0}, {39, 2.0}}), p); },
      {"rois[5, 0]", "[0, 2)"});
  // 65536 x 32768 elements per plane: argmax (int32) could not address them. Expanded from one element,
  // so nothing is allocated before the check.
  add("plane_too_large_for_int32_argmax", [=](const at::Device& d) {
        roi_pool_forward(at::zeros({1, 1, 1, 1}, f32(d)).expand({2, 1, 65536, 32768}), good_rois(d), p); },
      {"height * width", "2147483647", "int32"});
  add("backward_grad_3d", [=](const at::Device& d) {
        roi_pool_backward(at::ones({3, 2, 2}, f32(d)), good_rois(d), good_argmax(d), p, shape); },
      {"grad", "4-D"});
  add("backward_argmax_int64", [=](const at::Device& d) {
        roi_pool_backward(at::ones({2, 3, 2, 2}, f32(d)), good_rois(d), good_argmax(d).to(at::kLong), p, shape); },
      {"argmax", "int32"});
  add("backward_argmax_wrong_shape", [=](const at::Device& d) {
        roi_pool_backward(at::ones({2, 3, 2, 2}, f32(d)), good_rois(d), good_argmax(d).view({2, 3, 4, 1}), p, shape); },
      {"argmax", "[2, 3, 2, 2]"});
  add("backward_argmax_on_other_device", [=](const at::Device& d) {
        roi_pool_backward(at::ones({2, 3, 2, 2}, f32(d)), good_rois(d),
                          kit::other_device(good_argmax(d), d), p, shape); },
      {"grad and argmax", "same device"});
  add("backward_argmax_out_of_range", [=](const at::Device& d) {
        at::Tensor a = good_argmax(d); a[1][2][0][1] = 64;
        roi_pool_backward(at::ones({2, 3, 2, 2}, f32(d)), good_rois(d), a, p, shape); },
      {"argmax[1, 2, 0, 1] = 64", "[0, H * W = 64)"});
  add("backward_argmax_below_minus_one", [=](const at::Device& d) {
        at::Tensor a = good_argmax(d); a[0][1][1][0] = -2;
        roi_pool_backward(at::ones({2, 3, 2, 2}, f32(d)), good_rois(d), a, p, shape); },
      {"argmax[0, 1, 1, 0] = -2", "-1"});
  return std::move(bad.cases);
}

// 64-bit offsets past 2^31 elements of one image (OPS.md: int32 overflow for big tensors): the input is
// [1, 8, 16512, 16512] (2,181,038,080 elements; a plane of 272,646,144 fits argmax's int32), built on the device
// from sin(0.37 y + 0.11 x + 0.7 c), channels first (the channels-first kernel: 3 rois are far below map / 8) or
// channels last (the NHWC kernel, whose pixel offsets h * W * C + w * C then need 64 bits). Two rois sit at the
// far corner (one reaches past the right edge, so its last bin columns are empty), one at the origin; the
// reference runs on 512 x 512 crops that share the map's edges, with the rois shifted by the crop's origin and
// its argmax mapped back to the map's plane. Coordinates are multiples of 128, exact in every dtype (bf16 has 8
// significant bits), and every roi is 385 px, bins of exactly 55: fp32 and fp64 bin edges agree.
constexpr std::int64_t kLargeSide = 16512, kLargeChannels = 8, kLargeCrop = 512;

harness::CheckResult check_large_index(DType dtype, bool channels_last) {
  harness::CheckResult r;
  const RoiPoolParams p{1.0, 7, 7};
  const std::int64_t side = kLargeSide, far = kLargeSide - kLargeCrop;
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::ScalarType st = harness::scalar_type_of(dtype);
  const at::Tensor rois_cpu = at::tensor({0.0, 16128.0, 16128.0, 16512.0, 16512.0,  //
                                          0.0, 16256.0, 16000.0, 16640.0, 16384.0,  //
                                          0.0, 0.0, 0.0, 384.0, 384.0},
                                         at::kDouble).view({3, 5});
  const at::Tensor shift = at::tensor({0.0, static_cast<double>(far), static_cast<double>(far),
                                       static_cast<double>(far), static_cast<double>(far)}, at::kDouble);
  const at::Tensor far_rois = rois_cpu.slice(0, 0, 2) - shift, near_rois = rois_cpu.slice(0, 2, 3);
  r.properties["input_shape"] = "[1, 8, 16512, 16512]";
  r.properties["memory_format"] = channels_last ? "channels_last" : "contiguous";
  r.properties["input_elements"] = std::to_string(kLargeChannels * side * side);
  const at::ScalarType compute = dtype == DType::kFloat64 ? at::kDouble : at::kFloat;
  at::Tensor x;
  {
    const auto o = cuda.dtype(compute);
    const at::Tensor ys = at::arange(side, o) * 0.37, xs = at::arange(side, o) * 0.11;
    const at::Tensor cs = at::arange(kLargeChannels, o) * 0.7;
    // In place, so the map exists at most twice (its compute dtype and its dtype): 20 GB at most (fp64).
    if (channels_last) {
      at::Tensor a = ys.view({side, 1, 1}) + xs.view({1, side, 1}) + cs.view({1, 1, kLargeChannels});
      x = a.sin_().to(st).view({1, side, side, kLargeChannels}).permute({0, 3, 1, 2});
    } else {
      at::Tensor a = cs.view({kLargeChannels, 1, 1}) + ys.view({1, side, 1}) + xs.view({1, 1, side});
      x = a.sin_().to(st).view({1, kLargeChannels, side, side});
    }
  }
  const auto [out_dev, argmax_dev] = roi_pool_forward(x, rois_cpu.to(cuda.dtype(st)), p);
  const at::Tensor out = out_dev.cpu(), argmax = argmax_dev.cpu();
  const at::Tensor crop_far = x.slice(2, far, side).slice(3, far, side).cpu();
  const at::Tensor crop_near = x.slice(2, 0, kLargeCrop).slice(3, 0, kLargeCrop).cpu();
  x.reset();
  // The reference's argmax is h * 512 + w within its crop: the map's is (h + origin) * side + (w + origin).
  auto on_map = [side](const at::Tensor& a, std::int64_t origin) {
    const at::Tensor h = at::div(a, kLargeCrop, "floor") + origin, w = at::remainder(a, kLargeCrop) + origin;
    return at::where(a < 0, a, h * side + w);
  };
  const harness::Tolerance tol = harness::default_tolerance(dtype);
  for (int part = 0; part < 2; ++part) {
    const std::int64_t origin = part == 0 ? far : 0;
    const reference::RoiPoolResult ref = reference::roi_pool_forward(
        p, kit::to_tensor4d(part == 0 ? crop_far : crop_near), kit::to_matrix(part == 0 ? far_rois : near_rois));
    const at::Tensor rows_out = part == 0 ? out.slice(0, 0, 2) : out.slice(0, 2, 3);
    const at::Tensor rows_argmax = part == 0 ? argmax.slice(0, 0, 2) : argmax.slice(0, 2, 3);
    r.comparisons.push_back(harness::compare_tensors(rows_out, kit::from_tensor4d(ref.output), tol));
    const at::Tensor expected_argmax = on_map(index_tensor(ref.argmax), origin);
    r.comparisons.push_back(harness::compare_tensors(rows_argmax.to(at::kLong), expected_argmax, harness::Tolerance{}));
  }
  harness::summarize(r);
  return r;
}

// Benchmark cases (docs/benchmarks.md): the Faster R-CNN box head on the P2 level of an 800x1344 image, on
// boxes inside the image (box_head_1000) and on 1000 RPN proposals per image x 2 images (rpn_box, crossing
// the border), the latter cold and warm (rpn_box_warm: the map, or grad_output, just written).
std::vector<harness::BenchCase> roi_pool_benchmarks() {
  const RoiPoolParams params{0.25, 7, 7};
  const std::array<std::int64_t, 4> shape{2, 256, 200, 336};
  const std::string bytes_note =
      "fwd: x + rois + output + argmax (int32); bwd: grad_output + argmax + rois + grad_input read and written "
      "(atomic scatter)";
  const kit::RoiBenchForward forward = [params](const at::Tensor& x, const at::Tensor& rois) {
    return roi_pool_forward(x, rois, params);
  };
  const kit::RoiBenchBackward backward = [params, shape](const at::Tensor& grad, const at::Tensor&,
                                                         const at::Tensor& rois, const at::Tensor& argmax) {
    (void)roi_pool_backward(grad, rois, argmax, params, shape);
  };
  std::vector<harness::BenchCase> out{kit::roi_bench_case(
      kit::RoiBench{"box_head_1000", "x[2,256,200,336] rois[1000,5] 7x7 scale 1/4", bytes_note, shape, 1000, 9101},
      forward, backward)};
  kit::RoiBench rpn{"rpn_box", "x[2,256,200,336] proposals[2000,5] 7x7 scale 1/4", bytes_note, shape, 2000, 9111};
  rpn.boxes = kit::RoiBoxes::kProposals;
  for (harness::BenchCase& c : kit::roi_bench_cold_and_warm(rpn, forward, backward)) out.push_back(std::move(c));
  return out;
}

OpSpec roi_pool_spec() {
  OpSpec spec = kit::op_spec("roi_pool", roi_pool_cases(), roi_pool_bad_inputs());
  for (DType dtype : kAllDTypes) {
    for (bool channels_last : {false, true}) {
      spec.extra_checks.push_back({channels_last ? "large_index_channels_last_forward" : "large_index_forward",
                                   dtype_name(dtype), Device::kCuda,
                                   [dtype, channels_last] { return check_large_index(dtype, channels_last); }});
    }
  }
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
