// The softmax focal loss op spec (mmcv's form: [N, C] logits, int64 class targets, negative targets ignored,
// per-class weights). Seeded cases (the half-precision regression cases among them: logits of |x| = 1e4, where
// mmcv's fp16 softmax rounds p_t to 0 and its loss becomes inf; sums over thousands of rows that a
// half-precision accumulator gets wrong), bad inputs, determinism, tolerances and the detection benchmark
// shapes (COCO's 81 and LVIS's 1204 classes).
#include "kit/spec_prelude.h"

#include "detops/harness/checks.h"
#include "detops/reference/softmax_focal_loss_reference.h"
#include "kit/class_target_cases.h"
#include "kit/feature_cases.h"
#include "softmax_focal_loss/softmax_focal_loss_torch.h"

namespace detops {
namespace {

using R = SoftmaxFocalLossReduction;

enum class Logits {
  kNormal,  // N(0, 2^2)
  kSmall,   // N(0, 0.1^2): p close to 1 / C
  kLarge,   // uniform in [-30, 30]: p_t from about 1 down to e^-60
  kHuge,    // each of -1e4, -5e3, 0, 5e3, 1e4 (exact in fp16): p_t rounds to 0 or 1 in every dtype
  kTied,    // one value per row: p = 1 / C exactly
  kNaN,     // N(0, 2^2) with a NaN in every fifth row
};

enum class Targets {
  kUniform,  // uniform over [0, C)
  kArgmax,   // the row's largest logit: p_t >= 1 / C (close to 1 for large logits: q = 1 - p_t tiny)
  kArgmin,   // the row's smallest logit: p_t tiny for large logits
  kEdges,    // class 0 in rows 0, 3, 6, ..., class C - 1 in rows 1, 4, 7, ..., uniform in the others
};

struct SoftmaxFocalCaseConfig {
  std::int64_t n = 12, classes = 5;
  double gamma = 2.0, alpha = 0.25;
  R reduction = R::kMean;
  bool weighted = false;
  double ignored = 0.0;  // fraction of rows whose target is negative (-1, or -1 - k for every third such row)
  Logits logits = Logits::kNormal;
  Targets targets = Targets::kUniform;
  bool noncontiguous = false;
  bool stride0_grad = false;
  bool offset_view = false;  // the op sees the logits one element into a larger buffer: not 16-byte aligned
  const char* gradcheck_skip = nullptr;  // why finite differences are left out (the grid-streaming cases)
};

at::Tensor make_logits(Logits kind, at::Generator& gen, std::int64_t n, std::int64_t c) {
  switch (kind) {
    case Logits::kNormal: return at::randn({n, c}, gen, f64()) * 2;
    case Logits::kSmall: return at::randn({n, c}, gen, f64()) * 0.1;
    case Logits::kLarge: return at::rand({n, c}, gen, f64()) * 60 - 30;
    case Logits::kHuge: return (at::randint(0, 5, {n, c}, gen, f64()) - 2) * 5e3;
    case Logits::kTied: return (at::randn({n, 1}, gen, f64()) * 3).expand({n, c}).contiguous();
    case Logits::kNaN: {
      at::Tensor x = at::randn({n, c}, gen, f64()) * 2;
      for (std::int64_t r = 0; r < n; r += 5) x[r][(r / 5) % c] = kNaN;
      return x;
    }
  }
  throw std::invalid_argument("make_logits: unknown kind");
}

at::Tensor make_target(const SoftmaxFocalCaseConfig& cfg, const at::Tensor& x, at::Generator& gen) {
  const at::TensorOptions i64 = at::TensorOptions().dtype(at::kLong);
  at::Tensor t;
  switch (cfg.targets) {
    case Targets::kUniform: t = at::randint(0, cfg.classes, {cfg.n}, gen, i64); break;
    case Targets::kArgmax: t = x.argmax(1); break;
    case Targets::kArgmin: t = x.argmin(1); break;
    case Targets::kEdges: {
      const at::Tensor rows = at::arange(cfg.n, i64) % 3;
      const at::Tensor uniform = at::randint(0, cfg.classes, {cfg.n}, gen, i64);
      t = at::where(rows == 0, at::zeros_like(rows), at::where(rows == 1, at::full_like(rows, cfg.classes - 1), uniform));
      break;
    }
  }
  const at::Tensor ignored = at::rand({cfg.n}, gen, f64()) < cfg.ignored;
  const at::Tensor negative = -1 - (at::arange(cfg.n, i64) % 3) * (at::arange(cfg.n, i64) % 7);  // -1 mostly
  return at::where(ignored, negative, t).contiguous();
}

// The op and reference sides (kit/class_target_cases.h).
const kit::ClassTargetLoss<SoftmaxFocalLossParams, reference::Vectord, reference::Vectord> kLoss{
    &softmax_focal_loss_forward, &softmax_focal_loss_backward, &reference::softmax_focal_loss_forward,
    &reference::softmax_focal_loss_backward};

// x's values in a contiguous view that starts one element into a buffer of x.numel() + 1 elements: the
// allocation's alignment is lost (the CUDA kernels' 16-byte copies of such logits start at a partial pack, and
// grad_input, a fresh allocation, no longer shares their alignment).
at::Tensor offset_view(const at::Tensor& x) {
  at::Tensor v = at::empty({x.numel() + 1}, x.options()).narrow(0, 1, x.numel()).view(x.sizes());
  v.copy_(x);
  return v;
}

CaseData make_case(const SoftmaxFocalCaseConfig& cfg, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor x = make_logits(cfg.logits, gen, cfg.n, cfg.classes);
  const at::Tensor target = make_target(cfg, x, gen);
  CaseData d = kit::class_target_loss_case(kLoss, SoftmaxFocalLossParams{cfg.gamma, cfg.alpha, cfg.reduction}, cfg, x,
                                           target, gen, cfg.logits == Logits::kNaN);
  if (cfg.gradcheck_skip != nullptr) d.gradcheck_skip_reason = cfg.gradcheck_skip;
  if (cfg.offset_view) {
    d.op_forward = [forward = d.op_forward](const Tensors& in) {
      Tensors v = in;
      v[0] = offset_view(in[0]);
      return forward(v);
    };
    d.op_backward = [backward = d.op_backward](const Tensors& in, const Tensors& grad) {
      Tensors v = in;
      v[0] = offset_view(in[0]);
      return backward(v, grad);
    };
  }
  return d;
}

std::vector<OpCase> softmax_focal_cases() {
  kit::CaseList<SoftmaxFocalCaseConfig> add(0x50F7'1000, make_case);
  kit::add_class_target_basic_cases(add);
  SoftmaxFocalCaseConfig c;
  c = {}; c.classes = 1; c.n = 30; add("one_class_mean_is_zero", c);  // p_t = 1: loss and gradient 0
  c = {}; c.classes = 1; c.n = 30; c.weighted = true; c.reduction = R::kNone; add("one_class_weighted_none", c);
  c = {}; c.classes = 2; c.n = 40; c.reduction = R::kNone; add("two_classes_none", c);
  c = {}; c.classes = 81; c.n = 64; add("coco_81_classes_mean", c);
  c = {}; c.classes = 81; c.n = 64; c.reduction = R::kNone; add("coco_81_classes_none", c);
  c = {}; c.classes = 81; c.n = 64; c.weighted = true; c.reduction = R::kSum; add("coco_81_classes_weighted_sum", c);
  c = {}; c.classes = 1204; c.n = 6; add("lvis_1204_classes_mean", c);
  c = {}; c.classes = 1204; c.n = 6; c.weighted = true; c.reduction = R::kNone; add("lvis_1204_classes_weighted_none", c);
  // kSoftmaxFocalBlockRowClasses (2048) classes or more: a block per row on CUDA.
  c = {}; c.classes = 2100; c.n = 4; c.reduction = R::kNone; add("block_row_2100_classes_none", c);
  c = {}; c.classes = 2100; c.n = 5; c.reduction = R::kSum; c.ignored = 0.3; add("block_row_2100_classes_sum", c);
  c = {}; c.classes = 4096; c.n = 3; c.weighted = true; c.logits = Logits::kLarge; add("block_row_4096_large_logits_weighted_mean", c);
  c = {}; c.classes = 2047; c.n = 3; c.reduction = R::kNone; add("warp_row_2047_classes_below_switch", c);
  c = {}; c.classes = 2048; c.n = 3; c.reduction = R::kNone; add("block_row_2048_classes_at_switch", c);
  // More rows than one pass of the grid covers (grid_for caps the grid at 32 blocks per SM: 8 rows per block for
  // 'none', one 64-row chunk per block for 'mean'), so the kernels' grid-stride loops wrap.
  c = {}; c.classes = 3; c.n = 40000; c.reduction = R::kNone; c.ignored = 0.1; add("rows_40000_grid_stride_none", c);
  c = {}; c.classes = 2; c.n = 300000; add("rows_300000_chunk_grid_stride_mean", c);
  c = {}; c.ignored = 0.3; c.n = 30; add("ignored_rows_mean", c);
  c = {}; c.ignored = 0.3; c.n = 30; c.weighted = true; c.reduction = R::kNone; add("ignored_rows_weighted_none", c);
  c = {}; c.ignored = 1.0; c.reduction = R::kSum; add("all_rows_ignored_sum", c);
  c = {}; c.ignored = 1.0; c.weighted = true; add("all_rows_ignored_weighted_mean", c);
  c = {}; c.gamma = 0; add("gamma_zero_is_scaled_cross_entropy", c);
  c = {}; c.gamma = 0.5; add("gamma_half", c);
  c = {}; c.gamma = 1; c.reduction = R::kNone; add("gamma_one_none", c);
  c = {}; c.gamma = 5; add("gamma_five", c);
  c = {}; c.gamma = 3; c.reduction = R::kSum; add("gamma_three_pow", c);
  c = {}; c.gamma = -0.5; c.reduction = R::kNone; add("gamma_negative", c);  // mmcv accepts it
  c = {}; c.alpha = 0; add("alpha_zero", c);
  c = {}; c.alpha = 1; add("alpha_one", c);
  c = {}; c.alpha = -0.5; c.reduction = R::kNone; add("alpha_negative_used_as_given", c);
  c = {}; c.alpha = 1.5; c.reduction = R::kSum; add("alpha_above_one_used_as_given", c);
  c = {}; c.classes = 16; c.logits = Logits::kLarge; c.reduction = R::kNone; add("large_logits_30_none", c);
  c = {}; c.classes = 16; c.logits = Logits::kLarge; c.reduction = R::kSum; add("large_logits_30_sum", c);
  c = {}; c.classes = 16; c.logits = Logits::kLarge; c.targets = Targets::kArgmax; c.reduction = R::kNone; add("large_logits_target_argmax_p_near_1", c);
  c = {}; c.classes = 16; c.logits = Logits::kLarge; c.targets = Targets::kArgmax; c.gamma = 0.5; c.reduction = R::kNone; add("large_logits_target_argmax_gamma_half", c);
  c = {}; c.classes = 16; c.logits = Logits::kLarge; c.targets = Targets::kArgmin; c.reduction = R::kNone; add("large_logits_target_argmin_p_near_0", c);
  c = {}; c.classes = 16; c.logits = Logits::kLarge; c.gamma = 0.5; c.weighted = true; add("large_logits_gamma_half_weighted", c);
  // |x| = 1e4 in half precision: mmcv's fp16 softmax gives p_t = 0 and an inf loss; the exact loss is alpha times
  // the logit gap (up to 2e4), finite in every dtype. 8 rows keep a 'sum' below fp16's 65504.
  c = {}; c.classes = 7; c.n = 8; c.logits = Logits::kHuge; c.reduction = R::kNone; add("huge_logits_1e4_none", c);
  c = {}; c.classes = 7; c.n = 8; c.logits = Logits::kHuge; c.reduction = R::kSum; add("huge_logits_1e4_sum", c);
  c = {}; c.classes = 7; c.n = 8; c.logits = Logits::kHuge; c.targets = Targets::kArgmin; c.reduction = R::kNone; add("huge_logits_1e4_target_argmin", c);
  c = {}; c.classes = 7; c.n = 8; c.logits = Logits::kHuge; c.targets = Targets::kArgmax; c.gamma = 0.5; c.reduction = R::kNone; add("huge_logits_1e4_target_argmax_gamma_half", c);
  c = {}; c.classes = 9; c.logits = Logits::kSmall; add("small_logits", c);
  c = {}; c.classes = 6; c.logits = Logits::kTied; c.reduction = R::kNone; add("tied_logits_p_is_one_over_c", c);
  // Long reductions: a half-precision accumulator stalls (fp16 adds nothing below half an ulp of the running sum;
  // bf16 much earlier), so these fail unless the row losses are summed in fp32.
  c = {}; c.classes = 10; c.n = 20000; add("mean_20000_rows_half_accumulation", c);
  // Rows whose loss is up to 0.25 * 2e4 (the target the smallest of logits in {0, +-5e3, +-1e4}): the mean fp16
  // holds, a chunk of 64 rows sums past 65504, so an fp16 accumulator fails however the sum is split (inf).
  c = {}; c.classes = 10; c.n = 4096; c.logits = Logits::kHuge; c.targets = Targets::kArgmin;
  add("mean_4096_rows_up_to_5000_fp16_overflow", c);
  c = {}; c.classes = 4; c.n = 12000; c.reduction = R::kSum; add("sum_12000_rows_half_accumulation", c);
  c = {}; c.n = 2 * 64 + 1; c.reduction = R::kSum; add("sum_chunk_edges_129_rows", c);
  c = {}; c.n = 2 * 64; c.weighted = true; add("mean_whole_chunks_128_rows", c);
  kit::add_class_target_layout_cases(add);
  c = {}; c.logits = Logits::kNaN; c.reduction = R::kNone; c.n = 20; add("nan_logits_propagate", c);
  c = {}; c.logits = Logits::kNaN; c.reduction = R::kSum; c.n = 20; add("nan_logits_sum", c);
  // Added after the cases above, so their seeds stay.
  // The CUDA tile kernels (fewer than 2048 classes; docs/ops/softmax_focal_loss.md, "Execution"): a block copies a
  // tile of R rows into shared memory and a group of L lanes reads each row, L, R and one or two buffers chosen from
  // C and the dtype. The C below take every plan on both sides of its switches (fp32 / fp16 and bf16 / fp64): L = 1,
  // a thread per row (19 in fp32, R = 256 in two buffers of 47 KB; 4 to 33 in half) and L = 2 (20 in fp32); L = 4
  // (8), 8 (16; 32 in half), 16 (32 to 129) and 32 (305 in fp32 and fp64, 757 in half); tiles of fewer than 64 rows,
  // several to a chunk (from 64 classes up); two buffers filling the 48 KB exactly (760 in fp32, 1520 in half) and one
  // buffer past that (761, 1521; 378 in fp64); fewer rows than warps (1521 in fp32; 757 and 1515 in fp64). Row counts
  // are not multiples of R, targets include classes 0 and C - 1, and a fifth of the rows are ignored.
  for (const std::int64_t classes :
       {4, 8, 16, 19, 20, 32, 33, 63, 64, 65, 127, 128, 129, 305, 377, 378, 757, 760, 761, 1515, 1520, 1521}) {
    c = {}; c.classes = classes; c.n = classes < 300 ? 77 : 13; c.targets = Targets::kEdges; c.ignored = 0.2;
    c.reduction = R::kNone; add("tile_" + std::to_string(classes) + "_classes_none", c);
  }
  // 'mean' / 'sum' over tiles of fewer than 64 rows (129 classes: 16 or 32; 305: 8 or 32; 763: 4 or 8), whose chunks
  // of 64 rows span several tiles, the last chunk partial.
  c = {}; c.classes = 129; c.n = 200; c.reduction = R::kSum; c.targets = Targets::kEdges; c.ignored = 0.2;
  add("tile_129_classes_sum", c);
  c = {}; c.classes = 305; c.n = 150; c.weighted = true; c.ignored = 0.2; add("tile_305_classes_weighted_mean", c);
  c = {}; c.classes = 763; c.n = 70; c.reduction = R::kSum; c.targets = Targets::kEdges; add("tile_763_classes_sum", c);
  // More tiles than a grid (as many blocks as fit on the device at once) covers, so blocks stream several tiles,
  // each copied while the block works on the one before: 300,000 rows of 5 classes are 1172 tiles of 256 rows in
  // every dtype (more than 8 blocks of 256 threads on each of 132 SMs), 60,000 of 81 are 938 tiles of 64 rows in
  // fp32 (5 blocks per SM fit: 42.5 KB of shared memory each) and 1875 of 32 in fp64.
  // Their gradients are compared with the reference's; finite differences (two forwards of the whole input per
  // sampled logit, a minute of CPU time) are left out.
  const char* streaming = "grid-streaming case: finite differences at 96 of its 1.5M / 4.9M logits check nothing "
                          "the small cases do not; its gradient is compared with the reference's";
  c = {}; c.classes = 5; c.n = 300000; c.reduction = R::kNone; c.targets = Targets::kEdges; c.ignored = 0.1;
  c.gradcheck_skip = streaming; add("tiles_stream_5_classes_rows_300000_none", c);
  c = {}; c.classes = 81; c.n = 60000; c.reduction = R::kNone; c.ignored = 0.1; c.gradcheck_skip = streaming;
  add("tiles_stream_81_classes_rows_60000_none", c);
  // Logits at an odd element offset (not 16-byte aligned): the first tile's copy starts mid-pack and the backward
  // stores element by element (grad_input keeps the allocator's alignment).
  c = {}; c.classes = 81; c.n = 100; c.offset_view = true; c.reduction = R::kNone; c.targets = Targets::kEdges;
  c.ignored = 0.2; add("offset_view_input_81_classes_none", c);
  c = {}; c.classes = 7; c.n = 300; c.offset_view = true; c.weighted = true;
  add("offset_view_input_7_classes_weighted_mean", c);
  c = {}; c.logits = Logits::kNaN; c.reduction = R::kNone; c.n = 100; c.classes = 81;
  add("nan_logits_81_classes_none", c);
  return std::move(add.cases);
}

// ---------------------------------------------------------------------------------------------------
// 64-bit indices (CUDA): logits [26,512,400, 81], 2,147,504,400 elements (the last 256 rows past 2^31), COCO's 81
// classes (the tile kernels). Row n holds (((7 (n mod 23) + 3 c) mod 23) - 11) / 2 (exact in every dtype), its target
// is 13 n mod 81 and every ninth row is ignored, so the rows repeat every 1863 rows. The fp64 reference on the
// compared rows (the first 64, the 64 around element 2^31, the last 64) gives their losses and, with an upstream
// gradient of 1 + (n mod 5) / 4, their gradients; on one period, the expected 'mean'. fp64 is left out (34 GB of logits
// and gradient); the index arithmetic does not depend on the dtype.
harness::CheckResult check_large_index(DType dtype, bool backward) {
  harness::CheckResult r;
  constexpr std::int64_t kClasses = 81, kRows = 26512400, kPeriod = 1863;
  const at::ScalarType st = harness::scalar_type_of(dtype);
  const at::Tensor p = at::arange(23, f64()).view({23, 1}), cls = at::arange(kClasses, f64()).view({1, kClasses});
  const at::Tensor table = ((p * 7 + cls * 3).remainder(23) - 11) / 2;
  const at::Tensor n = at::arange(kRows, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
  const at::Tensor x = table.to(st).to(at::kCUDA).index_select(0, n.remainder(23));
  const at::Tensor target = at::where(n.remainder(9) == 4, at::full_like(n, -1), (n * 13).remainder(kClasses));
  std::vector<std::int64_t> picked;
  const std::int64_t mid = (std::int64_t{1} << 31) / kClasses;
  for (std::int64_t i = 0; i < 64; ++i) {
    for (const std::int64_t first : {std::int64_t{0}, mid - 32, kRows - 64}) picked.push_back(first + i);
  }
  const at::Tensor rows = at::tensor(picked, at::TensorOptions().dtype(at::kLong)).to(at::kCUDA);
  const reference::ClassTargetInputs in =
      kit::class_target_inputs({x.index_select(0, rows).cpu(), target.index_select(0, rows).cpu()});
  const harness::Tolerance tol = harness::default_tolerance(dtype);
  const SoftmaxFocalLossParams none{2.0, 0.25, R::kNone}, mean{2.0, 0.25, R::kMean};
  r.properties["input_elements"] = std::to_string(kRows * kClasses);
  if (!backward) {
    const at::Tensor loss = softmax_focal_loss_forward(x, target, at::Tensor(), none);
    const at::Tensor expected = kit::from_vector(reference::softmax_focal_loss_forward(none, in));
    r.comparisons.push_back(harness::compare_tensors(loss.index_select(0, rows).cpu(), expected, tol));
    const reference::Vectord period = reference::softmax_focal_loss_forward(
        none, kit::class_target_inputs({x.narrow(0, 0, kPeriod).cpu(), target.narrow(0, 0, kPeriod).cpu()}));
    double sum = 0;
    for (std::int64_t i = 0; i < kPeriod; ++i) {
      sum += period[i] * static_cast<double>(kRows / kPeriod + (i < kRows % kPeriod ? 1 : 0));  // row i's repeats
    }
    const at::Tensor got = softmax_focal_loss_forward(x, target, at::Tensor(), mean);
    r.comparisons.push_back(harness::compare_tensors(got.cpu().reshape({1}), at::full({1}, sum / kRows, f64()), tol));
  } else {
    const at::Tensor grad = (n.remainder(5).to(at::kDouble) / 4 + 1).to(st);
    const at::Tensor gx = softmax_focal_loss_backward(grad, x, target, at::Tensor(), none);
    const reference::Matrixd expected =
        reference::softmax_focal_loss_backward(none, in, kit::to_vector(grad.index_select(0, rows).cpu()));
    r.comparisons.push_back(harness::compare_tensors(gx.index_select(0, rows).cpu(), kit::from_matrix(expected), tol));
  }
  harness::summarize(r);
  return r;
}

// ---------------------------------------------------------------------------------------------------
// Bad inputs and the valid call.

using kit::f32_on;
using kit::i64_on;
using kit::other_device;

const SoftmaxFocalLossParams kMean{2.0, 0.25, R::kMean};
const SoftmaxFocalLossParams kNone{2.0, 0.25, R::kNone};

std::vector<BadInputCase> softmax_focal_bad_inputs() {
  kit::BadInputs bad;
  const auto targets = &kit::class_indices;
  auto x23 = [](const at::Device& d) { return at::zeros({2, 3}, f32_on(d)); };
  bad.add("input_one_dimensional", [=](const at::Device& d) {
        softmax_focal_loss_forward(at::zeros({6}, f32_on(d)), targets(d, {0, 1}), at::Tensor(), kMean); },
          {"input", "[N, C]", "[6]"});
  bad.add("input_zero_classes", [=](const at::Device& d) {
        softmax_focal_loss_forward(at::zeros({2, 0}, f32_on(d)), targets(d, {0, 0}), at::Tensor(), kMean); },
          {"input", "at least one class", "[2, 0]"});
  bad.add("integer_input", [=](const at::Device& d) {
        softmax_focal_loss_forward(at::zeros({2, 3}, i64_on(d)), targets(d, {0, 1}), at::Tensor(), kMean); },
          {"input", "float64, float32, float16 or bfloat16"});
  bad.add("target_float", [=](const at::Device& d) {
        softmax_focal_loss_forward(x23(d), at::zeros({2}, f32_on(d)), at::Tensor(), kMean); },
          {"target", "int64", "Float"});
  bad.add("target_wrong_length", [=](const at::Device& d) {
        softmax_focal_loss_forward(x23(d), targets(d, {0, 1, 2}), at::Tensor(), kMean); },
          {"target", "shape [2]", "[3]"});
  bad.add("target_two_dimensional", [=](const at::Device& d) {
        softmax_focal_loss_forward(x23(d), targets(d, {0, 1}).view({2, 1}), at::Tensor(), kMean); },
          {"target", "shape [2]", "[2, 1]"});
  bad.add("target_equal_to_classes", [=](const at::Device& d) {
        softmax_focal_loss_forward(x23(d), targets(d, {0, 3}), at::Tensor(), kMean); },
          {"target[1] = 3", "class index", "[0, 3)"});
  bad.add("target_far_above_classes_none", [=](const at::Device& d) {
        softmax_focal_loss_forward(x23(d), targets(d, {100, -1}), at::Tensor(), kNone); },
          {"target[0] = 100", "[0, 3)"});
  bad.add("backward_target_out_of_range", [=](const at::Device& d) {
        softmax_focal_loss_backward(at::ones({}, f32_on(d)), x23(d), targets(d, {0, 7}), at::Tensor(), kMean); },
          {"target[1] = 7", "[0, 3)"});
  bad.add("weight_wrong_length", [=](const at::Device& d) {
        softmax_focal_loss_forward(x23(d), targets(d, {0, 1}), at::ones({4}, f32_on(d)), kMean); },
          {"weight", "shape [3]", "[4]"});
  bad.add("weight_two_dimensional", [=](const at::Device& d) {
        softmax_focal_loss_forward(x23(d), targets(d, {0, 1}), at::ones({1, 3}, f32_on(d)), kMean); },
          {"weight", "shape [3]", "[1, 3]"});
  bad.add("weight_dtype_mismatch", [=](const at::Device& d) {
        softmax_focal_loss_forward(x23(d), targets(d, {0, 1}), at::ones({3}, f32_on(d).dtype(at::kDouble)), kMean); },
          {"weight dtype", "Double", "input dtype"});
  bad.add("weight_on_other_device", [=](const at::Device& d) {
        softmax_focal_loss_forward(x23(d), targets(d, {0, 1}), other_device(at::ones({3}, f32_on(d)), d), kMean); },
          {"input and weight", "same device"});
  bad.add("target_on_other_device", [=](const at::Device& d) {
        softmax_focal_loss_forward(x23(d), other_device(targets(d, {0, 1}), d), at::Tensor(), kMean); },
          {"input and target", "same device"});
  bad.add("invalid_reduction", [](const at::Device&) { make_softmax_focal_loss_params(2, 0.25, "batchmean"); },
          {"Invalid", "reduction", "'batchmean'"});
  bad.add("nan_gamma", [](const at::Device&) { make_softmax_focal_loss_params(kNaN, 0.25, "mean"); },
          {"gamma", "finite"});
  bad.add("infinite_alpha", [](const at::Device&) { make_softmax_focal_loss_params(2, kInf, "sum"); },
          {"alpha", "finite"});
  bad.add("backward_grad_wrong_shape", [=](const at::Device& d) {
        softmax_focal_loss_backward(at::ones({3}, f32_on(d)), x23(d), targets(d, {0, 1}), at::Tensor(), kNone); },
          {"grad", "[2]", "[3]"});
  bad.add("backward_grad_not_scalar_for_mean", [=](const at::Device& d) {
        softmax_focal_loss_backward(at::ones({2}, f32_on(d)), x23(d), targets(d, {0, 1}), at::Tensor(), kMean); },
          {"grad", "0-d", "'mean'"});
  bad.add("backward_grad_dtype_mismatch", [=](const at::Device& d) {
        softmax_focal_loss_backward(at::ones({2}, f32_on(d).dtype(at::kDouble)), x23(d), targets(d, {0, 1}),
                                    at::Tensor(), kNone); },
          {"grad dtype", "Double", "Float"});
  return std::move(bad.cases);
}

// One row of two equal logits, target 0: p_t = 1/2, loss = 0.25 * (1/2)^2 * log 2.
constexpr double kTwoTiedLogitsLoss = 0.25 * 0.25 * 0.69314718055994530942;

// Benchmarks (docs/benchmarks.md): the classification loss of a two-stage detector's box head or of a dense
// head over many anchors, 100,000 rows of N(0, 1) logits, 75 % of them background (class C - 1) and the rest
// uniform over the other classes; COCO's 81 classes (80 + background) and LVIS's 1204 (1203 + background);
// reduction 'mean' (mmcv's default); every dtype (the registry requires it), fp32 and fp16 the ones to watch.
std::vector<harness::BenchCase> softmax_focal_benchmarks() {
  std::vector<harness::BenchCase> out;
  std::uint64_t seed = 9901;
  for (const std::int64_t classes : {std::int64_t{81}, std::int64_t{1204}}) {
    const std::int64_t rows = 100000;
    const SoftmaxFocalLossParams params{2.0, 0.25, R::kMean};
    const std::uint64_t case_seed = seed++;
    auto make = [=](DType dtype) {
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(case_seed);
      const at::Tensor x = harness::bench_to_cuda(at::randn({rows, classes}, gen, f64()), dtype);
      const at::Tensor cls = at::randint(0, classes - 1, {rows}, gen, at::TensorOptions().dtype(at::kLong));
      const at::Tensor target =
          at::where(at::rand({rows}, gen, f64()) < 0.75, at::full({rows}, classes - 1, cls.options()), cls).cuda();
      const at::Tensor loss = softmax_focal_loss_forward(x, target, at::Tensor(), params);
      const at::Tensor grad = at::ones_like(loss);
      harness::BenchInstance inst;
      inst.forward = [x, target, params] { (void)softmax_focal_loss_forward(x, target, at::Tensor(), params); };
      inst.backward = [grad, x, target, params] {
        (void)softmax_focal_loss_backward(grad, x, target, at::Tensor(), params);
      };
      inst.bytes_forward = kit::bench_bytes({x, target, loss});
      inst.bytes_backward = kit::bench_bytes({grad, x, target, x});  // grad_input is x's size
      return inst;
    };
    out.push_back(kit::bench_case("rows_100000x" + std::to_string(classes) + "_mean",
                                  "input[100000," + std::to_string(classes) + "] target[100000] reduction mean",
                                  "fwd: input + target + the 0-d loss; bwd: grad (0-d) + input + target + grad_input",
                                  make));
  }
  return out;
}

OpSpec softmax_focal_loss_spec() {
  OpSpec spec = kit::op_spec("softmax_focal_loss", softmax_focal_cases(), softmax_focal_bad_inputs());
  spec.valid_call = [](const at::Device& d) {
    const at::Tensor got = softmax_focal_loss_forward(at::zeros({1, 2}, f32_on(d)), at::zeros({1}, i64_on(d)),
                                                      at::Tensor(), kMean);
    const double value = got.cpu().to(at::kDouble).item<double>();
    TORCH_CHECK(std::abs(value - kTwoTiedLogitsLoss) < 1e-6, "softmax_focal_loss: a valid call after the bad one returned ",
                value, ", expected ", kTwoTiedLogitsLoss);
  };
  spec.determinism.forward_cpu = spec.determinism.forward_cuda = true;
  spec.determinism.backward_cpu = spec.determinism.backward_cuda = true;
  spec.determinism.note =
      "no atomics on values: each row's loss and gradient are written by one thread (a group of lanes or a block "
      "reduces the row's softmax with a fixed butterfly); 'mean' / 'sum' sum fixed chunks of 64 rows in fp32 / fp64 with a fixed "
      "tree (in order on the CPU), then the chunk sums in a fixed order, independent of the grid, the device and the "
      "CPU thread count (CPU and CUDA orders differ)";
  spec.benchmarks = softmax_focal_benchmarks();
  for (const DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (const bool backward : {false, true}) {
      spec.extra_checks.push_back({backward ? "large_index_backward" : "large_index_forward", dtype_name(dtype),
                                   Device::kCuda, [dtype, backward] { return check_large_index(dtype, backward); }});
    }
  }
  return spec;
}

DETOPS_REGISTER_OP_SPEC(softmax_focal_loss_spec);

}  // namespace
}  // namespace detops
