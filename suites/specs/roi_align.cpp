// RoIAlign's op spec: seeded cases (the OPS.md regression cases among them), how to run the op and the
// reference, bad inputs, determinism and tolerances.
#include "kit/spec_prelude.h"

#include "detops/harness/checks.h"
#include "detops/reference/roi_align_reference.h"
#include "kit/feature_cases.h"
#include "kit/half_accumulation.h"
#include "kit/roi_case_runs.h"
#include "kit/roi_cases.h"
#include "roi_align/roi_align_torch.h"

namespace detops {
namespace {

enum class RoiLayout {
  kRandom, kOutside, kPartlyOutside, kDegenerate, kZeroSize, kNaN, kWholeMap, kMapBorder, kHuge,
  kHalfAccumulation,  // kHalfAccumulationTerms rois on each of four pixels, one sample each, at the pixel itself
};
using BatchLayout = kit::RoiBatchLayout;

struct RoiAlignCaseConfig : kit::RoiCaseShape {
  RoiAlignParams params;
  RoiLayout rois = RoiLayout::kRandom;
  BatchLayout batches = BatchLayout::kSpread;
  bool half_accumulation = false;  // features from kit::half_accumulation_values, grad_output positive
};

// Rois in input-image coordinates (feature size / spatial_scale).
at::Tensor make_rois(const RoiAlignCaseConfig& cfg, at::Generator& gen) {
  const double img_h = static_cast<double>(cfg.height) / cfg.params.spatial_scale;
  const double img_w = static_cast<double>(cfg.width) / cfg.params.spatial_scale;
  const std::int64_t k = cfg.num_rois;
  kit::RoiCorners r = kit::random_image_rois(k, img_w, img_h, gen).corners;
  switch (cfg.rois) {
    case RoiLayout::kRandom: break;
    case RoiLayout::kOutside: kit::move_outside(r, img_w, img_h); break;
    case RoiLayout::kPartlyOutside: kit::move_partly_outside(r, img_w, img_h); break;
    case RoiLayout::kDegenerate: kit::invert(r); break;
    case RoiLayout::kZeroSize: kit::collapse_to_points(r); break;
    case RoiLayout::kNaN: kit::set_nan_corners(r); break;
    case RoiLayout::kWholeMap: r = kit::cycled_rows(k, {{0, 0, img_w, img_h}}); break;
    case RoiLayout::kMapBorder: {
      // One sample per bin (sampling_ratio 1, 1x1 bins, aligned=false, scale 1): the sample sits at the
      // roi's center, so these land exactly on y = -1, y = H, x = -1, x = W and just outside them.
      const double h = static_cast<double>(cfg.height), w = static_cast<double>(cfg.width);
      const double centers[][2] = {{-1, 3}, {h, 3}, {3, -1}, {3, w}, {-1.001, 3}, {h + 0.001, 3}, {h - 1, w - 1}, {-0.5, -0.5}};
      std::vector<std::array<double, 4>> rows;
      for (const auto& c : centers) rows.push_back({c[1] - 0.5, c[0] - 0.5, (c[1] - 0.5) + 1, (c[0] - 0.5) + 1});
      r = kit::cycled_rows(k, rows);
      break;
    }
    case RoiLayout::kHuge:  // far larger than the adaptive-grid cap
      r = kit::cycled_rows(k, {{-1e6, -2e6, 1e6, 3e6}});
      break;
    case RoiLayout::kHalfAccumulation:
      // Legacy mode, sampling_ratio 1, 1x1 bins, scale 1: a roi [x - 0.5, x + 0.5] samples at x, weight 1.
      r = kit::half_accumulation_rois(kit::half_accumulation_pixel_rows(
          [](double y, double x) { return std::array<double, 4>{x - 0.5, y - 0.5, x + 0.5, y + 0.5}; }));
      break;
  }
  return kit::stack_rois(kit::roi_batch_column(cfg.batches, k, cfg.batch), r);
}

CaseData make_case(const RoiAlignCaseConfig& cfg, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  CaseData d;
  const std::vector<std::int64_t> sizes{cfg.batch, cfg.channels, cfg.height, cfg.width};
  const at::Tensor input =
      cfg.half_accumulation ? kit::half_accumulation_values(sizes, gen) : kit::uniform_features(sizes, gen);
  d.inputs = {input, make_rois(cfg, gen)};
  d.differentiable = {0};
  const RoiAlignParams p = cfg.params;
  const std::array<std::int64_t, 4> shape{cfg.batch, cfg.channels, cfg.height, cfg.width};
  d.op_forward = [p, cfg](const Tensors& in) {
    at::Tensor x = in[0], rois = in[1];
    if (cfg.noncontiguous_input) x = kit::w_major(x);
    if (cfg.noncontiguous_rois) rois = kit::row_stride_10(rois);
    return Tensors{roi_align_forward(x, rois, p)};
  };
  d.op_backward = [p, shape](const Tensors& in, const Tensors& grad) {
    return Tensors{roi_align_backward(grad[0], in[1], p, shape)};
  };
  d.reference_forward = [p](const Tensors& in) {
    return Tensors{kit::from_tensor4d(reference::roi_align_forward(p, kit::to_tensor4d(in[0]), kit::to_matrix(in[1])))};
  };
  d.reference_backward = [p, shape](const Tensors& in, const Tensors& grad) {
    return Tensors{kit::from_tensor4d(reference::roi_align_backward(
        p, kit::to_tensor4d(grad[0]), kit::to_matrix(in[1]), {shape[0], shape[1], shape[2], shape[3]}))};
  };
  // Every output (and grad_input) element is a sum with nonnegative bilinear weights, so the sum of
  // |terms| is the same op applied to |input| (|grad_output|).
  d.reference_forward_magnitude = kit::abs_input_magnitude(d.reference_forward);
  d.reference_backward_magnitude = kit::abs_grad_magnitude(d.reference_backward);
  if (cfg.stride0_grad) d.make_grad_output = kit::stride0_grad_output();
  if (cfg.half_accumulation) d.make_grad_output = kit::half_accumulation_grad_output();
  if (cfg.rois == RoiLayout::kNaN) d.gradcheck_skip_reason = "NaN roi coordinates: nothing to differentiate through";
  return d;
}

std::vector<OpCase> roi_align_cases() {
  kit::CaseList<RoiAlignCaseConfig> add(0x2A11'0000, make_case);

  // The parameter grid: every sampling_ratio x aligned x pooled size, spatial_scale cycling 1/4..1/32.
  const double scales[] = {0.25, 0.125, 0.0625, 0.03125};
  const std::int64_t pooled[] = {1, 7, 14};
  int n = 0;
  for (std::int64_t sr : {0, 1, 2, 4}) {
    for (bool aligned : {false, true}) {
      for (std::int64_t ps : pooled) {
        RoiAlignCaseConfig cfg;
        cfg.params = RoiAlignParams{scales[n++ % 4], ps, ps, sr, aligned};
        cfg.height = 10 + n % 5;
        cfg.width = 13 + n % 7;
        add("grid_sr" + std::to_string(sr) + (aligned ? "_aligned_" : "_legacy_") + std::to_string(ps) + "x" +
                std::to_string(ps) + "_" + kit::scale_name(cfg.params.spatial_scale),
            cfg);
      }
    }
  }

  const RoiAlignParams mask_head{0.0625, 14, 14, 2, true}, box_head{0.25, 7, 7, 0, true};
  RoiAlignCaseConfig c;
  c = {}; c.params = box_head; c.num_rois = 0; add("no_rois", c);
  c = {}; c.params = box_head; c.channels = 0; add("zero_channels", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kOutside; add("rois_outside_map", c);
  c = {}; c.params = {0.125, 7, 7, 2, false}; c.rois = RoiLayout::kOutside; add("rois_outside_map_fixed_sr", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kPartlyOutside; add("rois_partly_outside_map", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kDegenerate; add("degenerate_rois_aligned_adaptive", c);
  c = {}; c.params = {0.25, 7, 7, 2, true}; c.rois = RoiLayout::kDegenerate; add("degenerate_rois_aligned_fixed_sr", c);
  c = {}; c.params = {0.25, 7, 7, 0, false}; c.rois = RoiLayout::kDegenerate; add("degenerate_rois_legacy", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kZeroSize; add("zero_size_rois_aligned", c);
  c = {}; c.params = {0.25, 7, 7, 0, false}; c.rois = RoiLayout::kZeroSize; add("zero_size_rois_legacy", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kNaN; add("nan_coordinates_adaptive", c);
  c = {}; c.params = {0.25, 7, 7, 2, false}; c.rois = RoiLayout::kNaN; add("nan_coordinates_fixed_sr", c);
  c = {}; c.params = {0.0625, 7, 7, 0, true}; c.height = c.width = 1; add("feature_map_1x1", c);
  c = {}; c.params = {1.0, 2, 2, 2, false}; c.height = c.width = 1; add("feature_map_1x1_scale1", c);
  kit::add_stride_and_batch_cases(add, box_head, mask_head, RoiAlignParams{0.25, 2, 2, 1, true});
  c = {}; c.params = box_head; c.batch = 3; c.batches = BatchLayout::kFractional; add("fractional_batch_index_truncates", c);
  c = {}; c.params = {1.0, 1, 1, 1, false}; c.rois = RoiLayout::kMapBorder; c.num_rois = 8; c.channels = 2; add("samples_on_map_border", c);
  c = {}; c.params = box_head; c.rois = RoiLayout::kWholeMap; add("roi_covers_whole_map", c);
  c = {}; c.params = {1.0, 1, 1, 0, true}; c.rois = RoiLayout::kHuge; c.num_rois = 1; c.channels = 1; c.height = 5; c.width = 6;
  add("huge_roi_adaptive_grid_capped", c);
  c = {}; c.params = {0.5, 3, 5, 2, true}; add("rectangular_pooled_3x5_scale_half", c);
  c = {}; c.params = {1.0, 7, 7, 0, false}; add("scale1_legacy_adaptive", c);
  c = {}; c.params = {0.25, 7, 7, 2, true}; c.channels = 64; c.height = 9; c.width = 11; add("many_channels", c);
  // Real-model scale: an FPN P2 level of an 800x1344 image (200x336 at 1/4), box-head 7x7, sr 2, aligned.
  c = {}; c.params = {0.25, 7, 7, 2, true}; c.batch = 1; c.channels = 4; c.height = 200; c.width = 336; c.num_rois = 64;
  add("fpn_p2_box_head", c);
  c = {}; c.params = {0.03125, 14, 14, 0, true}; c.batch = 2; c.channels = 2; c.height = 25; c.width = 42; c.num_rois = 16;
  add("fpn_p5_mask_head_adaptive", c);
  // Sums of thousands of terms (kit/half_accumulation.h): an fp16 / bf16 kernel must accumulate in fp32.
  // Forward: one 1x1 bin over the whole 16 x 16 map, a 64 x 64 sampling grid (4096 samples of values 24..40:
  // an fp16 running sum passes 65504, a bf16 one stalls), output ~32.
  c = {}; c.params = {1.0, 1, 1, 64, true}; c.batch = 1; c.channels = 2; c.height = c.width = 16; c.num_rois = 2;
  c.rois = RoiLayout::kWholeMap; c.half_accumulation = true; add("half_accumulation_sampling_grid_4096", c);
  // Backward: 4096 rois on each of four pixels (one sample at the pixel, weight 1), grad_output 0.5..1:
  // each of those grad_input elements sums 4096 positive terms to ~3000.
  c = {}; c.params = {1.0, 1, 1, 1, false}; c.batch = 1; c.channels = 2; c.height = c.width = 6;
  c.num_rois = 4 * kit::kHalfAccumulationTerms; c.rois = RoiLayout::kHalfAccumulation; c.half_accumulation = true;
  add("half_accumulation_overlapping_rois_backward", c);
  return std::move(add.cases);
}

// Bad input: each call must raise an error naming the argument.
std::vector<harness::BadInputCase> roi_align_bad_inputs() {
  const RoiAlignParams p{1.0, 2, 2, 2, true};
  kit::BadInputs bad;
  kit::RoiOpBadInputs op;
  op.empty_grid_accepted = true;
  op.forward = [p](const at::Tensor& x, const at::Tensor& rois, kit::RoiParamFault fault) {
    roi_align_forward(x, rois, kit::with_fault(p, fault));
  };
  op.backward = [p](const at::Tensor& grad, const at::Tensor& rois) { roi_align_backward(grad, rois, p, {2, 3, 8, 8}); };
  kit::add_roi_op_bad_inputs(bad, op);
  bad.add("sampling_ratio_too_large", [=](const at::Device& d) {
            roi_align_forward(at::rand({2, 3, 8, 8}, kit::f32_on(d)), kit::good_rois(d), {1.0, 2, 2, kRoiAlignMaxSamplingGrid + 1, true});
          },
          {"sampling_ratio"});
  return std::move(bad.cases);
}

// 64-bit indexing past 2^31 input elements (OPS.md: int32 overflow for big tensors). The input is
// [1, 1, 46341, 46341] = 2,147,488,281 elements, built on the device from a formula; rois sit near its
// far corner (flat offsets > 2^31) and near its origin, and the reference runs on 1024 x 1024 crops
// that share the map's edges with the rois shifted by the crop origin, so every boundary rule is the
// same. Coordinates are multiples of 256, exact in every dtype (bf16 has 8 significant bits).
constexpr std::int64_t kLargeSide = 46341;
constexpr std::int64_t kCrop = 1024;

harness::CheckResult check_large_input(DType dtype, bool backward) {
  harness::CheckResult r;
  const RoiAlignParams p{1.0, 7, 7, 2, true};
  const std::int64_t side = kLargeSide, far = kLargeSide - kCrop;
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::ScalarType st = harness::scalar_type_of(dtype);
  // rows 0-1: near the far corner (row 1 reaches past the right edge); row 2: near the origin.
  const at::Tensor rois_cpu = at::tensor({0.0, 46080.0, 46080.0, 46336.0, 46336.0,  //
                                          0.0, 45824.0, 46080.0, 46592.0, 46336.0,  //
                                          0.0, 256.0, 0.0, 512.0, 256.0},
                                         at::kDouble).view({3, 5});
  const at::Tensor rois = rois_cpu.to(cuda.dtype(st));
  const at::Tensor shift = at::tensor({0.0, static_cast<double>(far), static_cast<double>(far),
                                       static_cast<double>(far), static_cast<double>(far)}, at::kDouble);
  const at::Tensor far_rois = rois_cpu.slice(0, 0, 2) - shift, near_rois = rois_cpu.slice(0, 2, 3);
  // Positions near 46,000 px computed in fp32 are off by a few 2^-8 px; the map's slope is <= 0.48
  // per px, so 2e-2 bounds that rounding, while an index that wrapped at 2^31 reads another part of
  // the map, O(1) away.
  const harness::Tolerance tol = dtype == DType::kFloat64 ? harness::default_tolerance(dtype) : harness::Tolerance{2e-2, 2e-2};
  r.properties["input_shape"] = "[1, 1, 46341, 46341]";
  r.properties["input_elements"] = std::to_string(side * side);
  const at::ScalarType compute = dtype == DType::kFloat64 ? at::kDouble : at::kFloat;
  if (!backward) {
    at::Tensor x;
    {
      const at::Tensor ys = at::arange(side, cuda.dtype(compute)).view({side, 1});
      const at::Tensor xs = at::arange(side, cuda.dtype(compute)).view({1, side});
      x = at::sin(ys * 0.37 + xs * 0.11).to(st).view({1, 1, side, side});
    }
    const at::Tensor out = roi_align_forward(x, rois, p).cpu();
    const at::Tensor crop_far = x.slice(2, far, side).slice(3, far, side).cpu();
    const at::Tensor crop_near = x.slice(2, 0, kCrop).slice(3, 0, kCrop).cpu();
    x.reset();
    const at::Tensor ref_far = kit::from_tensor4d(
        reference::roi_align_forward(p, kit::to_tensor4d(crop_far), kit::to_matrix(far_rois)));
    const at::Tensor ref_near = kit::from_tensor4d(
        reference::roi_align_forward(p, kit::to_tensor4d(crop_near), kit::to_matrix(near_rois)));
    r.comparisons.push_back(harness::compare_tensors(out.slice(0, 0, 2), ref_far, tol));
    r.comparisons.push_back(harness::compare_tensors(out.slice(0, 2, 3), ref_near, tol));
  } else {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0x2A11'BEEF);
    const at::Tensor grad_cpu = at::randn({3, 1, 7, 7}, gen, at::TensorOptions().dtype(at::kDouble)).to(st);
    const at::Tensor gi = roi_align_backward(grad_cpu.to(at::kCUDA), rois, p, {1, 1, side, side});
    const at::Tensor gi_far = gi.slice(2, far, side).slice(3, far, side).cpu();
    const at::Tensor gi_near = gi.slice(2, 0, kCrop).slice(3, 0, kCrop).cpu();
    // Nothing may land outside the two crops: an index that wrapped would write elsewhere.
    const std::int64_t nonzero_total = at::count_nonzero(gi).item<std::int64_t>();
    const std::int64_t nonzero_crops = at::count_nonzero(gi_far).item<std::int64_t>() + at::count_nonzero(gi_near).item<std::int64_t>();
    r.properties["nonzero_outside_crops"] = std::to_string(nonzero_total - nonzero_crops);
    const at::Tensor g = grad_cpu.to(at::kDouble);
    const at::Tensor ref_far = kit::from_tensor4d(reference::roi_align_backward(
        p, kit::to_tensor4d(g.slice(0, 0, 2)), kit::to_matrix(far_rois), {1, 1, kCrop, kCrop}));
    const at::Tensor ref_near = kit::from_tensor4d(reference::roi_align_backward(
        p, kit::to_tensor4d(g.slice(0, 2, 3)), kit::to_matrix(near_rois), {1, 1, kCrop, kCrop}));
    r.comparisons.push_back(harness::compare_tensors(gi_far, ref_far, tol));
    r.comparisons.push_back(harness::compare_tensors(gi_near, ref_near, tol));
    if (nonzero_total != nonzero_crops) {
      r.outcome = harness::Outcome::kMismatch;
      r.message = std::to_string(nonzero_total - nonzero_crops) + " grad_input elements outside the rois' crops are nonzero";
    }
  }
  harness::summarize(r);
  return r;
}

// Past 2^31 output (forward) or grad_output (backward) elements: 43,830,000 rois x 1 channel x 7 x 7
// = 2,147,670,000, which takes the kernels' 64-bit index path. The first and last 1000 rois lie on
// a 64 x 64 map (the last ones have flat indices > 2^31) and are checked against the reference; all
// others lie far outside the map, so they sample nothing (no atomics in the backward) and must give 0.
harness::CheckResult check_large_output(DType dtype, bool backward) {
  harness::CheckResult r;
  constexpr std::int64_t kRois = 43'830'000, kEdge = 1000, kSide = 64;
  const RoiAlignParams p{1.0, 7, 7, 2, true};
  const at::ScalarType st = harness::scalar_type_of(dtype);
  const auto cuda = at::TensorOptions().device(at::kCUDA).dtype(st);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0x2A11'0B16);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  // In-map rois, rounded to the dtype first so the reference sees what the op sees.
  const at::Tensor u = at::rand({2 * kEdge, 4}, gen, f64);
  const at::Tensor x1 = u.select(1, 0) * 40, y1 = u.select(1, 1) * 40;
  const at::Tensor edge_rois = at::stack({at::zeros({2 * kEdge}, f64), x1, y1, x1 + 2 + u.select(1, 2) * 20,
                                          y1 + 2 + u.select(1, 3) * 20}, 1).to(st).to(at::kDouble);
  at::Tensor rois = at::empty({kRois, 5}, cuda);
  rois.select(1, 0).fill_(0);
  rois.slice(1, 1, 3).fill_(-1000);
  rois.slice(1, 3, 5).fill_(-990);
  rois.slice(0, 0, kEdge).copy_(edge_rois.slice(0, 0, kEdge));
  rois.slice(0, kRois - kEdge, kRois).copy_(edge_rois.slice(0, kEdge, 2 * kEdge));
  r.properties["elements"] = std::to_string(kRois * 49);
  const harness::Tolerance tol = harness::default_tolerance(dtype);
  const auto compare_rows = [&](const at::Tensor& actual, const at::Tensor& expected) {
    r.comparisons.push_back(harness::compare_tensors(actual, expected, tol));
  };
  const at::Tensor map_cpu = (at::arange(kSide * kSide, f64).view({1, 1, kSide, kSide}) * 0.05).sin().to(st).to(at::kDouble);
  if (!backward) {
    const at::Tensor out = roi_align_forward(map_cpu.to(cuda), rois, p);
    const at::Tensor ref = kit::from_tensor4d(
        reference::roi_align_forward(p, kit::to_tensor4d(map_cpu), kit::to_matrix(edge_rois)));
    compare_rows(out.slice(0, 0, kEdge).cpu(), ref.slice(0, 0, kEdge));
    compare_rows(out.slice(0, kRois - kEdge, kRois).cpu(), ref.slice(0, kEdge, 2 * kEdge));
    const std::int64_t nonzero_middle = at::count_nonzero(out.slice(0, kEdge, kRois - kEdge)).item<std::int64_t>();
    r.properties["nonzero_outside_map_rows"] = std::to_string(nonzero_middle);
    if (nonzero_middle != 0) {
      r.outcome = harness::Outcome::kMismatch;
      r.message = std::to_string(nonzero_middle) + " outputs of rois outside the map are nonzero";
    }
  } else {
    at::Tensor grad = at::zeros({kRois, 1, 7, 7}, cuda);
    const at::Tensor edge_grad = at::randn({2 * kEdge, 1, 7, 7}, gen, f64).to(st);
    grad.slice(0, 0, kEdge).copy_(edge_grad.slice(0, 0, kEdge));
    grad.slice(0, kRois - kEdge, kRois).copy_(edge_grad.slice(0, kEdge, 2 * kEdge));
    grad.slice(0, kEdge, kRois - kEdge).fill_(1);  // rois outside the map: must contribute nothing
    const at::Tensor gi = roi_align_backward(grad, rois, p, {1, 1, kSide, kSide}).cpu();
    const at::Tensor ref = kit::from_tensor4d(reference::roi_align_backward(
        p, kit::to_tensor4d(edge_grad.to(at::kDouble)), kit::to_matrix(edge_rois), {1, 1, kSide, kSide}));
    const at::Tensor mag = kit::from_tensor4d(reference::roi_align_backward(
        p, kit::to_tensor4d(edge_grad.to(at::kDouble).abs()), kit::to_matrix(edge_rois), {1, 1, kSide, kSide}));
    r.comparisons.push_back(harness::compare_tensors(gi, ref, tol, mag));
  }
  harness::summarize(r);
  return r;
}

// Benchmark cases (docs/benchmarks.md): Faster/Mask R-CNN R50-FPN on an 800x1344 image, the P2 level
// (x[2,256,200,336], spatial_scale 1/4). The first four: boxes inside the image, sampling_ratio 2, aligned.
// The rpn_* cases: RPN proposals (4..400 px, crossing the border), each cold and warm (_warm: the map, or
// grad_output, just written, as in a model).
struct RoiAlignBench {
  kit::RoiBench b;
  kit::RoiBenchForward forward;
  kit::RoiBenchBackward backward;
};

RoiAlignBench roi_align_bench(const std::string& name, std::int64_t num_rois, std::int64_t pooled,
                              std::int64_t sampling_ratio, bool aligned, std::uint64_t seed, kit::RoiBoxes boxes) {
  const RoiAlignParams params{0.25, pooled, pooled, sampling_ratio, aligned};
  const std::array<std::int64_t, 4> shape{2, 256, 200, 336};
  const std::string rois = boxes == kit::RoiBoxes::kProposals ? " proposals[" : " rois[";
  kit::RoiBench b{name,
                  "x[2,256,200,336]" + rois + std::to_string(num_rois) + ",5] " + std::to_string(pooled) + "x" +
                      std::to_string(pooled) + " scale 1/4 sr" + std::to_string(sampling_ratio) +
                      (sampling_ratio <= 0 ? " (adaptive)" : "") + (aligned ? " aligned" : ""),
                  "fwd: x + rois + output; bwd: grad_output + rois + grad_input read and written (atomic scatter)",
                  shape, num_rois, seed};
  b.boxes = boxes;
  kit::RoiBenchForward forward = [params](const at::Tensor& x, const at::Tensor& r) {
    return std::make_tuple(roi_align_forward(x, r, params), at::Tensor());
  };
  kit::RoiBenchBackward backward = [params, shape](const at::Tensor& grad, const at::Tensor&, const at::Tensor& r,
                                                   const at::Tensor&) {
    (void)roi_align_backward(grad, r, params, shape);
  };
  return {b, forward, backward};
}

harness::BenchCase roi_align_bench_case(const std::string& name, std::int64_t num_rois, std::int64_t pooled,
                                        std::uint64_t seed) {
  const RoiAlignBench r = roi_align_bench(name, num_rois, pooled, 2, true, seed, kit::RoiBoxes::kImageBoxes);
  return kit::roi_bench_case(r.b, r.forward, r.backward);
}

// A proposals case, cold and warm.
void add_rpn_bench_cases(std::vector<harness::BenchCase>& out, const std::string& name, std::int64_t num_rois,
                         std::int64_t pooled, std::int64_t sampling_ratio, bool aligned, std::uint64_t seed) {
  const RoiAlignBench r =
      roi_align_bench(name, num_rois, pooled, sampling_ratio, aligned, seed, kit::RoiBoxes::kProposals);
  for (harness::BenchCase& c : kit::roi_bench_cold_and_warm(r.b, r.forward, r.backward)) out.push_back(std::move(c));
}

std::vector<harness::BenchCase> roi_align_benchmarks() {
  std::vector<harness::BenchCase> out{
      roi_align_bench_case("box_head_1000", 1000, 7, 9001),        // inference: 1000 rois, box head
      roi_align_bench_case("box_head_train_1024", 1024, 7, 9011),  // training: 512 rois x 2 images
      roi_align_bench_case("mask_head_100", 100, 14, 9021),        // inference: 100 detections, mask head
      roi_align_bench_case("mask_head_512", 512, 14, 9031)};       // training-size mask head batch
  // 1000 proposals per image x 2 images. torchvision's Faster R-CNN box head (MultiScaleRoIAlign: sr 2, not
  // aligned); detectron2's ROIAlignV2 box head (adaptive, aligned); torchvision.ops.roi_align's defaults
  // (adaptive, not aligned); a mask head's positives, 128 per image (14x14, adaptive, aligned).
  add_rpn_bench_cases(out, "rpn_box_sr2", 2000, 7, 2, false, 9041);
  add_rpn_bench_cases(out, "rpn_box_sr0_aligned", 2000, 7, 0, true, 9051);
  add_rpn_bench_cases(out, "rpn_box_sr0", 2000, 7, 0, false, 9061);
  add_rpn_bench_cases(out, "rpn_mask_sr0_aligned", 256, 14, 0, true, 9071);
  return out;
}

OpSpec roi_align_spec() {
  OpSpec spec = kit::op_spec("roi_align", roi_align_cases(), roi_align_bad_inputs());
  for (DType dtype : kAllDTypes) {
    for (bool backward : {false, true}) {
      spec.extra_checks.push_back({backward ? "large_index_backward" : "large_index_forward", dtype_name(dtype),
                                   Device::kCuda, [dtype, backward] { return check_large_input(dtype, backward); }});
      spec.extra_checks.push_back({backward ? "large_output_backward" : "large_output_forward", dtype_name(dtype),
                                   Device::kCuda, [dtype, backward] { return check_large_output(dtype, backward); }});
    }
  }
  spec.valid_call = [](const at::Device& d) {
    const auto opts = at::TensorOptions().dtype(at::kFloat).device(d);
    const at::Tensor x = at::ones({1, 1, 4, 4}, opts);
    const at::Tensor rois = at::tensor({0.0f, 0.0f, 0.0f, 3.0f, 3.0f}, opts.device(at::kCPU)).view({1, 5}).to(d);
    const at::Tensor out = roi_align_forward(x, rois, RoiAlignParams{1.0, 2, 2, 2, true}).cpu();
    TORCH_CHECK(at::allclose(out, at::ones_like(out)), "roi_align: a valid call after the bad one returned wrong values");
  };
  spec.tolerance_scales[DType::kFloat32] = harness::ToleranceScale{
      10, 1,
      "sampling positions are computed in fp32, as torchvision does: at feature-map coordinates up to ~400 px "
      "a position is off by up to ~|x| * 2^-23 * a few roundings ~ 1e-4 px, and features that change by O(1) "
      "per pixel turn that into up to ~1e-4 of absolute error"};
  spec.determinism.note =
      "CUDA backward scatters with atomicAdd, so the summation order (and the last bits of grad_input) can vary "
      "between runs; the forward and the CPU backward are deterministic.";
  spec.benchmarks = roi_align_benchmarks();
  return spec;
}

DETOPS_REGISTER_OP_SPEC(roi_align_spec);

}  // namespace
}  // namespace detops
