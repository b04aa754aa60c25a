// The sigmoid focal loss op specs: torchvision's form (sigmoid_focal_loss: logits of any shape, float targets)
// and mmcv's form (sigmoid_focal_loss_mmcv: [N, C] logits, int64 class targets with C as background,
// per-class weights). Seeded cases (the OPS.md regression cases among them: fp16 logits where p rounds to 1,
// which broke mmcv; sums long enough that a half-precision accumulator fails), bad inputs, determinism,
// tolerances and the RetinaNet benchmark shapes.
#include "kit/spec_prelude.h"

#include "detops/reference/sigmoid_focal_loss_reference.h"
#include "kit/class_target_cases.h"
#include "kit/fd_rows.h"
#include "kit/feature_cases.h"
#include "sigmoid_focal_loss/sigmoid_focal_loss_torch.h"

namespace detops {
namespace {

using R = FocalLossReduction;

// RetinaNet's classification head starts at the prior 0.01: bias -log(99).
constexpr double kPriorLogit = -4.59511985013459;

enum class Logits {
  kNormal,    // N(0, 2^2)
  kSmall,     // N(0, 0.1^2)
  kLarge,     // uniform in [-30, 30], with +-30, +-20 and +-9.39 (mmcv's fp16 NaN) placed exactly
  kRetina,    // the prior logit + N(0, 1): almost every p near 0.01
  kNaN,       // N(0, 2^2) with NaN logits
  kConfident, // uniform in [64, 107): with target 0, every term is about (1 - alpha) x, 48..80 (see below)
};

enum class Targets {
  kBinary,      // 0 / 1, about 30 % ones
  kSparse,      // 0 / 1, about 1 % ones (dense detection)
  kFractional,  // uniform in [0, 1] (soft labels: torchvision's formula accepts them)
  kAllZero,
  kAllOne,
};

at::Tensor make_logits(Logits kind, at::Generator& gen, const std::vector<std::int64_t>& shape) {
  switch (kind) {
    case Logits::kNormal: return at::randn(shape, gen, f64()) * 2;
    case Logits::kSmall: return at::randn(shape, gen, f64()) * 0.1;
    case Logits::kRetina: return at::randn(shape, gen, f64()) + kPriorLogit;
    case Logits::kNaN: {
      at::Tensor x = at::randn(shape, gen, f64()) * 2;
      at::Tensor flat = x.view({-1});
      for (std::int64_t i = 0; i < flat.numel(); i += 5) flat[i] = kNaN;
      return x;
    }
    case Logits::kConfident: return at::rand(shape, gen, f64()) * 43 + 64;
    case Logits::kLarge: {
      at::Tensor x = at::rand(shape, gen, f64()) * 60 - 30;
      at::Tensor flat = x.view({-1});
      const double exact[] = {30.0, -30.0, 20.0, -20.0, 9.39, -9.39, 12.0, -12.0};
      for (std::int64_t i = 0; i < flat.numel() && i < 8; ++i) flat[i] = exact[i];
      return x;
    }
  }
  throw std::invalid_argument("make_logits: unknown kind");
}

at::Tensor make_targets(Targets kind, at::Generator& gen, const std::vector<std::int64_t>& shape) {
  switch (kind) {
    case Targets::kBinary: return (at::rand(shape, gen, f64()) < 0.3).to(at::kDouble);
    case Targets::kSparse: return (at::rand(shape, gen, f64()) < 0.01).to(at::kDouble);
    case Targets::kFractional: return at::rand(shape, gen, f64());
    case Targets::kAllZero: return at::zeros(shape, f64());
    case Targets::kAllOne: return at::ones(shape, f64());
  }
  throw std::invalid_argument("make_targets: unknown kind");
}

// Both sides of a case see the same strides pattern: the op gets a non-contiguous view of the same values.
at::Tensor strided_view(const at::Tensor& t) {
  if (t.dim() == 0) return t;
  return at::cat({t, t}, -1).slice(-1, 0, t.size(-1));  // every row stride doubled
}

at::Tensor reduced_or_shaped(const reference::Vectord& v, FocalLossReduction r, at::IntArrayRef shape) {
  const at::Tensor t = kit::from_vector(v);
  return r == R::kNone ? t.reshape(shape) : t.reshape({});
}

reference::Vectord flat_vector(const at::Tensor& t) { return kit::to_vector(t.reshape({-1})); }

// ---------------------------------------------------------------------------------------------------
// torchvision form.

struct FocalCaseConfig {
  std::vector<std::int64_t> shape{17};
  double alpha = 0.25;
  double gamma = 2.0;
  FocalLossReduction reduction = R::kNone;
  Logits logits = Logits::kNormal;
  Targets targets = Targets::kBinary;
  bool noncontiguous_inputs = false;
  bool noncontiguous_targets = false;
  bool stride0_grad = false;
};

CaseData make_focal_case(const FocalCaseConfig& cfg, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  CaseData d;
  d.inputs = {make_logits(cfg.logits, gen, cfg.shape), make_targets(cfg.targets, gen, cfg.shape)};
  d.differentiable = {0};
  const SigmoidFocalLossParams p{FocalLossForm::kTorchvision, cfg.alpha, cfg.gamma, cfg.reduction};
  auto prepare = [cfg](const Tensors& in) {
    return std::make_pair(cfg.noncontiguous_inputs ? strided_view(in[0]) : in[0],
                          cfg.noncontiguous_targets ? strided_view(in[1]) : in[1]);
  };
  d.op_forward = [p, prepare](const Tensors& in) {
    const auto [x, t] = prepare(in);
    return Tensors{sigmoid_focal_loss_forward(x, t, p)};
  };
  d.op_backward = [p, prepare](const Tensors& in, const Tensors& grad) {
    const auto [x, t] = prepare(in);
    return Tensors{sigmoid_focal_loss_backward(grad[0], x, t, p)};
  };
  d.reference_forward = [p](const Tensors& in) {
    return Tensors{reduced_or_shaped(reference::sigmoid_focal_loss_forward(p, flat_vector(in[0]), flat_vector(in[1])),
                                     p.reduction, in[0].sizes())};
  };
  // The losses are nonnegative for alpha in [0, 1] or -1, so the sum of |terms| is the reference itself;
  // given explicitly so a reduced value's tolerance scales with its terms in every case.
  d.reference_forward_magnitude = [p](const Tensors& in) {
    SigmoidFocalLossParams none = p;
    none.reduction = R::kNone;
    const reference::Vectord terms =
        reference::sigmoid_focal_loss_forward(none, flat_vector(in[0]), flat_vector(in[1])).cwiseAbs();
    reference::Vectord out = terms;
    if (p.reduction != R::kNone) {
      out.resize(1);
      out(0) = terms.sum() / (p.reduction == R::kMean && terms.size() > 0 ? static_cast<double>(terms.size()) : 1.0);
    }
    return Tensors{reduced_or_shaped(out, p.reduction, in[0].sizes())};
  };
  d.reference_backward = [p](const Tensors& in, const Tensors& grad) {
    const reference::Vectord g =
        reference::sigmoid_focal_loss_backward(p, flat_vector(in[0]), flat_vector(in[1]), flat_vector(grad[0]));
    return Tensors{kit::from_vector(g).reshape(in[0].sizes())};
  };
  if (cfg.stride0_grad) d.make_grad_output = kit::stride0_grad_output();
  if (cfg.logits == Logits::kNaN) d.gradcheck_skip_reason = "NaN logits: nothing to differentiate";
  // Element i's loss depends on element i of the logits and targets only, so row i (dimension 0) of the loss on
  // row i of both; a mean divides by all elements, N times a row's (CaseData::fd_rows).
  d.fd_rows = kit::loss_fd_rows({0, 1}, cfg.reduction == R::kMean);
  return d;
}

std::vector<OpCase> focal_cases() {
  kit::CaseList<FocalCaseConfig> add(0xF0CA'1000, make_focal_case);
  FocalCaseConfig c;
  c = {}; add("vector_17_none", c);
  c = {}; c.reduction = R::kMean; add("vector_17_mean", c);
  c = {}; c.reduction = R::kSum; add("vector_17_sum", c);
  c = {}; c.shape = {}; add("scalar_0d_none", c);
  c = {}; c.shape = {}; c.reduction = R::kSum; add("scalar_0d_sum", c);
  c = {}; c.shape = {1}; c.reduction = R::kMean; add("single_element_mean", c);
  c = {}; c.shape = {0}; add("empty_none", c);
  c = {}; c.shape = {0, 80}; c.reduction = R::kMean; add("empty_mean_is_nan", c);
  c = {}; c.shape = {0, 80}; c.reduction = R::kSum; add("empty_sum_is_zero", c);
  c = {}; c.shape = {33, 80}; add("matrix_33x80_none", c);
  c = {}; c.shape = {4, 9, 20}; c.targets = Targets::kSparse; add("rank3_4x9x20_sparse_targets", c);
  c = {}; c.shape = {2, 3, 5, 7}; c.reduction = R::kMean; add("rank4_2x3x5x7_mean", c);
  c = {}; c.shape = {2, 2, 3, 4, 5}; c.reduction = R::kSum; add("rank5_2x2x3x4x5_sum", c);
  c = {}; c.shape = {40}; c.alpha = -1; add("alpha_ignore_none", c);
  c = {}; c.shape = {40}; c.alpha = -1; c.reduction = R::kSum; add("alpha_ignore_sum", c);
  c = {}; c.shape = {40}; c.alpha = 0; add("alpha_zero", c);
  c = {}; c.shape = {40}; c.alpha = 1; add("alpha_one", c);
  c = {}; c.shape = {40}; c.alpha = 0.5; c.reduction = R::kMean; add("alpha_half_mean", c);
  c = {}; c.shape = {40}; c.gamma = 0; add("gamma_zero_is_weighted_bce", c);
  c = {}; c.shape = {40}; c.gamma = 0.5; add("gamma_half", c);
  c = {}; c.shape = {40}; c.gamma = 1; add("gamma_one", c);
  c = {}; c.shape = {40}; c.gamma = 5; add("gamma_five", c);
  c = {}; c.shape = {40}; c.gamma = -0.5; add("gamma_negative", c);  // torchvision and mmcv accept it
  c = {}; c.shape = {40}; c.gamma = 0.5; c.reduction = R::kSum; add("gamma_half_sum", c);
  c = {}; c.shape = {6, 11}; c.targets = Targets::kFractional; add("fractional_targets_none", c);
  c = {}; c.shape = {6, 11}; c.targets = Targets::kFractional; c.reduction = R::kMean; add("fractional_targets_mean", c);
  c = {}; c.shape = {6, 11}; c.targets = Targets::kFractional; c.gamma = 0.5; c.alpha = -1; add("fractional_targets_gamma_half_no_alpha", c);
  c = {}; c.shape = {30}; c.targets = Targets::kAllZero; add("all_negative_targets", c);
  c = {}; c.shape = {30}; c.targets = Targets::kAllOne; add("all_positive_targets", c);
  c = {}; c.shape = {8, 16}; c.logits = Logits::kLarge; add("large_logits_30_none_fp16_p_rounds_to_1", c);
  c = {}; c.shape = {8, 16}; c.logits = Logits::kLarge; c.reduction = R::kSum; add("large_logits_30_sum", c);
  c = {}; c.shape = {8, 16}; c.logits = Logits::kLarge; c.gamma = 0.5; add("large_logits_gamma_half", c);
  c = {}; c.shape = {8, 16}; c.logits = Logits::kLarge; c.alpha = -1; c.gamma = 5; add("large_logits_gamma_five_no_alpha", c);
  c = {}; c.shape = {8, 16}; c.logits = Logits::kLarge; c.targets = Targets::kFractional; add("large_logits_fractional_targets", c);
  c = {}; c.shape = {25}; c.logits = Logits::kSmall; add("small_logits", c);
  c = {}; c.shape = {500, 80}; c.logits = Logits::kRetina; c.targets = Targets::kSparse; c.reduction = R::kSum; add("retinanet_prior_500x80_sum", c);
  c = {}; c.shape = {500, 80}; c.logits = Logits::kRetina; c.targets = Targets::kSparse; add("retinanet_prior_500x80_none", c);
  // Long reductions: a half-precision accumulator stalls (fp16 adds nothing below half an ulp of the running
  // sum, 4 at 8192; bf16 already at 256), so these fail unless the sums are kept in fp32.
  c = {}; c.shape = {1500, 100}; c.reduction = R::kMean; add("mean_150000_half_accumulation", c);
  c = {}; c.shape = {100000}; c.reduction = R::kSum; add("sum_100000_half_accumulation", c);
  // A reduction split into chunks and trees stalls far less than a serial one, so this one makes an fp16
  // accumulator fail however it is split: terms of 48..80 (confident wrong logits), whose mean (about 64) fp16
  // holds, while a chunk's 2048 of them sum past 65504 (inf). (bf16 has fp32's range: only the stalls above catch
  // a bf16 accumulator, and only a long serial one; a bf16 tree stays within bf16's tolerance.)
  c = {}; c.shape = {1500, 100}; c.logits = Logits::kConfident; c.targets = Targets::kAllZero; c.reduction = R::kMean;
  add("mean_150000_terms_of_64_fp16_overflow", c);
  c = {}; c.shape = {2048 * 3 + 1}; c.reduction = R::kSum; add("sum_chunk_edges_6145", c);
  c = {}; c.shape = {2, 2048}; c.reduction = R::kMean; add("mean_whole_chunks_4096", c);
  c = {}; c.shape = {9, 13}; c.noncontiguous_inputs = true; add("noncontiguous_inputs", c);
  c = {}; c.shape = {9, 13}; c.noncontiguous_targets = true; c.reduction = R::kSum; add("noncontiguous_targets_sum", c);
  c = {}; c.shape = {3, 5, 7}; c.noncontiguous_inputs = c.noncontiguous_targets = true; c.reduction = R::kMean; add("noncontiguous_both_mean", c);
  c = {}; c.shape = {12, 10}; c.stride0_grad = true; add("stride0_grad_output", c);
  c = {}; c.shape = {5, 4, 3}; c.stride0_grad = true; c.noncontiguous_inputs = true; add("stride0_grad_noncontiguous_inputs", c);
  c = {}; c.shape = {20}; c.logits = Logits::kNaN; add("nan_logits_propagate", c);
  c = {}; c.shape = {20}; c.logits = Logits::kNaN; c.reduction = R::kSum; add("nan_logits_sum", c);
  return std::move(add.cases);
}

// ---------------------------------------------------------------------------------------------------
// mmcv form.

struct MmcvCaseConfig {
  std::int64_t n = 12, classes = 5;
  double gamma = 2.0, alpha = 0.25;
  FocalLossReduction reduction = R::kMean;
  bool weighted = false;
  double background = 0.3;  // fraction of rows whose target is C
  Logits logits = Logits::kNormal;
  bool noncontiguous = false;
  bool stride0_grad = false;
};

// The mmcv form's op and reference sides (kit/class_target_cases.h).
const kit::ClassTargetLoss<SigmoidFocalLossParams, reference::Matrixd, reference::Matrixd> kMmcvLoss{
    &sigmoid_focal_loss_mmcv_forward, &sigmoid_focal_loss_mmcv_backward, &reference::sigmoid_focal_loss_mmcv_forward,
    &reference::sigmoid_focal_loss_mmcv_backward};

CaseData make_mmcv_case(const MmcvCaseConfig& cfg, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor x = make_logits(cfg.logits, gen, {cfg.n, cfg.classes});
  const at::Tensor cls = at::randint(0, cfg.classes, {cfg.n}, gen, at::TensorOptions().dtype(at::kLong));
  const at::Tensor bg = at::rand({cfg.n}, gen, f64()) < cfg.background;
  const at::Tensor target = at::where(bg, at::full({cfg.n}, cfg.classes, cls.options()), cls);
  const SigmoidFocalLossParams p{FocalLossForm::kMmcv, cfg.alpha, cfg.gamma, cfg.reduction};
  return kit::class_target_loss_case(kMmcvLoss, p, cfg, x, target, gen, cfg.logits == Logits::kNaN);
}

std::vector<OpCase> mmcv_cases() {
  kit::CaseList<MmcvCaseConfig> add(0xF0CA'2000, make_mmcv_case);
  kit::add_class_target_basic_cases(add);
  MmcvCaseConfig c;
  c = {}; c.classes = 1; c.n = 30; add("one_class_mean", c);
  c = {}; c.classes = 1; c.n = 30; c.reduction = R::kNone; c.weighted = true; add("one_class_weighted_none", c);
  c = {}; c.classes = 80; c.n = 64; add("coco_80_classes_mean", c);
  c = {}; c.classes = 80; c.n = 64; c.reduction = R::kNone; add("coco_80_classes_none", c);
  c = {}; c.classes = 80; c.n = 64; c.weighted = true; c.reduction = R::kSum; add("coco_80_classes_weighted_sum", c);
  c = {}; c.background = 1.0; add("all_background_mean", c);
  c = {}; c.background = 1.0; c.weighted = true; c.reduction = R::kNone; add("all_background_weighted_none", c);
  c = {}; c.background = 0.0; add("no_background_mean", c);
  c = {}; c.background = 0.0; c.weighted = true; add("no_background_weighted_mean", c);
  c = {}; c.gamma = 0; add("gamma_zero", c);
  c = {}; c.gamma = 0.5; add("gamma_half", c);
  c = {}; c.gamma = 1; c.reduction = R::kNone; add("gamma_one_none", c);
  c = {}; c.gamma = 5; add("gamma_five", c);
  c = {}; c.gamma = -0.5; add("gamma_negative", c);  // mmcv accepts it
  c = {}; c.alpha = 0; add("alpha_zero", c);
  c = {}; c.alpha = 1; add("alpha_one", c);
  c = {}; c.alpha = 0.5; c.reduction = R::kSum; add("alpha_half_sum", c);
  c = {}; c.alpha = -0.5; c.reduction = R::kNone; add("alpha_negative_used_as_given", c);
  c = {}; c.alpha = 1.5; add("alpha_above_one_used_as_given", c);
  c = {}; c.logits = Logits::kLarge; c.classes = 16; c.reduction = R::kNone; add("large_logits_30_none_mmcv_fp16_nan", c);
  c = {}; c.logits = Logits::kLarge; c.classes = 16; c.reduction = R::kSum; add("large_logits_30_sum", c);
  c = {}; c.logits = Logits::kLarge; c.classes = 16; c.gamma = 0.5; c.weighted = true; add("large_logits_gamma_half_weighted", c);
  c = {}; c.logits = Logits::kSmall; add("small_logits", c);
  c = {}; c.logits = Logits::kRetina; c.classes = 80; c.n = 500; c.background = 0.9; c.reduction = R::kSum; add("retinanet_prior_500x80_sum", c);
  c = {}; c.logits = Logits::kRetina; c.classes = 80; c.n = 500; c.background = 0.9; c.reduction = R::kNone; add("retinanet_prior_500x80_none", c);
  c = {}; c.classes = 80; c.n = 1500; c.reduction = R::kMean; add("mean_120000_half_accumulation", c);
  // As the torchvision form's: terms of 48..80 (every row background, confident logits), mean about 64.
  c = {}; c.classes = 80; c.n = 1500; c.background = 1.0; c.logits = Logits::kConfident; add("mean_120000_terms_of_64_fp16_overflow", c);
  c = {}; c.classes = 80; c.n = 1250; c.reduction = R::kSum; c.background = 0.5; c.logits = Logits::kSmall; add("sum_100000_half_accumulation", c);
  c = {}; c.classes = 3; c.n = 2049; c.reduction = R::kSum; add("sum_chunk_edges_6147", c);
  c = {}; c.n = 1; c.classes = 1; add("single_element_mean", c);
  // CUDA loads 16-byte Packs (2 fp64, 4 fp32, 8 fp16/bf16 logits) when C is at least a Pack's width: with C = 9 a
  // Pack crosses a row end in every dtype, so an element given the wrong row's target or class weight fails, and 9
  // rows' numel is odd (a scalar tail); C = 8 is a Pack per fp16 row (the first C taking Packs there) and C = 7 the
  // last below it (the scalar kernels in fp16/bf16, Packs crossing rows in fp32). 'sum' over 4500 elements crosses
  // chunk ends (2048) inside rows.
  c = {}; c.classes = 9; c.n = 37; c.weighted = true; c.reduction = R::kNone; add("classes_9_packs_cross_rows_weighted_none", c);
  c = {}; c.classes = 9; c.n = 500; c.weighted = true; c.reduction = R::kSum; add("classes_9_packs_cross_rows_weighted_sum", c);
  c = {}; c.classes = 9; c.n = 41; c.reduction = R::kNone; c.stride0_grad = true; add("classes_9_packs_stride0_grad", c);
  c = {}; c.classes = 8; c.n = 25; c.weighted = true; c.reduction = R::kNone; add("classes_8_pack_per_fp16_row_none", c);
  c = {}; c.classes = 7; c.n = 25; c.weighted = true; c.reduction = R::kMean; add("classes_7_below_fp16_pack_mean", c);
  kit::add_class_target_layout_cases(add);
  c = {}; c.logits = Logits::kNaN; c.reduction = R::kNone; add("nan_logits_propagate", c);
  return std::move(add.cases);
}

// ---------------------------------------------------------------------------------------------------
// Bad inputs and valid calls.

using kit::f32_on;
using kit::i64_on;
using kit::other_device;

const SigmoidFocalLossParams kTvNone{FocalLossForm::kTorchvision, 0.25, 2.0, R::kNone};
const SigmoidFocalLossParams kTvSum{FocalLossForm::kTorchvision, 0.25, 2.0, R::kSum};
const SigmoidFocalLossParams kMmcvMean{FocalLossForm::kMmcv, 0.25, 2.0, R::kMean};
const SigmoidFocalLossParams kMmcvNone{FocalLossForm::kMmcv, 0.25, 2.0, R::kNone};

std::vector<BadInputCase> focal_bad_inputs() {
  kit::BadInputs bad;
  bad.add("shape_mismatch", [](const at::Device& d) {
        sigmoid_focal_loss_forward(at::zeros({3, 4}, f32_on(d)), at::zeros({4, 3}, f32_on(d)), kTvNone); },
          {"targets", "shape", "[3, 4]", "[4, 3]"});
  bad.add("targets_int64", [](const at::Device& d) {
        sigmoid_focal_loss_forward(at::zeros({5}, f32_on(d)), at::zeros({5}, i64_on(d)), kTvNone); },
          {"targets", "floating-point", "Long"});
  bad.add("integer_inputs", [](const at::Device& d) {
        sigmoid_focal_loss_forward(at::zeros({5}, i64_on(d)), at::zeros({5}, f32_on(d)), kTvNone); },
          {"inputs", "float64, float32, float16 or bfloat16"});
  bad.add("targets_on_other_device", [](const at::Device& d) {
        sigmoid_focal_loss_forward(at::zeros({5}, f32_on(d)), other_device(at::zeros({5}, f32_on(d)), d), kTvNone); },
          {"inputs and targets", "same device"});
  bad.add("invalid_reduction", [](const at::Device&) { make_sigmoid_focal_loss_params(0.25, 2, "average"); },
          {"Invalid", "reduction", "'average'"});
  bad.add("alpha_above_one", [](const at::Device&) { make_sigmoid_focal_loss_params(1.5, 2, "none"); },
          {"Invalid alpha value", "alpha", "-1 for ignore"});
  bad.add("alpha_negative_not_minus_one", [](const at::Device&) { make_sigmoid_focal_loss_params(-0.5, 2, "none"); },
          {"Invalid alpha value", "alpha"});
  bad.add("infinite_gamma", [](const at::Device&) { make_sigmoid_focal_loss_params(0.25, kit::kInf, "none"); },
          {"gamma", "finite"});
  bad.add("nan_gamma", [](const at::Device& d) {
        sigmoid_focal_loss_forward(at::zeros({5}, f32_on(d)), at::zeros({5}, f32_on(d)),
                                   {FocalLossForm::kTorchvision, 0.25, kNaN, R::kNone}); }, {"gamma", "finite"});
  bad.add("backward_grad_wrong_shape", [](const at::Device& d) {
        sigmoid_focal_loss_backward(at::ones({4}, f32_on(d)), at::zeros({5}, f32_on(d)), at::zeros({5}, f32_on(d)), kTvNone); },
          {"grad", "[5]", "[4]"});
  bad.add("backward_grad_not_scalar_for_sum", [](const at::Device& d) {
        sigmoid_focal_loss_backward(at::ones({5}, f32_on(d)), at::zeros({5}, f32_on(d)), at::zeros({5}, f32_on(d)), kTvSum); },
          {"grad", "0-d", "'sum'"});
  bad.add("backward_grad_dtype_mismatch", [](const at::Device& d) {
        sigmoid_focal_loss_backward(at::ones({5}, f32_on(d).dtype(at::kDouble)), at::zeros({5}, f32_on(d)),
                                    at::zeros({5}, f32_on(d)), kTvNone); },
          {"grad dtype", "Double", "Float"});
  return std::move(bad.cases);
}

std::vector<BadInputCase> mmcv_bad_inputs() {
  kit::BadInputs bad;
  const auto targets = &kit::class_indices;
  bad.add("input_one_dimensional", [=](const at::Device& d) {
        sigmoid_focal_loss_mmcv_forward(at::zeros({6}, f32_on(d)), targets(d, {0, 1}), at::Tensor(), kMmcvMean); },
          {"input", "[N, C]", "[6]"});
  bad.add("target_float", [=](const at::Device& d) {
        sigmoid_focal_loss_mmcv_forward(at::zeros({2, 3}, f32_on(d)), at::zeros({2}, f32_on(d)), at::Tensor(), kMmcvMean); },
          {"target", "int64"});
  bad.add("target_wrong_length", [=](const at::Device& d) {
        sigmoid_focal_loss_mmcv_forward(at::zeros({2, 3}, f32_on(d)), targets(d, {0, 1, 2}), at::Tensor(), kMmcvMean); },
          {"target", "shape [2]", "[3]"});
  bad.add("target_negative", [=](const at::Device& d) {
        sigmoid_focal_loss_mmcv_forward(at::zeros({2, 3}, f32_on(d)), targets(d, {0, -1}), at::Tensor(), kMmcvMean); },
          {"target[1] = -1", "[0, 3]", "background"});
  bad.add("target_above_background", [=](const at::Device& d) {
        sigmoid_focal_loss_mmcv_forward(at::zeros({2, 3}, f32_on(d)), targets(d, {4, 3}), at::Tensor(), kMmcvNone); },
          {"target[0] = 4", "[0, 3]"});
  bad.add("backward_target_out_of_range", [=](const at::Device& d) {
        sigmoid_focal_loss_mmcv_backward(at::ones({}, f32_on(d)), at::zeros({2, 3}, f32_on(d)), targets(d, {0, 7}),
                                         at::Tensor(), kMmcvMean); },
          {"target[1] = 7"});
  // 40 rows of 9 classes: CUDA's vectorized kernels (a Pack crossing rows) report the first invalid row (23, not
  // 31, whichever Pack gets there first) in each reduction and in the backward.
  auto two_invalid = [=](const at::Device& d) {
    std::vector<std::int64_t> t(40);
    for (std::int64_t i = 0; i < 40; ++i) t[i] = i % 10;  // 9 = background
    t[23] = 10;
    t[31] = -2;
    return targets(d, t);
  };
  bad.add("target_invalid_packed_rows_none", [=](const at::Device& d) {
        sigmoid_focal_loss_mmcv_forward(at::zeros({40, 9}, f32_on(d)), two_invalid(d), at::Tensor(), kMmcvNone); },
          {"target[23] = 10", "[0, 9]"});
  bad.add("target_invalid_packed_rows_mean", [=](const at::Device& d) {
        sigmoid_focal_loss_mmcv_forward(at::zeros({40, 9}, f32_on(d)), two_invalid(d), at::ones({9}, f32_on(d)), kMmcvMean); },
          {"target[23] = 10", "[0, 9]"});
  bad.add("backward_target_invalid_packed_rows", [=](const at::Device& d) {
        sigmoid_focal_loss_mmcv_backward(at::ones({40, 9}, f32_on(d)), at::zeros({40, 9}, f32_on(d)), two_invalid(d),
                                         at::Tensor(), kMmcvNone); },
          {"target[23] = 10"});
  bad.add("weight_wrong_length", [=](const at::Device& d) {
        sigmoid_focal_loss_mmcv_forward(at::zeros({2, 3}, f32_on(d)), targets(d, {0, 1}), at::ones({4}, f32_on(d)), kMmcvMean); },
          {"weight", "shape [3]", "[4]"});
  bad.add("weight_dtype_mismatch", [=](const at::Device& d) {
        sigmoid_focal_loss_mmcv_forward(at::zeros({2, 3}, f32_on(d)), targets(d, {0, 1}),
                                        at::ones({3}, f32_on(d).dtype(at::kDouble)), kMmcvMean); },
          {"weight dtype", "input dtype"});
  bad.add("integer_input", [=](const at::Device& d) {
        sigmoid_focal_loss_mmcv_forward(at::zeros({2, 3}, i64_on(d)), targets(d, {0, 1}), at::Tensor(), kMmcvMean); },
          {"input", "float64, float32, float16 or bfloat16"});
  bad.add("target_on_other_device", [=](const at::Device& d) {
        sigmoid_focal_loss_mmcv_forward(at::zeros({2, 3}, f32_on(d)), other_device(targets(d, {0, 1}), d), at::Tensor(),
                                        kMmcvMean); },
          {"input and target", "same device"});
  bad.add("invalid_reduction", [](const at::Device&) { make_sigmoid_focal_loss_mmcv_params(2, 0.25, "batchmean"); },
          {"Invalid", "reduction", "'batchmean'"});
  bad.add("nan_gamma", [](const at::Device&) { make_sigmoid_focal_loss_mmcv_params(kit::kNaN, 0.25, "mean"); },
          {"gamma", "finite"});
  bad.add("backward_grad_wrong_shape", [=](const at::Device& d) {
        sigmoid_focal_loss_mmcv_backward(at::ones({3, 2}, f32_on(d)), at::zeros({2, 3}, f32_on(d)), targets(d, {0, 1}),
                                         at::Tensor(), kMmcvNone); },
          {"grad", "[2, 3]", "[3, 2]"});
  return std::move(bad.cases);
}

// One element, logit 0, target 1: p = 1/2, ce = log 2, (1 - p_t)^2 = 1/4, alpha 0.25.
constexpr double kHalfLogitLoss = 0.25 * 0.25 * 0.69314718055994530942;

void check_valid_value(const char* op, const at::Tensor& got, double expected) {
  const double value = got.cpu().to(at::kDouble).reshape({-1})[0].item<double>();
  TORCH_CHECK(std::abs(value - expected) < 1e-6, op, ": a valid call after the bad one returned ", value, ", expected ",
              expected);
}

// Benchmarks (docs/benchmarks.md): RetinaNet's classification loss (OPS.md): 240,000 anchors x 80 classes
// (the shape) and 2 images x 201,600 anchors x 80 classes at 800x1344, logits around the prior
// 0.01, about one positive per 10,000 elements; reductions 'sum' (what RetinaNet uses) and 'none'.
std::vector<harness::BenchCase> focal_benchmarks() {
  struct Shape {
    const char* name;
    std::vector<std::int64_t> dims;
    const char* text;
  };
  const Shape shapes[] = {
      {"anchors_240000x80", {240000, 80}, "inputs[240000,80] targets[240000,80]"},
      {"retinanet_2x201600x80", {2, 201600, 80}, "inputs[2,201600,80] targets[2,201600,80]"},
  };
  std::vector<harness::BenchCase> out;
  std::uint64_t seed = 9701;
  for (const Shape& s : shapes) {
    for (const R reduction : {R::kSum, R::kNone}) {
      const SigmoidFocalLossParams params{FocalLossForm::kTorchvision, 0.25, 2.0, reduction};
      const std::string red = reduction == R::kSum ? "sum" : "none";
      const std::vector<std::int64_t> dims = s.dims;
      const std::uint64_t case_seed = seed++;
      auto make = [=](DType dtype) {
        at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(case_seed);
        const at::Tensor x = harness::bench_to_cuda(at::randn(dims, gen, f64()) + kPriorLogit, dtype);
        const at::Tensor t = harness::bench_to_cuda((at::rand(dims, gen, f64()) < 1e-4).to(at::kDouble), dtype);
        const at::Tensor loss = sigmoid_focal_loss_forward(x, t, params);
        const at::Tensor grad = at::ones_like(loss);
        harness::BenchInstance inst;
        inst.forward = [x, t, params] { (void)sigmoid_focal_loss_forward(x, t, params); };
        inst.backward = [grad, x, t, params] { (void)sigmoid_focal_loss_backward(grad, x, t, params); };
        inst.bytes_forward = kit::bench_bytes({x, t, loss});
        inst.bytes_backward = kit::bench_bytes({grad, x, t, x});  // t and grad_inputs are x's size
        return inst;
      };
      out.push_back(kit::bench_case(std::string(s.name) + "_" + red, std::string(s.text) + " reduction " + red,
                                    reduction == R::kSum
                                        ? "fwd: inputs + targets + the 0-d loss; bwd: grad (0-d) + inputs + targets + grad_inputs"
                                        : "fwd: inputs + targets + loss; bwd: grad + inputs + targets + grad_inputs",
                                    make));
    }
  }
  return out;
}

// The mmcv form on the same shapes: [240,000, 80] and [2 x 201,600, 80] logits, int64 targets with about 99 %
// background rows (C = 80) and the rest uniform over the classes, per-class weights; reduction 'sum'.
std::vector<harness::BenchCase> mmcv_benchmarks() {
  struct Shape {
    const char* name;
    std::int64_t rows;
  };
  const Shape shapes[] = {{"anchors_240000x80", 240000}, {"retinanet_2x201600x80", 2 * 201600}};
  std::vector<harness::BenchCase> out;
  std::uint64_t seed = 9801;
  for (const Shape& s : shapes) {
    const SigmoidFocalLossParams params{FocalLossForm::kMmcv, 0.25, 2.0, R::kSum};
    const std::int64_t rows = s.rows, classes = 80;
    const std::uint64_t case_seed = seed++;
    auto make = [=](DType dtype) {
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(case_seed);
      const at::Tensor x = harness::bench_to_cuda(at::randn({rows, classes}, gen, f64()) + kPriorLogit, dtype);
      const at::Tensor cls = at::randint(0, classes, {rows}, gen, at::TensorOptions().dtype(at::kLong));
      const at::Tensor target =
          at::where(at::rand({rows}, gen, f64()) < 0.99, at::full({rows}, classes, cls.options()), cls).cuda();
      const at::Tensor w = harness::bench_to_cuda(at::rand({classes}, gen, f64()) + 0.5, dtype);
      const at::Tensor loss = sigmoid_focal_loss_mmcv_forward(x, target, w, params);
      const at::Tensor grad = at::ones_like(loss);
      harness::BenchInstance inst;
      inst.forward = [x, target, w, params] { (void)sigmoid_focal_loss_mmcv_forward(x, target, w, params); };
      inst.backward = [grad, x, target, w, params] {
        (void)sigmoid_focal_loss_mmcv_backward(grad, x, target, w, params);
      };
      inst.bytes_forward = kit::bench_bytes({x, target, w, loss});
      inst.bytes_backward = kit::bench_bytes({grad, x, target, w, x});  // grad_input is x's size
      return inst;
    };
    out.push_back(kit::bench_case(std::string(s.name) + "_weighted_sum",
                                  "input[" + std::to_string(rows) + ",80] target[" + std::to_string(rows) +
                                      "] weight[80] reduction sum",
                                  "fwd: input + target + weight + the 0-d loss; bwd: grad (0-d) + input + target + weight + "
                                  "grad_input",
                                  make));
  }
  return out;
}

harness::Determinism focal_determinism() {
  harness::Determinism det;
  det.forward_cpu = det.forward_cuda = det.backward_cpu = det.backward_cuda = true;
  det.note =
      "no atomics on values: 'none' and the backward write each element from one thread; 'mean' / 'sum' sum fixed "
      "chunks of 2048 elements (a fixed tree on CUDA, in order on the CPU) in fp32 / fp64 and then the chunk sums in "
      "a fixed order, independent of the grid, the device and the CPU thread count (CPU and CUDA orders differ)";
  return det;
}

OpSpec sigmoid_focal_loss_spec() {
  OpSpec spec = kit::op_spec("sigmoid_focal_loss", focal_cases(), focal_bad_inputs());
  spec.valid_call = [](const at::Device& d) {
    const SigmoidFocalLossParams mean{FocalLossForm::kTorchvision, 0.25, 2.0, R::kMean};
    check_valid_value("sigmoid_focal_loss",
                      sigmoid_focal_loss_forward(at::zeros({1}, f32_on(d)), at::ones({1}, f32_on(d)), mean),
                      kHalfLogitLoss);
  };
  spec.determinism = focal_determinism();
  spec.benchmarks = focal_benchmarks();
  return spec;
}

OpSpec sigmoid_focal_loss_mmcv_spec() {
  OpSpec spec = kit::op_spec("sigmoid_focal_loss_mmcv", mmcv_cases(), mmcv_bad_inputs());
  spec.valid_call = [](const at::Device& d) {
    check_valid_value("sigmoid_focal_loss_mmcv",
                      sigmoid_focal_loss_mmcv_forward(at::zeros({1, 1}, f32_on(d)), at::zeros({1}, i64_on(d)),
                                                      at::Tensor(), kMmcvMean),
                      kHalfLogitLoss);
  };
  spec.determinism = focal_determinism();
  spec.benchmarks = mmcv_benchmarks();
  return spec;
}

DETOPS_REGISTER_OP_SPEC(sigmoid_focal_loss_spec);
DETOPS_REGISTER_OP_SPEC(sigmoid_focal_loss_mmcv_spec);

}  // namespace
}  // namespace detops
