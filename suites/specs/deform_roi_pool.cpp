// Deformable RoI pooling's op spec (deform_roi_pool and modulated_deform_roi_pool, one set of kernels): seeded
// cases (the OPS.md cases among them), how to run the op and the reference (gradients for the features, the
// offsets and the mask), bad inputs, determinism, tolerances, the checks past 2^31 input elements and the
// benchmarks.
#include "kit/spec_prelude.h"

#include <c10/util/BFloat16.h>

#include <optional>

#include "deform_roi_pool/deform_roi_pool_torch.h"
#include "detops/harness/checks.h"
#include "detops/harness/compare.h"
#include "detops/reference/deform_roi_pool_reference.h"
#include "kit/feature_cases.h"
#include "kit/half_accumulation.h"
#include "kit/roi_case_runs.h"
#include "kit/roi_cases.h"
#include "roi_align/roi_align_torch.h"

namespace detops {
namespace {

using P = DeformRoiPoolParams;

enum class RoiLayout {
  kRandom, kOutside, kPartlyOutside, kDegenerate, kZeroSize, kNaN, kWholeMap, kHuge,
  kHalfAccumulation,  // kHalfAccumulationTerms rois [x, x + 1] x [y, y + 1] on each of four pixels: one sample at the pixel
};

enum class Offsets {
  kNone,     // no offset tensor (mmcv's offset=None)
  kZero,     // an offset tensor of zeros: RoIAlign's result
  kTrained,  // N(0, 0.1^2), what a trained offset head produces
  kLarge,    // N(0, 1): bins moved by up to a few tenths of the roi
  kFar,      // +-(50..100): every bin 5-10 rois away, off the map
  kNaN,      // trained, with every third offset NaN: those bins are 0
};

struct DeformRoiPoolCaseConfig : kit::RoiCaseShape {
  P params{0.25, 7, 7, 0, 0.1};
  RoiLayout rois = RoiLayout::kRandom;
  kit::RoiBatchLayout batches = kit::RoiBatchLayout::kSpread;
  Offsets offsets = Offsets::kTrained;
  bool modulated = false;            // modulated_deform_roi_pool with a U[0, 1) mask
  bool noncontiguous_offset = false; // the op gets offset (and mask) with their last two dimensions transposed in memory
  bool half_accumulation = false;    // features from kit::half_accumulation_values, grad_output positive
  bool equals_roi_align = false;     // the forward is also compared bit for bit with roi_align(aligned=True)
  bool channels_last_input = false;  // the op gets input in channels-last memory format
};

// The tolerance scale of fp32, shared with the roi_align comparison's judge.
const harness::ToleranceScale kFp32Scale{
    10, 10,
    "sampling positions are computed in fp32, as RoIAlign's (and mmcv's) are: at feature-map coordinates up to "
    "~400 px a position is off by up to ~|x| * 2^-23 * a few roundings ~ 1e-4 px, and features that change by "
    "O(1) per pixel turn that into up to ~1e-4 of absolute error; the offset gradient sums the surface's slopes "
    "at those positions, each off by the position error times the surface's curvature (up to 4 max|v| per px), "
    "so its error reaches ~1e-4 of its sum of |terms| (rtol x10)"};

harness::Tolerance tolerance_of(DType dtype) {
  const harness::Tolerance t = harness::default_tolerance(dtype);
  return dtype == DType::kFloat32 ? harness::scaled(t, kFp32Scale) : t;
}

// ---- Sample points kept off pixel lines ----
//
// The offset gradient is the slope of the bilinear surface at each sample, and that slope jumps where a
// sample crosses an integer coordinate (a pixel line; -1 and H / W, where the map ends, are lines too). A
// position computed in fp32 (the kernels' for every dtype but fp64) is ~1e-4 px off at map coordinates in the
// hundreds, so a sample within that distance of a line may take the other side's slope than the fp64
// reference: an O(1) difference, not a rounding error. The cases therefore keep every sample of a case with
// offsets at least kLineMargin px from every line: rois and offsets are bf16 values (exact in every dtype, so
// all dtypes see the same points), and a roi whose samples come closer is moved along the bf16 grid (x1 and
// x2 together, y1 and y2 together) until none does.
constexpr double kLineMargin = 2e-3;

double to_bf16(double v) { return static_cast<double>(static_cast<float>(c10::BFloat16(static_cast<float>(v)))); }

at::Tensor bf16_grid(const at::Tensor& t) { return t.to(at::kBFloat16).to(at::kDouble); }

// Whether the samples of roi row `r` along one axis (x: axis 0, y: axis 1) all keep kLineMargin from the
// lines of a map `extent` px long. The geometry is the reference's (docs/ops/deform_roi_pool.md).
// off: the roi's offsets [2, ph, pw] (contiguous), or nullptr.
bool axis_clear(const P& p, const double* r, const double* off, int axis, std::int64_t extent) {
  const double lo = r[1 + axis] * p.spatial_scale - 0.5, size = (r[3 + axis] * p.spatial_scale - 0.5) - lo;
  const std::int64_t bins_along = axis == 0 ? p.pooled_width : p.pooled_height;
  const std::int64_t bins_across = axis == 0 ? p.pooled_height : p.pooled_width;
  const double bin = size / static_cast<double>(bins_along);
  std::int64_t grid = p.sampling_ratio;
  if (grid <= 0) grid = bin > 0 ? static_cast<std::int64_t>(std::min(std::ceil(bin), 1024.0)) : 0;
  for (std::int64_t b = 0; b < bins_along; ++b) {
    for (std::int64_t a = 0; a < bins_across; ++a) {
      const std::int64_t ph = axis == 0 ? a : b, pw = axis == 0 ? b : a;
      const double shift = off ? p.gamma * size * off[(axis * p.pooled_height + ph) * p.pooled_width + pw] : 0.0;
      for (std::int64_t s = 0; s < grid; ++s) {
        const double v = lo + shift + static_cast<double>(b) * bin + (static_cast<double>(s) + 0.5) * bin / static_cast<double>(grid);
        if (!(v >= -1 - kLineMargin && v <= static_cast<double>(extent) + kLineMargin)) continue;
        if (std::abs(v - std::round(v)) < kLineMargin) return false;
      }
    }
  }
  return true;
}

void keep_samples_off_lines(const P& p, at::Tensor& rois, const at::Tensor& offset, std::int64_t height,
                            std::int64_t width, const std::string& name) {
  rois = rois.contiguous();
  const at::Tensor off_c = offset.defined() ? offset.contiguous() : at::Tensor();
  const std::int64_t per_roi = 2 * p.pooled_height * p.pooled_width;
  for (std::int64_t k = 0; k < rois.size(0); ++k) {
    double* r = rois.data_ptr<double>() + k * 5;
    const double* off = off_c.defined() ? off_c.data_ptr<double>() + k * per_roi : nullptr;
    if (!std::isfinite(r[1]) || !std::isfinite(r[2]) || !std::isfinite(r[3]) || !std::isfinite(r[4])) continue;
    for (int axis = 0; axis < 2; ++axis) {
      const double a0 = r[1 + axis], a1 = r[3 + axis];
      // Steps of one bf16 ulp of the larger corner (a multiple of the smaller one's), and at least 4 margins on
      // the map. First both corners together (n = 0: no move, then +-1, +-2, ... steps); then, for a roi wider
      // than 16 steps, its corners apart (its size changes by up to 8 steps), since where a step is a whole
      // number of pixels on the map (corners past 1024 at scale 1/4) moving the roi moves no sample off a line.
      int exponent = 0;
      std::frexp(std::max(std::abs(a0), std::abs(a1)), &exponent);
      const double step = std::max(std::ldexp(1.0, exponent - 8), 4 * kLineMargin / p.spatial_scale);
      const bool resizable = std::abs(a1 - a0) > 16 * step;
      const auto signed_step = [](int n) { return (n % 2 == 0 ? 1 : -1) * static_cast<double>((n + 1) / 2); };
      bool clear = false;
      for (int n = 0; n < (resizable ? 17 + 17 * 17 : 65) && !clear; ++n) {
        const double t0 = n < 17 ? signed_step(n) : signed_step((n - 17) / 17);
        const double t1 = n < 17 ? t0 : t0 + signed_step((n - 17) % 17);
        r[1 + axis] = to_bf16(a0 + t0 * step);
        r[3 + axis] = to_bf16(a1 + t1 * step);
        clear = axis_clear(p, r, off, axis, axis == 0 ? width : height);
      }
      if (!clear) throw std::runtime_error("deform_roi_pool case " + name + ": cannot keep roi " + std::to_string(k) +
                                           "'s samples off the pixel lines");
    }
  }
}

// ---- Inputs ----

// Rois in input-image coordinates (feature size / spatial_scale), on the bf16 grid.
at::Tensor make_rois(const DeformRoiPoolCaseConfig& cfg, at::Generator& gen) {
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
    case RoiLayout::kHuge: r = kit::cycled_rows(k, {{-1e6, -2e6, 1e6, 3e6}}); break;  // past the adaptive-grid cap
    case RoiLayout::kHalfAccumulation:
      // Scale 1, sampling_ratio 1, 1 x 1 bins: the roi [x, x + 1] (aligned: [x - 0.5, x + 0.5]) samples at x.
      r = kit::half_accumulation_rois(kit::half_accumulation_pixel_rows(
          [](double y, double x) { return std::array<double, 4>{x, y, x + 1, y + 1}; }));
      break;
  }
  return bf16_grid(kit::stack_rois(kit::roi_batch_column(cfg.batches, k, cfg.batch), r));
}

// Offsets [K, 2, ph, pw] on the bf16 grid (and fp16's: magnitudes below 2^-14 flushed to 0), or undefined.
at::Tensor make_offsets(const DeformRoiPoolCaseConfig& cfg, at::Generator& gen) {
  const std::vector<std::int64_t> shape{cfg.num_rois, 2, cfg.params.pooled_height, cfg.params.pooled_width};
  at::Tensor o;
  switch (cfg.offsets) {
    case Offsets::kNone: return at::Tensor();
    case Offsets::kZero: return at::zeros(shape, f64());
    case Offsets::kTrained:
    case Offsets::kNaN: o = at::randn(shape, gen, f64()) * 0.1; break;
    case Offsets::kLarge: o = at::randn(shape, gen, f64()); break;
    case Offsets::kFar: {
      const at::Tensor u = at::rand(shape, gen, f64());
      o = (u * 100 + 50) * at::where(u.gt(0.5), at::ones_like(u), -at::ones_like(u));
      break;
    }
  }
  o = bf16_grid(o);
  o.masked_fill_(o.abs().lt(std::ldexp(1.0, -14)), 0.0);
  if (cfg.offsets == Offsets::kNaN) o.view(-1).slice(0, 0, o.numel(), 3).fill_(kNaN);
  return o;
}

// The tensor the op gets: the same values with the last two dimensions transposed in memory, when asked.
at::Tensor strided(const at::Tensor& t, bool noncontiguous) {
  return noncontiguous && t.defined() ? t.transpose(2, 3).contiguous().transpose(2, 3) : t;
}

const reference::Tensor4d* ptr_or_null(const std::optional<reference::Tensor4d>& t) { return t ? &*t : nullptr; }

CaseData make_case(const DeformRoiPoolCaseConfig& cfg, const std::string& name, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  CaseData d;
  const std::vector<std::int64_t> sizes{cfg.batch, cfg.channels, cfg.height, cfg.width};
  const at::Tensor input =
      cfg.half_accumulation ? kit::half_accumulation_values(sizes, gen) : kit::uniform_features(sizes, gen);
  at::Tensor rois = make_rois(cfg, gen);
  const at::Tensor offset = make_offsets(cfg, gen);
  if (offset.defined()) keep_samples_off_lines(cfg.params, rois, offset, cfg.height, cfg.width, name);
  const at::Tensor mask =
      cfg.modulated ? at::rand({cfg.num_rois, 1, cfg.params.pooled_height, cfg.params.pooled_width}, gen, f64()) : at::Tensor();
  // inputs: input, rois, [offset], [mask]; each but rois differentiable.
  d.inputs = {input, rois};
  d.differentiable = {0};
  const int offset_at = offset.defined() ? 2 : -1;
  if (offset.defined()) {
    d.differentiable.push_back(d.inputs.size());
    d.inputs.push_back(offset);
  }
  const int mask_at = mask.defined() ? static_cast<int>(d.inputs.size()) : -1;
  if (mask.defined()) {
    d.differentiable.push_back(d.inputs.size());
    d.inputs.push_back(mask);
  }
  const P p = cfg.params;
  auto pick = [](const Tensors& in, int at) { return at >= 0 ? in[static_cast<size_t>(at)] : at::Tensor(); };
  d.op_forward = [=](const Tensors& in) {
    const at::Tensor x = cfg.noncontiguous_input  ? kit::w_major(in[0])
                         : cfg.channels_last_input ? in[0].contiguous(at::MemoryFormat::ChannelsLast)
                                                   : in[0];
    const at::Tensor r = cfg.noncontiguous_rois ? kit::row_stride_10(in[1]) : in[1];
    const at::Tensor o = strided(pick(in, offset_at), cfg.noncontiguous_offset);
    if (mask_at < 0) return Tensors{deform_roi_pool_forward(x, r, o, p)};
    return Tensors{modulated_deform_roi_pool_forward(x, r, o, strided(pick(in, mask_at), cfg.noncontiguous_offset), p)};
  };
  d.op_backward = [=](const Tensors& in, const Tensors& grad) {
    const at::Tensor x = cfg.noncontiguous_input  ? kit::w_major(in[0])
                         : cfg.channels_last_input ? in[0].contiguous(at::MemoryFormat::ChannelsLast)
                                                   : in[0];
    const at::Tensor r = cfg.noncontiguous_rois ? kit::row_stride_10(in[1]) : in[1];
    const auto [gi, go, gm] = deform_roi_pool_backward(grad[0], x, r, strided(pick(in, offset_at), cfg.noncontiguous_offset),
                                                       strided(pick(in, mask_at), cfg.noncontiguous_offset), p);
    Tensors out{gi};
    if (offset_at >= 0) out.push_back(go);
    if (mask_at >= 0) out.push_back(gm);
    return out;
  };
  // The reference on (input, rois, offset, mask); `abs`: |input| and |mask|, whose forward is the sum of |terms|.
  auto reference_forward = [=](const Tensors& in, bool abs) {
    const auto opt = [&](int at, bool take_abs) {
      return at >= 0 ? std::optional<reference::Tensor4d>(kit::to_tensor4d(take_abs ? in[at].abs() : in[at])) : std::nullopt;
    };
    const auto o = opt(offset_at, false), m = opt(mask_at, abs);
    return Tensors{kit::from_tensor4d(reference::deform_roi_pool_forward(
        p, kit::to_tensor4d(abs ? in[0].abs() : in[0]), kit::to_matrix(in[1]), ptr_or_null(o), ptr_or_null(m)))};
  };
  auto reference_backward = [=](const Tensors& in, const Tensors& grad, bool magnitude) {
    const auto opt = [&](int at) {
      return at >= 0 ? std::optional<reference::Tensor4d>(kit::to_tensor4d(in[at])) : std::nullopt;
    };
    const auto o = opt(offset_at), m = opt(mask_at);
    const reference::DeformRoiPoolGrads g = reference::deform_roi_pool_backward(
        p, kit::to_tensor4d(grad[0]), kit::to_tensor4d(in[0]), kit::to_matrix(in[1]), ptr_or_null(o), ptr_or_null(m));
    Tensors out{kit::from_tensor4d(magnitude ? g.input_magnitude : g.input)};
    if (offset_at >= 0) out.push_back(kit::from_tensor4d(magnitude ? g.offset_magnitude : g.offset));
    if (mask_at >= 0) out.push_back(kit::from_tensor4d(magnitude ? g.mask_magnitude : g.mask));
    return out;
  };
  d.reference_forward = [=](const Tensors& in) { return reference_forward(in, false); };
  d.reference_forward_magnitude = [=](const Tensors& in) { return reference_forward(in, true); };
  d.reference_backward = [=](const Tensors& in, const Tensors& grad) { return reference_backward(in, grad, false); };
  d.reference_backward_magnitude = [=](const Tensors& in, const Tensors& grad) { return reference_backward(in, grad, true); };
  if (cfg.equals_roi_align) {
    // Besides the reference: RoIAlign (aligned) on the same inputs, on the same device and dtype, bit for bit.
    d.judge_forward = [=](const Tensors& in, const Tensors& out, const Tensors& ref, DType dtype) {
      const at::TensorOptions like = out[0].options();
      const at::Tensor ra = roi_align_forward(
          in[0].to(like), in[1].to(like),
          RoiAlignParams{p.spatial_scale, p.pooled_height, p.pooled_width, p.sampling_ratio, true});
      return std::vector<harness::CompareResult>{
          harness::compare_tensors(out[0], ref[0], tolerance_of(dtype), reference_forward(in, true)[0]),
          harness::compare_tensors(out[0], ra, harness::Tolerance{0, 0})};
    };
  }
  if (cfg.stride0_grad) d.make_grad_output = kit::stride0_grad_output();
  if (cfg.half_accumulation) d.make_grad_output = kit::half_accumulation_grad_output();
  if (cfg.rois == RoiLayout::kNaN) d.gradcheck_skip_reason = "NaN roi coordinates: nothing to differentiate through";
  // Roi k's output rows depend on roi k's row of rois, offset and mask (and the whole input) only: the offsets' and
  // masks' differences by rows (CaseData::fd_rows).
  d.fd_rows = CaseData::FdRows{{1}, nullptr};
  if (offset_at >= 0) d.fd_rows->inputs.push_back(static_cast<std::size_t>(offset_at));
  if (mask_at >= 0) d.fd_rows->inputs.push_back(static_cast<std::size_t>(mask_at));
  return d;
}

std::vector<OpCase> deform_roi_pool_cases() {
  kit::CaseList<DeformRoiPoolCaseConfig> add(0xDE70'0000, make_case);
  using C = DeformRoiPoolCaseConfig;

  // The parameter grid: sampling_ratio x pooled size, trained offsets, spatial_scale cycling 1/4..1/32.
  const double scales[] = {0.25, 0.125, 0.0625, 0.03125};
  int n = 0;
  for (std::int64_t sr : {0, 1, 2}) {
    for (std::int64_t ps : {1, 3, 7}) {
      C cfg;
      cfg.params = P{scales[n % 4], ps, ps, sr, 0.1};
      ++n;
      cfg.height = 10 + n % 5;
      cfg.width = 13 + n % 7;
      add("grid_sr" + std::to_string(sr) + "_" + std::to_string(ps) + "x" + std::to_string(ps) + "_" +
              kit::scale_name(cfg.params.spatial_scale),
          cfg);
    }
  }

  const P box_head{0.25, 7, 7, 0, 0.1}, mask_head{0.0625, 14, 14, 2, 0.1};
  C c;
  // With zero (or no) offsets the op is RoIAlign (aligned): the same bits in every dtype.
  c = {}; c.offsets = Offsets::kNone; c.equals_roi_align = true; add("no_offset_equals_roi_align_adaptive", c);
  c = {}; c.params = {0.125, 7, 7, 2, 0.1}; c.offsets = Offsets::kNone; c.equals_roi_align = true;
  add("no_offset_equals_roi_align_sr2", c);
  c = {}; c.offsets = Offsets::kZero; c.equals_roi_align = true; add("zero_offset_equals_roi_align_adaptive", c);
  c = {}; c.params = mask_head; c.offsets = Offsets::kZero; c.equals_roi_align = true; add("zero_offset_equals_roi_align_14x14_sr2", c);
  c = {}; c.params = {0.25, 7, 7, 0, 0.0}; c.equals_roi_align = true; add("gamma_zero_ignores_offsets", c);
  c = {}; c.params = {0.25, 7, 7, 0, -0.3}; add("negative_gamma", c);
  c = {}; c.params = {0.5, 3, 5, 2, 0.1}; add("rectangular_pooled_3x5_scale_half", c);
  c = {}; c.params = {0.3, 2, 7, 0, 0.1}; add("scale_not_a_power_of_two", c);
  c = {}; c.num_rois = 0; add("no_rois", c);
  c = {}; c.channels = 0; add("zero_channels", c);
  c = {}; c.params = {0.25, 0, 0, 0, 0.1}; add("pooled_size_zero", c);
  c = {}; c.rois = RoiLayout::kOutside; add("rois_outside_map", c);
  c = {}; c.rois = RoiLayout::kPartlyOutside; add("rois_partly_outside_map", c);
  c = {}; c.rois = RoiLayout::kDegenerate; add("degenerate_rois_adaptive", c);
  c = {}; c.params = {0.25, 7, 7, 2, 0.1}; c.rois = RoiLayout::kDegenerate; add("degenerate_rois_fixed_sr", c);
  c = {}; c.rois = RoiLayout::kZeroSize; add("zero_size_rois_adaptive", c);
  c = {}; c.params = {0.25, 7, 7, 2, 0.1}; c.rois = RoiLayout::kZeroSize; add("zero_size_rois_fixed_sr", c);
  c = {}; c.rois = RoiLayout::kNaN; add("nan_coordinates", c);
  c = {}; c.params = {0.0625, 7, 7, 0, 0.1}; c.height = c.width = 1; add("feature_map_1x1", c);
  // Offsets: large, far off the map (every bin 0, no gradient), NaN (those bins 0, no out-of-bounds read).
  c = {}; c.offsets = Offsets::kLarge; add("large_offsets", c);
  c = {}; c.offsets = Offsets::kFar; add("offsets_far_outside_map", c);
  c = {}; c.offsets = Offsets::kNaN; add("nan_offsets", c);
  c = {}; c.noncontiguous_offset = true; add("noncontiguous_offset", c);
  kit::add_stride_and_batch_cases(add, box_head, mask_head, P{0.25, 2, 2, 1, 0.1});
  c = {}; c.batch = 3; c.batches = kit::RoiBatchLayout::kFractional; add("fractional_batch_index_truncates", c);
  c = {}; c.rois = RoiLayout::kWholeMap; add("roi_covers_whole_map", c);
  c = {}; c.params = {1.0, 1, 1, 0, 0.1}; c.rois = RoiLayout::kHuge; c.num_rois = 1; c.channels = 1; c.height = 5;
  c.width = 6; add("huge_roi_adaptive_grid_capped", c);
  // Channels across warp boundaries: the CUDA backward sums a bin's offset and mask gradients per warp run.
  c = {}; c.params = {0.25, 7, 7, 2, 0.1}; c.channels = 64; c.height = 9; c.width = 11; add("many_channels", c);
  c = {}; c.params = {0.25, 3, 3, 2, 0.1}; c.channels = 33; c.modulated = true; add("modulated_33_channels", c);
  c = {}; c.params = {0.25, 2, 3, 1, 0.1}; c.channels = 5; c.num_rois = 40; c.modulated = true; add("modulated_5_channels_many_rois", c);
  // CUDA's two forward kernels (deform_roi_pool.h): channels last when there are at least map / 16 outputs or the
  // input is channels last, and the output tile (bins x (32 L + 1) elements, about 258 bytes a bin in every dtype)
  // fits in 96 KB; else channels first. Most cases above take the channels-last kernel (14x14: a 51 KB tile, past
  // the 48 KB default; modulated_33_channels and many_channels: a second, partial tile in fp64, L = 1;
  // more_than_65535_rois: more block items than the grid); these take the other one (few rois on a large map; a
  // 20x20 tile of 103-106 KB) or force channels last (a channels-last input with few rois), and 300 channels are 3
  // tiles in fp16 and bf16 (L = 4), the last one partial.
  c = {}; c.params = {0.25, 7, 7, 2, 0.1}; c.num_rois = 2; c.height = 40; c.width = 48; c.modulated = true;
  add("modulated_few_rois_channels_first", c);
  c.channels_last_input = true; add("modulated_few_rois_channels_last_input", c);
  c = {}; c.params = {0.25, 20, 20, 2, 0.1}; c.num_rois = 4; c.channels = 35; add("pooled_20x20_tile_past_96kb", c);
  c = {}; c.params = {0.125, 3, 3, 2, 0.1}; c.num_rois = 5; c.channels = 300; c.height = 8; c.width = 10; c.modulated = true;
  add("modulated_300_channels_partial_last_tile", c);
  // Real-model scale: FPN P2 of an 800x1344 image (200x336 at 1/4), box head 7x7, sampling_ratio 2; P5 (25x42
  // at 1/32), adaptive. (An adaptive grid on P2 puts up to ~48 x 48 samples in a bin of a large roi: thousands
  // of sample positions per roi, which no roi placement keeps all kLineMargin off the pixel lines.)
  c = {}; c.params = {0.25, 7, 7, 2, 0.1}; c.batch = 1; c.channels = 4; c.height = 200; c.width = 336; c.num_rois = 48;
  add("fpn_p2_box_head_sr2", c);
  c = {}; c.params = {0.03125, 7, 7, 0, 0.1}; c.batch = 2; c.channels = 2; c.height = 25; c.width = 42; c.num_rois = 16;
  add("fpn_p5_box_head_adaptive", c);
  // The modulated form (ModulatedDeformRoIPoolPack: output * mask).
  c = {}; c.modulated = true; add("modulated_box_head", c);
  c = {}; c.modulated = true; c.offsets = Offsets::kNone; add("modulated_no_offset", c);
  c = {}; c.modulated = true; c.stride0_grad = true; add("modulated_stride0_grad_output", c);
  c = {}; c.modulated = true; c.noncontiguous_offset = true; c.noncontiguous_input = true; add("modulated_noncontiguous", c);
  c = {}; c.params = mask_head; c.modulated = true; c.rois = RoiLayout::kPartlyOutside; add("modulated_mask_head_partly_outside", c);
  // Sums of thousands of terms (kit/half_accumulation.h): an fp16 / bf16 kernel must accumulate in fp32.
  // Forward: one 1x1 bin over the whole 16 x 16 map, a 64 x 64 sampling grid (4096 samples of 24..40: an fp16
  // running sum passes 65504, a bf16 one stalls), output ~32; zero offsets (their gradient sums 4096 slopes).
  c = {}; c.params = {1.0, 1, 1, 64, 0.1}; c.batch = 1; c.channels = 2; c.height = c.width = 16; c.num_rois = 2;
  c.rois = RoiLayout::kWholeMap; c.offsets = Offsets::kZero; c.half_accumulation = true;
  add("half_accumulation_sampling_grid_4096", c);
  // Backward: 4096 rois on each of four pixels (one sample at the pixel, weight 1), grad_output 0.5..1: each of
  // those grad_input elements sums 4096 positive terms to ~3000.
  c = {}; c.params = {1.0, 1, 1, 1, 0.1}; c.batch = 1; c.channels = 2; c.height = c.width = 6;
  c.num_rois = 4 * kit::kHalfAccumulationTerms; c.rois = RoiLayout::kHalfAccumulation; c.offsets = Offsets::kNone;
  c.half_accumulation = true; add("half_accumulation_overlapping_rois_backward", c);
  return std::move(add.cases);
}

// ---- Bad inputs: each call must raise an error naming the argument ----

std::vector<harness::BadInputCase> deform_roi_pool_bad_inputs() {
  const P p{1.0, 2, 2, 2, 0.1};
  kit::BadInputs bad;
  kit::RoiOpBadInputs op;
  op.empty_grid_accepted = true;
  op.forward = [p](const at::Tensor& x, const at::Tensor& rois, kit::RoiParamFault fault) {
    deform_roi_pool_forward(x, rois, at::Tensor(), kit::with_fault(p, fault));
  };
  op.backward = [p](const at::Tensor& grad, const at::Tensor& rois) {
    deform_roi_pool_backward(grad, at::rand({2, 3, 8, 8}, grad.options()), rois, at::Tensor(), at::Tensor(), p);
  };
  kit::add_roi_op_bad_inputs(bad, op);
  const auto x = [](const at::Device& d) { return at::rand({2, 3, 8, 8}, kit::f32_on(d)); };
  const auto offset = [](const at::Device& d) { return at::zeros({2, 2, 2, 2}, kit::f32_on(d)); };
  const auto mask = [](const at::Device& d) { return at::ones({2, 1, 2, 2}, kit::f32_on(d)); };
  bad.add("sampling_ratio_too_large", [=](const at::Device& d) {
            deform_roi_pool_forward(x(d), kit::good_rois(d), offset(d), {1.0, 2, 2, kDeformRoiPoolMaxSamplingGrid + 1, 0.1});
          },
          {"sampling_ratio"});
  bad.add("gamma_nan", [=](const at::Device& d) { deform_roi_pool_forward(x(d), kit::good_rois(d), offset(d), {1.0, 2, 2, 2, kNaN}); },
          {"gamma", "finite"});
  bad.add("offset_wrong_shape", [=](const at::Device& d) {
            deform_roi_pool_forward(x(d), kit::good_rois(d), at::zeros({2, 2, 3, 3}, kit::f32_on(d)), p);
          },
          {"offset", "[2, 2, 2, 2]"});
  bad.add("offset_3d", [=](const at::Device& d) {
            deform_roi_pool_forward(x(d), kit::good_rois(d), at::zeros({2, 2, 4}, kit::f32_on(d)), p);
          },
          {"offset", "[2, 2, 2, 2]"});
  // OPS.md: fp16 features with fp32 offsets (mmcv: "expected Half but found Float") are refused, naming both.
  bad.add("half_input_float_offset", [=](const at::Device& d) {
            deform_roi_pool_forward(x(d).to(at::kHalf), kit::good_rois(d).to(at::kHalf), offset(d), p);
          },
          {"offset dtype (Float)", "input dtype (Half)"});
  bad.add("offset_on_other_device", [=](const at::Device& d) {
            deform_roi_pool_forward(x(d), kit::good_rois(d), kit::other_device(offset(d), d), p);
          },
          {"input and offset", "same device"});
  bad.add("mask_wrong_shape", [=](const at::Device& d) {
            modulated_deform_roi_pool_forward(x(d), kit::good_rois(d), offset(d), at::ones({2, 2, 2, 2}, kit::f32_on(d)), p);
          },
          {"mask", "[2, 1, 2, 2]"});
  bad.add("bfloat16_input_float_mask", [=](const at::Device& d) {
            modulated_deform_roi_pool_forward(x(d).to(at::kBFloat16), kit::good_rois(d).to(at::kBFloat16),
                                              offset(d).to(at::kBFloat16), mask(d), p);
          },
          {"mask dtype (Float)", "input dtype (BFloat16)"});
  bad.add("mask_missing", [=](const at::Device& d) {
            modulated_deform_roi_pool_forward(x(d), kit::good_rois(d), offset(d), at::Tensor(), p);
          },
          {"mask", "[K, 1, pooled_height, pooled_width]"});
  bad.add("backward_input_dtype_mismatch", [=](const at::Device& d) {
            deform_roi_pool_backward(at::ones({2, 3, 2, 2}, kit::f32_on(d)), x(d).to(at::kDouble), kit::good_rois(d),
                                     offset(d), at::Tensor(), p);
          },
          {"input dtype (Double)", "grad dtype (Float)"});
  bad.add("backward_offset_wrong_shape", [=](const at::Device& d) {
            deform_roi_pool_backward(at::ones({2, 3, 2, 2}, kit::f32_on(d)), x(d), kit::good_rois(d),
                                     at::zeros({3, 2, 2, 2}, kit::f32_on(d)), at::Tensor(), p);
          },
          {"offset", "[2, 2, 2, 2]"});
  return std::move(bad.cases);
}

// ---- Past 2^31 input elements (CUDA only) ----
//
// The input is [1, 1, 46341, 46341] = 2,147,488,281 elements, built on the device from a formula. Three rois
// (two near the far corner, flat offsets > 2^31, one of them reaching past the right edge; one near the
// origin) with one offset per roi: gamma 1/8 and offsets of +-8 / +-4 on rois 256 / 512 px wide move every
// bin by exactly +-256 px. The identity: the op equals RoIAlign (aligned) on the rois moved by those 256 px,
// a different code path that the roi_align spec checks on this map; every value here is a multiple of 256
// (or 1/8, or an offset in {+-4, +-8}), exact in every dtype, so the forward is equal bit for bit. The
// backward's grad_input equals RoIAlign's backward on the moved rois (up to the atomics' summation order),
// on the 1024 x 1024 crops that hold the rois and nowhere else; its grad_offset is checked against the
// reference on those crops (the crops share the map's edges; the rois are shifted by the crop origin).
constexpr std::int64_t kLargeSide = 46341;
constexpr std::int64_t kCrop = 1024;

harness::CheckResult check_large_input(DType dtype, bool backward) {
  harness::CheckResult r;
  const P p{1.0, 7, 7, 2, 0.125};
  const RoiAlignParams ra{1.0, 7, 7, 2, true};
  const std::int64_t side = kLargeSide, far = kLargeSide - kCrop;
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::ScalarType st = harness::scalar_type_of(dtype);
  const auto f64o = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor rois_cpu = at::tensor({0.0, 46080.0, 46080.0, 46336.0, 46336.0,  //
                                          0.0, 46080.0, 46080.0, 46592.0, 46336.0,  //
                                          0.0, 256.0, 0.0, 512.0, 256.0},
                                         f64o).view({3, 5});
  // Per roi (x, y) offsets; the moves they make: (-256, -256), (+256, -256), (+256, +256).
  const double off[3][2] = {{-8, -8}, {4, -8}, {8, 8}};
  const double move[3][2] = {{-256, -256}, {256, -256}, {256, 256}};
  at::Tensor offset_cpu = at::empty({3, 2, 7, 7}, f64o), moved_cpu = rois_cpu.clone();
  for (int k = 0; k < 3; ++k) {
    offset_cpu[k][0].fill_(off[k][0]);
    offset_cpu[k][1].fill_(off[k][1]);
    moved_cpu[k].slice(0, 1, 5, 2).add_(move[k][0]);
    moved_cpu[k].slice(0, 2, 5, 2).add_(move[k][1]);
  }
  const at::Tensor rois = rois_cpu.to(cuda.dtype(st)), offset = offset_cpu.to(cuda.dtype(st));
  const at::Tensor moved = moved_cpu.to(cuda.dtype(st));
  r.properties["input_shape"] = "[1, 1, 46341, 46341]";
  r.properties["input_elements"] = std::to_string(side * side);
  const at::ScalarType compute = dtype == DType::kFloat64 ? at::kDouble : at::kFloat;
  at::Tensor x;
  {
    const at::Tensor ys = at::arange(side, cuda.dtype(compute)).view({side, 1});
    const at::Tensor xs = at::arange(side, cuda.dtype(compute)).view({1, side});
    x = at::sin(ys * 0.37 + xs * 0.11).to(st).view({1, 1, side, side});
  }
  if (!backward) {
    const at::Tensor out = deform_roi_pool_forward(x, rois, offset, p).cpu();
    const at::Tensor expected = roi_align_forward(x, moved, ra).cpu();
    r.comparisons.push_back(harness::compare_tensors(out, expected, harness::Tolerance{0, 0}));
    harness::summarize(r);
    return r;
  }
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0xDE70'BEEF);
  const at::Tensor grad = at::randn({3, 1, 7, 7}, gen, f64o).to(st).to(at::kCUDA);
  const auto crops = [&](const at::Tensor& t) {
    return std::make_pair(t.slice(2, far, side).slice(3, far, side).cpu(), t.slice(2, 0, kCrop).slice(3, 0, kCrop).cpu());
  };
  std::pair<at::Tensor, at::Tensor> gi, gi_ra;
  at::Tensor grad_offset;
  std::int64_t nonzero_outside = 0;
  {
    const auto [grad_input, go, gm] = deform_roi_pool_backward(grad, x, rois, offset, at::Tensor(), p);
    (void)gm;
    gi = crops(grad_input);
    grad_offset = go.cpu();
    nonzero_outside = at::count_nonzero(grad_input).item<std::int64_t>() - at::count_nonzero(gi.first).item<std::int64_t>() -
                      at::count_nonzero(gi.second).item<std::int64_t>();
  }
  gi_ra = crops(roi_align_backward(grad, moved, ra, {1, 1, side, side}));
  // Atomics add in any order: fp32-accumulated sums of a few hundred terms of |g| <= ~4 differ by ~1e-5.
  const harness::Tolerance sum_order = tolerance_of(dtype);
  r.comparisons.push_back(harness::compare_tensors(gi.first, gi_ra.first, sum_order));
  r.comparisons.push_back(harness::compare_tensors(gi.second, gi_ra.second, sum_order));
  // grad_offset against the reference on the crops (rois shifted by the crop origin).
  const at::Tensor shift = at::tensor({0.0, static_cast<double>(far), static_cast<double>(far), static_cast<double>(far),
                                       static_cast<double>(far)}, f64o);
  const reference::Tensor4d crop_far = kit::to_tensor4d(x.slice(2, far, side).slice(3, far, side));
  const reference::Tensor4d crop_near = kit::to_tensor4d(x.slice(2, 0, kCrop).slice(3, 0, kCrop));
  x.reset();
  const reference::Tensor4d off_far = kit::to_tensor4d(offset_cpu.slice(0, 0, 2));
  const reference::Tensor4d off_near = kit::to_tensor4d(offset_cpu.slice(0, 2, 3));
  const at::Tensor g64 = grad.cpu().to(at::kDouble);
  const reference::DeformRoiPoolGrads ref_far = reference::deform_roi_pool_backward(
      p, kit::to_tensor4d(g64.slice(0, 0, 2)), crop_far, kit::to_matrix(rois_cpu.slice(0, 0, 2) - shift), &off_far, nullptr);
  const reference::DeformRoiPoolGrads ref_near = reference::deform_roi_pool_backward(
      p, kit::to_tensor4d(g64.slice(0, 2, 3)), crop_near, kit::to_matrix(rois_cpu.slice(0, 2, 3)), &off_near, nullptr);
  // Positions near 46,000 px computed in fp32 are off by a few 2^-8 px; the map's slope is <= 0.48 per px and
  // its slope changes by <= 0.14 per px, so 2e-2 of the sum of |terms| bounds that rounding, while an index
  // that wrapped at 2^31 reads another part of the map.
  const harness::Tolerance tol = dtype == DType::kFloat64 ? harness::default_tolerance(dtype) : harness::Tolerance{2e-2, 2e-2};
  r.comparisons.push_back(harness::compare_tensors(grad_offset.slice(0, 0, 2), kit::from_tensor4d(ref_far.offset), tol,
                                                   kit::from_tensor4d(ref_far.offset_magnitude)));
  r.comparisons.push_back(harness::compare_tensors(grad_offset.slice(0, 2, 3), kit::from_tensor4d(ref_near.offset), tol,
                                                   kit::from_tensor4d(ref_near.offset_magnitude)));
  r.properties["nonzero_outside_crops"] = std::to_string(nonzero_outside);
  harness::summarize(r);
  if (nonzero_outside != 0) {
    r.outcome = harness::Outcome::kMismatch;
    r.message = std::to_string(nonzero_outside) + " grad_input elements outside the rois' crops are nonzero";
  }
  return r;
}

// ---- Benchmarks (docs/benchmarks.md) ----
//
// DCN-RoI box head of Mask R-CNN R50-FPN on an 800x1344 image, batch 2, 256 channels: 7x7 on 1000 rois per
// image (2000) at each FPN level P2..P5, sampling_ratio 0 (mmcv's default: adaptive, up to ~23 x 23 samples
// per bin for a 640 px roi at P2), gamma 0.1, offsets N(0, 0.1^2) as a trained offset head gives (bins moved
// across the roi's and the map's borders); rois of 16..640 px (harness::bench_image_rois). The modulated form
// at P2 adds the mask.
harness::BenchCase deform_bench_case(const std::string& name, std::int64_t height, std::int64_t width, double scale,
                                     bool modulated, std::uint64_t seed) {
  const P params{scale, 7, 7, 0, 0.1};
  const std::int64_t k = 2000;
  const std::array<std::int64_t, 4> shape{2, 256, height, width};
  const std::string what = "x[2,256," + std::to_string(height) + "," + std::to_string(width) + "] rois[2000,5] offset[2000,2,7,7]" +
                           (modulated ? " mask[2000,1,7,7]" : "") + " 7x7 scale 1/" + std::to_string(static_cast<int>(1 / scale)) +
                           " sr0 gamma 0.1";
  return kit::bench_case(
      name, what,
      "fwd: x + rois + offset (+ mask) + output; bwd: grad_output + rois + offset (+ mask) + x read + grad_input read "
      "and written (atomic scatter) + grad_offset (+ grad_mask) written",
      [=](DType dtype) {
        const at::Tensor x = harness::bench_randn_cuda({shape.begin(), shape.end()}, dtype, seed);
        const at::Tensor rois = harness::bench_to_cuda(harness::bench_image_rois(k, 2, seed + 1), dtype);
        const at::Tensor offset = harness::bench_randn_cuda({k, 2, 7, 7}, dtype, seed + 2).mul_(0.1);
        const at::Tensor mask = modulated ? harness::bench_randn_cuda({k, 1, 7, 7}, dtype, seed + 3).sigmoid_() : at::Tensor();
        const auto forward = [=] {
          return modulated ? modulated_deform_roi_pool_forward(x, rois, offset, mask, params)
                           : deform_roi_pool_forward(x, rois, offset, params);
        };
        const at::Tensor out = forward();
        const at::Tensor grad = harness::bench_randn_cuda(out.sizes().vec(), dtype, seed + 4);
        harness::BenchInstance inst;
        inst.forward = [forward] { (void)forward(); };
        inst.backward = [=] { (void)deform_roi_pool_backward(grad, x, rois, offset, mask, params); };
        inst.bytes_forward = kit::bench_bytes({x, rois, offset, mask, out});
        inst.bytes_backward = kit::bench_bytes({grad, rois, offset, mask, x, x, x, offset, mask});
        return inst;
      });
}

std::vector<harness::BenchCase> deform_roi_pool_benchmarks() {
  return {deform_bench_case("p2_box_head_2000", 200, 336, 0.25, false, 9101),
          deform_bench_case("p3_box_head_2000", 100, 168, 0.125, false, 9111),
          deform_bench_case("p4_box_head_2000", 50, 84, 0.0625, false, 9121),
          deform_bench_case("p5_box_head_2000", 25, 42, 0.03125, false, 9131),
          deform_bench_case("p2_modulated_box_head_2000", 200, 336, 0.25, true, 9141)};
}

OpSpec deform_roi_pool_spec() {
  OpSpec spec = kit::op_spec("deform_roi_pool", deform_roi_pool_cases(), deform_roi_pool_bad_inputs());
  for (DType dtype : kAllDTypes) {
    for (bool backward : {false, true}) {
      spec.extra_checks.push_back({backward ? "large_index_backward" : "large_index_forward", dtype_name(dtype),
                                   Device::kCuda, [dtype, backward] { return check_large_input(dtype, backward); }});
    }
  }
  spec.valid_call = [](const at::Device& d) {
    const auto opts = at::TensorOptions().dtype(at::kFloat).device(d);
    const at::Tensor x = at::ones({1, 1, 4, 4}, opts);
    const at::Tensor rois = at::tensor({0.0f, 0.0f, 0.0f, 3.0f, 3.0f}, opts.device(at::kCPU)).view({1, 5}).to(d);
    const at::Tensor offset = at::full({1, 2, 2, 2}, 0.1, opts);
    const at::Tensor out = deform_roi_pool_forward(x, rois, offset, P{1.0, 2, 2, 2, 0.1}).cpu();
    TORCH_CHECK(at::allclose(out, at::ones_like(out)), "deform_roi_pool: a valid call after the bad one returned wrong values");
  };
  spec.tolerance_scales[DType::kFloat32] = kFp32Scale;
  spec.determinism.note =
      "CUDA backward adds with atomicAdd (grad_input per sample, grad_offset and grad_mask per warp run of a bin's "
      "channels), so the summation order (and the last bits of the gradients) can vary between runs; the forward and "
      "the CPU backward are deterministic.";
  spec.benchmarks = deform_roi_pool_benchmarks();
  return spec;
}

DETOPS_REGISTER_OP_SPEC(deform_roi_pool_spec);

}  // namespace
}  // namespace detops
