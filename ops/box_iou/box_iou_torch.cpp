// The box IoU family as torch ops: torch.ops.detops.box_iou / generalized_box_iou / distance_box_iou /
// complete_box_iou (pairwise) and iou_loss / generalized_box_iou_loss / distance_box_iou_loss /
// complete_box_iou_loss (element-wise), each with a backward op (_box_iou_pairwise_backward,
// _box_iou_loss_backward) for both box tensors. Argument names, order and defaults follow torchvision.ops
// so the ops can replace it unchanged. Declared with the op kit (docs/op-kit.md).
#include "box_iou/box_iou_torch.h"

#include <ATen/ExpandUtils.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "common/torch_op_kit.h"
#include "common/torch_utils.h"

namespace detops {
namespace {

using Sizes = std::vector<std::int64_t>;

// The dtype the kernels run in for a pair of box tensors, as torchvision computes: the promoted dtype of
// the two; integer (and bool) boxes in float32, which is also torchvision's output dtype for them.
// float16 / bfloat16 stay as they are (the kernels compute them in float32). Complex boxes, and bool boxes
// in box_iou and generalized_box_iou (torchvision cannot subtract bools there), raise RuntimeError.
at::ScalarType compute_type(const char* op, const at::Tensor& boxes1, const at::Tensor& boxes2, bool allow_bool) {
  const at::ScalarType t = at::promote_types(boxes1.scalar_type(), boxes2.scalar_type());
  TORCH_CHECK(!at::isComplexType(t), op, ": boxes1 and boxes2 must be real tensors; got ", boxes1.scalar_type(),
              " and ", boxes2.scalar_type());
  TORCH_CHECK(allow_bool || t != at::kBool, op, ": boxes1 and boxes2 cannot both be bool tensors");
  if (t == at::kDouble || t == at::kFloat || t == at::kHalf || t == at::kBFloat16) return t;
  TORCH_CHECK(at::isIntegralType(t, /*includeBool=*/true), op, ": boxes of dtype ", t, " are not supported");
  return at::kFloat;
}

// The pairwise ops' compute dtype: bool boxes only in distance_box_iou and complete_box_iou (torchvision upcasts them).
at::ScalarType pairwise_type(const char* op, const at::Tensor& boxes1, const at::Tensor& boxes2, BoxIouVariant v) {
  return compute_type(op, boxes1, boxes2, v == BoxIouVariant::kDIoU || v == BoxIouVariant::kCIoU);
}

// The dtype of every output: float64 for float64 computation, float32 otherwise (torchvision upcasts
// half-precision and integer boxes and returns float32).
at::ScalarType output_type(at::ScalarType compute) { return accumulation_scalar_type(compute); }

at::Tensor as_type(const at::Tensor& t, at::ScalarType type) { return t.scalar_type() == type ? t : t.to(type); }

std::int64_t product(at::IntArrayRef sizes) {
  std::int64_t p = 1;
  for (const std::int64_t s : sizes) p *= s;
  return p;
}

// The broadcast of two leading (batch) shapes, by torch's rules; RuntimeError when they do not broadcast.
Sizes broadcast_batch(const char* op, at::IntArrayRef a, at::IntArrayRef b) {
  const std::size_t nd = std::max(a.size(), b.size());
  Sizes out(nd);
  for (std::size_t i = 0; i < nd; ++i) {
    const std::int64_t da = i + a.size() < nd ? 1 : a[i + a.size() - nd];
    const std::int64_t db = i + b.size() < nd ? 1 : b[i + b.size() - nd];
    TORCH_CHECK(da == db || da == 1 || db == 1, op, ": the leading (batch) dimensions of boxes1 ", shape_string(a),
                " and boxes2 ", shape_string(b), " must broadcast; got ", da, " and ", db, " at batch dimension ", i);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// The pairwise ops take boxes1 [..., N, 4] (or one box [4], as [1, 4]) and boxes2 [..., M, 4], leading
// dimensions broadcast, -> [..., N, M]. Error types as torchvision's: IndexError for a missing dimension
// or fewer than 4 coordinates, RuntimeError for more than 4 or batch dimensions that do not broadcast.
struct PairwisePlan {
  Sizes batch;  // the broadcast leading dimensions
  std::int64_t n = 0, m = 0;
  Sizes out_shape;
};

void check_coordinates(const char* op, const char* name, const char* shape, const at::Tensor& boxes,
                       bool index_error_only) {
  const std::int64_t last = boxes.size(-1);
  TORCH_CHECK_INDEX(last >= 4, op, ": ", name, " must be ", shape, " of (x1, y1, x2, y2); got shape ",
                    shape_string(boxes.sizes()));
  if (!index_error_only) {
    TORCH_CHECK(last == 4, op, ": ", name, " must be ", shape, " of (x1, y1, x2, y2); got shape ",
                shape_string(boxes.sizes()));
  }
}

PairwisePlan plan_pairwise(const char* op, const at::Tensor& boxes1, const at::Tensor& boxes2) {
  TORCH_CHECK_INDEX(boxes1.dim() >= 1, op, ": boxes1 must be [..., N, 4] (or one box [4]) of (x1, y1, x2, y2); got shape ",
                    shape_string(boxes1.sizes()));
  check_coordinates(op, "boxes1", "[..., N, 4] (or one box [4])", boxes1, true);
  TORCH_CHECK_INDEX(boxes2.dim() >= 2, op, ": boxes2 must be [..., M, 4] of (x1, y1, x2, y2); got shape ",
                    shape_string(boxes2.sizes()));
  check_coordinates(op, "boxes2", "[..., M, 4]", boxes2, true);
  check_coordinates(op, "boxes1", "[..., N, 4] (or one box [4])", boxes1, false);
  check_coordinates(op, "boxes2", "[..., M, 4]", boxes2, false);
  PairwisePlan plan;
  const at::IntArrayRef s1 = boxes1.sizes(), s2 = boxes2.sizes();
  const at::IntArrayRef batch1 = boxes1.dim() == 1 ? at::IntArrayRef() : s1.slice(0, s1.size() - 2);
  plan.n = boxes1.dim() == 1 ? 1 : s1[s1.size() - 2];
  plan.m = s2[s2.size() - 2];
  plan.batch = broadcast_batch(op, batch1, s2.slice(0, s2.size() - 2));
  plan.out_shape = plan.batch;
  plan.out_shape.push_back(plan.n);
  plan.out_shape.push_back(plan.m);
  return plan;
}

// boxes as [B, rows, 4] contiguous in `type`, broadcast over the plan's batch dimensions.
at::Tensor batched_boxes(const at::Tensor& boxes, const Sizes& batch, std::int64_t rows, at::ScalarType type) {
  Sizes shape = batch;
  shape.push_back(rows);
  shape.push_back(4);
  const at::Tensor b = boxes.dim() == 1 ? boxes.view({1, 4}) : boxes;
  return as_type(b, type).expand(shape).contiguous().view({product(batch), rows, 4});
}

// The losses take boxes1 and boxes2 of any shape [..., 4] (one pair [4] included); boxes2 broadcasts to
// boxes1's shape (torchvision's masked assignment needs the result shaped like boxes1). Error types as
// torchvision's: IndexError for a 0-d tensor, ValueError for a last dimension other than 4 (its
// unpacking into x1, y1, x2, y2), RuntimeError for shapes that do not broadcast, IndexError for shapes
// that broadcast to something other than boxes1's shape.
struct LossPlan {
  Sizes loss_shape;  // boxes1's shape without the coordinates: the loss's shape for reduction 'none'
  std::int64_t n = 0;
};

LossPlan plan_loss(const char* op, const at::Tensor& boxes1, const at::Tensor& boxes2) {
  TORCH_CHECK_INDEX(boxes1.dim() >= 1 && boxes2.dim() >= 1, op,
                    ": boxes1 and boxes2 must be [..., 4] of (x1, y1, x2, y2); got shapes ", shape_string(boxes1.sizes()),
                    " and ", shape_string(boxes2.sizes()));
  TORCH_CHECK_VALUE(boxes1.size(-1) == 4, op, ": boxes1 must be [..., 4] of (x1, y1, x2, y2); got shape ",
                    shape_string(boxes1.sizes()));
  TORCH_CHECK_VALUE(boxes2.size(-1) == 4, op, ": boxes2 must be [..., 4] of (x1, y1, x2, y2); got shape ",
                    shape_string(boxes2.sizes()));
  const at::IntArrayRef lead1 = boxes1.sizes().slice(0, boxes1.dim() - 1);
  const at::IntArrayRef lead2 = boxes2.sizes().slice(0, boxes2.dim() - 1);
  const Sizes common = broadcast_batch(op, lead1, lead2);
  TORCH_CHECK_INDEX(at::IntArrayRef(common) == lead1, op, ": boxes2 ", shape_string(boxes2.sizes()),
                    " must broadcast to boxes1's shape ", shape_string(boxes1.sizes()),
                    " (the loss is element-wise, shaped like boxes1)");
  return {Sizes(lead1.begin(), lead1.end()), product(lead1)};
}

// boxes1 and boxes2 as [n, 4] contiguous in `type`, boxes2 broadcast to boxes1's shape.
std::pair<at::Tensor, at::Tensor> flat_pairs(const at::Tensor& boxes1, const at::Tensor& boxes2, std::int64_t n,
                                             at::ScalarType type) {
  return {as_type(boxes1, type).contiguous().view({n, 4}),
          as_type(boxes2, type).expand(boxes1.sizes()).contiguous().view({n, 4})};
}

// A box tensor's gradient: float boxes' own dtype, the compute dtype for the others.
at::ScalarType grad_type(const at::Tensor& boxes, at::ScalarType compute) {
  return at::isFloatingType(boxes.scalar_type()) ? boxes.scalar_type() : compute;
}

// `full` (a gradient of boxes expanded to the broadcast shape) summed back to boxes' shape, in its grad_type.
at::Tensor box_grad(const at::Tensor& full, const at::Tensor& boxes, at::ScalarType compute) {
  return as_type(full.sizes() == boxes.sizes() ? full : at::sum_to(full, boxes.sizes()), grad_type(boxes, compute));
}

DType dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return DType::kFloat64;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    default: return DType::kFloat32;
  }
}

at::Tensor loss_forward_impl(const at::Tensor& boxes1, const at::Tensor& boxes2, const at::Tensor& alpha_boxes1,
                             const at::Tensor& alpha_boxes2, const BoxIouLossParams& params) {
  const char* op = box_iou_loss_op_name(params.variant);
  const LossPlan plan = plan_loss(op, boxes1, boxes2);
  const at::ScalarType type = compute_type(op, boxes1, boxes2, true);
  check_same_device(op, "boxes1", boxes1, "boxes2", boxes2);
  const std::int64_t n = plan.n;
  const auto [b1, b2] = flat_pairs(boxes1, boxes2, n, type);
  const at::Tensor losses = at::empty(plan.loss_shape, boxes1.options().dtype(output_type(type)));
  BoxIouLossForwardArgs args{n, b1.data_ptr(), b2.data_ptr(), nullptr, nullptr, losses.data_ptr()};
  at::Tensor a1, a2;
  if (alpha_boxes1.defined()) {
    TORCH_CHECK_VALUE(alpha_boxes1.sizes() == boxes1.sizes() && alpha_boxes2.sizes() == boxes1.sizes(), op,
                      ": alpha_boxes1 and alpha_boxes2 must have boxes1's shape ", shape_string(boxes1.sizes()));
    check_same_device(op, "boxes1", boxes1, "alpha_boxes1", alpha_boxes1);
    check_same_device(op, "boxes1", boxes1, "alpha_boxes2", alpha_boxes2);
    a1 = as_type(alpha_boxes1, type).contiguous();
    a2 = as_type(alpha_boxes2, type).contiguous();
    args.alpha_boxes1 = a1.data_ptr();
    args.alpha_boxes2 = a2.data_ptr();
  }
  run_on_device(op, "boxes1", boxes1, [&](cudaStream_t stream) { launch_box_iou_loss_forward(params, args, dtype_of(type), stream); },
                [&] { run_box_iou_loss_forward_cpu(params, args, dtype_of(type), aten_parallel_for()); });
  if (params.reduction == LossReduction::kNone) return losses;
  at::Tensor total = losses.sum();  // an empty sum is 0, so the mean of no pairs is 0 (as torchvision)
  if (params.reduction == LossReduction::kMean && n > 0) total = total.div(static_cast<double>(n));
  return total;
}

}  // namespace

BoxIouVariant parse_box_iou_variant(const std::string& variant, const char* op) {
  if (variant == "iou") return BoxIouVariant::kIoU;
  if (variant == "giou") return BoxIouVariant::kGIoU;
  if (variant == "diou") return BoxIouVariant::kDIoU;
  if (variant == "ciou") return BoxIouVariant::kCIoU;
  TORCH_CHECK_VALUE(false, op, ": variant must be 'iou', 'giou', 'diou' or 'ciou'; got '", variant, "'");
}

const char* box_iou_variant_name(BoxIouVariant variant) {
  switch (variant) {
    case BoxIouVariant::kIoU: return "iou";
    case BoxIouVariant::kGIoU: return "giou";
    case BoxIouVariant::kDIoU: return "diou";
    case BoxIouVariant::kCIoU: return "ciou";
  }
  TORCH_CHECK_VALUE(false, "box_iou: unknown variant code ", static_cast<int>(variant));
}

BoxIouLossParams make_box_iou_loss_params(BoxIouVariant variant, const std::string& reduction, double eps,
                                          bool defined_degenerate) {
  const char* op = box_iou_loss_op_name(variant);
  return BoxIouLossParams{variant, parse_reduction<LossReduction>(op, reduction), eps, defined_degenerate};
}

at::Tensor box_iou_pairwise(const at::Tensor& boxes1, const at::Tensor& boxes2, const BoxIouParams& params) {
  const char* op = box_iou_pairwise_op_name(params.variant);
  const PairwisePlan plan = plan_pairwise(op, boxes1, boxes2);
  const at::ScalarType type = pairwise_type(op, boxes1, boxes2, params.variant);
  check_same_device(op, "boxes1", boxes1, "boxes2", boxes2);
  at::Tensor out = at::empty(plan.out_shape, boxes1.options().dtype(output_type(type)));
  if (out.numel() == 0) return out;
  const at::Tensor b1 = batched_boxes(boxes1, plan.batch, plan.n, type);
  const at::Tensor b2 = batched_boxes(boxes2, plan.batch, plan.m, type);
  const BoxIouPairwiseArgs args{plan.n, plan.m, b1.data_ptr(), b2.data_ptr(), out.data_ptr(), product(plan.batch)};
  run_on_device(op, "boxes1", boxes1, [&](cudaStream_t stream) { launch_box_iou_pairwise(params, args, dtype_of(type), stream); },
                [&] { run_box_iou_pairwise_cpu(params, args, dtype_of(type), aten_parallel_for()); });
  return out;
}

std::tuple<at::Tensor, at::Tensor> box_iou_pairwise_backward(const at::Tensor& grad, const at::Tensor& boxes1,
                                                             const at::Tensor& boxes2, const BoxIouParams& params) {
  const char* op = box_iou_pairwise_op_name(params.variant);
  const PairwisePlan plan = plan_pairwise(op, boxes1, boxes2);
  const at::ScalarType type = pairwise_type(op, boxes1, boxes2, params.variant);
  check_same_device(op, "boxes1", boxes1, "boxes2", boxes2);
  check_same_device(op, "boxes1", boxes1, "grad", grad);
  TORCH_CHECK_TYPE(grad.scalar_type() == output_type(type), op, ": grad dtype (", grad.scalar_type(),
                   ") must be the output's dtype, ", output_type(type), " for ", boxes1.scalar_type(), " and ",
                   boxes2.scalar_type(), " boxes");
  TORCH_CHECK_VALUE(grad.sizes() == at::IntArrayRef(plan.out_shape), op, ": grad must have the output's shape ",
                    shape_string(plan.out_shape), "; got shape ", shape_string(grad.sizes()));
  const std::int64_t batch = product(plan.batch), n = plan.n, m = plan.m;
  // Every element is written when there are pairs; without pairs the gradients are 0.
  const auto alloc = [&](std::int64_t rows) {
    const at::TensorOptions o = boxes1.options().dtype(type);
    return batch * n * m > 0 ? at::empty({batch, rows, 4}, o) : at::zeros({batch, rows, 4}, o);
  };
  at::Tensor grad1 = alloc(n), grad2 = alloc(m);
  if (batch * n * m > 0) {
    const at::Tensor b1 = batched_boxes(boxes1, plan.batch, n, type), b2 = batched_boxes(boxes2, plan.batch, m, type);
    const at::Tensor g = grad.reshape({batch, n, m});  // a view where it can be (stride 0 included)
    const BoxIouPairwiseBackwardArgs args{n, m, batch, g.data_ptr(), {g.stride(0), g.stride(1), g.stride(2)},
                                          b1.data_ptr(), b2.data_ptr(), grad1.data_ptr(), grad2.data_ptr()};
    run_on_device(op, "boxes1", boxes1,
                  [&](cudaStream_t stream) { launch_box_iou_pairwise_backward(params, args, dtype_of(type), stream); },
                  [&] { run_box_iou_pairwise_backward_cpu(params, args, dtype_of(type), aten_parallel_for()); });
  }
  const auto full = [&](const at::Tensor& g, std::int64_t rows) {
    Sizes shape = plan.batch;
    shape.push_back(rows);
    shape.push_back(4);
    return g.view(shape);
  };
  return {box_grad(full(grad1, n), boxes1, type), box_grad(full(grad2, m), boxes2, type)};
}

at::Tensor box_iou_loss_forward(const at::Tensor& boxes1, const at::Tensor& boxes2, const BoxIouLossParams& params) {
  return loss_forward_impl(boxes1, boxes2, at::Tensor(), at::Tensor(), params);
}

at::Tensor complete_box_iou_loss_alpha_at(const at::Tensor& boxes1, const at::Tensor& boxes2,
                                          const at::Tensor& alpha_boxes1, const at::Tensor& alpha_boxes2,
                                          const BoxIouLossParams& params) {
  TORCH_CHECK_VALUE(params.variant == BoxIouVariant::kCIoU,
                    "complete_box_iou_loss_alpha_at: only the CIoU loss has an alpha; got variant ",
                    box_iou_variant_name(params.variant));
  TORCH_CHECK_VALUE(alpha_boxes1.defined() && alpha_boxes2.defined(),
                    "complete_box_iou_loss_alpha_at: alpha_boxes1 and alpha_boxes2 are required");
  return loss_forward_impl(boxes1, boxes2, alpha_boxes1, alpha_boxes2, params);
}

std::tuple<at::Tensor, at::Tensor> box_iou_loss_backward(const at::Tensor& grad, const at::Tensor& boxes1,
                                                         const at::Tensor& boxes2, const BoxIouLossParams& params) {
  const char* op = box_iou_loss_op_name(params.variant);
  const LossPlan plan = plan_loss(op, boxes1, boxes2);
  const at::ScalarType type = compute_type(op, boxes1, boxes2, true);
  check_same_device(op, "boxes1", boxes1, "boxes2", boxes2);
  check_same_device(op, "boxes1", boxes1, "grad", grad);
  const at::ScalarType loss_type = output_type(type);
  TORCH_CHECK_TYPE(grad.scalar_type() == loss_type, op, ": grad dtype (", grad.scalar_type(), ") must be the loss's dtype, ",
                   loss_type, " for ", boxes1.scalar_type(), " and ", boxes2.scalar_type(), " boxes");
  const std::int64_t n = plan.n;
  const bool reduce = params.reduction != LossReduction::kNone;
  check_loss_grad(op, grad, plan.loss_shape, reduce, reduction_name(params.reduction));
  at::Tensor grad1 = at::empty({n, 4}, boxes1.options().dtype(type)), grad2 = at::empty({n, 4}, boxes1.options().dtype(type));
  if (n > 0) {
    const auto [b1, b2] = flat_pairs(boxes1, boxes2, n, type);
    const at::Tensor g = reduce ? grad : grad.reshape({n});  // a view where it can be (stride 0 included)
    const double scale = params.reduction == LossReduction::kMean ? 1.0 / static_cast<double>(n) : 1.0;
    const BoxIouLossBackwardArgs args{n,           {g.data_ptr(), reduce ? 0 : g.stride(0), scale},
                                      b1.data_ptr(), b2.data_ptr(), grad1.data_ptr(), grad2.data_ptr()};
    run_on_device(op, "boxes1", boxes1,
                  [&](cudaStream_t stream) { launch_box_iou_loss_backward(params, args, dtype_of(type), stream); },
                  [&] { run_box_iou_loss_backward_cpu(params, args, dtype_of(type), aten_parallel_for()); });
  }
  // Gradients in each box tensor's dtype, boxes2's summed over the dimensions it was broadcast along.
  return {box_grad(grad1.view(boxes1.sizes()), boxes1, type), box_grad(grad2.view(boxes1.sizes()), boxes2, type)};
}

namespace {

// Shape-only implementations for meta tensors (torch.compile's fake tensors): the same shape and dtype
// rules (and checks) as the CPU and CUDA kernels.
at::Tensor pairwise_meta(const at::Tensor& boxes1, const at::Tensor& boxes2, const BoxIouParams& p) {
  const char* op = box_iou_pairwise_op_name(p.variant);
  const PairwisePlan plan = plan_pairwise(op, boxes1, boxes2);
  const at::ScalarType type = pairwise_type(op, boxes1, boxes2, p.variant);
  return at::empty(plan.out_shape, boxes1.options().dtype(output_type(type)));
}

// Both box gradients: shaped like the boxes, in their grad_type.
std::tuple<at::Tensor, at::Tensor> box_grads_meta(const at::Tensor& boxes1, const at::Tensor& boxes2, at::ScalarType type) {
  return {at::empty(boxes1.sizes(), boxes1.options().dtype(grad_type(boxes1, type))),
          at::empty(boxes2.sizes(), boxes2.options().dtype(grad_type(boxes2, type)))};
}

std::tuple<at::Tensor, at::Tensor> pairwise_backward_meta(const at::Tensor&, const at::Tensor& boxes1,
                                                          const at::Tensor& boxes2, const BoxIouParams& p) {
  const char* op = box_iou_pairwise_op_name(p.variant);
  (void)plan_pairwise(op, boxes1, boxes2);
  return box_grads_meta(boxes1, boxes2, pairwise_type(op, boxes1, boxes2, p.variant));
}

at::Tensor loss_meta(const at::Tensor& boxes1, const at::Tensor& boxes2, const BoxIouLossParams& p) {
  const char* op = box_iou_loss_op_name(p.variant);
  const LossPlan plan = plan_loss(op, boxes1, boxes2);
  const at::TensorOptions options = boxes1.options().dtype(output_type(compute_type(op, boxes1, boxes2, true)));
  if (p.reduction == LossReduction::kNone) return at::empty(plan.loss_shape, options);
  return at::empty({}, options);
}

std::tuple<at::Tensor, at::Tensor> loss_backward_meta(const at::Tensor&, const at::Tensor& boxes1,
                                                      const at::Tensor& boxes2, const BoxIouLossParams&) {
  return box_grads_meta(boxes1, boxes2, compute_type("_box_iou_loss_backward", boxes1, boxes2, true));
}

// The schema arguments -> Params.
template <BoxIouVariant V>
BoxIouParams pairwise_params(double eps, bool defined_degenerate) {
  return {V, eps, defined_degenerate};
}
template <BoxIouVariant V>
BoxIouParams pairwise_params_default_eps(bool defined_degenerate) {
  return {V, BoxIouParams{}.eps, defined_degenerate};
}
BoxIouParams pairwise_backward_params(const std::string& variant, double eps, bool defined_degenerate) {
  return {parse_box_iou_variant(variant, "_box_iou_pairwise_backward"), eps, defined_degenerate};
}
template <BoxIouVariant V>
BoxIouLossParams loss_params(const std::string& reduction, double eps, bool defined_degenerate) {
  return make_box_iou_loss_params(V, reduction, eps, defined_degenerate);
}
BoxIouLossParams loss_backward_params(const std::string& variant, const std::string& reduction, double eps,
                                      bool defined_degenerate) {
  return make_box_iou_loss_params(parse_box_iou_variant(variant, "_box_iou_loss_backward"), reduction, eps,
                                  defined_degenerate);
}

using opkit::Field;
using opkit::Tensor;
using P = BoxIouParams;
using LP = BoxIouLossParams;
using Variant = opkit::Str<&P::variant, &box_iou_variant_name>;
using Defined = Field<&P::defined_degenerate>;
using LossDefined = Field<&LP::defined_degenerate>;
using LossVariant = opkit::Str<&LP::variant, &box_iou_variant_name>;
using Reduction = opkit::Str<&LP::reduction, &reduction_name<LossReduction>>;

// A forward of (boxes1, boxes2, scalars...) whose backward op gives both boxes' gradients as
// Backward(grad, boxes1, boxes2, params).
template <typename Params, typename Backward>
struct BothBoxesGrad : opkit::OpDef<Params> {
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kFunction;
  static opkit::TensorList saved(const opkit::TensorList& inputs, const opkit::TensorList&) { return inputs; }
  static opkit::variable_list backward(const opkit::Saved<Params>& s, const opkit::variable_list& grads) {
    auto [g1, g2] = opkit::call<Backward>({grads[0], s.tensors[0], s.tensors[1]}, s.params);
    return {g1, g2};
  }
};

template <typename Params>
struct BackwardDef : opkit::OpDef<Params> {  // differentiable once
  using Returns = std::tuple<at::Tensor, at::Tensor>;
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kOnce;
};

struct PairwiseBackward : BackwardDef<P> {
  static constexpr const char* kSchema =
      "_box_iou_pairwise_backward(Tensor grad, Tensor boxes1, Tensor boxes2, str variant, float eps, "
      "bool defined_degenerate=False) -> (Tensor, Tensor)";
  using Args = opkit::Args<Tensor, Tensor, Tensor, Variant, Field<&P::eps>, Defined>;
  static constexpr auto kMakeParams = &pairwise_backward_params;
  static constexpr auto kCompute = &box_iou_pairwise_backward;
  static constexpr auto kMeta = &pairwise_backward_meta;
  static constexpr const char* kOpName = "box IoU pairwise ops";
};

struct Pairwise : BothBoxesGrad<P, PairwiseBackward> {
  static constexpr auto kCompute = &box_iou_pairwise;
  static constexpr auto kMeta = &pairwise_meta;
};

// DetOps' rule for degenerate boxes is an explicit keyword; the default is torchvision's.
#define DETOPS_DEFINED_DEGENERATE "*, bool defined_degenerate=False) -> Tensor"
struct BoxIou : Pairwise {
  static constexpr const char* kSchema = "box_iou(Tensor boxes1, Tensor boxes2, " DETOPS_DEFINED_DEGENERATE;
  using Args = opkit::Args<Tensor, Tensor, Defined>;
  static constexpr auto kMakeParams = &pairwise_params_default_eps<BoxIouVariant::kIoU>;
};
struct GeneralizedBoxIou : Pairwise {
  static constexpr const char* kSchema = "generalized_box_iou(Tensor boxes1, Tensor boxes2, " DETOPS_DEFINED_DEGENERATE;
  using Args = opkit::Args<Tensor, Tensor, Defined>;
  static constexpr auto kMakeParams = &pairwise_params_default_eps<BoxIouVariant::kGIoU>;
};
struct DistanceBoxIou : Pairwise {
  static constexpr const char* kSchema =
      "distance_box_iou(Tensor boxes1, Tensor boxes2, float eps=1e-07, " DETOPS_DEFINED_DEGENERATE;
  using Args = opkit::Args<Tensor, Tensor, Field<&P::eps>, Defined>;
  static constexpr auto kMakeParams = &pairwise_params<BoxIouVariant::kDIoU>;
};
struct CompleteBoxIou : Pairwise {
  static constexpr const char* kSchema =
      "complete_box_iou(Tensor boxes1, Tensor boxes2, float eps=1e-07, " DETOPS_DEFINED_DEGENERATE;
  using Args = opkit::Args<Tensor, Tensor, Field<&P::eps>, Defined>;
  static constexpr auto kMakeParams = &pairwise_params<BoxIouVariant::kCIoU>;
};

struct LossBackward : BackwardDef<LP> {
  static constexpr const char* kSchema =
      "_box_iou_loss_backward(Tensor grad, Tensor boxes1, Tensor boxes2, str variant, str reduction, float eps, "
      "bool defined_degenerate=False) -> (Tensor, Tensor)";
  using Args = opkit::Args<Tensor, Tensor, Tensor, LossVariant, Reduction, Field<&LP::eps>, LossDefined>;
  static constexpr auto kMakeParams = &loss_backward_params;
  static constexpr auto kCompute = &box_iou_loss_backward;
  static constexpr auto kMeta = &loss_backward_meta;
  static constexpr const char* kOpName = "box IoU losses";
};

template <BoxIouVariant V>
struct Loss : BothBoxesGrad<LP, LossBackward> {
  using Args = opkit::Args<Tensor, Tensor, Reduction, Field<&LP::eps>, LossDefined>;
  static constexpr auto kMakeParams = &loss_params<V>;
  static constexpr auto kCompute = &box_iou_loss_forward;
  static constexpr auto kMeta = &loss_meta;
};

#define DETOPS_BOX_IOU_LOSS_SCHEMA(name) \
  #name "(Tensor boxes1, Tensor boxes2, str reduction=\"none\", float eps=1e-07, " DETOPS_DEFINED_DEGENERATE
struct IouLoss : Loss<BoxIouVariant::kIoU> {
  static constexpr const char* kSchema = DETOPS_BOX_IOU_LOSS_SCHEMA(iou_loss);
};
struct GeneralizedBoxIouLoss : Loss<BoxIouVariant::kGIoU> {
  static constexpr const char* kSchema = DETOPS_BOX_IOU_LOSS_SCHEMA(generalized_box_iou_loss);
};
struct DistanceBoxIouLoss : Loss<BoxIouVariant::kDIoU> {
  static constexpr const char* kSchema = DETOPS_BOX_IOU_LOSS_SCHEMA(distance_box_iou_loss);
};
struct CompleteBoxIouLoss : Loss<BoxIouVariant::kCIoU> {
  static constexpr const char* kSchema = DETOPS_BOX_IOU_LOSS_SCHEMA(complete_box_iou_loss);
};
#undef DETOPS_BOX_IOU_LOSS_SCHEMA
#undef DETOPS_DEFINED_DEGENERATE

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) {
  using namespace detops;
  opkit::define<BoxIou, GeneralizedBoxIou, DistanceBoxIou, CompleteBoxIou, PairwiseBackward, IouLoss,
                GeneralizedBoxIouLoss, DistanceBoxIouLoss, CompleteBoxIouLoss, LossBackward>(m);
}
