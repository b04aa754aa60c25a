// carafe's op spec: seeded cases (kernel_size 1, 3, 5, 7 x scale_factor 1..4 with group_size 1, 2, 4; batch 0
// and 3, channel counts around the kernels' channel chunks, maps smaller than the window, softmax-normalised,
// signed and all-one masks, NaN, non-contiguous and stride-0 inputs, the half-accumulation sums), the FPN-size
// comparison with the unfold form and the 64-bit index identities (extra checks), bad inputs, determinism and
// the FPN upsampling benchmarks.
#include "kit/spec_prelude.h"

#include <ATen/ops/col2im.h>
#include <ATen/ops/im2col.h>

#include "carafe/carafe_torch.h"
#include "detops/harness/checks.h"
#include "detops/reference/carafe_reference.h"
#include "kit/feature_cases.h"
#include "kit/half_accumulation.h"

namespace detops {
namespace {

enum class MaskKind {
  kSoftmax,    // softmax over each group's k k taps at every output pixel: CARAFE's normalised kernels
  kUniform,    // U[-1, 1): signed and unnormalised (the op normalises nothing)
  kOnes,       // all 1: each output the sum of its window (k = 1: nearest upsampling)
  kNanOffMap,  // softmax, NaN at every tap whose feature lies off the map: absent taps, no effect
};

// Which sum a half-precision accumulator would get wrong (kit/half_accumulation.h).
enum class HalfAccumulation {
  kNone,
  kForward,       // 33 x 33 taps (up to 1089 terms) of all-one masks times features 1.25..1.5: an fp16 running
                  // sum past 1024 (step 1) drops 0.25..0.5 a term (~8 % low), a bf16 one stalls at 512
  kGradFeatures,  // k 9, s 8: 81 * 64 = 5184 terms per interior feature, all-one masks times grad 0.5..1
  kGradMasks,     // 4096 channels per mask element: grad 0.5..1 times features 0.5..1
};

struct CarafeCaseConfig {
  std::int64_t batch = 2, channels = 4, height = 5, width = 6;
  CarafeParams params{3, 1, 2};
  MaskKind mask = MaskKind::kSoftmax;
  bool noncontiguous = false;  // features and masks stored W-major (kit::w_major)
  bool stride0_grad = false;   // grad_output from kit::stride0_grad_output
  bool nan_features = false;   // 10 % of the features NaN
  HalfAccumulation half = HalfAccumulation::kNone;
};

std::vector<std::int64_t> masks_sizes(const CarafeCaseConfig& cfg) {
  const CarafeParams& p = cfg.params;
  return {cfg.batch, carafe_mask_channels(p), cfg.height * p.scale_factor, cfg.width * p.scale_factor};
}

// NaN at the taps (n, g k k + i k + j, y, x) whose feature (y / s + i - r, x / s + j - r) lies off the map.
void nan_off_map(at::Tensor& masks, const CarafeCaseConfig& cfg) {
  const CarafeParams& p = cfg.params;
  const std::int64_t k = p.kernel_size, r = carafe_radius(p);
  auto m = masks.accessor<double, 4>();
  for (std::int64_t n = 0; n < masks.size(0); ++n)
    for (std::int64_t c = 0; c < masks.size(1); ++c)
      for (std::int64_t y = 0; y < masks.size(2); ++y)
        for (std::int64_t x = 0; x < masks.size(3); ++x) {
          const std::int64_t t = c % (k * k), fy = y / p.scale_factor + t / k - r, fx = x / p.scale_factor + t % k - r;
          if (fy < 0 || fy >= cfg.height || fx < 0 || fx >= cfg.width) m[n][c][y][x] = kNaN;
        }
}

at::Tensor make_masks(const CarafeCaseConfig& cfg, at::Generator& gen) {
  const std::vector<std::int64_t> sizes = masks_sizes(cfg);
  if (cfg.half == HalfAccumulation::kForward || cfg.half == HalfAccumulation::kGradFeatures) return at::ones(sizes, f64());
  switch (cfg.mask) {
    case MaskKind::kUniform: return kit::uniform_features(sizes, gen);
    case MaskKind::kOnes: return at::ones(sizes, f64());
    case MaskKind::kSoftmax:
    case MaskKind::kNanOffMap: {
      const std::int64_t taps = cfg.params.kernel_size * cfg.params.kernel_size;
      at::Tensor logits = at::rand({sizes[0], cfg.params.group_size, taps, sizes[2], sizes[3]}, gen, f64()) * 4 - 2;
      at::Tensor m = at::softmax(logits, 2).reshape(sizes).contiguous();
      if (cfg.mask == MaskKind::kNanOffMap) nan_off_map(m, cfg);
      return m;
    }
  }
  throw std::invalid_argument("make_masks: unknown kind");
}

at::Tensor make_features(const CarafeCaseConfig& cfg, at::Generator& gen) {
  const std::vector<std::int64_t> sizes{cfg.batch, cfg.channels, cfg.height, cfg.width};
  if (cfg.half == HalfAccumulation::kForward) return at::rand(sizes, gen, f64()) * 0.25 + 1.25;
  if (cfg.half == HalfAccumulation::kGradMasks) return at::rand(sizes, gen, f64()) * 0.5 + 0.5;
  at::Tensor x = kit::uniform_features(sizes, gen);
  if (cfg.nan_features) kit::sprinkle_nan(x, 0.1, gen);
  return x;
}

Tensors reference_forward(const CarafeParams& p, const Tensors& in, bool abs_values) {
  auto v = [abs_values](const at::Tensor& t) { return kit::to_tensor4d(abs_values ? t.abs() : t); };
  return {kit::from_tensor4d(reference::carafe_forward(p, v(in[0]), v(in[1])))};
}

Tensors reference_backward(const CarafeParams& p, const Tensors& in, const at::Tensor& grad, bool abs_values) {
  auto v = [abs_values](const at::Tensor& t) { return kit::to_tensor4d(abs_values ? t.abs() : t); };
  const reference::CarafeGrads g = reference::carafe_backward(p, v(in[0]), v(in[1]), v(grad));
  return {kit::from_tensor4d(g.features), kit::from_tensor4d(g.masks)};
}

CaseData make_case(const CarafeCaseConfig& cfg, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  CaseData d;
  d.inputs = {make_features(cfg, gen), make_masks(cfg, gen)};
  d.differentiable = {0, 1};
  const CarafeParams p = cfg.params;
  const std::array<std::int64_t, 4> shape{cfg.batch, cfg.channels, cfg.height, cfg.width};
  const bool noncontiguous = cfg.noncontiguous;
  auto layout = [noncontiguous](const at::Tensor& t) { return noncontiguous ? kit::w_major(t) : t; };
  d.op_forward = [p, layout](const Tensors& in) { return Tensors{carafe_forward(layout(in[0]), layout(in[1]), p)}; };
  d.op_backward = [p, shape, layout](const Tensors& in, const Tensors& grad) {
    return Tensors{carafe_backward_features(grad[0], layout(in[1]), p, shape),
                   carafe_backward_masks(grad[0], layout(in[0]), p)};
  };
  d.reference_forward = [p](const Tensors& in) { return reference_forward(p, in, false); };
  d.reference_backward = [p](const Tensors& in, const Tensors& grad) { return reference_backward(p, in, grad[0], false); };
  // Every output (gradient) element is a sum of products; the sum of their |terms| is the same op on |values|.
  d.reference_forward_magnitude = [p](const Tensors& in) { return reference_forward(p, in, true); };
  d.reference_backward_magnitude = [p](const Tensors& in, const Tensors& grad) {
    return reference_backward(p, in, grad[0], true);
  };
  if (cfg.stride0_grad) d.make_grad_output = kit::stride0_grad_output();
  if (cfg.half == HalfAccumulation::kGradFeatures || cfg.half == HalfAccumulation::kGradMasks) {
    d.make_grad_output = kit::half_accumulation_grad_output();
  }
  if (cfg.nan_features) d.gradcheck_skip_reason = "NaN features: finite differences of NaN outputs are NaN";
  return d;
}

std::vector<OpCase> carafe_cases() {
  kit::CaseList<CarafeCaseConfig> add(0xCA7A'0000, make_case);
  // The grid: every kernel_size 1, 3, 5, 7 with every scale_factor 1..4, group_size cycling through 1, 2, 4
  // (three channels per group: one partial channel chunk), on a 5 x 6 map (k = 7: wider than the map).
  const std::int64_t groups[] = {1, 2, 4};
  int cell = 0;
  for (std::int64_t k : {1, 3, 5, 7}) {
    for (std::int64_t s : {1, 2, 3, 4}) {
      CarafeCaseConfig c;
      c.params = {k, groups[cell % 3], s};
      c.channels = 3 * c.params.group_size;
      c.batch = 1 + cell % 2;
      add("k" + std::to_string(k) + "_g" + std::to_string(c.params.group_size) + "_s" + std::to_string(s), c);
      ++cell;
    }
  }
  using M = MaskKind;
  using H = HalfAccumulation;
  CarafeCaseConfig c;
  c = {}; c.params = {5, 1, 2}; c.channels = 16; c.height = 7; c.width = 9; add("fpn_like_k5_g1_s2_c16", c);
  c = {}; c.params = {5, 4, 2}; c.channels = 8; add("k5_g4_s2_two_channels_per_group", c);
  c = {}; c.params = {7, 1, 1}; c.batch = 1; c.height = 9; c.width = 8; add("k7_g1_s1_window_inside_map", c);
  c = {}; c.params = {5, 1, 1}; c.height = 6; c.width = 7; add("scale1_same_size_k5", c);
  c = {}; c.params = {3, 1, 8}; c.height = 3; c.width = 4; c.channels = 2; add("scale8_k3", c);
  c = {}; c.batch = 0; add("empty_batch", c);
  c = {}; c.batch = 3; c.params = {3, 2, 2}; add("batch3_g2", c);
  c = {}; c.channels = 0; c.params = {3, 2, 2}; add("zero_channels", c);
  c = {}; c.channels = 4; c.params = {3, 4, 2}; add("one_channel_per_group", c);
  c = {}; c.channels = 16; c.params = {3, 2, 2}; add("group_channels_8_one_full_chunk", c);
  c = {}; c.channels = 9; c.params = {3, 1, 2}; add("group_channels_9_ragged_chunk", c);
  c = {}; c.channels = 34; c.params = {5, 2, 2}; c.height = 4; c.width = 5; add("group_channels_17_three_chunks", c);
  c = {}; c.height = 1; c.width = 1; c.params = {7, 1, 2}; add("map_1x1_k7", c);
  c = {}; c.height = 2; c.width = 3; c.params = {5, 2, 3}; add("map_2x3_smaller_than_k5", c);
  c = {}; c.height = 3; c.width = 11; c.params = {3, 1, 3}; add("wide_map_3x11_s3", c);
  c = {}; c.height = 13; c.width = 2; c.params = {5, 1, 2}; c.batch = 1; add("tall_map_13x2", c);
  c = {}; c.mask = M::kUniform; c.params = {5, 2, 2}; add("signed_unnormalised_masks_g2", c);
  c = {}; c.mask = M::kOnes; c.params = {1, 1, 3}; add("ones_k1_is_nearest_upsampling", c);
  c = {}; c.mask = M::kOnes; c.params = {3, 1, 2}; add("ones_k3_window_sums", c);
  c = {}; c.mask = M::kNanOffMap; c.params = {5, 2, 2}; c.height = 4; add("nan_masks_at_off_map_taps", c);
  c = {}; c.nan_features = true; c.params = {3, 1, 2}; add("nan_features", c);
  c = {}; c.noncontiguous = true; c.params = {5, 2, 2}; c.channels = 6; add("noncontiguous_features_and_masks", c);
  c = {}; c.stride0_grad = true; c.params = {5, 1, 2}; add("stride0_grad_output", c);
  c = {}; c.half = H::kForward; c.batch = 1; c.channels = 2; c.height = c.width = 33; c.params = {33, 1, 1};
  add("half_accumulation_forward_1089_taps", c);
  c = {}; c.half = H::kGradFeatures; c.batch = 1; c.channels = 2; c.height = c.width = 10; c.params = {9, 1, 8};
  add("half_accumulation_grad_features_5184_terms", c);
  c = {}; c.half = H::kGradMasks; c.batch = 1; c.channels = 4096; c.height = c.width = 3; c.params = {3, 1, 1};
  add("half_accumulation_grad_masks_4096_channels", c);
  // The CUDA kernels' tiles (carafe_cuda.cu): forward tiles of 4 x 32 source pixels (2 x 32 in fp64 and for
  // k 7; 1 x 32 past 100 KB, as for k 9) with chunks of 16 channels (32, 64 on the shorter tiles; masks of 4
  // of a pixel's s s outputs per pass, channel slots past the group's end zero-filled), a group's chunks split
  // over blocks on small maps; 16 channels per gather item of the features' gradient, tap-major tiles of 32
  // output pixels in the masks' gradient (fp64 on larger maps: the tiled kernel, below). Maps one short of, exactly and one past a tile (7 x 31, 8 x 32,
  // 9 x 33), several tiles each way (17 x 65), channel counts past a chunk, k 7 at scales 3 and 4 on maps
  // smaller than the window, groups 2 / 4, k 9 on 1-row tiles.
  c = {}; c.params = {5, 1, 2}; c.channels = 17; c.height = 7; c.width = 31; add("tile_edges_7x31_k5_c17", c);
  c = {}; c.params = {5, 2, 2}; c.channels = 34; c.height = 8; c.width = 32; add("tile_edges_8x32_k5_g2_c34", c);
  c = {}; c.params = {3, 4, 2}; c.channels = 20; c.height = 9; c.width = 33; add("tile_edges_9x33_k3_g4_c20", c);
  c = {}; c.params = {5, 1, 1}; c.channels = 3; c.batch = 1; c.height = 17; c.width = 65; add("tiles_3x3_17x65_s1", c);
  c = {}; c.params = {5, 1, 2}; c.channels = 29; c.height = 5; c.width = 6; add("group_channels_29_window_passes", c);
  c = {}; c.params = {7, 1, 3}; c.channels = 7; c.height = 3; c.width = 4; add("map_3x4_smaller_than_k7_s3", c);
  c = {}; c.params = {7, 2, 4}; c.channels = 10; c.height = 2; c.width = 5; add("map_2x5_smaller_than_k7_s4_g2", c);
  c = {}; c.params = {7, 4, 3}; c.channels = 8; c.batch = 1; c.height = 9; c.width = 33; add("k7_s3_g4_9x33", c);
  c = {}; c.params = {9, 1, 2}; c.channels = 20; c.batch = 1; c.height = 5; c.width = 35;
  add("k9_s2_one_row_tiles_5x35", c);
  // The masks' gradient's tiled kernel (fp64, at least an item per SM: 132 on an H100 / H200): 2 x 32 tiles of
  // 8-channel chunks, 7 taps per thread (k 7: two tap groups), 4 outputs per pass (s 4: four passes).
  c = {}; c.params = {7, 4, 4}; c.channels = 12; c.batch = 1; c.height = 10; c.width = 33;
  add("masks_grad_tiles_k7_s4_g4_10x33", c);
  c = {}; c.params = {5, 4, 2}; c.channels = 44; c.height = 34; c.width = 33;
  add("masks_grad_tiles_k5_s2_g4_c11_34x33", c);
  return std::move(add.cases);
}

// ---------------------------------------------------------------------------------------------------
// Extra checks.

harness::Tolerance tolerance_of(DType dtype) { return harness::default_tolerance(dtype); }

// CARAFE written with ATen ops, fp64, independent of the kernels and of the reference: forward, the unfolded
// features (F.unfold, zero padding r) upsampled by repetition and weighted by the masks; backward, the masks'
// gradient from the same columns, the features' from F.fold of the masks times grad summed over each s x s
// block.
struct UnfoldForm {
  at::Tensor out, grad_features, grad_masks;
};

UnfoldForm unfold_form(const at::Tensor& f, const at::Tensor& m, const at::Tensor& grad, const CarafeParams& p) {
  const std::int64_t n = f.size(0), c = f.size(1), h = f.size(2), w = f.size(3), k = p.kernel_size;
  const std::int64_t g = p.group_size, s = p.scale_factor, r = carafe_radius(p), kk = k * k;
  const at::Tensor cols = at::im2col(f, {k, k}, {1, 1}, {r, r}, {1, 1})
                              .view({n, g, c / g, kk, h, w})
                              .repeat_interleave(s, 4)
                              .repeat_interleave(s, 5);  // [N, G, C / G, k k, H s, W s]
  const at::Tensor mg = m.view({n, g, 1, kk, h * s, w * s}), gg = grad.view({n, g, c / g, 1, h * s, w * s});
  UnfoldForm u;
  u.out = (cols * mg).sum(3).view({n, c, h * s, w * s});
  u.grad_masks = (cols * gg).sum(2).view(m.sizes());
  const at::Tensor dcols = (mg * gg).view({n, g, c / g, kk, h, s, w, s}).sum({5, 7}).view({n, c * kk, h * w});
  u.grad_features = at::col2im(dcols, {h, w}, {k, k}, {1, 1}, {r, r}, {1, 1});
  return u;
}

// CARAFE in FPN upsampling (k 5, group 1, scale 2, 256 channels, batch 2, softmax masks, N(0, 1) grad) against
// the unfold form on the same rounded inputs, forward and both gradients; magnitudes from the form on |values|.
// CUDA: P3 100x168 -> P2 200x336 (mmcv's backward failed with `invalid configuration argument` at these sizes);
// CPU: P5 25x42 -> P4 50x84.
harness::CheckResult check_unfold_form(DType dtype, Device device) {
  harness::CheckResult r;
  const CarafeParams p{5, 1, 2};
  const std::int64_t h = device == Device::kCuda ? 100 : 25, w = device == Device::kCuda ? 168 : 42;
  const at::Device dev = device == Device::kCpu ? at::Device(at::kCPU) : at::Device(at::kCUDA, 0);
  const at::ScalarType st = harness::scalar_type_of(dtype);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0xCA7A'F9A0);
  auto rounded = [&](const at::Tensor& t) { return t.to(st).to(at::kDouble).to(dev); };
  const at::Tensor f = rounded(at::randn({2, 256, h, w}, gen, f64()));
  const at::Tensor m = rounded(at::softmax(at::randn({2, 25, 2 * h, 2 * w}, gen, f64()), 1));
  const at::Tensor go = rounded(at::randn({2, 256, 2 * h, 2 * w}, gen, f64()));
  const UnfoldForm e = unfold_form(f, m, go, p), mag = unfold_form(f.abs(), m.abs(), go.abs(), p);
  const at::Tensor out = carafe_forward(f.to(st), m.to(st), p);
  const at::Tensor gf = carafe_backward_features(go.to(st), m.to(st), p, {2, 256, h, w});
  const at::Tensor gm = carafe_backward_masks(go.to(st), f.to(st), p);
  const harness::Tolerance tol = tolerance_of(dtype);
  r.comparisons.push_back(harness::compare_tensors(out.cpu(), e.out.cpu(), tol, mag.out.cpu()));
  r.comparisons.push_back(harness::compare_tensors(gf.cpu(), e.grad_features.cpu(), tol, mag.grad_features.cpu()));
  r.comparisons.push_back(harness::compare_tensors(gm.cpu(), e.grad_masks.cpu(), tol, mag.grad_masks.cpu()));
  r.properties["features_shape"] = "[2, 256, " + std::to_string(h) + ", " + std::to_string(w) + "]";
  harness::summarize(r);
  return r;
}

// 64-bit indices: k 1, group 1, scale 2, masks of ones (nearest upsampling), features [1, 8, 8192, 8200]
// (537M elements) -> output and grad [1, 8, 16384, 16400]: 2,149,580,800 elements, past 2^31 in the last
// channel. Small integers (features -8..8, grad -5..5) make every sum exact in each dtype, so the op must equal,
// bitwise, the identities computed with ATen on the device: the forward is features repeated over 2 x 2
// blocks, grad_features the 2 x 2 block sums of grad, grad_masks the channel sums of grad times the repeated
// features. fp64 is left out (its inputs and the identities' temporaries need ~60 GB); the index arithmetic
// does not depend on the dtype.
harness::CheckResult check_large_index(DType dtype, bool backward) {
  harness::CheckResult r;
  const CarafeParams p{1, 1, 2};
  const std::int64_t c = 8, h = 8192, w = 8200;
  const at::ScalarType st = harness::scalar_type_of(dtype);
  const auto cuda = at::TensorOptions().device(at::kCUDA).dtype(at::kInt);
  auto ramp = [&](std::int64_t hh, std::int64_t ww, std::int64_t a, std::int64_t b, std::int64_t d, std::int64_t mod) {
    const at::Tensor v = at::arange(c, cuda).view({1, c, 1, 1}) * a + at::arange(hh, cuda).view({1, 1, hh, 1}) * b +
                         at::arange(ww, cuda).view({1, 1, 1, ww}) * d;
    return (v.remainder(mod) - mod / 2).to(st);
  };
  const at::Tensor f = ramp(h, w, 7, 3, 1, 17);
  const at::Tensor m = at::ones({1, 1, 2 * h, 2 * w}, cuda.dtype(st));
  const at::Tensor f6 = f.view({1, c, h, 1, w, 1});
  r.properties["output_elements"] = std::to_string(c * 4 * h * w);
  bool equal = false;
  if (!backward) {
    const at::Tensor out = carafe_forward(f, m, p);
    equal = at::equal(out.view({1, c, h, 2, w, 2}), f6.expand({1, c, h, 2, w, 2}));
  } else {
    const at::Tensor go = ramp(2 * h, 2 * w, 5, 3, 7, 11), go6 = go.view({1, c, h, 2, w, 2});
    const bool features_ok = at::equal(carafe_backward_features(go, m, p, {1, c, h, w}), go6.sum({3, 5}));
    const bool masks_ok = at::equal(carafe_backward_masks(go, f, p), (go6 * f6).sum(1).view({1, 1, 2 * h, 2 * w}));
    r.properties["grad_features_equal"] = features_ok ? "true" : "false";
    r.properties["grad_masks_equal"] = masks_ok ? "true" : "false";
    equal = features_ok && masks_ok;
  }
  if (!equal) {
    r.outcome = harness::Outcome::kMismatch;
    r.message = std::string(backward ? "a gradient" : "the output") + " differs from its identity past 2^31 elements";
  }
  return r;
}

// ---------------------------------------------------------------------------------------------------
// Bad inputs and the valid call. The valid call: features [2, 4, 3, 5], k 3, group 2, scale 2 -> masks
// [2, 18, 6, 10], output [2, 4, 6, 10].

using kit::f32_on;
using kit::other_device;

at::Tensor features(const at::Device& d) { return at::rand({2, 4, 3, 5}, f32_on(d)); }
at::Tensor masks(const at::Device& d) { return at::rand({2, 18, 6, 10}, f32_on(d)); }
at::Tensor grad(const at::Device& d) { return at::ones({2, 4, 6, 10}, f32_on(d)); }
constexpr CarafeParams kValid{3, 2, 2};

std::vector<BadInputCase> carafe_bad_inputs() {
  kit::BadInputs bad;
  using D = const at::Device&;
  auto fwd = [](const at::Tensor& x, const at::Tensor& m, CarafeParams p = kValid) { carafe_forward(x, m, p); };
  bad.add("features_3d", [=](D d) { fwd(features(d)[0], masks(d)); }, {"features", "4-D"});
  bad.add("integer_features", [=](D d) { fwd(features(d).to(at::kInt), masks(d).to(at::kInt)); },
          {"features", "float64, float32, float16 or bfloat16"});
  bad.add("half_features_float_masks", [=](D d) { fwd(features(d).to(at::kHalf), masks(d)); },
          {"masks dtype", "Float", "features dtype", "Half"});
  bad.add("masks_on_other_device", [=](D d) { fwd(features(d), other_device(masks(d), d)); },
          {"features and masks", "same device"});
  bad.add("masks_wrong_channels", [=](D d) { fwd(features(d), at::rand({2, 9, 6, 10}, f32_on(d))); },
          {"masks", "kernel_size^2 * group_size", "[2, 18, 6, 10]", "[2, 9, 6, 10]"});
  bad.add("masks_of_input_size", [=](D d) { fwd(features(d), at::rand({2, 18, 3, 5}, f32_on(d))); },
          {"masks", "H * scale_factor", "[2, 18, 6, 10]", "[2, 18, 3, 5]"});
  bad.add("masks_wrong_batch", [=](D d) { fwd(features(d), at::rand({1, 18, 6, 10}, f32_on(d))); },
          {"masks", "[2, 18, 6, 10]", "[1, 18, 6, 10]"});
  bad.add("masks_3d", [=](D d) { fwd(features(d), masks(d)[0]); }, {"masks", "[2, 18, 6, 10]", "[18, 6, 10]"});
  bad.add("kernel_size_even", [=](D d) { fwd(features(d), masks(d), {4, 2, 2}); }, {"kernel_size", "odd", "4"});
  bad.add("kernel_size_zero", [=](D d) { fwd(features(d), masks(d), {0, 2, 2}); }, {"kernel_size", "odd", "0"});
  bad.add("kernel_size_negative", [=](D d) { fwd(features(d), masks(d), {-3, 2, 2}); }, {"kernel_size", "-3"});
  bad.add("group_size_zero", [=](D d) { fwd(features(d), masks(d), {3, 0, 2}); }, {"group_size", ">= 1", "0"});
  bad.add("channels_not_divisible_by_group_size", [=](D d) { fwd(features(d), masks(d), {3, 3, 2}); },
          {"channels", "4", "divisible", "group_size", "3"});
  bad.add("scale_factor_zero", [=](D d) { fwd(features(d), masks(d), {3, 2, 0}); }, {"scale_factor", ">= 1", "0"});
  bad.add("scale_factor_overflows", [=](D d) { fwd(features(d), masks(d), {3, 2, std::int64_t{1} << 62}); },
          {"scale_factor", "overflows"});
  bad.add("kernel_size_overflows", [=](D d) { fwd(features(d), masks(d), {(std::int64_t{1} << 40) + 1, 2, 2}); },
          {"kernel_size^2", "overflows"});
  bad.add("backward_features_grad_wrong_shape", [](D d) {
        carafe_backward_features(at::ones({2, 4, 3, 5}, f32_on(d)), masks(d), kValid, {2, 4, 3, 5}); },
          {"grad", "[2, 4, 6, 10]", "[2, 4, 3, 5]"});
  bad.add("backward_features_masks_wrong_shape", [](D d) {
        carafe_backward_features(grad(d), masks(d).slice(1, 0, 9), kValid, {2, 4, 3, 5}); },
          {"masks", "[2, 18, 6, 10]", "[2, 9, 6, 10]"});
  bad.add("backward_features_grad_dtype_mismatch", [](D d) {
        carafe_backward_features(grad(d).to(at::kDouble), masks(d), kValid, {2, 4, 3, 5}); },
          {"masks dtype", "grad dtype"});
  bad.add("backward_masks_grad_wrong_shape", [](D d) {
        carafe_backward_masks(at::ones({2, 4, 6, 9}, f32_on(d)), features(d), kValid); },
          {"grad", "[2, 4, 6, 10]", "[2, 4, 6, 9]"});
  bad.add("backward_masks_grad_on_other_device", [](D d) {
        carafe_backward_masks(other_device(grad(d), d), features(d), kValid); },
          {"features and grad", "same device"});
  return std::move(bad.cases);
}

// Benchmarks (docs/benchmarks.md): CARAFE in FPN upsampling (k 5, group 1, scale 2, 256 channels, batch 2,
// softmax masks) at the three top-down steps of an 800x1344 image: P5 25x42 -> 50x84, P4 50x84 -> 100x168,
// P3 100x168 -> 200x336.
std::vector<harness::BenchCase> carafe_benchmarks() {
  std::vector<harness::BenchCase> out;
  std::uint64_t seed = 9951;
  const CarafeParams p{5, 1, 2};
  for (const auto& hw : {std::pair<std::int64_t, std::int64_t>{25, 42}, {50, 84}, {100, 168}}) {
    const std::int64_t h = hw.first, w = hw.second;
    const std::uint64_t case_seed = seed;
    seed += 3;
    auto make = [=](DType dtype) {
      const at::Tensor x = harness::bench_randn_cuda({2, 256, h, w}, dtype, case_seed);
      const at::Tensor m =
          at::softmax(harness::bench_randn_cuda({2, 25, 2 * h, 2 * w}, DType::kFloat32, case_seed + 1), 1)
              .to(harness::scalar_type_of(dtype));
      const at::Tensor y = carafe_forward(x, m, p);
      const at::Tensor g = harness::bench_randn_cuda({2, 256, 2 * h, 2 * w}, dtype, case_seed + 2);
      harness::BenchInstance inst;
      inst.forward = [=] { (void)carafe_forward(x, m, p); };
      inst.backward = [=] {
        (void)carafe_backward_features(g, m, p, {2, 256, h, w});
        (void)carafe_backward_masks(g, x, p);
      };
      inst.bytes_forward = kit::bench_bytes({x, m, y});
      inst.bytes_backward = kit::bench_bytes({g, m, x, g, x, m});  // grad_features (x's size), grad_masks (m's)
      return inst;
    };
    const std::string src = std::to_string(h) + "x" + std::to_string(w);
    const std::string dst = std::to_string(2 * h) + "x" + std::to_string(2 * w);
    out.push_back(kit::bench_case(
        "fpn_" + src + "_to_" + dst + "_k5_g1_s2",
        "features[2,256," + std::to_string(h) + "," + std::to_string(w) + "] masks[2,25," + std::to_string(2 * h) +
            "," + std::to_string(2 * w) + "] k5 g1 s2",
        "fwd: features + masks + output; bwd: grad + masks (features op), grad + features (masks op), grad_features + "
        "grad_masks written",
        make));
  }
  return out;
}

OpSpec carafe_spec() {
  OpSpec spec = kit::op_spec("carafe", carafe_cases(), carafe_bad_inputs());
  for (DType dtype : kAllDTypes) {
    for (Device device : {Device::kCpu, Device::kCuda}) {
      spec.extra_checks.push_back({"unfold_form_fpn", dtype_name(dtype), device,
                                   [dtype, device] { return check_unfold_form(dtype, device); }});
    }
    if (dtype == DType::kFloat64) continue;
    for (bool backward : {false, true}) {
      spec.extra_checks.push_back({backward ? "large_index_backward" : "large_index_forward", dtype_name(dtype),
                                   Device::kCuda, [dtype, backward] { return check_large_index(dtype, backward); }});
    }
  }
  spec.valid_call = [](const at::Device& d) {
    const at::Tensor x = at::full({1, 1, 2, 2}, 3.0, f32_on(d));
    const at::Tensor out = carafe_forward(x, at::full({1, 1, 4, 4}, 2.0, f32_on(d)), CarafeParams{1, 1, 2}).cpu();
    TORCH_CHECK(at::equal(out, at::full({1, 1, 4, 4}, 6.0)), "carafe: a valid call after the bad one returned wrong values");
  };
  spec.determinism.backward_cuda = true;
  spec.determinism.note =
      "no atomics: every output and gradient element is one thread's sum in a fixed order (taps in row-major "
      "order, then each output block's (dy, dx); the group's channels in order), the same work items on both "
      "devices, independent of the grid and the CPU thread count";
  spec.benchmarks = carafe_benchmarks();
  return spec;
}

DETOPS_REGISTER_OP_SPEC(carafe_spec);

}  // namespace
}  // namespace detops
