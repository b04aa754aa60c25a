// masked_conv2d's op spec: seeded cases (batch 1 and 3, stride 1 and 2, padding 0 and 1, 1x1 and 3x3 kernels,
// bias or none, all-zero, all-one, border and non-binary masks, the half-accumulation sums and fp16 overflow of
// partial sums, the CUDA launchers' position chunks), the dense-conv2d equivalence of an all-one mask and the
// 64-bit index checks (extra checks), bad inputs, determinism and the FPN-level benchmarks.
#include "kit/spec_prelude.h"

#include "detops/harness/checks.h"
#include "detops/reference/masked_conv2d_reference.h"
#include "kit/feature_cases.h"
#include "kit/half_accumulation.h"
#include "masked_conv2d/masked_conv2d_torch.h"

namespace detops {
namespace {

enum class MaskKind {
  kRandom,     // bool, each position selected with probability `density`
  kAllZero,    // bool, nothing selected: the output is 0
  kAllOne,     // bool, everything selected: the dense convolution
  kBorder,     // bool, the outermost ring of output positions (their windows reach into the padding)
  kCorner,     // bool, only the last position (H_out - 1, W_out - 1) of each image
  kValues,     // floating U[-1, 2) with exact zeros and NaNs: selected where > 0
  kUint8,      // uint8 in {0, 1, 2}: selected where nonzero
  kInt64,      // int64 in {-2, -1, 0, 1, 5}: selected where > 0
};

// Which sum a half-precision accumulator would get wrong (kit/half_accumulation.h): the case's values are
// all positive and each such sum has at least kHalfAccumulationTerms terms.
enum class HalfAccumulation {
  kNone,
  kForward,       // C_in * kh * kw = 4608 taps of features 24..40 times weights 0.5..1 / 64
  kGradFeatures,  // C_out * kh * kw = 4608 terms per pixel: grad 0.5..1 times weights 0.5..1
  kGradWeight,    // 4096 selected positions per weight (and bias) element: grad 0.5..1 times features 0.5..1
  // fp16's range: features, weight and grad are +-128 with signs such that every forward output, features'
  // gradient and weight's gradient is a sum of 16384-sized terms whose partial sums in k order pass 65504 (8 or
  // more same-sign terms in a row) while the result is 0 (+ bias): a kernel that accumulates in fp16, or keeps a
  // running sum in fp16 between position chunks, gets inf. 1x1 kernel, C_in = C_out = 16 (channels 0..7 +,
  // 8..15 -), 16 x 16 map, all-one mask; features' sign flips at row 8, grad's at column 8 and channel 8.
  kOverflow,
};

struct MaskedConv2dCaseConfig {
  std::int64_t batch = 1, in_channels = 3, height = 10, width = 9, out_channels = 4, kernel_h = 3, kernel_w = 3;
  MaskedConv2dParams params{};
  bool bias = true;
  MaskKind mask = MaskKind::kRandom;
  double density = 0.5;
  bool mask_batch_one = false;  // mask [1, H_out, W_out], broadcast over the batch
  bool noncontiguous = false;   // features and weight stored W-major (kit::w_major)
  bool stride0_grad = false;    // grad_output from kit::stride0_grad_output
  HalfAccumulation half = HalfAccumulation::kNone;
};

std::int64_t out_size(std::int64_t in, std::int64_t k, std::int64_t pad, std::int64_t stride) {
  return masked_conv2d_out_size(in, k, pad, stride);
}

at::Tensor make_mask(const MaskedConv2dCaseConfig& cfg, at::Generator& gen) {
  const std::int64_t ho = out_size(cfg.height, cfg.kernel_h, cfg.params.padding_h, cfg.params.stride_h);
  const std::int64_t wo = out_size(cfg.width, cfg.kernel_w, cfg.params.padding_w, cfg.params.stride_w);
  const std::vector<std::int64_t> sizes{cfg.mask_batch_one ? 1 : cfg.batch, ho, wo};
  const at::Tensor u = at::rand(sizes, gen, f64());
  switch (cfg.mask) {
    case MaskKind::kRandom: return u < cfg.density;
    case MaskKind::kAllZero: return at::zeros(sizes, at::kBool);
    case MaskKind::kAllOne: return at::ones(sizes, at::kBool);
    case MaskKind::kBorder: {
      at::Tensor m = at::ones(sizes, at::kBool);
      if (ho > 2 && wo > 2) m.slice(1, 1, ho - 1).slice(2, 1, wo - 1).fill_(false);
      return m;
    }
    case MaskKind::kCorner: {
      at::Tensor m = at::zeros(sizes, at::kBool);
      m.select(1, ho - 1).select(1, wo - 1).fill_(true);
      return m;
    }
    case MaskKind::kValues: {
      at::Tensor m = u * 3 - 1;
      m.masked_fill_(at::rand(sizes, gen, f64()) < 0.15, 0.0);
      m.masked_fill_(at::rand(sizes, gen, f64()) < 0.1, kNaN);
      return m;
    }
    case MaskKind::kUint8: return (u * 3).floor().to(at::kByte);
    case MaskKind::kInt64: {
      const at::Tensor values = at::tensor(std::vector<std::int64_t>{-2, -1, 0, 1, 5});
      return values.index({(u * 5).floor().to(at::kLong)});
    }
  }
  throw std::invalid_argument("make_mask: unknown kind");
}

// Features, weight and bias: U[-1, 1), or the half-accumulation case's positive values.
// +1 where t < threshold, -1 elsewhere.
at::Tensor sign_below(const at::Tensor& t, std::int64_t threshold) { return 1.0 - 2.0 * (t >= threshold).to(at::kDouble); }

// kOverflow's grad_output: 128 times + below channel C_out / 2 and below column W_out / 2, - otherwise.
std::function<at::Tensor(const at::Tensor&, std::uint64_t)> overflow_grad_output() {
  return [](const at::Tensor& out, std::uint64_t) {
    const at::Tensor o = at::arange(out.size(1), f64()).view({1, -1, 1, 1});
    const at::Tensor x = at::arange(out.size(3), f64()).view({1, 1, 1, -1});
    return (128.0 * sign_below(o, out.size(1) / 2) * sign_below(x, out.size(3) / 2))
        .expand(out.sizes())
        .contiguous()
        .to(out.options());
  };
}

std::vector<at::Tensor> make_values(const MaskedConv2dCaseConfig& cfg, at::Generator& gen) {
  const std::vector<std::int64_t> xs{cfg.batch, cfg.in_channels, cfg.height, cfg.width};
  const std::vector<std::int64_t> ws{cfg.out_channels, cfg.in_channels, cfg.kernel_h, cfg.kernel_w};
  const std::vector<std::int64_t> bs{cfg.out_channels};
  auto half_open = [&](const std::vector<std::int64_t>& s) { return at::rand(s, gen, f64()) * 0.5 + 0.5; };
  switch (cfg.half) {
    case HalfAccumulation::kNone:
      return {kit::uniform_features(xs, gen), kit::uniform_features(ws, gen), kit::uniform_features(bs, gen)};
    case HalfAccumulation::kForward:
      return {kit::half_accumulation_values(xs, gen), half_open(ws) / 64, half_open(bs)};
    case HalfAccumulation::kGradFeatures:
    case HalfAccumulation::kGradWeight: return {half_open(xs), half_open(ws), half_open(bs)};
    case HalfAccumulation::kOverflow: {
      const at::Tensor c = at::arange(cfg.in_channels, f64()).view({1, -1, 1, 1});
      const at::Tensor h = at::arange(cfg.height, f64()).view({1, 1, -1, 1});
      const at::Tensor x = 128.0 * sign_below(c, cfg.in_channels / 2) * sign_below(h, cfg.height / 2);
      return {x.expand(xs).contiguous(), at::full(ws, 128.0, f64()), half_open(bs)};
    }
  }
  throw std::invalid_argument("make_values: unknown kind");
}

// The reference's view of the inputs {features, mask, weight[, bias]}.
struct RefInputs {
  reference::Tensor4d x, mask, w;
  reference::Vectord b;
  bool has_bias;
};

RefInputs ref_inputs(const Tensors& in, bool abs_values) {
  auto v = [abs_values](const at::Tensor& t) { return abs_values ? t.abs() : t; };
  RefInputs r{kit::to_tensor4d(v(in[0])), kit::to_tensor4d(in[1].unsqueeze(1)), kit::to_tensor4d(v(in[2])),
              in.size() > 3 ? kit::to_vector(v(in[3])) : reference::Vectord(), in.size() > 3};
  return r;
}

Tensors reference_forward(const MaskedConv2dParams& p, const Tensors& in, bool abs_values) {
  const RefInputs r = ref_inputs(in, abs_values);
  return {kit::from_tensor4d(reference::masked_conv2d_forward(p, r.x, r.mask, r.w, r.has_bias ? &r.b : nullptr))};
}

Tensors reference_backward(const MaskedConv2dParams& p, const Tensors& in, const at::Tensor& grad, bool abs_values) {
  const RefInputs r = ref_inputs(in, abs_values);
  const reference::MaskedConv2dGrads g =
      reference::masked_conv2d_backward(p, r.x, r.mask, r.w, kit::to_tensor4d(abs_values ? grad.abs() : grad));
  Tensors out{kit::from_tensor4d(g.features), kit::from_tensor4d(g.weight)};
  if (r.has_bias) out.push_back(kit::from_vector(g.bias));
  return out;
}

CaseData make_case(const MaskedConv2dCaseConfig& cfg, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  CaseData d;
  const std::vector<at::Tensor> v = make_values(cfg, gen);
  d.inputs = {v[0], make_mask(cfg, gen), v[1]};
  d.differentiable = {0, 2};
  if (cfg.bias) {
    d.inputs.push_back(v[2]);
    d.differentiable.push_back(3);
  }
  const MaskedConv2dParams p = cfg.params;
  const std::array<std::int64_t, 4> shape{cfg.batch, cfg.in_channels, cfg.height, cfg.width};
  const bool noncontiguous = cfg.noncontiguous;
  auto layout = [noncontiguous](const at::Tensor& t) { return noncontiguous ? kit::w_major(t) : t; };
  d.op_forward = [p, layout](const Tensors& in) {
    return Tensors{masked_conv2d_forward(layout(in[0]), in[1], layout(in[2]), in.size() > 3 ? in[3] : at::Tensor(), p)};
  };
  d.op_backward = [p, shape, layout](const Tensors& in, const Tensors& grad) {
    const auto [gw, gb] = masked_conv2d_backward_weight(grad[0], layout(in[0]), in[1], layout(in[2]), p);
    Tensors out{masked_conv2d_backward_input(grad[0], in[1], layout(in[2]), p, shape), gw};
    if (in.size() > 3) out.push_back(gb);
    return out;
  };
  d.reference_forward = [p](const Tensors& in) { return reference_forward(p, in, false); };
  d.reference_backward = [p](const Tensors& in, const Tensors& grad) { return reference_backward(p, in, grad[0], false); };
  // Each output (gradient) element is a sum of products; the sum of their |terms| is the same op on |values|
  // (the mask, which only selects, unchanged).
  d.reference_forward_magnitude = [p](const Tensors& in) { return reference_forward(p, in, true); };
  d.reference_backward_magnitude = [p](const Tensors& in, const Tensors& grad) {
    return reference_backward(p, in, grad[0], true);
  };
  if (cfg.stride0_grad) d.make_grad_output = kit::stride0_grad_output();
  if (cfg.half != HalfAccumulation::kNone) d.make_grad_output = kit::half_accumulation_grad_output();
  if (cfg.half == HalfAccumulation::kOverflow) {
    d.make_grad_output = overflow_grad_output();
    d.gradcheck_skip_reason =
        "+-128 values whose 16384-sized terms cancel exactly: central differences in fp64 lose their digits to the "
        "partial sums (the op's gradients are checked against the reference's)";
  }
  return d;
}

std::string pair_name(const char* what, std::int64_t h, std::int64_t w) {
  return std::string(what) + std::to_string(h) + (h == w ? "" : "x" + std::to_string(w));
}

std::vector<OpCase> masked_conv2d_cases() {
  kit::CaseList<MaskedConv2dCaseConfig> add(0x3A5C'0000, make_case);
  // The grid: batch 1 and 3, stride 1 and 2, padding 0 and 1, 1x1 and 3x3 kernels; random masks (density 1/2).
  for (std::int64_t batch : {1, 3}) {
    for (std::int64_t stride : {1, 2}) {
      for (std::int64_t pad : {0, 1}) {
        for (std::int64_t k : {1, 3}) {
          MaskedConv2dCaseConfig c;
          c.batch = batch;
          c.kernel_h = c.kernel_w = k;
          c.params = {pad, pad, stride, stride};
          add("grid_b" + std::to_string(batch) + "_" + pair_name("s", stride, stride) + "_" + pair_name("p", pad, pad) +
                  "_k" + std::to_string(k),
              c);
        }
      }
    }
  }
  using M = MaskKind;
  MaskedConv2dCaseConfig c;
  c = {}; c.bias = false; c.params = {1, 1, 1, 1}; add("no_bias_3x3_pad1", c);
  c = {}; c.bias = false; c.kernel_h = c.kernel_w = 1; c.params = {0, 0, 2, 2}; c.batch = 3; add("no_bias_1x1_stride2_batch3", c);
  c = {}; c.mask = M::kAllZero; add("all_zero_mask", c);
  c = {}; c.mask = M::kAllZero; c.bias = false; c.batch = 3; c.params = {1, 1, 2, 2}; add("all_zero_mask_no_bias_batch3", c);
  c = {}; c.mask = M::kAllOne; c.params = {1, 1, 1, 1}; add("all_one_mask_3x3_pad1", c);
  c = {}; c.mask = M::kAllOne; c.params = {1, 1, 2, 2}; c.batch = 3; add("all_one_mask_stride2_batch3", c);
  c = {}; c.mask = M::kAllOne; c.bias = false; c.kernel_h = c.kernel_w = 1; add("all_one_mask_1x1_no_bias", c);
  c = {}; c.mask = M::kBorder; c.params = {1, 1, 1, 1}; add("border_mask_3x3_pad1", c);
  c = {}; c.mask = M::kBorder; c.kernel_h = c.kernel_w = 5; c.params = {2, 2, 1, 1}; c.batch = 2; add("border_mask_5x5_pad2", c);
  c = {}; c.mask = M::kBorder; c.params = {1, 1, 2, 2}; c.height = 11; c.width = 12; add("border_mask_stride2_pad1", c);
  c = {}; c.mask = M::kCorner; c.params = {1, 1, 1, 1}; c.batch = 2; add("single_position_last_corner", c);
  c = {}; c.mask_batch_one = true; c.batch = 3; c.params = {1, 1, 1, 1}; add("mask_batch_one_broadcast", c);
  c = {}; c.mask = M::kValues; c.params = {1, 1, 1, 1}; c.batch = 2; add("mask_nonbinary_float_positive_selects", c);
  c = {}; c.mask = M::kUint8; c.batch = 2; add("mask_uint8", c);
  c = {}; c.mask = M::kInt64; c.params = {0, 1, 1, 2}; add("mask_int64_negative_values", c);
  c = {}; c.kernel_h = 2; c.kernel_w = 3; c.params = {1, 0, 2, 1}; c.batch = 2; add("rectangular_kernel_2x3_pad1x0_stride2x1", c);
  c = {}; c.params = {0, 2, 1, 3}; c.height = 12; c.width = 13; add("asymmetric_pad0x2_stride1x3", c);
  c = {}; c.kernel_h = c.kernel_w = 1; c.params = {0, 0, 3, 3}; c.height = 11; c.width = 10; add("stride3_larger_than_kernel_1x1", c);
  c = {}; c.kernel_h = c.kernel_w = 5; c.params = {2, 2, 1, 1}; c.height = 2; c.width = 3; add("kernel_5x5_larger_than_map_pad2", c);
  c = {}; c.kernel_h = c.kernel_w = 1; c.height = c.width = 1; c.mask = M::kAllOne; add("map_1x1", c);
  c = {}; c.density = 0.9; c.params = {1, 1, 1, 1}; c.height = 14; c.width = 15; add("dense_mask_0_9", c);
  c = {}; c.density = 0.05; c.params = {1, 1, 1, 1}; c.height = 20; c.width = 18; c.batch = 2; add("sparse_mask_0_05", c);
  // CUDA tiles: more than one 64-row tile of positions, more than one 64-column tile of output channels, a
  // reduction over several 16-wide k slices with a ragged end (taps 16 * 9 = 144; 5 * 9 = 45).
  c = {}; c.in_channels = 16; c.out_channels = 70; c.height = 20; c.width = 19; c.params = {1, 1, 1, 1}; add("tiles_144_taps_70_channels", c);
  c = {}; c.in_channels = 5; c.out_channels = 65; c.height = 14; c.width = 15; c.params = {1, 1, 1, 1}; c.batch = 2; c.density = 0.6;
  add("tiles_45_taps_65_channels_batch2", c);
  c = {}; c.in_channels = 64; c.out_channels = 8; c.height = 9; c.width = 8; c.params = {1, 1, 1, 1}; add("many_input_channels_576_taps", c);
  c = {}; c.batch = 0; c.params = {1, 1, 1, 1}; add("empty_batch", c);
  c = {}; c.out_channels = 0; add("zero_out_channels", c);
  c = {}; c.in_channels = 0; c.params = {1, 1, 1, 1}; add("zero_in_channels_bias_only", c);
  c = {}; c.noncontiguous = true; c.params = {1, 1, 1, 1}; c.batch = 2; add("noncontiguous_features_and_weight", c);
  c = {}; c.stride0_grad = true; c.params = {1, 1, 1, 1}; c.batch = 2; add("stride0_grad_output", c);
  // Sums of at least kHalfAccumulationTerms positive terms: fail unless accumulated in fp32.
  c = {}; c.half = HalfAccumulation::kForward; c.in_channels = 512; c.out_channels = 2; c.height = c.width = 6;
  c.params = {1, 1, 1, 1}; c.mask = M::kAllOne; add("half_accumulation_forward_4608_taps", c);
  c = {}; c.half = HalfAccumulation::kGradFeatures; c.in_channels = 2; c.out_channels = 512; c.height = c.width = 6;
  c.params = {1, 1, 1, 1}; c.mask = M::kAllOne; add("half_accumulation_grad_features_4608_terms", c);
  c = {}; c.half = HalfAccumulation::kGradWeight; c.in_channels = 2; c.out_channels = 2; c.kernel_h = c.kernel_w = 1;
  c.height = c.width = 64; c.mask = M::kAllOne; add("half_accumulation_grad_weight_4096_positions", c);
  c.params.chunk_positions = 1000; add("half_accumulation_grad_weight_4096_positions_chunks_1000", c);
  c = {}; c.half = HalfAccumulation::kGradFeatures; c.in_channels = 2; c.out_channels = 512; c.height = c.width = 6;
  c.params = {1, 1, 1, 1, 7}; c.mask = M::kAllOne; add("half_accumulation_grad_features_chunks_7", c);
  c = {}; c.half = HalfAccumulation::kOverflow; c.in_channels = c.out_channels = 16; c.kernel_h = c.kernel_w = 1;
  c.height = c.width = 16; c.mask = M::kAllOne; add("half_overflow_of_partial_sums", c);
  c.params.chunk_positions = 100; add("half_overflow_of_partial_sums_chunks_100", c);
  // The CUDA launchers' chunks of positions (params.chunk_positions; the CPU ignores it): chunks that are not a
  // multiple of the 16-element row alignment, exactly one, and one position each; C_out not a multiple of 8 with
  // an odd number of taps (C_in = 3: 27).
  c = {}; c.batch = 2; c.in_channels = 5; c.out_channels = 7; c.height = 11; c.width = 10; c.params = {1, 1, 1, 1, 37};
  add("chunks_37_positions", c);
  c = {}; c.mask = M::kAllOne; c.batch = 3; c.params = {1, 1, 2, 2, 16}; add("chunks_16_positions_all_one_stride2", c);
  c = {}; c.mask = M::kBorder; c.kernel_h = c.kernel_w = 5; c.params = {2, 2, 1, 1, 1}; c.bias = false;
  add("chunks_1_position_border_mask_5x5", c);
  c = {}; c.out_channels = 13; c.height = 13; c.width = 12; c.params = {1, 1, 1, 1, 23}; add("odd_taps_27_out_channels_13_chunks_23", c);
  c = {}; c.out_channels = 13; c.height = 13; c.width = 12; c.params = {1, 1, 1, 1}; add("odd_taps_27_out_channels_13", c);
  // Every window crosses all four borders: a 9x9 kernel with padding 4 on a 4 x 4 map.
  c = {}; c.kernel_h = c.kernel_w = 9; c.height = c.width = 4; c.params = {4, 4, 1, 1}; c.density = 0.6; c.batch = 2;
  add("every_window_crosses_every_border_9x9", c);
  c.params.chunk_positions = 5; add("every_window_crosses_every_border_9x9_chunks_5", c);
  // The CUDA GEMMs run over each chunk's positions rounded up to 16, reading zeros the gathers write past the
  // chunk: with the workspace poisoned (NaN everywhere before the launch; the CPU ignores the hook), a padding
  // column left unwritten makes the weight gradient NaN. Chunks of 37 (48 padded) and one chunk of an odd count.
  c = {}; c.batch = 2; c.in_channels = 5; c.out_channels = 7; c.height = 11; c.width = 10;
  c.params = {1, 1, 1, 1, 37, true}; add("chunks_37_positions_poisoned_workspace", c);
  c = {}; c.out_channels = 13; c.height = 13; c.width = 12; c.params = {1, 1, 1, 1, 0, true};
  add("odd_taps_27_out_channels_13_poisoned_workspace", c);
  return std::move(add.cases);
}

// ---------------------------------------------------------------------------------------------------
// Extra checks.

harness::Tolerance tolerance_of(DType dtype) { return harness::default_tolerance(dtype); }

// An all-one mask is the dense convolution: forward and all three gradients against ATen's conv2d
// (at::convolution_backward) in fp64 on the CPU, on the same rounded inputs; magnitudes from |inputs|.
harness::CheckResult check_dense_equivalence(DType dtype, Device device) {
  harness::CheckResult r;
  const MaskedConv2dParams p{1, 2, 2, 1};
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0x3A5C'DE05);
  const at::ScalarType st = harness::scalar_type_of(dtype);
  const at::Device dev = device == Device::kCpu ? at::Device(at::kCPU) : at::Device(at::kCUDA, 0);
  auto rounded = [&](at::IntArrayRef s) { return kit::uniform_features(s, gen).to(st).to(at::kDouble); };
  const at::Tensor x = rounded({2, 5, 11, 12}), w = rounded({7, 5, 3, 3}), b = rounded({7});
  const at::Tensor mask = at::ones({2, masked_conv2d_out_size(11, 3, p.padding_h, p.stride_h),
                                     masked_conv2d_out_size(12, 3, p.padding_w, p.stride_w)}, at::kBool);
  const std::vector<std::int64_t> stride{p.stride_h, p.stride_w}, padding{p.padding_h, p.padding_w}, dil{1, 1};
  const auto conv = [&](const at::Tensor& xx, const at::Tensor& ww, const at::Tensor& bb) {
    return at::conv2d(xx, ww, bb, stride, padding, dil, 1);
  };
  const at::Tensor expected = conv(x, w, b), magnitude = conv(x.abs(), w.abs(), b.abs());
  const at::Tensor go = rounded(expected.sizes());
  const auto on = [&](const at::Tensor& t) { return t.to(dev, st); };
  const at::Tensor out = masked_conv2d_forward(on(x), mask.to(dev), on(w), on(b), p);
  const auto [gx, gw, gb] = at::convolution_backward(go, x, w, std::vector<std::int64_t>{7}, stride, padding, dil, false,
                                                     std::vector<std::int64_t>{0, 0}, 1, {true, true, true});
  const auto [mx, mw, mb] = at::convolution_backward(go.abs(), x.abs(), w.abs(), std::vector<std::int64_t>{7}, stride,
                                                     padding, dil, false, std::vector<std::int64_t>{0, 0}, 1,
                                                     {true, true, true});
  const at::Tensor our_gx = masked_conv2d_backward_input(on(go), mask.to(dev), on(w), p, {2, 5, 11, 12});
  const auto [our_gw, our_gb] = masked_conv2d_backward_weight(on(go), on(x), mask.to(dev), on(w), p);
  const harness::Tolerance tol = tolerance_of(dtype);
  r.comparisons.push_back(harness::compare_tensors(out.cpu(), expected, tol, magnitude));
  r.comparisons.push_back(harness::compare_tensors(our_gx.cpu(), gx, tol, mx));
  r.comparisons.push_back(harness::compare_tensors(our_gw.cpu(), gw, tol, mw));
  r.comparisons.push_back(harness::compare_tensors(our_gb.cpu(), gb, tol, mb));
  harness::summarize(r);
  return r;
}

// 64-bit indices: features [1, 3, 32768, 32768] (3 * 2^30 elements: channel 2 starts past 2^31), weight
// [3, 3, 3, 3], padding 1, so the output [1, 3, 32768, 32768] is as large, while the mask (2^30 elements)
// keeps ATen's compaction in its 32-bit range. 256 positions are selected near the map's far corner (flat
// offsets past 2^31 in channels 1 and 2) and 256 near its origin; the reference runs on the two 64 x 64
// crops (whose outer edges are the map's, the selected windows never crossing their inner edges). Values are
// formulas computed on the device. fp64 is left out: its backward needs ~100 GB.
constexpr std::int64_t kLargeSide = 32768, kCrop = 64;

// The kCrop x kCrop crop of t [N, C, H, W] at (y0, x0), on the CPU in fp64.
at::Tensor crop(const at::Tensor& t, std::int64_t y0, std::int64_t x0) {
  return t.slice(2, y0, y0 + kCrop).slice(3, x0, x0 + kCrop).cpu().to(at::kDouble);
}

// Summarizes r's comparisons, then checks that every nonzero element of t (the output or grad_features, named
// `what`) lies in the two crops (at (far, far) and the origin) that hold the selection.
void summarize_zero_outside_crops(harness::CheckResult& r, const at::Tensor& t, std::int64_t far, const char* what) {
  const std::int64_t nonzero = at::count_nonzero(t).item<std::int64_t>();
  const std::int64_t in_crops = at::count_nonzero(crop(t, far, far)).item<std::int64_t>() +
                                at::count_nonzero(crop(t, 0, 0)).item<std::int64_t>();
  r.properties["nonzero_outside_crops"] = std::to_string(nonzero - in_crops);
  harness::summarize(r);
  if (nonzero != in_crops) {
    r.outcome = harness::Outcome::kMismatch;
    r.message = std::to_string(nonzero - in_crops) + " " + what + " outside the selected crops are nonzero";
  }
}

harness::CheckResult check_large_index(DType dtype, bool backward) {
  harness::CheckResult r;
  const MaskedConv2dParams p{1, 1, 1, 1};
  const std::int64_t side = kLargeSide, far = kLargeSide - kCrop;
  const at::ScalarType st = harness::scalar_type_of(dtype);
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0x3A5C'B16B);
  const at::Tensor w_cpu = kit::uniform_features({3, 3, 3, 3}, gen).to(st).to(at::kDouble);
  const at::Tensor b_cpu = kit::uniform_features({3}, gen).to(st).to(at::kDouble);
  // Positions: y, x in [far + 1, side) (far crop) or [0, kCrop - 1) (near crop).
  const at::Tensor u = at::randint(0, kCrop - 1, {2, 256, 2}, gen, at::TensorOptions().dtype(at::kLong));
  const at::Tensor far_yx = u[0] + (far + 1), near_yx = u[1];
  at::Tensor mask = at::zeros({1, side, side}, cuda.dtype(at::kBool));
  for (const at::Tensor& yx : {far_yx, near_yx}) {
    mask.index_put_({at::zeros({256}, at::kLong).to(at::kCUDA), yx.select(1, 0).to(at::kCUDA), yx.select(1, 1).to(at::kCUDA)},
                    at::ones({256}, cuda.dtype(at::kBool)));
  }
  const auto formula = [&](double a, double b, double c) {  // a plane-wise formula over [1, 3, side, side]
    const at::ScalarType compute = at::kFloat;
    const at::Tensor cs = at::arange(3, cuda.dtype(compute)).view({1, 3, 1, 1});
    const at::Tensor ys = at::arange(side, cuda.dtype(compute)).view({1, 1, side, 1});
    const at::Tensor xs = at::arange(side, cuda.dtype(compute)).view({1, 1, 1, side});
    return at::sin(cs * a + ys * b + xs * c).to(st);
  };
  const reference::Tensor4d w_ref = kit::to_tensor4d(w_cpu), w_abs = kit::to_tensor4d(w_cpu.abs());
  const reference::Vectord b_ref = kit::to_vector(b_cpu), b_abs = kit::to_vector(b_cpu.abs());
  const harness::Tolerance tol = tolerance_of(dtype);
  r.properties["features_shape"] = "[1, 3, 32768, 32768]";
  r.properties["features_elements"] = std::to_string(3 * side * side);
  at::Tensor x = formula(0.7, 0.37, 0.11);
  if (!backward) {
    const at::Tensor out = masked_conv2d_forward(x, mask, w_cpu.to(cuda.dtype(st)), b_cpu.to(cuda.dtype(st)), p);
    for (const std::int64_t o : {far, std::int64_t{0}}) {
      const at::Tensor xc = crop(x, o, o);
      const reference::Tensor4d mc = kit::to_tensor4d(crop(mask.unsqueeze(1), o, o));
      const at::Tensor ref = kit::from_tensor4d(reference::masked_conv2d_forward(p, kit::to_tensor4d(xc), mc, w_ref, &b_ref));
      const at::Tensor mag =
          kit::from_tensor4d(reference::masked_conv2d_forward(p, kit::to_tensor4d(xc.abs()), mc, w_abs, &b_abs));
      r.comparisons.push_back(harness::compare_tensors(crop(out, o, o), ref, tol, mag));
    }
    summarize_zero_outside_crops(r, out, far, "outputs");
    return r;
  }
  const at::Tensor go = formula(1.3, 0.23, 0.19);
  const at::Tensor gx = masked_conv2d_backward_input(go, mask, w_cpu.to(cuda.dtype(st)), p, {1, 3, side, side});
  const auto [gw, gb] = masked_conv2d_backward_weight(go, x, mask, w_cpu.to(cuda.dtype(st)), p);
  // grad_weight / grad_bias: the two crops' sums; their tolerance scales with the sums of |terms| (the same
  // reference on |values|), as does grad_features'.
  at::Tensor ref_w = at::zeros({3, 3, 3, 3}, at::kDouble), mag_w = ref_w.clone();
  at::Tensor ref_b = at::zeros({3}, at::kDouble), mag_b = ref_b.clone();
  for (const std::int64_t o : {far, std::int64_t{0}}) {
    const at::Tensor xc = crop(x, o, o), gc = crop(go, o, o);
    const reference::Tensor4d mc = kit::to_tensor4d(crop(mask.unsqueeze(1), o, o));
    const reference::MaskedConv2dGrads g =
        reference::masked_conv2d_backward(p, kit::to_tensor4d(xc), mc, w_ref, kit::to_tensor4d(gc));
    const reference::MaskedConv2dGrads m = reference::masked_conv2d_backward(
        p, kit::to_tensor4d(xc.abs()), mc, kit::to_tensor4d(w_cpu.abs()), kit::to_tensor4d(gc.abs()));
    r.comparisons.push_back(harness::compare_tensors(crop(gx, o, o), kit::from_tensor4d(g.features), tol,
                                                     kit::from_tensor4d(m.features)));
    ref_w += kit::from_tensor4d(g.weight);
    mag_w += kit::from_tensor4d(m.weight);
    ref_b += kit::from_vector(g.bias);
    mag_b += kit::from_vector(m.bias);
  }
  r.comparisons.push_back(harness::compare_tensors(gw.cpu(), ref_w, tol, mag_w));
  r.comparisons.push_back(harness::compare_tensors(gb.cpu(), ref_b, tol, mag_b));
  summarize_zero_outside_crops(r, gx, far, "grad_features elements");
  return r;
}

// ---------------------------------------------------------------------------------------------------
// Bad inputs and the valid call. The valid call: features [2, 3, 8, 8], weight [4, 3, 3, 3], padding 0,
// stride 1 -> output [2, 4, 6, 6].

using kit::f32_on;
using kit::other_device;

at::Tensor features(const at::Device& d) { return at::rand({2, 3, 8, 8}, f32_on(d)); }
at::Tensor weight(const at::Device& d) { return at::rand({4, 3, 3, 3}, f32_on(d)); }
at::Tensor bias(const at::Device& d) { return at::rand({4}, f32_on(d)); }
at::Tensor mask(const at::Device& d) { return at::ones({2, 6, 6}, at::TensorOptions().dtype(at::kBool).device(d)); }
at::Tensor grad(const at::Device& d) { return at::ones({2, 4, 6, 6}, f32_on(d)); }
constexpr MaskedConv2dParams kValid{};

std::vector<BadInputCase> masked_conv2d_bad_inputs() {
  kit::BadInputs bad;
  using D = const at::Device&;
  auto fwd = [](const at::Tensor& x, const at::Tensor& m, const at::Tensor& w, const at::Tensor& b,
                MaskedConv2dParams p = kValid) { masked_conv2d_forward(x, m, w, b, p); };
  bad.add("features_3d", [=](D d) { fwd(features(d)[0], mask(d), weight(d), bias(d)); }, {"features", "4-D"});
  bad.add("integer_features", [=](D d) { fwd(features(d).to(at::kInt), mask(d), weight(d).to(at::kInt), at::Tensor()); },
          {"features", "float64, float32, float16 or bfloat16"});
  bad.add("weight_channels_mismatch", [=](D d) { fwd(features(d), mask(d), at::rand({4, 2, 3, 3}, f32_on(d)), bias(d)); },
          {"weight", "C_in", "3", "[4, 2, 3, 3]"});
  bad.add("weight_3d", [=](D d) { fwd(features(d), mask(d), weight(d)[0], bias(d)); }, {"weight", "4-D"});
  bad.add("weight_dtype_mismatch", [=](D d) { fwd(features(d), mask(d), weight(d).to(at::kDouble), bias(d)); },
          {"weight dtype", "features dtype"});
  bad.add("weight_on_other_device", [=](D d) { fwd(features(d), mask(d), other_device(weight(d), d), bias(d)); },
          {"features and weight", "same device"});
  bad.add("bias_wrong_length", [=](D d) { fwd(features(d), mask(d), weight(d), at::rand({5}, f32_on(d))); },
          {"bias", "[4]", "[5]"});
  bad.add("bias_dtype_mismatch", [=](D d) { fwd(features(d), mask(d), weight(d), bias(d).to(at::kHalf)); },
          {"bias dtype", "features dtype"});
  bad.add("bias_on_other_device", [=](D d) { fwd(features(d), mask(d), weight(d), other_device(bias(d), d)); },
          {"features and bias", "same device"});
  bad.add("mask_input_sized_not_output_sized", [=](D d) {
        fwd(features(d), at::ones({1, 8, 8}, at::TensorOptions().dtype(at::kBool).device(d)), weight(d), bias(d)); },
          {"mask", "[2, 6, 6]", "[1, 6, 6]", "[1, 8, 8]"});
  bad.add("mask_wrong_batch", [=](D d) { fwd(features(d), at::ones({3, 6, 6}, f32_on(d)), weight(d), bias(d)); },
          {"mask", "[2, 6, 6]", "[3, 6, 6]"});
  bad.add("mask_4d", [=](D d) { fwd(features(d), mask(d).unsqueeze(1), weight(d), bias(d)); },
          {"mask", "[2, 6, 6]", "[2, 1, 6, 6]"});
  bad.add("mask_complex", [=](D d) {
        fwd(features(d), at::ones({2, 6, 6}, at::TensorOptions().dtype(at::kComplexFloat).device(d)), weight(d), bias(d)); },
          {"mask", "bool, integer or floating-point"});
  bad.add("mask_on_other_device", [=](D d) { fwd(features(d), other_device(mask(d), d), weight(d), bias(d)); },
          {"features and mask", "same device"});
  bad.add("negative_padding", [=](D d) { fwd(features(d), mask(d), weight(d), bias(d), {-1, 0, 1, 1}); },
          {"padding", ">= 0", "(-1, 0)"});
  bad.add("stride_zero", [=](D d) { fwd(features(d), mask(d), weight(d), bias(d), {0, 0, 1, 0}); },
          {"stride", ">= 1", "(1, 0)"});
  bad.add("stride_negative", [=](D d) { fwd(features(d), mask(d), weight(d), bias(d), {0, 0, -2, 1}); },
          {"stride", ">= 1"});
  bad.add("kernel_larger_than_padded_input", [=](D d) {
        fwd(features(d), mask(d), at::rand({4, 3, 11, 3}, f32_on(d)), bias(d), {1, 0, 1, 1}); },
          {"padded input", "(10, 8)", "kernel", "(11, 3)"});
  bad.add("backward_input_grad_wrong_shape", [](D d) {
        masked_conv2d_backward_input(at::ones({2, 4, 8, 8}, f32_on(d)), mask(d), weight(d), kValid, {2, 3, 8, 8}); },
          {"grad", "[2, 4, 6, 6]", "[2, 4, 8, 8]"});
  bad.add("backward_input_mask_wrong_shape", [](D d) {
        masked_conv2d_backward_input(grad(d), mask(d).slice(2, 0, 5), weight(d), kValid, {2, 3, 8, 8}); },
          {"mask", "[2, 6, 6]", "[2, 6, 5]"});
  bad.add("backward_weight_grad_dtype_mismatch", [](D d) {
        masked_conv2d_backward_weight(grad(d).to(at::kDouble), features(d), mask(d), weight(d), kValid); },
          {"grad dtype", "features dtype"});
  bad.add("backward_weight_grad_on_other_device", [](D d) {
        masked_conv2d_backward_weight(other_device(grad(d), d), features(d), mask(d), weight(d), kValid); },
          {"features and grad", "same device"});
  return std::move(bad.cases);
}

// Benchmarks (docs/benchmarks.md): a 3x3 convolution at the FPN P3 level of an 800x1344 image (features
// [2, 256, 100, 168], 256 output channels, padding 1), masks selecting 10 % and 50 % of the positions.
std::vector<harness::BenchCase> masked_conv2d_benchmarks() {
  std::vector<harness::BenchCase> out;
  std::uint64_t seed = 9901;
  for (const double density : {0.1, 0.5}) {
    const std::uint64_t case_seed = seed++;
    const MaskedConv2dParams p{1, 1, 1, 1};
    auto make = [=](DType dtype) {
      const at::Tensor x = harness::bench_randn_cuda({2, 256, 100, 168}, dtype, case_seed);
      const at::Tensor w = harness::bench_randn_cuda({256, 256, 3, 3}, dtype, case_seed + 1) * (1.0 / 48);
      const at::Tensor b = harness::bench_randn_cuda({256}, dtype, case_seed + 2);
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(case_seed + 3);
      const at::Tensor m = (at::rand({2, 100, 168}, gen, f64()) < density).to(at::kCUDA);
      const at::Tensor y = masked_conv2d_forward(x, m, w, b, p);
      const at::Tensor g = harness::bench_randn_cuda({2, 256, 100, 168}, dtype, case_seed + 4);
      harness::BenchInstance inst;
      inst.forward = [=] { (void)masked_conv2d_forward(x, m, w, b, p); };
      inst.backward = [=] {
        (void)masked_conv2d_backward_input(g, m, w, p, {2, 256, 100, 168});
        (void)masked_conv2d_backward_weight(g, x, m, w, p);
      };
      inst.bytes_forward = kit::bench_bytes({x, m, w, b, y});
      inst.bytes_backward = kit::bench_bytes({g, m, w, x, x, m, g, w, b});  // grad_features, grad_weight, grad_bias
      return inst;
    };
    const std::string pct = std::to_string(static_cast<int>(density * 100));
    out.push_back(kit::bench_case(
        "fpn_p3_3x3_density" + pct, "features[2,256,100,168] weight[256,256,3,3] pad 1, mask " + pct + "% of [2,100,168]",
        "fwd: features + mask + weight + bias + output; bwd: grad + mask + weight + features (input op) and grad + "
        "features + mask (weight op), grad_features + grad_weight + grad_bias written",
        make));
  }
  return out;
}

OpSpec masked_conv2d_spec() {
  OpSpec spec = kit::op_spec("masked_conv2d", masked_conv2d_cases(), masked_conv2d_bad_inputs());
  for (DType dtype : kAllDTypes) {
    for (Device device : {Device::kCpu, Device::kCuda}) {
      spec.extra_checks.push_back({"all_one_mask_is_conv2d", dtype_name(dtype), device,
                                   [dtype, device] { return check_dense_equivalence(dtype, device); }});
    }
    if (dtype == DType::kFloat64) continue;
    for (bool backward : {false, true}) {
      spec.extra_checks.push_back({backward ? "large_index_backward" : "large_index_forward", dtype_name(dtype),
                                   Device::kCuda, [dtype, backward] { return check_large_index(dtype, backward); }});
    }
  }
  spec.valid_call = [](const at::Device& d) {
    const at::Tensor x = at::ones({1, 1, 4, 4}, f32_on(d));
    const at::Tensor m = at::ones({1, 4, 4}, at::TensorOptions().dtype(at::kBool).device(d));
    const at::Tensor out = masked_conv2d_forward(x, m, at::full({1, 1, 1, 1}, 2.0, f32_on(d)), at::Tensor(), kValid).cpu();
    TORCH_CHECK(at::equal(out, at::full({1, 1, 4, 4}, 2.0)), "masked_conv2d: a valid call after the bad one returned wrong values");
  };
  spec.determinism.backward_cuda = true;
  spec.determinism.note =
      "no atomics: CUDA: cuBLAS GEMMs (bitwise reproducible run to run on one GPU model), the features' gradient "
      "gathered in the kernel taps' order, the bias gradient a fixed-order block sum, position chunks added in "
      "order; CPU: every element one thread's sum in a fixed order, independent of the thread count (CPU and "
      "CUDA orders differ)";
  spec.benchmarks = masked_conv2d_benchmarks();
  return spec;
}

DETOPS_REGISTER_OP_SPEC(masked_conv2d_spec);

}  // namespace
}  // namespace detops
