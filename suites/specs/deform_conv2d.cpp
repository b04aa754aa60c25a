// deform_conv2d's op spec: seeded cases (DCNv1 and DCNv2, offset groups 1/2/4, weight groups 1/2, stride,
// padding, dilation and kernel shapes, batches 0 to 65, offsets far outside the map, on the border bands, on
// integers and NaN, non-contiguous inputs, stride-0 grad_output, the half-accumulation sums, GPU-only large
// cases), the dense-conv2d identity of zero offsets and the 32/64-bit index checks (extra checks), bad inputs,
// determinism and the ResNet-50 DCN benchmarks.
#include "kit/spec_prelude.h"

#include "deform_conv2d/deform_conv2d_torch.h"
#include "detops/harness/checks.h"
#include "detops/reference/deform_conv2d_reference.h"
#include "kit/feature_cases.h"
#include "kit/half_accumulation.h"

namespace detops {
namespace {

using P = DeformConv2dParams;

// Where the taps sample (sample point = the tap's integer grid position + its offset). Every kind but kInteger
// and kZero keeps each sample point's fractional part in [0.01, 0.99], away from the kinks of the bilinear
// interpolation at integer coordinates, so finite differences see a smooth function.
enum class OffsetKind {
  kRandom,            // U(-offset_range, offset_range)
  kFar,               // U(-3 M, 3 M), M = max(H, W): most samples far outside the map (contribute 0)
  kBorder,            // sample points in the bands (-2, -1), (-1, 0), (H - 1, H), (H, H + 1) (and W's) or inside
  kNaN,               // kRandom with 25 % of the offsets NaN (those samples contribute 0)
  kInteger,           // integers in [-2, 2]: samples on integer coordinates, -1 and H - 1 among them
  kZero,              // 0: the dense convolution's points; with padding, samples at -1 (forward 0)
  kConverge,          // every sample at (2.3, 3.6): thousands of scatters into the same four pixels
  kNegativeFraction,  // -U(0.1, 0.9): every sample in the cell below-left of its grid point, inside [-1, H)
};

enum class MaskKind {
  kSigmoid,  // sigmoid(2 N(0, 1)), in (0, 1): what DCNv2's modulation produces
  kAnySign,  // U(-1, 2) with 15 % exact zeros: the op does not clamp the mask
};

// Which sum a half-precision accumulator would get wrong (kit/half_accumulation.h): every term of it has the
// same sign, and it has at least kHalfAccumulationTerms terms.
enum class HalfAccumulation {
  kNone,
  kForward,     // C_in * kh * kw = 4608 taps of inputs 24..40 times weights 0.5..1 / 64 and masks in (0, 1)
  kGradInput,   // 4096 positions all sampling one point: each of its four pixels receives 4096 terms
  kGradWeight,  // 4096 positions per weight (and bias) element: grad 0.5..1 times samples of 0.5..1
  kGradOffset,  // 4096 channels in one offset group: inputs rising by 1 per row and 0.5 per column
};

struct DeformConv2dCaseConfig {
  std::int64_t batch = 2, in_channels = 4, height = 7, width = 8, out_channels = 4, kernel_h = 3, kernel_w = 3;
  P params{1, 1, 1, 1, 1, 1, 1, 1, false};  // stride 1, padding 1, dilation 1, groups 1, offset_groups 1, DCNv1
  bool bias = true;                        // false: no bias input (the op gets zeros, as torchvision passes)
  OffsetKind offsets = OffsetKind::kRandom;
  double offset_range = 2.0;
  MaskKind mask = MaskKind::kSigmoid;  // when params.use_mask
  bool noncontiguous = false;          // input, offset, weight and mask stored W-major (kit::w_major)
  bool stride0_grad = false;           // grad_output one value expanded (stride 0)
  double stride0_value = 1.0;          // that grad_output's one value
  bool dyadic_offsets = false;         // kRandom offsets on a 1/256 grid: every sample coordinate exact in fp32
  HalfAccumulation half = HalfAccumulation::kNone;
  bool large = false;  // a GPU-only large_ case: no finite differences (the harness runs the reference's on the CPU)

  std::int64_t out_height() const {
    return deform_conv2d_out_size(height, kernel_h, params.pad_h, params.dilation_h, params.stride_h);
  }
  std::int64_t out_width() const {
    return deform_conv2d_out_size(width, kernel_w, params.pad_w, params.dilation_w, params.stride_w);
  }
  std::int64_t taps() const { return kernel_h * kernel_w; }
};
using Cfg = DeformConv2dCaseConfig;

// u with its integer part kept and its fractional part mapped into [0.01, 0.99].
at::Tensor kink_free(const at::Tensor& u) {
  const at::Tensor f = at::floor(u);
  return f + 0.01 + 0.98 * (u - f);
}

// The taps' integer grid positions [1, 2 offset_groups kh kw, H_out, W_out]: row 2 (G kh kw + k) holds
// y * stride_h - pad_h + i * dilation_h, the next row x * stride_w - pad_w + j * dilation_w.
at::Tensor grid_positions(const Cfg& c) {
  const P& p = c.params;
  const std::int64_t ho = c.out_height(), wo = c.out_width();
  at::Tensor base = at::empty({1, 2 * p.offset_groups * c.taps(), ho, wo}, f64());
  const at::Tensor ys = at::arange(ho, f64()).view({ho, 1}) * static_cast<double>(p.stride_h);
  const at::Tensor xs = at::arange(wo, f64()).view({1, wo}) * static_cast<double>(p.stride_w);
  for (std::int64_t g = 0; g < p.offset_groups; ++g) {
    for (std::int64_t i = 0; i < c.kernel_h; ++i) {
      for (std::int64_t j = 0; j < c.kernel_w; ++j) {
        const std::int64_t row = 2 * (g * c.taps() + i * c.kernel_w + j);
        base[0][row].copy_((ys + static_cast<double>(i * p.dilation_h - p.pad_h)).expand({ho, wo}));
        base[0][row + 1].copy_((xs + static_cast<double>(j * p.dilation_w - p.pad_w)).expand({ho, wo}));
      }
    }
  }
  return base;
}

// The offset rows that move y (even) or x (odd).
at::Tensor dy_rows(const at::Tensor& t) { return t.slice(1, 0, t.size(1), 2); }
at::Tensor dx_rows(const at::Tensor& t) { return t.slice(1, 1, t.size(1), 2); }

at::Tensor make_offsets(const Cfg& c, at::Generator& gen) {
  const std::vector<std::int64_t> sizes{c.batch, 2 * c.params.offset_groups * c.taps(), c.out_height(), c.out_width()};
  auto uniform = [&](double lo, double hi) { return at::rand(sizes, gen, f64()) * (hi - lo) + lo; };
  switch (c.offsets) {
    case OffsetKind::kRandom: {
      const at::Tensor o = kink_free(uniform(-c.offset_range, c.offset_range));
      return c.dyadic_offsets ? at::round(o * 256.0) / 256.0 : o;
    }
    case OffsetKind::kFar: {
      const double m = 3.0 * static_cast<double>(std::max(c.height, c.width));
      return kink_free(uniform(-m, m));
    }
    case OffsetKind::kNaN: {
      at::Tensor o = kink_free(uniform(-c.offset_range, c.offset_range));
      kit::sprinkle_nan(o, 0.25, gen);
      return o;
    }
    case OffsetKind::kInteger: return at::randint(-2, 3, sizes, gen, f64());
    case OffsetKind::kZero: return at::zeros(sizes, f64());
    case OffsetKind::kNegativeFraction: return -uniform(0.1, 0.9);
    case OffsetKind::kBorder:
    case OffsetKind::kConverge: {
      // Absolute sample points, then minus the grid positions.
      at::Tensor target = at::empty(sizes, f64());
      if (c.offsets == OffsetKind::kConverge) {
        dy_rows(target).fill_(2.3);
        dx_rows(target).fill_(3.6);
      } else {
        for (const bool y : {true, false}) {
          const double n = static_cast<double>(y ? c.height : c.width);
          // The integer part: -2, -1, n - 1, n (the bands around the border) or a point inside.
          const at::Tensor band = at::tensor(std::vector<double>{-2.0, -1.0, n - 1, n, std::floor(n / 2)}, f64());
          at::Tensor rows = y ? dy_rows(target) : dx_rows(target);
          const at::Tensor pick = at::randint(0, 5, rows.sizes(), gen, at::TensorOptions().dtype(at::kLong));
          rows.copy_(band.index({pick}) + 0.01 + 0.98 * at::rand(rows.sizes(), gen, f64()));
        }
      }
      return target - grid_positions(c);
    }
  }
  throw std::invalid_argument("make_offsets: unknown kind");
}

at::Tensor make_mask(const Cfg& c, at::Generator& gen) {
  const std::vector<std::int64_t> sizes{c.batch, c.params.offset_groups * c.taps(), c.out_height(), c.out_width()};
  if (c.mask == MaskKind::kSigmoid) return at::sigmoid(at::randn(sizes, gen, f64()) * 2);
  at::Tensor m = at::rand(sizes, gen, f64()) * 3 - 1;
  m.masked_fill_(at::rand(sizes, gen, f64()) < 0.15, 0.0);
  return m;
}

// input, weight and bias: U[-1, 1), or the half-accumulation case's same-sign values.
std::vector<at::Tensor> make_values(const Cfg& c, at::Generator& gen) {
  const std::vector<std::int64_t> xs{c.batch, c.in_channels, c.height, c.width};
  const std::vector<std::int64_t> ws{c.out_channels, c.in_channels / c.params.groups, c.kernel_h, c.kernel_w};
  const std::vector<std::int64_t> bs{c.out_channels};
  auto half_open = [&](const std::vector<std::int64_t>& s) { return at::rand(s, gen, f64()) * 0.5 + 0.5; };
  switch (c.half) {
    case HalfAccumulation::kNone:
      return {kit::uniform_features(xs, gen), kit::uniform_features(ws, gen), kit::uniform_features(bs, gen)};
    case HalfAccumulation::kForward: return {kit::half_accumulation_values(xs, gen), half_open(ws) / 64, half_open(bs)};
    case HalfAccumulation::kGradInput:
    case HalfAccumulation::kGradWeight: return {half_open(xs), half_open(ws), half_open(bs)};
    case HalfAccumulation::kGradOffset: {
      // u_c + row + col / 2 (u_c a multiple of 1/8 in [0, 1)): exact in every dtype, each cell's corner
      // differences exactly 1 (rows) and 0.5 (columns).
      const at::Tensor u = at::floor(at::rand({c.batch, c.in_channels, 1, 1}, gen, f64()) * 8) / 8;
      const at::Tensor rows = at::arange(c.height, f64()).view({1, 1, c.height, 1});
      const at::Tensor cols = at::arange(c.width, f64()).view({1, 1, 1, c.width}) * 0.5;
      return {(u + rows + cols).contiguous(), half_open(ws), half_open(bs)};
    }
  }
  throw std::invalid_argument("make_values: unknown kind");
}

// A case's inputs in order: input, offset, weight, then mask (DCNv2) and bias when present.
struct Parts {
  at::Tensor input, offset, weight, mask, bias;  // mask / bias undefined when absent
};

Parts parts(const Tensors& in, bool has_mask, bool has_bias) {
  Parts t{in[0], in[1], in[2], at::Tensor(), at::Tensor()};
  std::size_t next = 3;
  if (has_mask) t.mask = in[next++];
  if (has_bias) t.bias = in[next++];
  return t;
}

Tensors reference_forward(const P& p, const Tensors& in, bool has_bias, bool abs_terms) {
  const Parts t = parts(in, p.use_mask, has_bias);
  const reference::Tensor4d x = kit::to_tensor4d(t.input), o = kit::to_tensor4d(t.offset), w = kit::to_tensor4d(t.weight);
  const reference::Tensor4d m = p.use_mask ? kit::to_tensor4d(t.mask) : reference::Tensor4d();
  const reference::Vectord b = has_bias ? kit::to_vector(t.bias) : reference::Vectord();
  return {kit::from_tensor4d(reference::deform_conv2d_forward(p, x, w, o, p.use_mask ? &m : nullptr,
                                                              has_bias ? &b : nullptr, abs_terms))};
}

Tensors reference_backward(const P& p, const Tensors& in, const at::Tensor& grad, bool has_bias, bool abs_terms) {
  const Parts t = parts(in, p.use_mask, has_bias);
  const reference::Tensor4d m = p.use_mask ? kit::to_tensor4d(t.mask) : reference::Tensor4d();
  const reference::DeformConv2dGrads g = reference::deform_conv2d_backward(
      p, kit::to_tensor4d(t.input), kit::to_tensor4d(t.weight), kit::to_tensor4d(t.offset), p.use_mask ? &m : nullptr,
      kit::to_tensor4d(grad), abs_terms);
  Tensors out{kit::from_tensor4d(g.input), kit::from_tensor4d(g.offset), kit::from_tensor4d(g.weight)};
  if (p.use_mask) out.push_back(kit::from_tensor4d(g.mask));
  if (has_bias) out.push_back(kit::from_vector(g.bias));
  return out;
}

// The op's view of a case's inputs: torchvision's placeholders for an absent mask ([B, 1] zeros) and bias
// (C_out zeros), the layout applied.
Parts op_parts(const Tensors& in, const P& p, bool has_bias, std::int64_t out_channels, bool noncontiguous) {
  Parts t = parts(in, p.use_mask, has_bias);
  auto layout = [noncontiguous](const at::Tensor& x) { return noncontiguous ? kit::w_major(x) : x; };
  t.input = layout(t.input);
  t.offset = layout(t.offset);
  t.weight = layout(t.weight);
  t.mask = p.use_mask ? layout(t.mask) : at::zeros({t.input.size(0), 1}, t.input.options());
  if (!has_bias) t.bias = at::zeros({out_channels}, t.input.options());
  return t;
}

CaseData make_case(const Cfg& cfg, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  CaseData d;
  const std::vector<at::Tensor> v = make_values(cfg, gen);
  d.inputs = {v[0], make_offsets(cfg, gen), v[1]};
  if (cfg.params.use_mask) d.inputs.push_back(make_mask(cfg, gen));
  if (cfg.bias) d.inputs.push_back(v[2]);
  for (std::size_t i = 0; i < d.inputs.size(); ++i) d.differentiable.push_back(i);
  const P p = cfg.params;
  const bool has_bias = cfg.bias, noncontiguous = cfg.noncontiguous;
  const std::int64_t c_out = cfg.out_channels;
  d.op_forward = [=](const Tensors& in) {
    const Parts t = op_parts(in, p, has_bias, c_out, noncontiguous);
    return Tensors{deform_conv2d_forward(t.input, t.weight, t.offset, t.mask, t.bias, p)};
  };
  d.op_backward = [=](const Tensors& in, const Tensors& grad) {
    const Parts t = op_parts(in, p, has_bias, c_out, noncontiguous);
    const auto [gi, gw, go, gm, gb] = deform_conv2d_backward(grad[0], t.input, t.weight, t.offset, t.mask, t.bias, p);
    Tensors out{gi, go, gw};
    if (p.use_mask) out.push_back(gm);
    if (has_bias) out.push_back(gb);
    return out;
  };
  d.reference_forward = [=](const Tensors& in) { return reference_forward(p, in, has_bias, false); };
  d.reference_backward = [=](const Tensors& in, const Tensors& g) { return reference_backward(p, in, g[0], has_bias, false); };
  // Each element is a sum of products; the reference with abs_terms gives the sum of their |terms| (the offset
  // gradient's corner differences as sums of |values|).
  d.reference_forward_magnitude = [=](const Tensors& in) { return reference_forward(p, in, has_bias, true); };
  d.reference_backward_magnitude = [=](const Tensors& in, const Tensors& g) {
    return reference_backward(p, in, g[0], has_bias, true);
  };
  if (cfg.offsets == OffsetKind::kInteger || cfg.offsets == OffsetKind::kZero) {
    d.gradcheck_skip_reason =
        "samples on integer coordinates: the bilinear interpolation has a kink there, where the backward gives the "
        "cell [floor, floor + 1]'s (right) derivative and central differences average both sides; the forward and "
        "backward checks compare that convention with the reference";
  }
  if (cfg.large) {
    d.gradcheck_skip_reason =
        "a large case for the CUDA launcher's chunks and indices: the fp64 reference's finite differences would "
        "take tens of minutes on the CPU; the backward check compares its gradients with the reference, and "
        "finite differences run on the smaller cases";
  }
  if (cfg.stride0_grad) {
    const double value = cfg.stride0_value;
    d.make_grad_output = [value](const at::Tensor& out, std::uint64_t) {
      return at::full({}, value, out.options()).expand(out.sizes());
    };
  }
  if (cfg.half != HalfAccumulation::kNone) d.make_grad_output = kit::half_accumulation_grad_output();
  return d;
}

std::string pair_name(const char* what, std::int64_t h, std::int64_t w) {
  return std::string(what) + std::to_string(h) + (h == w ? "" : "x" + std::to_string(w));
}

// The geometry fields of a config, in one call.
Cfg with(Cfg c, std::int64_t stride_h, std::int64_t stride_w, std::int64_t pad_h, std::int64_t pad_w,
         std::int64_t dil_h, std::int64_t dil_w) {
  c.params.stride_h = stride_h;
  c.params.stride_w = stride_w;
  c.params.pad_h = pad_h;
  c.params.pad_w = pad_w;
  c.params.dilation_h = dil_h;
  c.params.dilation_w = dil_w;
  return c;
}

Cfg groups(Cfg c, std::int64_t weight_groups, std::int64_t offset_groups, bool use_mask) {
  c.params.groups = weight_groups;
  c.params.offset_groups = offset_groups;
  c.params.use_mask = use_mask;
  return c;
}

const char* version(bool use_mask) { return use_mask ? "v2" : "v1"; }

std::vector<OpCase> deform_conv2d_cases() {
  kit::CaseList<Cfg> add(0xDC02'0000, make_case);
  // DCNv1 / DCNv2 x offset groups 1, 2, 4 x weight groups 1, 2 (C_in 4, C_out 4, 3x3, padding 1, batch 2).
  for (const bool v2 : {false, true}) {
    for (const std::int64_t og : {1, 2, 4}) {
      for (const std::int64_t g : {1, 2}) {
        add(std::string(version(v2)) + "_og" + std::to_string(og) + "_g" + std::to_string(g), groups(Cfg{}, g, og, v2));
      }
    }
  }
  // Stride 1, 2 x padding 0, 1, 2 x dilation 1, 2 (3x3 on 9 x 10, C_in 3, C_out 2), DCNv1 and v2 alternating.
  int n = 0;
  for (const std::int64_t s : {1, 2}) {
    for (const std::int64_t pad : {0, 1, 2}) {
      for (const std::int64_t dil : {1, 2}) {
        Cfg c = with(Cfg{}, s, s, pad, pad, dil, dil);
        c.in_channels = 3;
        c.out_channels = 2;
        c.height = 9;
        c.width = 10;
        c.batch = 1;
        c.params.use_mask = (n++ % 2) == 1;
        add(pair_name("s", s, s) + "_" + pair_name("p", pad, pad) + "_" + pair_name("d", dil, dil) + "_" +
                version(c.params.use_mask),
            c);
      }
    }
  }
  using O = OffsetKind;
  Cfg c;
  // Kernel shapes: kh != kw and unequal strides, paddings and dilations catch a swapped h / w.
  c = {}; c.kernel_h = c.kernel_w = 1; c = with(c, 1, 1, 0, 0, 1, 1); add("kernel_1x1_v1", c);
  c = groups(Cfg{}, 1, 2, true); c.kernel_h = c.kernel_w = 1; c = with(c, 2, 2, 0, 0, 1, 1); add("kernel_1x1_stride2_v2_og2", c);
  c = groups(Cfg{}, 1, 1, true); c.kernel_w = 1; c = with(c, 1, 1, 1, 0, 1, 1); add("kernel_3x1_v2", c);
  c = {}; c.kernel_h = 1; c = with(c, 1, 1, 0, 1, 1, 1); add("kernel_1x3_v1", c);
  c = groups(Cfg{}, 1, 1, true); c.kernel_h = 2; c.kernel_w = 3; c.height = 9; c.width = 11; c = with(c, 2, 1, 1, 0, 1, 2);
  add("kernel_2x3_stride2x1_pad1x0_dil1x2_v2", c);
  c = groups(Cfg{}, 2, 2, true); c.kernel_w = 1; c.out_channels = 6; c.height = 10; c.width = 9; c = with(c, 1, 2, 2, 0, 2, 1);
  add("kernel_3x1_stride1x2_pad2x0_dil2x1_v2_og2_g2", c);
  c = groups(Cfg{}, 1, 1, true); c.kernel_h = c.kernel_w = 5; c.height = c.width = 9; c.in_channels = 2; c.batch = 1;
  c = with(c, 1, 1, 4, 4, 2, 2); add("kernel_5x5_dil2_pad4_v2", c);
  // No bias (torchvision's None: the op gets zeros and no bias gradient is compared).
  c = {}; c.bias = false; add("no_bias_v1", c);
  c = groups(Cfg{}, 2, 2, true); c.bias = false; add("no_bias_v2_og2_g2", c);
  // Batches: 1, 3, 33 and 65 (peers broke past 32-image chunks), 0.
  c = groups(Cfg{}, 1, 1, true); c.batch = 1; add("batch1_v2", c);
  c = {}; c.batch = 3; c = with(c, 2, 2, 1, 1, 1, 1); add("batch3_stride2_v1", c);
  c = groups(Cfg{}, 1, 1, true); c.batch = 33; c.in_channels = 2; c.out_channels = 3; c.height = 4; c.width = 5;
  add("batch33_v2", c);
  c = groups(Cfg{}, 1, 2, true); c.batch = 65; c.in_channels = 2; c.out_channels = 3; c.height = 4; c.width = 5;
  add("batch65_v2_og2", c);
  c = {}; c.batch = 65; c.in_channels = 2; c.out_channels = 3; c.height = 5; c.width = 4; add("batch65_v1", c);
  c = groups(Cfg{}, 1, 1, true); c.batch = 0; add("batch0_v2", c);
  c = {}; c.batch = 0; c.bias = false; add("batch0_v1_no_bias", c);
  // Offsets far outside the map, in the bands around its border, on integers (kinks: the right derivative;
  // zero offsets with padding put samples at exactly -1, where the forward is 0 and the offset gradient is row /
  // column 0's value), NaN (contributes 0 to the output and every gradient).
  c = {}; c.offsets = O::kFar; add("far_offsets_3x_map_v1", c);
  c = groups(Cfg{}, 1, 2, true); c.offsets = O::kFar; add("far_offsets_3x_map_v2_og2", c);
  c = groups(Cfg{}, 1, 1, true); c.offsets = O::kBorder; add("border_band_samples_v2", c);
  c = {}; c.offsets = O::kBorder; c = with(c, 2, 2, 1, 1, 1, 1); c.height = 9; add("border_band_samples_stride2_v1", c);
  c = {}; c.offsets = O::kZero; add("zero_offsets_pad1_v1", c);
  c = groups(Cfg{}, 2, 2, true); c.offsets = O::kZero; add("zero_offsets_pad1_v2_og2_g2", c);
  c = groups(Cfg{}, 1, 1, true); c.offsets = O::kZero; c = with(c, 1, 1, 2, 2, 2, 2); add("zero_offsets_pad2_dil2_v2", c);
  c = groups(Cfg{}, 1, 1, true); c.offsets = O::kInteger; add("integer_offsets_v2", c);
  c = groups(Cfg{}, 1, 2, false); c.offsets = O::kInteger; c = with(c, 2, 1, 0, 1, 1, 1); add("integer_offsets_v1_og2", c);
  c = {}; c.offsets = O::kNaN; add("nan_offsets_v1", c);
  c = groups(Cfg{}, 1, 2, true); c.offsets = O::kNaN; add("nan_offsets_v2_og2", c);
  // Masks of any sign (with exact zeros): DCNv2 multiplies, it does not clamp.
  c = groups(Cfg{}, 1, 1, true); c.mask = MaskKind::kAnySign; add("mask_any_sign_with_zeros_v2", c);
  // Layouts and grad_output strides.
  c = groups(Cfg{}, 1, 2, true); c.noncontiguous = true; add("noncontiguous_input_offset_weight_mask_v2", c);
  c = groups(Cfg{}, 2, 1, false); c.noncontiguous = true; c.batch = 3; add("noncontiguous_v1_g2", c);
  c = groups(Cfg{}, 1, 1, true); c.stride0_grad = true; add("stride0_grad_output_v2", c);
  c = {}; c.stride0_grad = true; c.bias = false; add("stride0_grad_output_v1_no_bias", c);
  // Channel layouts: several channels per group, offset groups and weight groups crossing each other.
  c = groups(Cfg{}, 2, 4, true); c.in_channels = 64; c.out_channels = 70; c.height = c.width = 6; c.batch = 1;
  add("channels_64_to_70_v2_og4_g2", c);
  c = groups(Cfg{}, 3, 3, true); c.in_channels = 6; c.out_channels = 9; add("channels_6_to_9_v2_og3_g3", c);
  c = groups(Cfg{}, 4, 2, false); c.in_channels = 8; c.out_channels = 8; add("channels_8_v1_og2_g4", c);
  // 4099 channels per offset group (odd: one channel per run in every dtype): 32 lanes would each run 128 > 64
  // channels, so the CUDA backward spreads each of the 216 points over 4 warps and adds their offset and mask
  // sums in a second kernel (deform_conv2d_cuda.cu's backward_lanes); the 2^31-channel checks take that path
  // only in fp16 / bf16.
  c = groups(Cfg{}, 1, 2, true); c.in_channels = 8198; c.out_channels = 2; c.batch = 1; c.height = 3; c.width = 4;
  add("wide_backward_4099_channels_per_offset_group_og2_v2", c);
  // Sums of at least kHalfAccumulationTerms same-sign terms: fail unless accumulated in fp32.
  c = groups(Cfg{}, 1, 1, true); c.half = HalfAccumulation::kForward; c.in_channels = 512; c.out_channels = 2;
  c.height = c.width = 8; c.batch = 1; c.offsets = O::kNegativeFraction; c = with(c, 1, 1, 0, 0, 1, 1);
  add("half_accumulation_forward_4608_taps", c);
  c = groups(Cfg{}, 1, 1, true); c.half = HalfAccumulation::kGradInput; c.in_channels = c.out_channels = 1;
  c.kernel_h = c.kernel_w = 1; c.height = c.width = 64; c.batch = 1; c.offsets = O::kConverge; c = with(c, 1, 1, 0, 0, 1, 1);
  add("half_accumulation_grad_input_4096_positions_one_point", c);
  c = groups(Cfg{}, 1, 1, true); c.half = HalfAccumulation::kGradWeight; c.in_channels = c.out_channels = 2;
  c.kernel_h = c.kernel_w = 1; c.height = c.width = 64; c.batch = 1; c.offsets = O::kNegativeFraction;
  c = with(c, 1, 1, 0, 0, 1, 1); add("half_accumulation_grad_weight_4096_positions", c);
  c = groups(Cfg{}, 1, 1, true); c.half = HalfAccumulation::kGradOffset; c.in_channels = 4096; c.out_channels = 1;
  c.kernel_h = c.kernel_w = 1; c.height = c.width = 4; c.batch = 1; c.offsets = O::kNegativeFraction;
  c = with(c, 1, 1, 0, 0, 1, 1); add("half_accumulation_grad_offset_4096_channels", c);
  // GPU only (large_: run serially): the CUDA launcher's batch chunks (65 samples of 32 * 9 * 7680 column
  // entries exceed kDeformConv2dColumnBudget: chunks of 60 and 5), and torchvision's issue 2598 (an illegal
  // access on the second backward at input [8, 9, 1000, 110], weight [9, 9, 3, 3], padding 1, out.mean()).
  const std::map<Device, std::string> gpu_only{
      {Device::kCpu, "a large case for the CUDA path (its fp64 reference takes tens of seconds per call); the CPU "
                     "loops are the ones the smaller cases cover"}};
  c = groups(Cfg{}, 1, 1, true); c.batch = 65; c.in_channels = 32; c.out_channels = 1; c.height = 96; c.width = 80;
  c.large = true;
  add("large_batch65_column_chunks_v2", c, gpu_only);
  // Its grad_output is one value expanded (out.mean()'s is 1 / numel; 1/64 here keeps the fp16 bias gradient,
  // 880000 / 64, finite), its offsets dyadic: at y ~ 1000 an fp32 coordinate base + offset would otherwise be
  // rounded by up to 3e-5 px, an error the fp64 reference does not share and not what this case is about.
  c = {}; c.batch = 8; c.in_channels = c.out_channels = 9; c.height = 1000; c.width = 110; c.stride0_grad = true;
  c.stride0_value = 1.0 / 64; c.dyadic_offsets = true; c.large = true;
  add("large_torchvision_issue2598_8x9x1000x110", c, gpu_only);
  return std::move(add.cases);
}

// ---------------------------------------------------------------------------------------------------
// Extra checks.

at::Device torch_device(Device device) { return device == Device::kCpu ? at::Device(at::kCPU) : at::Device(at::kCUDA, 0); }

// Zero offsets (and a unit mask) are the dense convolution: forward and the input, weight and bias gradients
// against ATen's conv2d / convolution_backward in fp64 on the CPU, on the same rounded inputs, with weight groups 2,
// offset groups 3 and unequal strides, paddings and dilations; magnitudes from |inputs|.
harness::CheckResult check_conv2d_identity(DType dtype, Device device, bool unit_mask) {
  harness::CheckResult r;
  const P p{2, 1, 1, 2, 2, 1, 2, 3, unit_mask};
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(unit_mask ? 0xDC02'C0A2 : 0xDC02'C0A1);
  const at::ScalarType st = harness::scalar_type_of(dtype);
  const at::Device dev = torch_device(device);
  auto rounded = [&](at::IntArrayRef s) { return kit::uniform_features(s, gen).to(st).to(at::kDouble); };
  const at::Tensor x = rounded({2, 6, 11, 12}), w = rounded({8, 3, 3, 3}), b = rounded({8});
  const std::int64_t ho = deform_conv2d_out_size(11, 3, p.pad_h, p.dilation_h, p.stride_h);
  const std::int64_t wo = deform_conv2d_out_size(12, 3, p.pad_w, p.dilation_w, p.stride_w);
  const at::Tensor offset = at::zeros({2, 2 * 3 * 9, ho, wo}, f64());
  const at::Tensor mask = unit_mask ? at::ones({2, 3 * 9, ho, wo}, f64()) : at::zeros({2, 1}, f64());
  const std::vector<std::int64_t> stride{p.stride_h, p.stride_w}, padding{p.pad_h, p.pad_w},
      dil{p.dilation_h, p.dilation_w};
  const auto conv = [&](const at::Tensor& xx, const at::Tensor& ww, const at::Tensor& bb) {
    return at::conv2d(xx, ww, bb, stride, padding, dil, p.groups);
  };
  const at::Tensor expected = conv(x, w, b), magnitude = conv(x.abs(), w.abs(), b.abs());
  const at::Tensor go = rounded(expected.sizes());
  const auto conv_backward = [&](const at::Tensor& g, const at::Tensor& xx, const at::Tensor& ww) {
    return at::convolution_backward(g, xx, ww, std::vector<std::int64_t>{8}, stride, padding, dil, false,
                                    std::vector<std::int64_t>{0, 0}, p.groups, {true, true, true});
  };
  const auto [gx, gw, gb] = conv_backward(go, x, w);
  const auto [mx, mw, mb] = conv_backward(go.abs(), x.abs(), w.abs());
  const auto on = [&](const at::Tensor& t) { return t.to(dev, st); };
  const at::Tensor out = deform_conv2d_forward(on(x), on(w), on(offset), on(mask), on(b), p);
  const auto [our_gx, our_gw, our_go, our_gm, our_gb] =
      deform_conv2d_backward(on(go), on(x), on(w), on(offset), on(mask), on(b), p);
  const harness::Tolerance tol = harness::default_tolerance(dtype);
  r.comparisons.push_back(harness::compare_tensors(out.cpu(), expected, tol, magnitude));
  r.comparisons.push_back(harness::compare_tensors(our_gx.cpu(), gx, tol, mx));
  r.comparisons.push_back(harness::compare_tensors(our_gw.cpu(), gw, tol, mw));
  r.comparisons.push_back(harness::compare_tensors(our_gb.cpu(), gb, tol, mb));
  harness::summarize(r);
  return r;
}

// 32/64-bit indices (the CUDA launcher's switch: 32-bit when a chunk's largest tensor has at most 2^31 - 1
// elements). A 1x1 kernel, stride 1, no padding, one offset group, DCNv2, in two families:
// - square: input, offset, columns and output [1, 2, H, W] (C_in = C_out = 2) all of 2 H W elements, H x W =
//   2^30 - 1 (32767 x 32769), 2^30 and 2^30 + 1 (32513 x 33025): 2^31 - 2, 2^31 and 2^31 + 2 elements in a map of
//   model-like proportions. Offsets are multiples of 1/64 within +-1.5 px, so every sample coordinate (< 2^16 +
//   2) is exact in fp32, the precision the kernels form coordinates in. The reference runs on two bands, the first
//   and the last kBand output rows, from the input rows their samples reach (the last band holds the flat indices
//   past 2^31). The backward's grad_output is zero outside the bands, so grad_weight and grad_bias are the bands'
//   sums and every gradient element outside them must be 0.
// - channels: input [1, C, 1, 1] with exactly C = 2^31 - 1, 2^31 and 2^31 + 1 elements. 2^31 - 1 is prime and
//   2^31 + 1 = 3 x 715827883, so a map holding exactly that many elements has a side of over 7e8 px, where fp32
//   cannot hold the (integer) sample coordinates; the channels carry the count instead: weight [1, C, 1, 1] and
//   columns [C, 1] hold C elements too, offset and mask 2 and 1, and the input alone sits at the boundary. Zero
//   offsets sample each channel's only pixel with weight 1, so with S = sum_c w_c x_c and grad_output g:
//     out = b + m S,  grad_input_c = g m w_c,  grad_weight_c = g m x_c,  grad_mask = g S,
//     grad_offset (dy and dx) = -g m S (the cell [0, 1]'s slopes; the other corners lie outside the 1x1 map),
//     grad_bias = g,
//   each compared with that identity in fp64 (the per-channel ones element by element, in slices). w is a dense
//   formula; x is 0 but for 64 channels (the first and last 16 and 16 on each side of 2^30 and of 2^31), so S is
//   a sum of 64 terms, exact in any order for the zeros, and a column or gradient written to the wrong channel
//   shows in S or in grad_weight.
// Values are formulas computed on the device. fp64 is left out (the square backward needs over 100 GB); fp32 runs
// the forward only (its square backward ~90 GB).
struct LargeSize {
  const char* tag;
  std::int64_t h, w;
};
constexpr LargeSize kLargeSizes[] = {{"2pow31_minus_2", 32767, 32769}, {"2pow31", 32768, 32768},
                                     {"2pow31_plus_2", 32513, 33025}};
struct LargeChannels {
  const char* tag;
  std::int64_t channels;
};
constexpr std::int64_t kTwo31 = std::int64_t{1} << 31;
constexpr LargeChannels kLargeChannels[] = {{"channels_exactly_2pow31_minus_1", kTwo31 - 1},
                                            {"channels_exactly_2pow31", kTwo31},
                                            {"channels_exactly_2pow31_plus_1", kTwo31 + 1}};
constexpr std::int64_t kBand = 8, kMargin = 2;  // output rows per band; rows of margin around a band's samples

// sin(a c + b (y mod 8191) + d x) * scale + shift over [1, channels, y1 - y0, w], rows y0.., computed on the
// device (the row index reduced in int64 first: an index wrapped by 2^32 elements moves by a row count that is
// not a multiple of 8191); rounded to a multiple of `quantum` when it is > 0.
at::Tensor large_formula(std::int64_t channels, std::int64_t y0, std::int64_t y1, std::int64_t w, double a, double b,
                         double d, double scale, double shift, at::ScalarType st, double quantum = 0) {
  const auto cuda = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const at::Tensor cs = at::arange(channels, cuda).view({1, channels, 1, 1}) * a;
  const at::Tensor ys =
      at::arange(y0, y1, cuda.dtype(at::kLong)).remainder(8191).to(at::kFloat).view({1, 1, y1 - y0, 1}) * b;
  const at::Tensor xs = at::arange(w, cuda).view({1, 1, 1, w}) * d;
  at::Tensor t = (cs + ys) + xs;
  t.sin_().mul_(scale).add_(shift);
  if (quantum > 0) t.div_(quantum).round_().mul_(quantum);
  return t.to(st);
}

// Rows [y0, y1) of t, on the CPU in fp64.
at::Tensor rows(const at::Tensor& t, std::int64_t y0, std::int64_t y1) { return t.slice(2, y0, y1).cpu().to(at::kDouble); }

harness::CheckResult check_large_index(DType dtype, LargeSize size, bool backward) {
  harness::CheckResult r;
  const P p{1, 1, 0, 0, 1, 1, 1, 1, true};
  const std::int64_t h = size.h, w = size.w, crop = kBand + 2 * kMargin;
  const at::ScalarType st = harness::scalar_type_of(dtype);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0xDC02'B16B);
  const at::Tensor w_cpu = kit::uniform_features({2, 2, 1, 1}, gen).to(st).to(at::kDouble);
  const at::Tensor b_cpu = kit::uniform_features({2}, gen).to(st).to(at::kDouble);
  const at::Tensor weight = w_cpu.to(at::kCUDA).to(st), bias = b_cpu.to(at::kCUDA).to(st);
  const at::Tensor x = large_formula(2, 0, h, w, 0.7, 0.37, 0.11, 1.0, 0.0, st);
  const at::Tensor offset = large_formula(2, 0, h, w, 1.9, 0.53, 0.29, 1.5, 0.0, st, 1.0 / 64);
  const at::Tensor mask = large_formula(1, 0, h, w, 0.0, 0.41, 0.17, 0.5, 0.5, st);
  r.properties["input_shape"] = "[1, 2, " + std::to_string(h) + ", " + std::to_string(w) + "]";
  r.properties["largest_tensor_elements"] = std::to_string(2 * h * w);
  const reference::Tensor4d w_ref = kit::to_tensor4d(w_cpu);
  const reference::Vectord b_ref = kit::to_vector(b_cpu);
  const harness::Tolerance tol = harness::default_tolerance(dtype);
  // The two bands: input (= output) rows [c0, c0 + crop) and, within them, the band's rows [c0 + local, + kBand).
  const std::array<std::array<std::int64_t, 2>, 2> bands{{{0, 0}, {h - crop, 2 * kMargin}}};
  if (!backward) {
    const at::Tensor out = deform_conv2d_forward(x, weight, offset, mask, bias, p);
    for (const auto& [c0, local] : bands) {
      const reference::Tensor4d xc = kit::to_tensor4d(rows(x, c0, c0 + crop)), oc = kit::to_tensor4d(rows(offset, c0, c0 + crop)),
                                mc = kit::to_tensor4d(rows(mask, c0, c0 + crop));
      const at::Tensor ref = kit::from_tensor4d(reference::deform_conv2d_forward(p, xc, w_ref, oc, &mc, &b_ref));
      const at::Tensor mag = kit::from_tensor4d(reference::deform_conv2d_forward(p, xc, w_ref, oc, &mc, &b_ref, true));
      r.comparisons.push_back(harness::compare_tensors(rows(out, c0 + local, c0 + local + kBand),
                                                       ref.slice(2, local, local + kBand), tol,
                                                       mag.slice(2, local, local + kBand)));
    }
    harness::summarize(r);
    return r;
  }
  at::Tensor grad = at::zeros({1, 2, h, w}, at::TensorOptions().device(at::kCUDA).dtype(st));
  for (const auto& [c0, local] : bands) {
    grad.slice(2, c0 + local, c0 + local + kBand).copy_(large_formula(2, c0 + local, c0 + local + kBand, w, 1.3, 0.23, 0.19, 1.0, 0.0, st));
  }
  const auto [gi, gw, go, gm, gb] = deform_conv2d_backward(grad, x, weight, offset, mask, bias, p);
  at::Tensor ref_w = at::zeros({2, 2, 1, 1}, at::kDouble), mag_w = ref_w.clone();
  at::Tensor ref_b = at::zeros({2}, at::kDouble), mag_b = ref_b.clone();
  std::int64_t in_bands[3] = {0, 0, 0};  // nonzero elements of grad_input, grad_offset, grad_mask in the bands
  for (const auto& [c0, local] : bands) {
    const reference::Tensor4d xc = kit::to_tensor4d(rows(x, c0, c0 + crop)), oc = kit::to_tensor4d(rows(offset, c0, c0 + crop)),
                              mc = kit::to_tensor4d(rows(mask, c0, c0 + crop)), gc = kit::to_tensor4d(rows(grad, c0, c0 + crop));
    const reference::DeformConv2dGrads g = reference::deform_conv2d_backward(p, xc, w_ref, oc, &mc, gc);
    const reference::DeformConv2dGrads m = reference::deform_conv2d_backward(p, xc, w_ref, oc, &mc, gc, true);
    const at::Tensor ours[3] = {rows(gi, c0, c0 + crop), rows(go, c0, c0 + crop), rows(gm, c0, c0 + crop)};
    const reference::Tensor4d* refs[3] = {&g.input, &g.offset, &g.mask};
    const reference::Tensor4d* mags[3] = {&m.input, &m.offset, &m.mask};
    for (int i = 0; i < 3; ++i) {
      r.comparisons.push_back(harness::compare_tensors(ours[i], kit::from_tensor4d(*refs[i]), tol, kit::from_tensor4d(*mags[i])));
      in_bands[i] += at::count_nonzero(ours[i]).item<std::int64_t>();
    }
    ref_w += kit::from_tensor4d(g.weight);
    mag_w += kit::from_tensor4d(m.weight);
    ref_b += kit::from_vector(g.bias);
    mag_b += kit::from_vector(m.bias);
  }
  r.comparisons.push_back(harness::compare_tensors(gw.cpu(), ref_w, tol, mag_w));
  r.comparisons.push_back(harness::compare_tensors(gb.cpu(), ref_b, tol, mag_b));
  harness::summarize(r);
  const char* names[3] = {"grad_input", "grad_offset", "grad_mask"};
  const at::Tensor all[3] = {gi, go, gm};
  for (int i = 0; i < 3; ++i) {
    const std::int64_t outside = at::count_nonzero(all[i]).item<std::int64_t>() - in_bands[i];
    r.properties[std::string(names[i]) + "_nonzero_outside_bands"] = std::to_string(outside);
    if (outside != 0 && r.outcome == harness::Outcome::kPassed) {
      r.outcome = harness::Outcome::kMismatch;
      r.message = std::to_string(outside) + " " + names[i] + " elements outside the bands are nonzero (grad_output is 0 there)";
    }
  }
  return r;
}

// [1, C, 1, 1] per-channel values on the device: sin(0.7 (c mod 8191) + 0.3 (c mod 127)) * scale + shift (the
// two periods make a value repeat only every 1,040,257 channels). Formed in slices of 2^26 channels: int64
// temporaries over all 2^31 would take 48 GB beside the op's own ~40 GB (out of memory on an 80 GB GPU).
at::Tensor channel_formula(std::int64_t channels, double scale, double shift, at::ScalarType st) {
  at::Tensor out = at::empty({channels}, at::TensorOptions().device(at::kCUDA).dtype(st));
  constexpr std::int64_t kSlice = std::int64_t{1} << 26;
  for (std::int64_t c0 = 0; c0 < channels; c0 += kSlice) {
    const std::int64_t c1 = std::min(channels, c0 + kSlice);
    const at::Tensor c = at::arange(c0, c1, at::TensorOptions().device(at::kCUDA).dtype(at::kLong));
    at::Tensor t = c.remainder(8191).to(at::kFloat).mul_(0.7).add_(c.remainder(127).to(at::kFloat).mul_(0.3));
    t.sin_().mul_(scale).add_(shift);
    out.narrow(0, c0, c1 - c0).copy_(t);
  }
  return out.view({1, channels, 1, 1});
}

// The channels of check_large_channels' sparse input that are not 0.
std::vector<std::int64_t> sparse_channels(std::int64_t channels) {
  std::vector<std::int64_t> out;
  for (const std::int64_t centre : {std::int64_t{16}, kTwo31 / 2, kTwo31, channels - 16}) {
    for (std::int64_t c = centre - 16; c < centre + 16; ++c) {
      if (c >= 0 && c < channels && (out.empty() || c > out.back())) out.push_back(c);
    }
  }
  return out;
}

harness::CheckResult check_large_channels(DType dtype, LargeChannels size, bool backward) {
  harness::CheckResult r;
  const P p{1, 1, 0, 0, 1, 1, 1, 1, true};
  const std::int64_t n = size.channels;
  const at::ScalarType st = harness::scalar_type_of(dtype);
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const std::vector<std::int64_t> picked = sparse_channels(n);
  const at::Tensor index = at::tensor(picked, at::kLong).to(at::kCUDA);
  at::Tensor x = at::zeros({1, n, 1, 1}, cuda.dtype(st));
  x.view({n}).index_copy_(0, index, (at::arange(static_cast<std::int64_t>(picked.size()), cuda.dtype(at::kFloat))
                                         .mul_(0.37).sin_().mul_(0.5).add_(0.75)).to(st));
  const at::Tensor weight = channel_formula(n, 1.0, 0.0, st);
  const at::Tensor offset = at::zeros({1, 2, 1, 1}, cuda.dtype(st));
  const at::Tensor mask = at::full({1, 1, 1, 1}, 0.625, cuda.dtype(st));
  const at::Tensor bias = at::full({1}, -0.375, cuda.dtype(st));
  r.properties["input_shape"] = "[1, " + std::to_string(n) + ", 1, 1]";
  const harness::Tolerance tol = harness::default_tolerance(dtype);
  // S = sum_c w_c x_c and sum_c |w_c x_c| over the nonzero channels, in fp64.
  const at::Tensor xs = x.view({n}).index_select(0, index).to(at::kDouble).cpu();
  const at::Tensor ws = weight.view({n}).index_select(0, index).to(at::kDouble).cpu();
  const double s = (xs * ws).sum().item<double>(), s_abs = (xs * ws).abs().sum().item<double>();
  const double m = 0.625, b = -0.375;
  auto scalar = [](double v) { return at::full({1}, v, at::kDouble); };
  auto compare_scalar = [&](const at::Tensor& ours, double expected, double magnitude) {
    r.comparisons.push_back(harness::compare_tensors(ours.reshape({-1}).cpu(), scalar(expected), tol, scalar(magnitude)));
  };
  if (!backward) {
    const at::Tensor out = deform_conv2d_forward(x, weight, offset, mask, bias, p);
    compare_scalar(out, b + m * s, std::abs(b) + m * s_abs);
    harness::summarize(r);
    return r;
  }
  const double g = 0.8125;
  const at::Tensor grad = at::full({1, 1, 1, 1}, g, cuda.dtype(st));
  const auto [gi, gw, go, gm, gb] = deform_conv2d_backward(grad, x, weight, offset, mask, bias, p);
  // grad_input = g m w and grad_weight = g m x, element by element, in slices of 2^27 channels, on the device (the
  // expected values formed there in fp64; compare_tensors compares operands that lie on the device there: copied
  // to the host and looped over on one core, 2 x 2^31 elements took about 30 s).
  constexpr std::int64_t kSlice = std::int64_t{1} << 27;
  for (std::int64_t c0 = 0; c0 < n; c0 += kSlice) {
    const std::int64_t len = std::min(kSlice, n - c0);
    const at::Tensor expect_gi = weight.view({n}).narrow(0, c0, len).to(at::kDouble) * (g * m);
    r.comparisons.push_back(harness::compare_tensors(gi.view({n}).narrow(0, c0, len), expect_gi, tol, expect_gi.abs()));
    const at::Tensor expect_gw = x.view({n}).narrow(0, c0, len).to(at::kDouble) * (g * m);
    r.comparisons.push_back(harness::compare_tensors(gw.view({n}).narrow(0, c0, len), expect_gw, tol, expect_gw.abs()));
  }
  compare_scalar(gm, g * s, g * s_abs);
  compare_scalar(go.narrow(1, 0, 1), -g * m * s, g * m * s_abs);
  compare_scalar(go.narrow(1, 1, 1), -g * m * s, g * m * s_abs);
  compare_scalar(gb, g, g);
  harness::summarize(r);
  return r;
}


// ---------------------------------------------------------------------------------------------------
// Bad inputs and the valid call. The valid call: input [2, 3, 8, 8], weight [4, 3, 3, 3], padding 0, stride 1,
// one offset group -> output [2, 4, 6, 6], offset [2, 18, 6, 6], mask [2, 9, 6, 6].

using kit::f32_on;
using kit::other_device;

at::Tensor input(const at::Device& d) { return at::rand({2, 3, 8, 8}, f32_on(d)); }
at::Tensor weight(const at::Device& d) { return at::rand({4, 3, 3, 3}, f32_on(d)); }
at::Tensor offset(const at::Device& d) { return at::rand({2, 18, 6, 6}, f32_on(d)); }
at::Tensor mask(const at::Device& d) { return at::rand({2, 9, 6, 6}, f32_on(d)); }
at::Tensor bias(const at::Device& d) { return at::rand({4}, f32_on(d)); }
at::Tensor grad(const at::Device& d) { return at::ones({2, 4, 6, 6}, f32_on(d)); }
constexpr P kValid{1, 1, 0, 0, 1, 1, 1, 1, true};

P with_param(P p, std::int64_t P::*field, std::int64_t value) {
  p.*field = value;
  return p;
}

std::vector<BadInputCase> deform_conv2d_bad_inputs() {
  kit::BadInputs bad;
  using D = const at::Device&;
  auto fwd = [](const at::Tensor& x, const at::Tensor& w, const at::Tensor& o, const at::Tensor& m, const at::Tensor& b,
                P p = kValid) { deform_conv2d_forward(x, w, o, m, b, p); };
  bad.add("input_3d", [=](D d) { fwd(input(d)[0], weight(d), offset(d), mask(d), bias(d)); }, {"input", "4-D"});
  bad.add("integer_input", [=](D d) {
        fwd(input(d).to(at::kInt), weight(d).to(at::kInt), offset(d).to(at::kInt), mask(d).to(at::kInt), bias(d).to(at::kInt)); },
          {"input", "float64, float32, float16 or bfloat16"});
  bad.add("offset_3d", [=](D d) { fwd(input(d), weight(d), offset(d)[0], mask(d), bias(d)); }, {"offset", "4-D"});
  bad.add("mask_3d", [=](D d) { fwd(input(d), weight(d), offset(d), mask(d)[0], bias(d)); }, {"mask", "4-D"});
  bad.add("weight_3d", [=](D d) { fwd(input(d), weight(d)[0], offset(d), mask(d), bias(d)); }, {"weight", "4-D"});
  bad.add("weight_dtype_mismatch", [=](D d) { fwd(input(d), weight(d).to(at::kDouble), offset(d), mask(d), bias(d)); },
          {"weight", "input's dtype", "Double"});
  // fp16 features with fp32 offsets ("expected Half but found Float" in peers): refused, naming both.
  bad.add("offset_fp32_with_fp16_input", [=](D d) {
        fwd(input(d).to(at::kHalf), weight(d).to(at::kHalf), offset(d), mask(d).to(at::kHalf), bias(d).to(at::kHalf)); },
          {"offset", "input's dtype", "Half", "Float", "mixed dtypes"});
  bad.add("mask_dtype_mismatch", [=](D d) { fwd(input(d), weight(d), offset(d), mask(d).to(at::kBFloat16), bias(d)); },
          {"mask", "input's dtype", "BFloat16"});
  bad.add("bias_dtype_mismatch", [=](D d) { fwd(input(d), weight(d), offset(d), mask(d), bias(d).to(at::kHalf)); },
          {"bias", "input's dtype"});
  bad.add("weight_on_other_device", [=](D d) { fwd(input(d), other_device(weight(d), d), offset(d), mask(d), bias(d)); },
          {"input and weight", "same device"});
  bad.add("offset_on_other_device", [=](D d) { fwd(input(d), weight(d), other_device(offset(d), d), mask(d), bias(d)); },
          {"input and offset", "same device"});
  bad.add("mask_on_other_device", [=](D d) { fwd(input(d), weight(d), offset(d), other_device(mask(d), d), bias(d)); },
          {"input and mask", "same device"});
  bad.add("stride_zero", [=](D d) { fwd(input(d), weight(d), offset(d), mask(d), bias(d), with_param(kValid, &P::stride_w, 0)); },
          {"stride", ">= 1", "(1, 0)"});
  bad.add("padding_negative", [=](D d) { fwd(input(d), weight(d), offset(d), mask(d), bias(d), with_param(kValid, &P::pad_h, -1)); },
          {"padding", ">= 0", "(-1, 0)"});
  bad.add("dilation_zero", [=](D d) { fwd(input(d), weight(d), offset(d), mask(d), bias(d), with_param(kValid, &P::dilation_h, 0)); },
          {"dilation", ">= 1", "(0, 1)"});
  bad.add("groups_zero", [=](D d) { fwd(input(d), weight(d), offset(d), mask(d), bias(d), with_param(kValid, &P::groups, 0)); },
          {"groups", ">= 1"});
  bad.add("offset_groups_zero", [=](D d) {
        fwd(input(d), weight(d), offset(d), mask(d), bias(d), with_param(kValid, &P::offset_groups, 0)); },
          {"offset_groups", ">= 1"});
  bad.add("weight_channels_times_groups_mismatch", [=](D d) {
        fwd(input(d), at::rand({4, 2, 3, 3}, f32_on(d)), offset(d), mask(d), bias(d)); },
          {"weight.size(1) * groups", "3", "[4, 2, 3, 3]"});
  bad.add("out_channels_not_divisible_by_groups", [=](D d) {
        fwd(at::rand({2, 4, 8, 8}, f32_on(d)), at::rand({3, 2, 3, 3}, f32_on(d)), offset(d), mask(d), at::rand({3}, f32_on(d)),
            with_param(kValid, &P::groups, 2)); },
          {"output channels", "divisible by groups"});
  bad.add("in_channels_not_divisible_by_offset_groups", [=](D d) {
        fwd(input(d), weight(d), at::rand({2, 36, 6, 6}, f32_on(d)), at::rand({2, 18, 6, 6}, f32_on(d)), bias(d),
            with_param(kValid, &P::offset_groups, 2)); },
          {"channels 3", "divisible by offset_groups 2"});
  bad.add("kernel_larger_than_padded_input", [=](D d) {
        fwd(input(d), at::rand({4, 3, 9, 3}, f32_on(d)), offset(d), mask(d), bias(d)); },
          {"output would be empty", "kernel (9, 3)"});
  bad.add("offset_rows_not_two_per_tap", [=](D d) { fwd(input(d), weight(d), at::rand({2, 17, 6, 6}, f32_on(d)), mask(d), bias(d)); },
          {"offset", "[2, 18, 6, 6]", "[2, 17, 6, 6]"});
  bad.add("offset_input_sized_not_output_sized", [=](D d) {
        fwd(input(d), weight(d), at::rand({2, 18, 8, 8}, f32_on(d)), mask(d), bias(d)); },
          {"offset", "[2, 18, 6, 6]", "[2, 18, 8, 8]"});
  bad.add("offset_wrong_batch", [=](D d) { fwd(input(d), weight(d), at::rand({3, 18, 6, 6}, f32_on(d)), mask(d), bias(d)); },
          {"offset", "[2, 18, 6, 6]", "[3, 18, 6, 6]"});
  bad.add("mask_rows_of_offset", [=](D d) { fwd(input(d), weight(d), offset(d), at::rand({2, 18, 6, 6}, f32_on(d)), bias(d)); },
          {"mask", "[2, 9, 6, 6]", "[2, 18, 6, 6]"});
  bad.add("bias_wrong_length", [=](D d) { fwd(input(d), weight(d), offset(d), mask(d), at::rand({5}, f32_on(d))); },
          {"bias", "[4]", "[5]"});
  bad.add("backward_grad_wrong_shape", [](D d) {
        deform_conv2d_backward(at::ones({2, 4, 8, 8}, f32_on(d)), input(d), weight(d), offset(d), mask(d), bias(d), kValid); },
          {"grad", "[2, 4, 6, 6]", "[2, 4, 8, 8]"});
  bad.add("backward_grad_dtype_mismatch", [](D d) {
        deform_conv2d_backward(grad(d).to(at::kDouble), input(d), weight(d), offset(d), mask(d), bias(d), kValid); },
          {"grad", "input's dtype", "Double"});
  bad.add("backward_offset_wrong_shape", [](D d) {
        deform_conv2d_backward(grad(d), input(d), weight(d), at::rand({2, 18, 5, 6}, f32_on(d)), mask(d), bias(d), kValid); },
          {"offset", "[2, 18, 6, 6]", "[2, 18, 5, 6]"});
  return std::move(bad.cases);
}

// ---------------------------------------------------------------------------------------------------
// Benchmarks (docs/benchmarks.md): the 3x3 DCN of ResNet-50's stages 3-5 at 800x1344, batch 2 (OPS.md), and
// the comparison point with torchvision and cuDNN, x[2,256,100,168] 3x3 padding 1, C_out = C_in.
// Offsets N(0, 1.5^2) per element (|offset| ~ 1-2 px, as trained DCNs produce), DCNv2 masks sigmoid(N(0, 1)),
// weights N(0, 1 / (9 C_in)).
std::vector<harness::BenchCase> deform_conv2d_benchmarks() {
  struct Shape {
    const char* name;
    std::int64_t c, h, w;
    bool v2;
  };
  const Shape shapes[] = {{"r50_stage3_c128_100x168_v2", 128, 100, 168, true},
                          {"r50_stage4_c256_50x84_v2", 256, 50, 84, true},
                          {"r50_stage5_c512_25x42_v2", 512, 25, 42, true},
                          {"c256_100x168_v1", 256, 100, 168, false},
                          {"c256_100x168_v2", 256, 100, 168, true}};
  std::vector<harness::BenchCase> out;
  std::uint64_t seed = 12301;
  for (const Shape& sh : shapes) {
    const std::uint64_t s0 = seed;
    seed += 10;
    const P p{1, 1, 1, 1, 1, 1, 1, 1, sh.v2};
    auto make = [sh, s0, p](DType dtype) {
      const at::Tensor x = harness::bench_randn_cuda({2, sh.c, sh.h, sh.w}, dtype, s0);
      const at::Tensor w = harness::bench_randn_cuda({sh.c, sh.c, 3, 3}, dtype, s0 + 1) * (1.0 / std::sqrt(9.0 * sh.c));
      const at::Tensor b = harness::bench_randn_cuda({sh.c}, dtype, s0 + 2);
      const at::Tensor o = harness::bench_randn_cuda({2, 18, sh.h, sh.w}, dtype, s0 + 3) * 1.5;
      const at::Tensor m = sh.v2 ? at::sigmoid(harness::bench_randn_cuda({2, 9, sh.h, sh.w}, dtype, s0 + 4))
                                 : at::zeros({2, 1}, x.options());
      const at::Tensor y = deform_conv2d_forward(x, w, o, m, b, p);
      const at::Tensor g = harness::bench_randn_cuda({2, sh.c, sh.h, sh.w}, dtype, s0 + 5);
      const at::Tensor mask_read = sh.v2 ? m : at::Tensor();
      harness::BenchInstance inst;
      inst.forward = [=] { (void)deform_conv2d_forward(x, w, o, m, b, p); };
      inst.backward = [=] { (void)deform_conv2d_backward(g, x, w, o, m, b, p); };
      inst.bytes_forward = kit::bench_bytes({x, o, mask_read, w, b, y});
      // Read: grad, input, offset, mask, weight; grad_input read and written (atomic scatter); written: grad_offset,
      // grad_mask, grad_weight, grad_bias.
      inst.bytes_backward = kit::bench_bytes({g, x, o, mask_read, w, x, x, o, mask_read, w, b});
      return inst;
    };
    const std::string dims = std::to_string(sh.c) + "," + std::to_string(sh.h) + "," + std::to_string(sh.w);
    out.push_back(kit::bench_case(
        sh.name,
        "x[2," + dims + "] weight[" + std::to_string(sh.c) + "," + std::to_string(sh.c) + ",3,3] pad 1, offset[2,18," +
            std::to_string(sh.h) + "," + std::to_string(sh.w) + "] ~1.5 px" + (sh.v2 ? ", mask sigmoid" : ", DCNv1"),
        "fwd: input + offset + mask + weight + bias + output; bwd: grad + input + offset + mask + weight read, "
        "grad_input read and written (atomic scatter), grad_offset + grad_mask + grad_weight + grad_bias written",
        make));
  }
  return out;
}

OpSpec deform_conv2d_spec() {
  OpSpec spec = kit::op_spec("deform_conv2d", deform_conv2d_cases(), deform_conv2d_bad_inputs());
  for (DType dtype : kAllDTypes) {
    for (Device device : {Device::kCpu, Device::kCuda}) {
      spec.extra_checks.push_back({"zero_offsets_is_conv2d", dtype_name(dtype), device,
                                   [dtype, device] { return check_conv2d_identity(dtype, device, false); }});
      spec.extra_checks.push_back({"zero_offsets_unit_mask_is_conv2d", dtype_name(dtype), device,
                                   [dtype, device] { return check_conv2d_identity(dtype, device, true); }});
    }
    if (dtype == DType::kFloat64) continue;
    for (const bool backward : {false, true}) {
      if (backward && dtype == DType::kFloat32) continue;
      const std::string check = backward ? "large_index_backward_" : "large_index_forward_";
      for (const LargeSize& size : kLargeSizes) {
        spec.extra_checks.push_back({check + size.tag, dtype_name(dtype), Device::kCuda,
                                     [dtype, size, backward] { return check_large_index(dtype, size, backward); }});
      }
      for (const LargeChannels& size : kLargeChannels) {
        spec.extra_checks.push_back({check + size.tag, dtype_name(dtype), Device::kCuda,
                                     [dtype, size, backward] { return check_large_channels(dtype, size, backward); }});
      }
    }
  }
  spec.valid_call = [](const at::Device& d) {
    const at::Tensor x = at::ones({1, 1, 4, 4}, f32_on(d));
    const at::Tensor out = deform_conv2d_forward(x, at::full({1, 1, 1, 1}, 2.0, f32_on(d)), at::zeros({1, 2, 4, 4}, f32_on(d)),
                                                 at::zeros({1, 1}, f32_on(d)), at::zeros({1}, f32_on(d)),
                                                 P{1, 1, 0, 0, 1, 1, 1, 1, false})
                               .cpu();
    TORCH_CHECK(at::equal(out, at::full({1, 1, 4, 4}, 2.0)), "deform_conv2d: a valid call after the bad one returned wrong values");
  };
  spec.tolerance_scales[DType::kFloat32] = harness::ToleranceScale{
      10, 10,
      "sample coordinates are formed in fp32, as torchvision's: at map coordinates up to ~1000 px (offsets "
      "far outside the map) a coordinate is off by up to half an ulp, 3e-5 px, and corner values that "
      "differ by up to 2 per px turn that into 6e-5 per term, up to ~1e-4 of the sum of |terms| (a simulation of "
      "that case with torchvision in fp64 and fp32-rounded coordinates reached twice the unscaled tolerance)"};
  spec.determinism.note =
      "the CUDA backward scatters grad_input with atomicAdd (into an fp32 buffer for fp16 / bf16), so its order "
      "varies between runs, as torchvision's; the CUDA forward (im2col, cuBLAS GEMMs), the other CUDA gradients "
      "(one thread per element summing in a fixed order, GEMMs, the batch's grad_weight GEMMs in order) and every "
      "CPU path are deterministic";
  spec.benchmarks = deform_conv2d_benchmarks();
  return spec;
}

DETOPS_REGISTER_OP_SPEC(deform_conv2d_spec);

}  // namespace
}  // namespace detops
