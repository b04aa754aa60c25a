// Precise RoI Pooling's op spec: seeded cases, how to run the op and the reference (gradients for the
// features and the roi coordinates), bad inputs, determinism and tolerances.
#include "kit/spec_prelude.h"

#include "detops/reference/prroi_pool_reference.h"
#include "kit/feature_cases.h"
#include "kit/half_accumulation.h"
#include "kit/roi_case_runs.h"
#include "kit/roi_cases.h"
#include "prroi_pool/prroi_pool_torch.h"

namespace detops {
namespace {

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
  kHalfAccumulation,  // kHalfAccumulationTerms rois [x - 0.5, x + 0.5] x [y - 0.5, y + 0.5] on one pixel
};

// Batch indices are k mod N + 0.5 unless a case sets otherwise: truncation selects image k mod N, and
// the finite-difference check can perturb column 0 by +-eps without changing the image (derivative 0).
enum class BatchLayout { kSpreadHalf, kAllInFirst, kInteger, kFractional };

enum class Features {
  kUniform,   // uniform in [-1, 1)
  kConstant,  // one value per plane
  kNaN,       // ~10% of the elements NaN
  kHalfAccumulation,  // kit::half_accumulation_values
};

struct PrRoiPoolCaseConfig : kit::RoiCaseShape {
  PrRoiPoolParams params;
  RoiLayout rois = RoiLayout::kRandom;
  BatchLayout batches = BatchLayout::kSpreadHalf;
  Features features = Features::kUniform;
  bool half_accumulation_grad = false;  // grad_output from kit::half_accumulation_grad_output (positive)
};

at::Tensor make_features(const PrRoiPoolCaseConfig& cfg, at::Generator& gen) {
  const std::vector<std::int64_t> sizes{cfg.batch, cfg.channels, cfg.height, cfg.width};
  if (cfg.features == Features::kHalfAccumulation) return kit::half_accumulation_values(sizes, gen);
  at::Tensor x = kit::uniform_features(sizes, gen);
  switch (cfg.features) {
    case Features::kUniform:
    case Features::kHalfAccumulation: break;
    case Features::kConstant: x = kit::constant_planes(x, gen); break;
    case Features::kNaN: kit::sprinkle_nan(x, 0.1, gen); break;
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
  const kit::RandomRois random = kit::random_image_rois(k, img_w, img_h, gen);
  const at::Tensor& u = random.u;
  kit::RoiCorners r = random.corners;
  at::Tensor &x1 = r.x1, &y1 = r.y1, &x2 = r.x2, &y2 = r.y2;
  // Integers in [lo, lo + n) as doubles.
  auto integers = [&](double lo, double n) { return at::floor(at::rand({k}, gen, opts) * n) + lo; };
  switch (cfg.rois) {
    case RoiLayout::kRandom: break;
    case RoiLayout::kOutside: kit::move_outside(r, img_w, img_h); break;  // beyond the support (-1, W) x (-1, H)
    case RoiLayout::kPartlyOutside: kit::move_partly_outside(r, img_w, img_h); break;
    case RoiLayout::kStraddling: r = kit::straddling_rois(u, img_w, img_h); break;
    case RoiLayout::kInverted: kit::invert(r); break;
    case RoiLayout::kZeroWidth: x2 = x1.clone(); break;
    case RoiLayout::kZeroHeight: y2 = y1.clone(); break;
    case RoiLayout::kZeroSize: kit::collapse_to_points(r); break;
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
      r = kit::cycled_rows(k, {{-1, -1, map_w, map_h}, {-2, 0.5, -1, 2.5}, {map_w, 0.5, map_w + 1.5, 2.5},
                                   {0, 0, map_w - 1, map_h - 1}, {-1, map_h - 1, 0.5, map_h}, {1.5, -1.5, 3, -1}}, s);
      break;
    }
    case RoiLayout::kNaN: kit::set_nan_corners(r); break;
    case RoiLayout::kInfinite: r = kit::infinite_rois(k, img_w, img_h); break;
    case RoiLayout::kLarge:  // [-2000, 3000 + ...] x [-1500, 2500 + ...] map px around the map
      x1 = (-2000 - u.select(1, 0) * 100) / s;
      y1 = (-1500 - u.select(1, 1) * 100) / s;
      x2 = (3000 + u.select(1, 2) * 100) / s;
      y2 = (2500 + u.select(1, 3) * 100) / s;
      break;
    case RoiLayout::kWholeMap: r = kit::cycled_rows(k, {{0, 0, img_w, img_h}}); break;
    case RoiLayout::kHalfAccumulation:
      // One target pixel, (1, 1): the fp64 reference gradients run 2 * 96 forwards of every roi.
      r = kit::half_accumulation_rois({{0.5, 0.5, 1.5, 1.5}}, s);
      break;
  }
  at::Tensor b = at::arange(k, opts).remainder(static_cast<double>(cfg.batch));
  switch (cfg.batches) {
    case BatchLayout::kSpreadHalf: b = b + 0.5; break;
    case BatchLayout::kAllInFirst: b = at::full({k}, 0.5, opts); break;
    case BatchLayout::kInteger: break;
    case BatchLayout::kFractional: b = b + 0.75; break;
  }
  return kit::stack_rois(b, r);
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
    return cfg.noncontiguous_input ? kit::w_major(x) : x;
  };
  auto rois_view = [cfg](const at::Tensor& r) {
    return cfg.noncontiguous_rois ? kit::row_stride_10(r) : r;
  };
  d.op_forward = [p, input_view, rois_view](const Tensors& in) {
    return Tensors{prroi_pool_forward(input_view(in[0]), rois_view(in[1]), p)};
  };
  d.op_backward = [p, shape, input_view, rois_view](const Tensors& in, const Tensors& grad) {
    const at::Tensor rois = rois_view(in[1]);
    return Tensors{prroi_pool_backward(grad[0], rois, p, shape), prroi_pool_rois_backward(grad[0], input_view(in[0]), rois, p)};
  };
  d.reference_forward = [p](const Tensors& in) {
    return Tensors{kit::from_tensor4d(reference::prroi_pool_forward(p, kit::to_tensor4d(in[0]), kit::to_matrix(in[1])))};
  };
  d.reference_backward = [p](const Tensors& in, const Tensors& grad) {
    const reference::PrRoiPoolGrads g = reference::prroi_pool_backward(
        p, kit::to_tensor4d(grad[0]), kit::to_tensor4d(in[0]), kit::to_matrix(in[1]));
    return Tensors{kit::from_tensor4d(g.input), kit::from_matrix(g.rois)};
  };
  // An output (and a grad_input element) is a sum with nonnegative weights, so its sum of |terms| is the
  // same function of |input| (|grad_output|). A grad_rois element is a sum over (c, ph, pw) of signed
  // terms; the reference reports their sum of |terms| itself.
  d.reference_forward_magnitude = kit::abs_input_magnitude(d.reference_forward);
  d.reference_backward_magnitude = [p](const Tensors& in, const Tensors& grad) {
    const reference::PrRoiPoolGrads g = reference::prroi_pool_backward(
        p, kit::to_tensor4d(grad[0].abs()), kit::to_tensor4d(in[0]), kit::to_matrix(in[1]));
    return Tensors{kit::from_tensor4d(g.input), kit::from_matrix(g.rois_magnitude)};
  };
  if (cfg.stride0_grad) d.make_grad_output = kit::stride0_grad_output();
  if (cfg.half_accumulation_grad) d.make_grad_output = kit::half_accumulation_grad_output();
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
  // Roi k's output rows depend on roi k (and the whole input) only: the rois' differences by rows (CaseData::fd_rows).
  d.fd_rows = CaseData::FdRows{{1}, nullptr};
  // Bin edges exactly on pixel boundaries (kPixelEdges, kSupportEdges) need no skip: the surface is
  // continuous, so the bin average is continuously differentiable in its edges (only its second
  // derivative jumps there), and central differences agree with the gradient to O(eps).
  return d;
}

std::vector<OpCase> prroi_pool_cases() {
  kit::CaseList<PrRoiPoolCaseConfig> add(0x9F00'0000, make_case);
  kit::add_pooled_scale_grid(add, {1, 2, 7, 14});
  const PrRoiPoolParams box_head{0.25, 7, 7}, mask_head{0.0625, 14, 14};
  kit::add_pooling_basic_cases(add, box_head);
  PrRoiPoolCaseConfig c;
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
  kit::add_stride_and_batch_cases(add, box_head, mask_head, PrRoiPoolParams{0.25, 2, 2});
  c = {}; c.params = box_head; c.batch = 3; c.batches = BatchLayout::kInteger; add("integer_batch_indices", c);
  c = {}; c.params = box_head; c.batch = 3; c.batches = BatchLayout::kFractional; add("fractional_batch_index_truncates", c);
  c = {}; c.params = box_head; c.features = Features::kConstant; add("constant_planes", c);
  c = {}; c.params = {0.25, 3, 3}; c.features = Features::kNaN; add("nan_features", c);
  kit::add_pooling_map_size_cases(add, box_head, /*p2_channels=*/2, /*p2_rois=*/24);
  // Sums of thousands of terms (kit/half_accumulation.h): an fp16 / bf16 kernel must accumulate in fp32.
  // Forward: one 1x1 bin over a 2 x 8192 map of values 24..40; each row's integral sums 8193 pixels of
  // weight ~1/8192, ~0.004 each, to ~32: an fp16 running sum stalls near 16 (half its ulp there is 0.008),
  // a bf16 one near 2.
  c = {}; c.params = {1.0, 1, 1}; c.batch = 1; c.channels = 1; c.height = 2; c.width = 2 * kit::kHalfAccumulationTerms;
  c.num_rois = 1; c.rois = RoiLayout::kWholeMap; c.batches = BatchLayout::kAllInFirst; c.features = Features::kHalfAccumulation;
  add("half_accumulation_bin_8192_pixels_wide", c);
  // Backward: 4096 one-pixel rois on one pixel, grad_output 0.5..1: the pixel's weight is 0.75^2, so its
  // grad_input element sums 4096 positive terms of 0.28..0.56 to ~1700 (its neighbours' terms ~0.07 each).
  c = {}; c.params = {1.0, 1, 1}; c.batch = 1; c.channels = 1; c.height = c.width = 6; c.num_rois = kit::kHalfAccumulationTerms;
  c.rois = RoiLayout::kHalfAccumulation; c.batches = BatchLayout::kAllInFirst; c.half_accumulation_grad = true;
  add("half_accumulation_overlapping_rois_backward", c);
  return std::move(add.cases);
}

// Bad input: each call must raise an error naming the argument.
std::vector<harness::BadInputCase> prroi_pool_bad_inputs() {
  auto f32 = kit::f32_on;
  auto good_input = [f32](const at::Device& d) { return at::rand({2, 3, 8, 8}, f32(d)); };
  auto good_rois = kit::good_rois;
  auto good_grad = [f32](const at::Device& d) { return at::ones({2, 3, 2, 2}, f32(d)); };
  const PrRoiPoolParams p{1.0, 2, 2};
  const std::array<std::int64_t, 4> shape{2, 3, 8, 8};
  kit::BadInputs bad;
  kit::RoiOpBadInputs op;
  op.negative_batch_index = -0.5;
  op.spatial_scale_words = {"spatial_scale", "positive finite"};
  op.forward = [p](const at::Tensor& x, const at::Tensor& rois, kit::RoiParamFault fault) {
    prroi_pool_forward(x, rois, kit::with_fault(p, fault));
  };
  op.backward = [p, shape](const at::Tensor& grad, const at::Tensor& rois) { prroi_pool_backward(grad, rois, p, shape); };
  kit::add_roi_op_bad_inputs(bad, op);
  auto add = [&](std::string name, kit::BadCall call, std::vector<std::string> words) {
    bad.add(std::move(name), std::move(call), std::move(words));
  };
  add("rois_backward_batch_index_nan", [=](const at::Device& d) {
        at::Tensor r = good_rois(d); r[1][0] = NAN; prroi_pool_rois_backward(good_grad(d), good_input(d), r, p); },
      {"rois[1, 0]", "batch index"});
  add("spatial_scale_negative", [=](const at::Device& d) { prroi_pool_forward(good_input(d), good_rois(d), {-0.25, 2, 2}); },
      {"spatial_scale", "positive finite"});
  add("spatial_scale_nan", [=](const at::Device& d) { prroi_pool_forward(good_input(d), good_rois(d), {NAN, 2, 2}); },
      {"spatial_scale", "positive finite"});
  add("spatial_scale_infinite", [=](const at::Device& d) { prroi_pool_forward(good_input(d), good_rois(d), {INFINITY, 2, 2}); },
      {"spatial_scale", "positive finite"});
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
        prroi_pool_rois_backward(good_grad(d), kit::other_device(good_input(d), d), good_rois(d), p); },
      {"grad and input", "same device"});
  add("rois_backward_rois_dtype_mismatch", [=](const at::Device& d) {
        prroi_pool_rois_backward(good_grad(d), good_input(d), good_rois(d).to(at::kHalf), p); }, {"rois dtype", "grad dtype"});
  return std::move(bad.cases);
}

// Benchmark case (docs/benchmarks.md): the Faster R-CNN box head on the P2 level of an 800x1344 image, as
// IoU-Net uses PrRoIPool. The backward computes both gradients (features and roi coordinates), as training
// with a localization-confidence head does.
std::vector<harness::BenchCase> prroi_pool_benchmarks() {
  const PrRoiPoolParams params{0.25, 7, 7};
  const std::array<std::int64_t, 4> shape{2, 256, 200, 336};
  const kit::RoiBench b{"box_head_1000", "x[2,256,200,336] rois[1000,5] 7x7 scale 1/4",
                        "fwd: x + rois + output; bwd: grad_output (read twice) + x (read for the roi gradient) + rois + "
                        "grad_input read and written (atomic scatter) + grad_rois",
                        shape, 1000, 9701, /*roi_gradient=*/true};
  return {kit::roi_bench_case(
      b, [params](const at::Tensor& x, const at::Tensor& rois) {
        return std::make_tuple(prroi_pool_forward(x, rois, params), at::Tensor());
      },
      [params, shape](const at::Tensor& grad, const at::Tensor& x, const at::Tensor& rois, const at::Tensor&) {
        (void)prroi_pool_backward(grad, rois, params, shape);
        (void)prroi_pool_rois_backward(grad, x, rois, params);
      })};
}

OpSpec prroi_pool_spec() {
  OpSpec spec = kit::op_spec("prroi_pool", prroi_pool_cases(), prroi_pool_bad_inputs());
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
