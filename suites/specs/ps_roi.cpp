// The op specs of ps_roi_align and ps_roi_pool: seeded cases (the OPS.md regression cases among them), how
// to run each op and its reference, bad inputs, determinism and tolerances.
#include "kit/spec_prelude.h"

#include "detops/reference/ps_roi_reference.h"
#include "kit/feature_cases.h"
#include "kit/half_accumulation.h"
#include "kit/roi_cases.h"
#include "ps_roi/ps_roi_torch.h"

namespace detops {
namespace {

enum class RoiLayout {
  kRandom,
  kOutside,          // entirely beyond every edge
  kPartlyOutside,    // crossing the top and left edges: some bins have no pixel / sample on the map
  kDegenerate,       // x2 < x1, y2 < y1
  kZeroSize,         // x2 == x1, y2 == y1
  kSubPixel,         // 0.05 feature-map pixels wide and high
  kNaN,              // one NaN coordinate in each of the first four rois
  kInfinite,         // +-inf coordinates
  kHuge,             // +-1e6..1e12 image pixels
  kWholeMap,         // [0, 0, W, H] in image coordinates
  kMapBorder,        // ps_roi_align: single samples exactly on y = -1, y = H, x = -1, x = W and just outside
  kLastRowColumn,    // ps_roi_pool: rois ending on or past the map's last row and column
  kRoundingTies,     // ps_roi_pool: scaled coordinates exactly at n + 0.5, positive and negative
  kUnevenBins,       // ps_roi_pool: roi sizes where floating-point bin arithmetic is off by one pixel
  kFloatBins27,      // ps_roi_pool: sizes 55 and 110 over 27 bins, where fp32 and fp64 bins both move a boundary
  kHalfAccumulation, // kHalfAccumulationTerms rois on each of four pixels (scale 1, 1x1 bins): sample / pool that pixel
  kOneAxisOutside,   // each roi beyond the map on one axis only (crossing one edge, or wholly beside the map)
  kOnePixelBins,     // rois pw x ph feature-map pixels: bins of one pixel (at integer and fractional positions)
  kSubPixelBins,     // rois of 0.5-5 pixels: with 7x7 bins, bins of a fraction of a pixel
};
using BatchLayout = kit::RoiBatchLayout;

struct PsRoiCaseConfig {
  std::int64_t batch = 2, out_channels = 2, height = 12, width = 15, num_rois = 6;
  double spatial_scale = 0.25;
  std::int64_t pooled_height = 3, pooled_width = 3;
  std::int64_t sampling_ratio = 0;  // ps_roi_align only
  RoiLayout rois = RoiLayout::kRandom;
  BatchLayout batches = BatchLayout::kSpread;
  bool noncontiguous_input = false;
  bool misaligned_input = false;  // contiguous, one element into its buffer: not 16-byte aligned
  bool noncontiguous_rois = false;
  bool stride0_grad = false;
  bool half_accumulation = false;  // features from kit::half_accumulation_values, grad_output positive
  bool zero_empty_bins = false;    // ps_roi_align's option (default false: torchvision's NaN for empty bins)
  bool exact_bins = false;         // ps_roi_pool's option (default false: torchvision's bins)

  std::int64_t in_channels() const { return out_channels * pooled_height * pooled_width; }
  PsRoiAlignParams align_params() const {
    return {spatial_scale, pooled_height, pooled_width, sampling_ratio, zero_empty_bins};
  }
  PsRoiPoolParams pool_params() const { return {spatial_scale, pooled_height, pooled_width, exact_bins}; }
};

// Rois in input-image coordinates (feature size / spatial_scale).
at::Tensor make_rois(const PsRoiCaseConfig& cfg, at::Generator& gen) {
  const double s = cfg.spatial_scale;
  const double img_h = static_cast<double>(cfg.height) / s, img_w = static_cast<double>(cfg.width) / s;
  const std::int64_t k = cfg.num_rois;
  kit::RoiCorners r = kit::random_image_rois(k, img_w, img_h, gen).corners;
  auto fill_rows = [&](const std::vector<std::array<double, 4>>& rows) { r = kit::cycled_rows(k, rows, s); };
  const double h = static_cast<double>(cfg.height), w = static_cast<double>(cfg.width);
  switch (cfg.rois) {
    case RoiLayout::kRandom: break;
    case RoiLayout::kOutside: kit::move_outside(r, img_w, img_h); break;
    case RoiLayout::kPartlyOutside:
      r.x1 = r.x1 - 0.6 * img_w;
      r.y1 = r.y1 - 0.6 * img_h;
      break;
    case RoiLayout::kDegenerate: kit::invert(r); break;
    case RoiLayout::kZeroSize: kit::collapse_to_points(r); break;
    case RoiLayout::kSubPixel:
      r.x2 = r.x1 + 0.05 / s;
      r.y2 = r.y1 + 0.05 / s;
      break;
    case RoiLayout::kNaN: kit::set_nan_corners(r); break;
    case RoiLayout::kInfinite: {
      const double inf = std::numeric_limits<double>::infinity();
      r.x1[0] = -inf;
      r.y2[1 % k] = inf;
      r.x2[2 % k] = inf;
      r.y1[3 % k] = -inf;
      r.x1[4 % k] = -inf;
      r.x2[4 % k] = inf;
      break;
    }
    case RoiLayout::kHuge:
      fill_rows({{-1e6, -2e6, 1e6, 3e6}, {-1e12, 2, 5, 1e12}, {3, -1e9, 1e9, 7}, {-5e11, -5e11, -1e11, 5e11}});
      break;
    case RoiLayout::kWholeMap: fill_rows({{0, 0, w, h}}); break;
    case RoiLayout::kMapBorder: {
      // One sample per bin (sampling_ratio 1, 1x1 bins, scale 1): a roi [c, c + 1] samples at c + 0.5 - 0.5 = c,
      // so these land exactly on y = -1, y = H, x = -1, x = W, just outside them, on (H-1, W-1) and (-0.5, -0.5).
      const double centers[][2] = {{-1, 3}, {h, 3}, {3, -1}, {3, w}, {-1.001, 3}, {h + 0.001, 3}, {h - 1, w - 1}, {-0.5, -0.5}};
      std::vector<std::array<double, 4>> rows;
      for (const auto& c : centers) rows.push_back({c[1], c[0], c[1] + 1, c[0] + 1});
      fill_rows(rows);
      break;
    }
    case RoiLayout::kLastRowColumn:
      fill_rows({{w - 3, h - 4, w, h}, {w - 1, h - 1, w, h}, {2, h - 2, w + 5, h + 3}, {w - 5, 1, w + 2, h}, {0, 0, w, h - 1}});
      break;
    case RoiLayout::kRoundingTies:  // n + 0.5 rounds away from zero: 2.5 -> 3, -1.5 -> -2, 0.5 -> 1, -0.5 -> -1
      fill_rows({{2.5, 1.5, 7.5, 6.5}, {-1.5, -0.5, 4.5, 3.5}, {0.5, 2.5, 3.5, 8.5}, {5.5, -2.5, 12.5, 9.5}});
      break;
    case RoiLayout::kUnevenBins:  // widths / heights where torchvision's fp32 or fp64 bins are off by one pixel:
      // 7 bins: 57 (fp32), 29, 58 (fp64); 11 bins: 29, 47, 58 (fp32), 25, 50, 61 (fp64); 13 bins: 7, 14, 28, 56
      // (fp32), 27, 54, 57 (fp64)
      fill_rows({{1, 2, 30, 59}, {3, 1, 61, 29}, {0, 0, 61, 54}, {2, 3, 49, 17},
                 {4, 5, 54, 32}, {6, 1, 31, 57}, {5, 4, 62, 33}, {1, 1, 59, 8}});
      break;
    case RoiLayout::kFloatBins27:  // 27 bins over 55 or 110 pixels: fp32 and fp64 give the same bins, one
      // boundary off the exact one; integer coordinates below 256 are exact in every dtype
      fill_rows({{3, 2, 58, 57}, {1, 4, 111, 59}, {5, 1, 60, 111}, {0, 0, 110, 110}});
      break;
    case RoiLayout::kOneAxisOutside:
      // The samples (pixels) of these bins are beyond the map on one axis and inside it on the other: such a sample
      // contributes nothing but still counts in ps_roi_align's divisor.
      fill_rows({{-0.6 * w, 0.2 * h, 0.5 * w, 0.8 * h},   // crosses the left edge only
                 {0.5 * w, 0.1 * h, 1.7 * w, 0.7 * h},    // the right edge only
                 {0.1 * w, -0.8 * h, 0.9 * w, 0.4 * h},   // the top edge only
                 {0.2 * w, 0.6 * h, 0.7 * w, 1.9 * h},    // the bottom edge only
                 {-1.5 * w, 0.3 * h, -0.2 * w, 0.6 * h},  // left of the map, inside it vertically
                 {0.3 * w, 1.2 * h, 0.6 * w, 2.0 * h}});  // below the map, inside it horizontally
      break;
    case RoiLayout::kOnePixelBins: {
      const double ph = static_cast<double>(cfg.pooled_height), pw = static_cast<double>(cfg.pooled_width);
      std::vector<std::array<double, 4>> rows;
      for (const auto& o : std::vector<std::array<double, 2>>{
               {1, 2}, {3.5, 0.5}, {w - pw, h - ph}, {0, 0}, {-2, 4}, {5.25, 1.75}}) {
        rows.push_back({o[0], o[1], o[0] + pw, o[1] + ph});
      }
      fill_rows(rows);
      break;
    }
    case RoiLayout::kSubPixelBins:
      fill_rows({{1, 2, 3, 5}, {4.3, 0.7, 6.1, 3.2}, {w - 3, h - 2, w, h}, {-1, -1, 2, 1.5}, {7.5, 6.5, 8, 9},
                 {0.2, 8, 4.9, 8.6}});
      break;
    case RoiLayout::kHalfAccumulation:
      // [x, x + 1] x [y, y + 1]: ps_roi_align (sampling_ratio 1) samples exactly (y, x); ps_roi_pool pools that pixel.
      r = kit::half_accumulation_rois(kit::half_accumulation_pixel_rows(
                                          [](double y, double x) { return std::array<double, 4>{x, y, x + 1, y + 1}; }),
                                      s);
      break;
  }
  return kit::stack_rois(kit::roi_batch_column(cfg.batches, k, cfg.batch), r);
}

at::Tensor reference_mapping(const at::Tensor& rois, std::int64_t channels, std::int64_t ph, std::int64_t pw) {
  return kit::from_tensor4d(reference::ps_roi_channel_mapping(rois.size(0), channels, ph, pw)).to(at::kInt);
}

// Everything two ps ops share: inputs, layouts, grad_output, magnitudes. `Op` supplies the params, the
// op's entry points and the reference's.
template <typename Op>
CaseData make_case(const PsRoiCaseConfig& cfg, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  CaseData d;
  const std::array<std::int64_t, 4> shape{cfg.batch, cfg.in_channels(), cfg.height, cfg.width};
  const at::IntArrayRef sizes(shape.data(), shape.size());
  const at::Tensor input =
      cfg.half_accumulation ? kit::half_accumulation_values(sizes, gen) : kit::uniform_features(sizes, gen);
  d.inputs = {input, make_rois(cfg, gen)};
  d.differentiable = {0};
  const auto p = Op::params(cfg);
  d.op_forward = [p, cfg](const Tensors& in) {
    at::Tensor x = in[0], rois = in[1];
    if (cfg.noncontiguous_input) x = kit::w_major(x);
    if (cfg.misaligned_input) {
      at::Tensor view = at::empty({x.numel() + 1}, x.options()).narrow(0, 1, x.numel()).view(x.sizes());
      x = view.copy_(x);
    }
    if (cfg.noncontiguous_rois) rois = kit::row_stride_10(rois);
    auto [out, mapping] = Op::forward(x, rois, p);
    return Tensors{out, mapping};
  };
  d.op_backward = [p, shape](const Tensors& in, const Tensors& grad) {
    const at::Tensor mapping = std::get<1>(Op::forward(in[0], in[1], p));  // as autograd hands it over
    return Tensors{Op::backward(grad[0], in[1], mapping, p, shape)};
  };
  d.reference_forward = [p, shape](const Tensors& in) {
    return Tensors{kit::from_tensor4d(Op::reference_forward(p, kit::to_tensor4d(in[0]), kit::to_matrix(in[1]))),
                   reference_mapping(in[1], shape[1], p.pooled_height, p.pooled_width)};
  };
  d.reference_backward = [p, shape](const Tensors& in, const Tensors& grad) {
    return Tensors{kit::from_tensor4d(Op::reference_backward(p, kit::to_tensor4d(grad[0]), kit::to_matrix(in[1]),
                                                                 {shape[0], shape[1], shape[2], shape[3]}))};
  };
  // Every output (and grad_input) element is a sum with nonnegative weights (bilinear weights or 1/area),
  // so the sum of |terms| is the same op applied to |input| (|grad_output|). channel_mapping is an
  // integer output compared exactly: no magnitude.
  d.reference_forward_magnitude = kit::abs_input_magnitude(d.reference_forward, /*first_only=*/true);
  d.reference_backward_magnitude = kit::abs_grad_magnitude(d.reference_backward);
  if (cfg.stride0_grad) d.make_grad_output = kit::stride0_grad_output();
  if (cfg.half_accumulation) d.make_grad_output = kit::half_accumulation_grad_output();
  Op::finish_case(d, cfg, p, shape);
  return d;
}

// What a case needs beyond the shared parts, per op.
// ps_roi_align without zero_empty_bins: an adaptive grid over a zero-size roi (or a degenerate one with an
// extent in (-1, 0]) gives NaN bins, and NaN outputs make every difference quotient NaN.
void finish_align_case(CaseData& d, const PsRoiCaseConfig& cfg, const PsRoiAlignParams& p,
                       const std::array<std::int64_t, 4>&) {
  const bool empty_bins = cfg.rois == RoiLayout::kZeroSize || cfg.rois == RoiLayout::kDegenerate;
  if (!p.zero_empty_bins && p.sampling_ratio <= 0 && empty_bins) {
    d.gradcheck_skip_reason = "NaN bins (torchvision's 0 / 0 for a bin without samples): every difference quotient is NaN";
  }
}

// ps_roi_pool without exact_bins: the backward (as torchvision's) clips bins to the map where the forward
// stops before the last row and column, so the finite differences differentiate the forward with the
// backward's bins (the reference's ps_roi_pool_gradient_target), for the op's backward and the reference's.
void finish_pool_case(CaseData& d, const PsRoiCaseConfig&, const PsRoiPoolParams& p,
                      const std::array<std::int64_t, 4>& shape) {
  if (p.exact_bins) return;
  auto target = [p, shape](const Tensors& x, const Tensors&) {
    const at::Tensor out =
        kit::from_tensor4d(reference::ps_roi_pool_gradient_target(p, kit::to_tensor4d(x[0].cpu()), kit::to_matrix(x[1].cpu())));
    return Tensors{out.to(x[0].device()), reference_mapping(x[1].cpu(), shape[1], p.pooled_height, p.pooled_width).to(x[0].device())};
  };
  d.op_gradient_target = target;
  d.op_gradient_target_on_host = true;  // the reference's function: a CUDA check evaluates it on CPU copies
  d.reference_gradient_target = target;
}

// An op's entry points and its reference's, and its params from a case config.
template <typename Params, Params (PsRoiCaseConfig::*kParams)() const, auto kForward, auto kBackward,
          auto kReferenceForward, auto kReferenceBackward, auto kFinishCase>
struct PsOp {
  static Params params(const PsRoiCaseConfig& c) { return (c.*kParams)(); }
  static constexpr auto forward = kForward;
  static constexpr auto backward = kBackward;
  static constexpr auto reference_forward = kReferenceForward;
  static constexpr auto reference_backward = kReferenceBackward;
  static constexpr auto finish_case = kFinishCase;
};
using AlignOp = PsOp<PsRoiAlignParams, &PsRoiCaseConfig::align_params, &ps_roi_align_forward, &ps_roi_align_backward,
                     &reference::ps_roi_align_forward, &reference::ps_roi_align_backward, &finish_align_case>;
using PoolOp = PsOp<PsRoiPoolParams, &PsRoiCaseConfig::pool_params, &ps_roi_pool_forward, &ps_roi_pool_backward,
                    &reference::ps_roi_pool_forward, &reference::ps_roi_pool_backward, &finish_pool_case>;

std::string pooled_name(std::int64_t ph, std::int64_t pw) { return std::to_string(ph) + "x" + std::to_string(pw); }

using CaseList = kit::CaseList<PsRoiCaseConfig>;

const double kScales[] = {0.25, 0.125, 0.0625, 0.03125};

// The cases both ops run (names without an op-specific parameter).
void add_common_cases(CaseList& l, const PsRoiCaseConfig& base) {
  PsRoiCaseConfig c;
  c = base; c.num_rois = 0; l.add("no_rois", c);
  c = base; c.out_channels = 0; l.add("zero_channels", c);
  c = base; c.rois = RoiLayout::kOutside; l.add("rois_outside_map", c);
  c = base; c.rois = RoiLayout::kPartlyOutside; c.pooled_height = c.pooled_width = 7; l.add("rois_partly_outside_map_empty_bins", c);
  c = base; c.rois = RoiLayout::kDegenerate; l.add("degenerate_rois", c);
  c = base; c.rois = RoiLayout::kZeroSize; l.add("zero_size_rois", c);
  c = base; c.rois = RoiLayout::kSubPixel; l.add("subpixel_rois", c);
  c = base; c.rois = RoiLayout::kNaN; l.add("nan_coordinates", c);
  // ps_roi_pool runs these two with exact_bins: over rois of more than 2^24 pixels, torchvision's fp32 bin
  // arithmetic (the default in fp32 and the half types) moves boundaries by many pixels, which the fp64
  // reference cannot follow (suites/peer/test_dropin_roi.py compares the default with torchvision there).
  c = base; c.rois = RoiLayout::kInfinite; c.exact_bins = true; l.add("infinite_coordinates", c);
  // A fixed grid for ps_roi_align: an adaptive one is capped at 1024 x 1024 samples per bin (a case of its own).
  c = base; c.rois = RoiLayout::kHuge; c.num_rois = 4; c.sampling_ratio = 2; c.exact_bins = true;
  l.add("huge_coordinates", c);
  c = base; c.height = c.width = 1; c.spatial_scale = 0.0625; c.pooled_height = c.pooled_width = 7; l.add("feature_map_1x1", c);
  c = base; c.height = c.width = 1; c.spatial_scale = 1.0; c.pooled_height = c.pooled_width = 2; l.add("feature_map_1x1_scale1", c);
  c = base; c.noncontiguous_input = true; c.pooled_height = c.pooled_width = 7; l.add("noncontiguous_input", c);
  c = base; c.noncontiguous_rois = true; l.add("noncontiguous_rois", c);
  c = base; c.stride0_grad = true; c.pooled_height = c.pooled_width = 7; l.add("stride0_grad_output", c);
  c = base; c.stride0_grad = true; c.noncontiguous_input = true; l.add("stride0_grad_noncontiguous_input", c);
  // 1x1 bins keep the finite-difference checks (96 points x 2 forwards of 70,000 rois) affordable.
  c = base; c.out_channels = 2; c.pooled_height = c.pooled_width = 1; c.height = 6; c.width = 7; c.num_rois = 70000;
  l.add("more_than_65535_rois", c);
  c = base; c.batch = 4; c.num_rois = 12; c.batches = BatchLayout::kAllInFirst; l.add("all_rois_in_first_image", c);
  c = base; c.batch = 4; c.num_rois = 12; l.add("rois_spread_over_batch", c);
  c = base; c.batch = 3; c.batches = BatchLayout::kFractional; l.add("fractional_batch_index_truncates", c);
  c = base; c.rois = RoiLayout::kWholeMap; c.pooled_height = c.pooled_width = 7; l.add("roi_covers_whole_map", c);
  c = base; c.out_channels = 8; c.height = 9; c.width = 11; l.add("many_output_channels", c);
  // R-FCN's shape scaled down: x[2, 490, ...] = 10 * 7 * 7 channels becomes 2 * 7 * 7 = 98 on a 1/16 map.
  c = base; c.out_channels = 2; c.pooled_height = c.pooled_width = 7; c.height = 38; c.width = 50; c.num_rois = 40;
  c.spatial_scale = 0.0625; l.add("rfcn_shape_scaled_down", c);
  c = base; c.pooled_height = 3; c.pooled_width = 5; c.spatial_scale = 0.5; l.add("rectangular_pooled_3x5_scale_half", c);
  c = base; c.pooled_height = 7; c.pooled_width = 2; c.spatial_scale = 1.0; c.out_channels = 1; l.add("rectangular_pooled_7x2_scale1", c);
}

// Sums of thousands of terms (kit/half_accumulation.h), after every other case so that no seed moves. The
// backward: 4096 rois on each of four pixels, grad_output 0.5..1, so those grad_input elements sum 4096
// positive terms to ~3000.
void add_half_accumulation_backward_case(CaseList& l, const PsRoiCaseConfig& base) {
  PsRoiCaseConfig c = base;
  c.out_channels = 1; c.pooled_height = c.pooled_width = 1; c.sampling_ratio = 1; c.spatial_scale = 1.0;
  c.batch = 1; c.height = c.width = 6; c.num_rois = 4 * kit::kHalfAccumulationTerms; c.rois = RoiLayout::kHalfAccumulation;
  c.half_accumulation = true; l.add("half_accumulation_overlapping_rois_backward", c);
}

// The cases of the team kernels (ops/ps_roi/ps_roi_cuda.cu: a team of lanes per element, on a bin's columns, a
// loop over its rows, channels in chunks of 64 per warp), both ops. Added after every other case so that no seed moves.
void add_team_cases(CaseList& l, const PsRoiCaseConfig& base) {
  PsRoiCaseConfig c;
  // Bins wider than a 32-lane team: the column loop runs twice. ps_roi_align: a 40 x 24 adaptive grid, whose column
  // list (40 pixels) does not fit: the per-sample loop, lanes on a sample row's samples, twice.
  c = base; c.rois = RoiLayout::kWholeMap; c.pooled_height = c.pooled_width = 1; c.spatial_scale = 1.0; c.height = 24;
  c.width = 40; c.num_rois = 2; c.out_channels = 3; l.add("roi_covers_wide_map_1x1", c);
  // ps_roi_align: bins 33 pixels wide, whose column lists hold 34 and 33 taps (kPsRoiAlignListTaps = 34): the lists
  // at capacity, 32-lane teams over them twice. ps_roi_pool: 33-column bins.
  c = base; c.rois = RoiLayout::kWholeMap; c.pooled_height = c.pooled_width = 2; c.spatial_scale = 1.0; c.height = 9;
  c.width = 66; c.num_rois = 2; l.add("roi_covers_wide_map_2x2", c);
  // Samples (pixels) beyond the map on one axis only.
  c = base; c.rois = RoiLayout::kOneAxisOutside; l.add("rois_outside_on_one_axis", c);
  c.pooled_height = c.pooled_width = 7; l.add("rois_outside_on_one_axis_7x7", c);
  // Bins of one pixel (ps_roi_align: one sample per bin, on a pixel or between pixels) and of a fraction of one.
  c = base; c.rois = RoiLayout::kOnePixelBins; c.pooled_height = c.pooled_width = 7; c.spatial_scale = 1.0;
  l.add("one_pixel_bins_7x7", c);
  c.pooled_height = 3; c.pooled_width = 5; c.spatial_scale = 0.5; l.add("one_pixel_bins_3x5_scale_half", c);
  c = base; c.rois = RoiLayout::kSubPixelBins; c.pooled_height = c.pooled_width = 7; c.spatial_scale = 1.0;
  l.add("subpixel_bins_7x7", c);
  // Many output channels with ph != pw: the element -> (channel, bin) mapping, chunks of 64 channels that end inside
  // a channel's bins (195 = 3 x 64 + 3 and 154 = 2 x 64 + 26 channels per roi).
  c = base; c.out_channels = 13; c.pooled_height = 3; c.pooled_width = 5; c.height = 11; c.width = 14; c.num_rois = 5;
  l.add("many_output_channels_3x5", c);
  c = base; c.out_channels = 11; c.pooled_height = 7; c.pooled_width = 2; c.height = 13; c.width = 10; c.num_rois = 5;
  c.spatial_scale = 0.5; l.add("many_output_channels_7x2", c);
  c = base; c.rois = RoiLayout::kNaN; c.out_channels = 3; c.pooled_height = c.pooled_width = 7;
  l.add("nan_coordinates_7x7_many_channels", c);
  // ph + pw > 32: ps_roi_align builds no lists (the per-sample loop for every roi).
  c = base; c.out_channels = 1; c.pooled_height = 20; c.pooled_width = 14; c.height = 16; c.width = 18;
  c.spatial_scale = 1.0; c.num_rois = 4; l.add("pooled_20x14", c);
}

std::vector<OpCase> ps_roi_align_cases() {
  CaseList l(0x95A1'0000, make_case<AlignOp>);
  // The parameter grid: every sampling_ratio x pooled size x C_out, spatial_scale cycling 1/4..1/32.
  int n = 0;
  for (std::int64_t sr : {0, 1, 2}) {
    for (std::int64_t ps : {1, 3, 7}) {
      for (std::int64_t c_out : {1, 2}) {
        PsRoiCaseConfig cfg;
        cfg.spatial_scale = kScales[n++ % 4];
        cfg.pooled_height = cfg.pooled_width = ps;
        cfg.sampling_ratio = sr;
        cfg.out_channels = c_out;
        cfg.height = 10 + n % 5;
        cfg.width = 13 + n % 7;
        l.add("grid_sr" + std::to_string(sr) + "_" + pooled_name(ps, ps) + "_cout" + std::to_string(c_out) + "_" +
                  kit::scale_name(cfg.spatial_scale),
              cfg);
      }
    }
  }
  PsRoiCaseConfig base;  // adaptive grid, 3x3, C_out 2, 1/4
  add_common_cases(l, base);
  PsRoiCaseConfig c;
  c = base; c.sampling_ratio = 2; c.rois = RoiLayout::kOutside; l.add("rois_outside_map_fixed_sr", c);
  c = base; c.sampling_ratio = 2; c.rois = RoiLayout::kDegenerate; l.add("degenerate_rois_fixed_sr", c);
  c = base; c.sampling_ratio = 2; c.rois = RoiLayout::kZeroSize; l.add("zero_size_rois_fixed_sr", c);
  c = base; c.sampling_ratio = 2; c.rois = RoiLayout::kNaN; l.add("nan_coordinates_fixed_sr", c);
  c = base; c.sampling_ratio = 1; c.pooled_height = c.pooled_width = 1; c.spatial_scale = 1.0; c.rois = RoiLayout::kMapBorder;
  c.num_rois = 8; l.add("samples_on_map_border", c);
  c = base; c.sampling_ratio = 0; c.pooled_height = c.pooled_width = 1; c.spatial_scale = 1.0; c.rois = RoiLayout::kHuge;
  c.out_channels = 1; c.num_rois = 1; c.height = 5; c.width = 6; l.add("huge_roi_adaptive_grid_capped", c);
  c = base; c.sampling_ratio = 2; c.out_channels = 2; c.pooled_height = c.pooled_width = 7; c.height = 38; c.width = 50;
  c.num_rois = 40; c.spatial_scale = 0.0625; l.add("rfcn_shape_scaled_down_sr2", c);
  // Sample positions up to ~170 px: the fp32 coordinate arithmetic at realistic map sizes.
  c = base; c.sampling_ratio = 2; c.out_channels = 1; c.pooled_height = c.pooled_width = 7; c.height = 100; c.width = 168;
  c.batch = 1; c.num_rois = 24; c.spatial_scale = 0.125; l.add("fpn_p3_size_map", c);
  // Sums of thousands of terms (kit/half_accumulation.h): an fp16 / bf16 kernel must accumulate in fp32.
  // Forward: one 1x1 bin over the whole 16 x 16 map, a 64 x 64 sampling grid (4096 samples of values 24..40:
  // an fp16 running sum passes 65504, a bf16 one stalls), output ~32.
  c = base; c.out_channels = 1; c.pooled_height = c.pooled_width = 1; c.sampling_ratio = 64; c.spatial_scale = 1.0;
  c.batch = 1; c.height = c.width = 16; c.num_rois = 2; c.rois = RoiLayout::kWholeMap; c.half_accumulation = true;
  l.add("half_accumulation_sampling_grid_4096", c);
  add_half_accumulation_backward_case(l, base);
  // Added after every other case so that no seed moves: zero_empty_bins, where the default gives NaN.
  c = base; c.zero_empty_bins = true; c.rois = RoiLayout::kZeroSize; l.add("zero_empty_bins_zero_size_rois", c);
  c = base; c.zero_empty_bins = true; c.rois = RoiLayout::kDegenerate; l.add("zero_empty_bins_degenerate_rois", c);
  c = base; c.zero_empty_bins = true; l.add("zero_empty_bins_random_rois", c);
  add_team_cases(l, base);
  // Fixed grids whose column taps do not merge (samples 2.6 pixels apart, two taps each): sampling_ratio 17 fills a
  // list (34 taps), 18 overflows it (the per-sample loop).
  c = base; c.rois = RoiLayout::kWholeMap; c.pooled_height = c.pooled_width = 1; c.spatial_scale = 1.0; c.height = 10;
  c.width = 45; c.num_rois = 2; c.sampling_ratio = 17; l.add("fixed_sr17_list_capacity", c);
  c.sampling_ratio = 18; l.add("fixed_sr18_list_overflow", c);
  c = base; c.rois = RoiLayout::kOneAxisOutside; c.sampling_ratio = 2; c.pooled_height = c.pooled_width = 7;
  l.add("rois_outside_on_one_axis_fixed_sr", c);
  // Degenerate rois with a fixed grid: sample positions decrease along each axis (the lists merge taps that way).
  c = base; c.rois = RoiLayout::kDegenerate; c.sampling_ratio = 3; c.pooled_height = c.pooled_width = 7;
  c.spatial_scale = 1.0; l.add("degenerate_rois_fixed_sr3_7x7", c);
  c = base; c.rois = RoiLayout::kSubPixelBins; c.sampling_ratio = 2; c.pooled_height = c.pooled_width = 7;
  c.spatial_scale = 1.0; l.add("subpixel_bins_7x7_fixed_sr", c);
  return std::move(l.cases);
}

std::vector<OpCase> ps_roi_pool_cases() {
  CaseList l(0x95B0'0000, make_case<PoolOp>);
  // The parameter grid: pooled sizes x C_out, spatial_scale cycling 1/4..1/32.
  int n = 0;
  const std::int64_t sizes[][2] = {{1, 1}, {2, 2}, {3, 3}, {7, 7}, {3, 5}, {6, 4}};
  for (const auto& ps : sizes) {
    for (std::int64_t c_out : {1, 3}) {
      PsRoiCaseConfig cfg;
      cfg.spatial_scale = kScales[n++ % 4];
      cfg.pooled_height = ps[0];
      cfg.pooled_width = ps[1];
      cfg.out_channels = c_out;
      cfg.height = 10 + n % 5;
      cfg.width = 13 + n % 7;
      l.add("grid_" + pooled_name(ps[0], ps[1]) + "_cout" + std::to_string(c_out) + "_" + kit::scale_name(cfg.spatial_scale), cfg);
    }
  }
  PsRoiCaseConfig base;  // 3x3, C_out 2, 1/4
  add_common_cases(l, base);
  PsRoiCaseConfig c;
  c = base; c.rois = RoiLayout::kLastRowColumn; c.spatial_scale = 1.0; c.num_rois = 5; l.add("rois_on_last_row_and_column", c);
  c = base; c.rois = RoiLayout::kLastRowColumn; c.spatial_scale = 1.0; c.num_rois = 5; c.pooled_height = c.pooled_width = 1;
  l.add("rois_on_last_row_and_column_1x1", c);
  c = base; c.rois = RoiLayout::kRoundingTies; c.spatial_scale = 0.5; c.num_rois = 4; c.pooled_height = c.pooled_width = 2;
  l.add("coordinate_rounding_ties", c);
  // Sizes where fp32 and fp64 bins differ: torchvision's bins depend on the dtype there, and the fp64
  // reference cannot follow the dtype under test, so these run with exact_bins (which is the same in every
  // dtype); the Python suite compares the default with torchvision in the same dtype on them.
  c = base; c.rois = RoiLayout::kUnevenBins; c.spatial_scale = 1.0; c.num_rois = 8; c.out_channels = 1;
  c.pooled_height = c.pooled_width = 7; c.height = c.width = 70; c.batch = 1; c.exact_bins = true;
  l.add("exact_bins_uneven_bins_7x7", c);
  c = base; c.rois = RoiLayout::kUnevenBins; c.spatial_scale = 1.0; c.num_rois = 8; c.out_channels = 1;
  c.pooled_height = 13; c.pooled_width = 11; c.height = c.width = 70; c.batch = 1; c.exact_bins = true;
  l.add("exact_bins_uneven_bins_13x11", c);
  c = base; c.rois = RoiLayout::kSubPixel; c.pooled_height = c.pooled_width = 7; l.add("roi_smaller_than_bins", c);
  c = base; c.out_channels = 1; c.pooled_height = c.pooled_width = 7; c.height = 100; c.width = 168; c.batch = 1;
  c.num_rois = 24; c.spatial_scale = 0.125; l.add("fpn_p3_size_map", c);
  // Sums of thousands of terms (kit/half_accumulation.h). Forward: one 1x1 bin over the whole 64 x 64 map
  // (4096 pixels of values 24..40: an fp16 running sum passes 65504, a bf16 one stalls), output ~32.
  c = base; c.out_channels = 1; c.pooled_height = c.pooled_width = 1; c.spatial_scale = 1.0; c.batch = 1;
  c.height = c.width = 64; c.num_rois = 2; c.rois = RoiLayout::kWholeMap; c.half_accumulation = true;
  l.add("half_accumulation_bin_4096_pixels", c);
  add_half_accumulation_backward_case(l, base);
  // Added after every other case so that no seed moves. torchvision's floating-point bins where fp32 and
  // fp64 agree with each other but not with exact arithmetic (the default), and the exact ones.
  c = base; c.rois = RoiLayout::kFloatBins27; c.spatial_scale = 1.0; c.num_rois = 4; c.out_channels = 1;
  c.pooled_height = c.pooled_width = 27; c.height = c.width = 120; c.batch = 1; l.add("torchvision_float_bins_27x27", c);
  c.exact_bins = true; l.add("exact_bins_27x27", c);
  // The exact bins on the cases where they differ from torchvision's: the last row and column, the border,
  // non-finite coordinates, and random rois.
  c = base; c.exact_bins = true; c.rois = RoiLayout::kLastRowColumn; c.spatial_scale = 1.0; c.num_rois = 5;
  l.add("exact_bins_rois_on_last_row_and_column", c);
  c.pooled_height = c.pooled_width = 1; l.add("exact_bins_rois_on_last_row_and_column_1x1", c);
  c = base; c.exact_bins = true; l.add("exact_bins_random_rois", c);
  c = base; c.exact_bins = true; c.pooled_height = c.pooled_width = 7; c.rois = RoiLayout::kWholeMap;
  l.add("exact_bins_roi_covers_whole_map", c);
  c = base; c.exact_bins = true; c.rois = RoiLayout::kPartlyOutside; c.pooled_height = c.pooled_width = 7;
  l.add("exact_bins_rois_partly_outside_map", c);
  c = base; c.exact_bins = true; c.rois = RoiLayout::kNaN; l.add("exact_bins_nan_coordinates", c);
  c = base; c.exact_bins = true; c.rois = RoiLayout::kInfinite; l.add("exact_bins_infinite_coordinates", c);
  c = base; c.exact_bins = true; c.height = c.width = 1; c.spatial_scale = 1.0; c.pooled_height = c.pooled_width = 2;
  l.add("exact_bins_feature_map_1x1_scale1", c);
  c = base; c.exact_bins = true; c.stride0_grad = true; c.noncontiguous_input = true;
  l.add("exact_bins_stride0_grad_noncontiguous_input", c);
  add_team_cases(l, base);
  c = base; c.exact_bins = true; c.rois = RoiLayout::kOneAxisOutside; c.pooled_height = c.pooled_width = 7;
  l.add("exact_bins_rois_outside_on_one_axis_7x7", c);
  c = base; c.exact_bins = true; c.rois = RoiLayout::kWholeMap; c.pooled_height = c.pooled_width = 1;
  c.spatial_scale = 1.0; c.height = 24; c.width = 40; c.num_rois = 2; c.out_channels = 3;
  l.add("exact_bins_roi_covers_wide_map_1x1", c);
  // A contiguous map one element into its buffer (not 16-byte aligned): the kernels' plane offsets from a storage
  // offset, the default bins and the exact ones.
  c = base; c.misaligned_input = true; c.pooled_height = c.pooled_width = 7; c.height = 30; c.width = 41;
  c.num_rois = 12; l.add("misaligned_input_7x7", c);
  c.exact_bins = true; l.add("exact_bins_misaligned_input_7x7", c);
  return std::move(l.cases);
}

// Bad input: each call must raise an error naming the argument.
template <typename Op, typename Params>
std::vector<harness::BadInputCase> bad_inputs(const char* op, Params good, std::vector<harness::BadInputCase> extra) {
  auto f32 = kit::f32_on;
  auto good_rois = kit::good_rois;
  auto mapping = [](const at::Device& d) { return at::zeros({2, 2, 2, 2}, at::TensorOptions().dtype(at::kInt).device(d)); };
  const std::string name(op);
  kit::BadInputs bad;
  bad.cases = std::move(extra);
  auto add = [&](std::string n, kit::BadCall call, std::vector<std::string> words) {
    bad.add(std::move(n), std::move(call), std::move(words));
  };
  add("channels_not_multiple_of_bins", [=](const at::Device& d) { Op::forward(at::rand({2, 6, 8, 8}, f32(d)), good_rois(d), good); },
      {name, "input channels (6)", "multiple of pooled_height * pooled_width", "= 4"});
  kit::RoiOpBadInputs common;
  common.input_channels = 8;  // 2 * (2 x 2)
  common.output_channels = 2;
  common.forward = [good](const at::Tensor& x, const at::Tensor& rois, kit::RoiParamFault fault) {
    Op::forward(x, rois, kit::with_fault(good, fault));
  };
  common.backward = [good, mapping](const at::Tensor& grad, const at::Tensor& rois) {
    Op::backward(grad, rois, mapping(grad.device()), good, {2, 8, 8, 8});
  };
  kit::add_roi_op_bad_inputs(bad, common);
  add("backward_channels_not_multiple_of_bins", [=](const at::Device& d) {
        Op::backward(at::ones({2, 2, 2, 2}, f32(d)), good_rois(d), mapping(d), good, {2, 9, 8, 8}); },
      {"input channels (9)", "multiple of pooled_height * pooled_width"});
  add("backward_channel_mapping_wrong_dtype", [=](const at::Device& d) {
        Op::backward(at::ones({2, 2, 2, 2}, f32(d)), good_rois(d), mapping(d).to(at::kLong), good, {2, 8, 8, 8}); },
      {"channel_mapping", "int32"});
  add("backward_channel_mapping_wrong_shape", [=](const at::Device& d) {
        Op::backward(at::ones({2, 2, 2, 2}, f32(d)), good_rois(d), mapping(d).view({2, 2, 4}), good, {2, 8, 8, 8}); },
      {"channel_mapping", "[2, 2, 2, 2]"});
  add("backward_channel_mapping_on_other_device", [=](const at::Device& d) {
        Op::backward(at::ones({2, 2, 2, 2}, f32(d)), good_rois(d), kit::other_device(mapping(d), d), good, {2, 8, 8, 8}); },
      {"grad and channel_mapping", "same device"});
  // Rois 2 (index 5) and 4 (NaN) invalid, 160 channels (three chunks of a CUDA warp item per roi): the first invalid
  // roi is reported, whichever warp meets which first.
  auto later_invalid_rois = [](const at::Device& d) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    return at::tensor({0.0f, 0.0f, 0.0f, 4.0f, 4.0f, 1.0f, 1.0f, 1.0f, 6.0f, 6.0f, 5.0f, 0.0f, 0.0f, 3.0f, 3.0f,
                       0.0f, 2.0f, 2.0f, 7.0f, 7.0f, nan, 0.0f, 0.0f, 2.0f, 2.0f})
        .view({5, 5})
        .to(d);
  };
  add("batch_index_invalid_in_later_rois_many_channels", [=](const at::Device& d) {
        Op::forward(at::rand({2, 160, 8, 8}, f32(d)), later_invalid_rois(d), good); },
      {"rois[2, 0]", "[0, 2)"});
  add("backward_batch_index_invalid_in_later_rois_many_channels", [=](const at::Device& d) {
        Op::backward(at::ones({5, 40, 2, 2}, f32(d)), later_invalid_rois(d),
                     at::zeros({5, 40, 2, 2}, at::TensorOptions().dtype(at::kInt).device(d)), good, {2, 160, 8, 8}); },
      {"rois[2, 0]", "[0, 2)"});
  return std::move(bad.cases);
}

// A valid call after a bad one: a constant map pools to the constant; channel_mapping is 0..3.
template <typename Op, typename Params>
std::function<void(const at::Device&)> valid_call(const char* op, Params p) {
  return [op, p](const at::Device& d) {
    const auto opts = at::TensorOptions().dtype(at::kFloat).device(d);
    const at::Tensor x = at::ones({1, 4, 4, 4}, opts);
    const at::Tensor rois = at::tensor({0.0f, 0.0f, 0.0f, 3.0f, 3.0f}, opts.device(at::kCPU)).view({1, 5}).to(d);
    auto [out, mapping] = Op::forward(x, rois, p);
    TORCH_CHECK(at::allclose(out.cpu(), at::ones({1, 1, 2, 2})), op, ": a valid call after the bad one returned wrong values");
    TORCH_CHECK(at::equal(mapping.cpu(), at::arange(4, at::kInt).view({1, 1, 2, 2})), op,
                ": a valid call after the bad one returned a wrong channel_mapping");
  };
}

const char* const kDeterminismNote =
    "CUDA backward scatters with atomicAdd, so the summation order (and the last bits of grad_input) can vary "
    "between runs; the forward and the CPU backward are deterministic.";

// Benchmark cases (docs/benchmarks.md): R-FCN style position-sensitive pooling on a 490-channel (10 x 7 x 7)
// P2-sized map of an 800x1344 image: rfcn_1000 (1000 boxes inside the image, `params`), and rpn_rfcn (1000 RPN
// proposals per image x 2 images, crossing the border, `rpn_params`) cold and warm (rpn_rfcn_warm: the map, or
// grad_output, just written).
template <typename Op, typename Params>
std::vector<harness::BenchCase> ps_roi_benchmarks(const Params& params, const std::string& shape_suffix,
                                                  const Params& rpn_params, const std::string& rpn_shape_suffix,
                                                  std::uint64_t seed) {
  const std::array<std::int64_t, 4> shape{2, 490, 200, 336};
  const std::string bytes_note =
      "fwd: x + rois + output + channel_mapping (int32); bwd: grad_output + channel_mapping + rois + grad_input read "
      "and written (atomic scatter)";
  auto forward_of = [](const Params& p) -> kit::RoiBenchForward {
    return [p](const at::Tensor& x, const at::Tensor& rois) { return Op::forward(x, rois, p); };
  };
  auto backward_of = [shape](const Params& p) -> kit::RoiBenchBackward {
    return [p, shape](const at::Tensor& grad, const at::Tensor&, const at::Tensor& rois, const at::Tensor& mapping) {
      (void)Op::backward(grad, rois, mapping, p, shape);
    };
  };
  std::vector<harness::BenchCase> out{kit::roi_bench_case(
      kit::RoiBench{"rfcn_1000", "x[2,490,200,336] rois[1000,5] 7x7 scale 1/4" + shape_suffix, bytes_note, shape,
                    1000, seed},
      forward_of(params), backward_of(params))};
  kit::RoiBench rpn{"rpn_rfcn", "x[2,490,200,336] proposals[2000,5] 7x7 scale 1/4" + rpn_shape_suffix, bytes_note,
                    shape, 2000, seed + 10};
  rpn.boxes = kit::RoiBoxes::kProposals;
  for (harness::BenchCase& c : kit::roi_bench_cold_and_warm(rpn, forward_of(rpn_params), backward_of(rpn_params))) {
    out.push_back(std::move(c));
  }
  return out;
}

OpSpec ps_roi_align_spec() {
  OpSpec spec;
  spec.name = "ps_roi_align";
  spec.cases = ps_roi_align_cases();
  std::vector<harness::BadInputCase> extra;
  extra.push_back({"sampling_ratio_too_large", [](const at::Device& d) {
                     ps_roi_align_forward(at::rand({1, 4, 8, 8}, at::TensorOptions().device(d)),
                                          at::zeros({1, 5}, at::TensorOptions().device(d)),
                                          {1.0, 2, 2, kPsRoiAlignMaxSamplingGrid + 1});
                   }, {"sampling_ratio", "1024"}});
  spec.bad_inputs = bad_inputs<AlignOp, PsRoiAlignParams>("ps_roi_align", {1.0, 2, 2, 2}, std::move(extra));
  spec.valid_call = valid_call<AlignOp, PsRoiAlignParams>("ps_roi_align", {1.0, 2, 2, 2});
  spec.determinism.note = kDeterminismNote;
  // rpn_rfcn: sampling_ratio -1 (adaptive), torchvision.ops.ps_roi_align's default.
  spec.benchmarks = ps_roi_benchmarks<AlignOp>(PsRoiAlignParams{0.25, 7, 7, 2}, " sr2",
                                               PsRoiAlignParams{0.25, 7, 7, -1}, " sr-1 (adaptive)", 9201);
  return spec;
}

OpSpec ps_roi_pool_spec() {
  OpSpec spec = kit::op_spec("ps_roi_pool", ps_roi_pool_cases(),
                             bad_inputs<PoolOp, PsRoiPoolParams>("ps_roi_pool", {1.0, 2, 2}, {}));
  spec.valid_call = valid_call<PoolOp, PsRoiPoolParams>("ps_roi_pool", {1.0, 2, 2});
  spec.determinism.note = kDeterminismNote;
  spec.benchmarks = ps_roi_benchmarks<PoolOp>(PsRoiPoolParams{0.25, 7, 7}, "", PsRoiPoolParams{0.25, 7, 7}, "", 9301);
  return spec;
}

DETOPS_REGISTER_OP_SPEC(ps_roi_align_spec);
DETOPS_REGISTER_OP_SPEC(ps_roi_pool_spec);

}  // namespace
}  // namespace detops
