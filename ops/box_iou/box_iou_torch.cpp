// The box IoU family as torch ops: torch.ops.detops.box_iou / generalized_box_iou / distance_box_iou /
// complete_box_iou (pairwise, forward only) and iou_loss / generalized_box_iou_loss /
// distance_box_iou_loss / complete_box_iou_loss (element-wise, with backward). Argument names, order and
// defaults follow torchvision.ops so the ops can replace it unchanged. Registered with the op kit
// (docs/op-kit.md); the string arguments make these hand-written (opkit::define_raw).
#include "box_iou/box_iou_torch.h"

#include <ATen/ExpandUtils.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <c10/cuda/CUDAGuard.h>

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

cudaStream_t current_stream(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

void check_device(const char* op, const at::Tensor& boxes1, const at::Tensor& boxes2) {
  check_same_device(op, "boxes1", boxes1, "boxes2", boxes2);
  TORCH_CHECK(boxes1.is_cpu() || boxes1.is_cuda(), op, ": boxes1 must be a CPU or CUDA tensor; got ", boxes1.device());
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
  check_device(op, boxes1, boxes2);
  const std::int64_t n = plan.n;
  const bool reduce = params.reduction != LossReduction::kNone;
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
  if (n > 0) {
    if (boxes1.is_cuda()) {
      c10::cuda::CUDAGuard guard(boxes1.device());
      launch_box_iou_loss_forward(params, args, dtype_of(type), current_stream(boxes1));
    } else {
      run_box_iou_loss_forward_cpu(params, args, dtype_of(type), aten_parallel_for());
    }
  }
  if (!reduce) return losses;
  c10::OptionalDeviceGuard guard(boxes1.device());
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

BoxIouLossParams make_box_iou_loss_params(BoxIouVariant variant, const std::string& reduction, double eps) {
  const char* op = box_iou_loss_op_name(variant);
  return BoxIouLossParams{variant, parse_reduction<LossReduction>(op, reduction), eps};
}

at::Tensor box_iou_pairwise(const at::Tensor& boxes1, const at::Tensor& boxes2, const BoxIouParams& params) {
  const char* op = box_iou_pairwise_op_name(params.variant);
  const PairwisePlan plan = plan_pairwise(op, boxes1, boxes2);
  const bool allow_bool = params.variant == BoxIouVariant::kDIoU || params.variant == BoxIouVariant::kCIoU;
  const at::ScalarType type = compute_type(op, boxes1, boxes2, allow_bool);
  check_device(op, boxes1, boxes2);
  at::Tensor out = at::empty(plan.out_shape, boxes1.options().dtype(output_type(type)));
  if (out.numel() == 0) return out;
  const at::Tensor b1 = batched_boxes(boxes1, plan.batch, plan.n, type);
  const at::Tensor b2 = batched_boxes(boxes2, plan.batch, plan.m, type);
  const BoxIouPairwiseArgs args{plan.n, plan.m, b1.data_ptr(), b2.data_ptr(), out.data_ptr(), product(plan.batch)};
  if (boxes1.is_cuda()) {
    c10::cuda::CUDAGuard guard(boxes1.device());
    launch_box_iou_pairwise(params, args, dtype_of(type), current_stream(boxes1));
  } else {
    run_box_iou_pairwise_cpu(params, args, dtype_of(type), aten_parallel_for());
  }
  return out;
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
  check_device(op, boxes1, boxes2);
  check_same_device(op, "boxes1", boxes1, "grad", grad);
  const at::ScalarType loss_type = output_type(type);
  TORCH_CHECK_TYPE(grad.scalar_type() == loss_type, op, ": grad dtype (", grad.scalar_type(), ") must be the loss's dtype, ",
                   loss_type, " for ", boxes1.scalar_type(), " and ", boxes2.scalar_type(), " boxes");
  const std::int64_t n = plan.n;
  const bool reduce = params.reduction != LossReduction::kNone;
  check_loss_grad(op, grad, plan.loss_shape, reduce, reduction_name(params.reduction));
  // Gradients in each box tensor's dtype (the compute dtype for non-floating boxes), boxes2's summed over
  // the dimensions it was broadcast along.
  const auto grad_type = [type](const at::Tensor& b) { return at::isFloatingType(b.scalar_type()) ? b.scalar_type() : type; };
  at::Tensor grad1 = at::empty({n, 4}, boxes1.options().dtype(type)), grad2 = at::empty({n, 4}, boxes1.options().dtype(type));
  if (n > 0) {
    const auto [b1, b2] = flat_pairs(boxes1, boxes2, n, type);
    const at::Tensor g = reduce ? grad : grad.reshape({n});  // a view where it can be (stride 0 included)
    const double scale = params.reduction == LossReduction::kMean ? 1.0 / static_cast<double>(n) : 1.0;
    const BoxIouLossBackwardArgs args{n,           g.data_ptr(),  reduce ? 0 : g.stride(0), scale,
                                      b1.data_ptr(), b2.data_ptr(), grad1.data_ptr(),         grad2.data_ptr()};
    if (boxes1.is_cuda()) {
      c10::cuda::CUDAGuard guard(boxes1.device());
      launch_box_iou_loss_backward(params, args, dtype_of(type), current_stream(boxes1));
    } else {
      run_box_iou_loss_backward_cpu(params, args, dtype_of(type), aten_parallel_for());
    }
  }
  c10::OptionalDeviceGuard guard(boxes1.device());
  at::Tensor g1 = as_type(grad1.view(boxes1.sizes()), grad_type(boxes1));
  at::Tensor g2 = grad2.view(boxes1.sizes());
  if (boxes2.sizes() != boxes1.sizes()) g2 = at::sum_to(g2, boxes2.sizes());
  return {g1, as_type(g2, grad_type(boxes2))};
}

namespace {

// Schema-facing kernels (CPU and CUDA).
at::Tensor box_iou_kernel(const at::Tensor& boxes1, const at::Tensor& boxes2) {
  return box_iou_pairwise(boxes1, boxes2, BoxIouParams{BoxIouVariant::kIoU});
}
at::Tensor generalized_box_iou_kernel(const at::Tensor& boxes1, const at::Tensor& boxes2) {
  return box_iou_pairwise(boxes1, boxes2, BoxIouParams{BoxIouVariant::kGIoU});
}
at::Tensor distance_box_iou_kernel(const at::Tensor& boxes1, const at::Tensor& boxes2, double eps) {
  return box_iou_pairwise(boxes1, boxes2, BoxIouParams{BoxIouVariant::kDIoU, eps});
}
at::Tensor complete_box_iou_kernel(const at::Tensor& boxes1, const at::Tensor& boxes2, double eps) {
  return box_iou_pairwise(boxes1, boxes2, BoxIouParams{BoxIouVariant::kCIoU, eps});
}

template <BoxIouVariant V>
at::Tensor loss_kernel(const at::Tensor& boxes1, const at::Tensor& boxes2, c10::string_view reduction, double eps) {
  return box_iou_loss_forward(boxes1, boxes2, make_box_iou_loss_params(V, std::string(reduction), eps));
}

std::tuple<at::Tensor, at::Tensor> loss_backward_kernel(const at::Tensor& grad, const at::Tensor& boxes1,
                                                        const at::Tensor& boxes2, c10::string_view variant,
                                                        c10::string_view reduction, double eps) {
  const BoxIouVariant v = parse_box_iou_variant(std::string(variant), "_box_iou_loss_backward");
  return box_iou_loss_backward(grad, boxes1, boxes2, make_box_iou_loss_params(v, std::string(reduction), eps));
}

// Shape-only implementations for meta tensors (torch.compile's fake tensors): the same shape and dtype
// rules (and checks) as the CPU and CUDA kernels.
at::Tensor pairwise_meta(BoxIouVariant v, const at::Tensor& boxes1, const at::Tensor& boxes2) {
  const char* op = box_iou_pairwise_op_name(v);
  const PairwisePlan plan = plan_pairwise(op, boxes1, boxes2);
  const at::ScalarType type =
      compute_type(op, boxes1, boxes2, v == BoxIouVariant::kDIoU || v == BoxIouVariant::kCIoU);
  return at::empty(plan.out_shape, boxes1.options().dtype(output_type(type)));
}
at::Tensor box_iou_meta(const at::Tensor& b1, const at::Tensor& b2) { return pairwise_meta(BoxIouVariant::kIoU, b1, b2); }
at::Tensor generalized_box_iou_meta(const at::Tensor& b1, const at::Tensor& b2) {
  return pairwise_meta(BoxIouVariant::kGIoU, b1, b2);
}
at::Tensor distance_box_iou_meta(const at::Tensor& b1, const at::Tensor& b2, double) {
  return pairwise_meta(BoxIouVariant::kDIoU, b1, b2);
}
at::Tensor complete_box_iou_meta(const at::Tensor& b1, const at::Tensor& b2, double) {
  return pairwise_meta(BoxIouVariant::kCIoU, b1, b2);
}

template <BoxIouVariant V>
at::Tensor loss_meta(const at::Tensor& boxes1, const at::Tensor& boxes2, c10::string_view reduction, double eps) {
  const char* op = box_iou_loss_op_name(V);
  const BoxIouLossParams p = make_box_iou_loss_params(V, std::string(reduction), eps);
  const LossPlan plan = plan_loss(op, boxes1, boxes2);
  const at::TensorOptions options = boxes1.options().dtype(output_type(compute_type(op, boxes1, boxes2, true)));
  if (p.reduction == LossReduction::kNone) return at::empty(plan.loss_shape, options);
  return at::empty({}, options);
}

std::tuple<at::Tensor, at::Tensor> loss_backward_meta(const at::Tensor&, const at::Tensor& boxes1,
                                                      const at::Tensor& boxes2, c10::string_view, c10::string_view,
                                                      double) {
  const at::ScalarType type = compute_type("_box_iou_loss_backward", boxes1, boxes2, true);
  const auto options = [type](const at::Tensor& b) {
    return b.options().dtype(at::isFloatingType(b.scalar_type()) ? b.scalar_type() : type);
  };
  return {at::empty(boxes1.sizes(), options(boxes1)), at::empty(boxes2.sizes(), options(boxes2))};
}

using opkit::AutogradContext;
using opkit::variable_list;

// The pairwise ops are forward only: an output that requires grad carries a node that refuses the
// backward with a clear message, instead of silently giving no gradient.
template <BoxIouVariant V, typename... Eps>
class PairwiseFunction : public torch::autograd::Function<PairwiseFunction<V, Eps...>> {
 public:
  static variable_list forward(AutogradContext*, const at::Tensor& boxes1, const at::Tensor& boxes2, Eps... eps) {
    static const auto op = find_typed_op<at::Tensor(const at::Tensor&, const at::Tensor&, Eps...)>(
        (std::string("detops::") + box_iou_pairwise_op_name(V)).c_str());
    at::AutoDispatchBelowADInplaceOrView guard;
    return {op.call(boxes1, boxes2, eps...)};
  }
  static variable_list backward(AutogradContext*, const variable_list&) {
    TORCH_CHECK(false, box_iou_pairwise_op_name(V),
                ": the pairwise box IoU ops are forward only (no backward); for gradients use the element-wise "
                "losses iou_loss, generalized_box_iou_loss, distance_box_iou_loss or complete_box_iou_loss");
  }
};

template <BoxIouVariant V, typename... Eps>
at::Tensor pairwise_autograd(const at::Tensor& b1, const at::Tensor& b2, Eps... eps) {
  return PairwiseFunction<V, Eps...>::apply(b1, b2, eps...)[0];
}

using LossSchema = at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view, double);
using LossBackwardSchema = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                              c10::string_view, c10::string_view, double);

const c10::TypedOperatorHandle<LossBackwardSchema>& loss_backward_op() {
  static const auto op = find_typed_op<LossBackwardSchema>("detops::_box_iou_loss_backward");
  return op;
}

// The losses' autograd: the op runs below autograd (and validates its arguments); its Params are then
// saved whole for the backward, which calls _box_iou_loss_backward with them.
template <BoxIouVariant V>
class LossFunction : public torch::autograd::Function<LossFunction<V>> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& boxes1, const at::Tensor& boxes2,
                               c10::string_view reduction, double eps) {
    static const auto op =
        find_typed_op<LossSchema>((std::string("detops::") + box_iou_loss_op_name(V)).c_str());
    ctx->save_for_backward({boxes1, boxes2});
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor loss = op.call(boxes1, boxes2, reduction, eps);
    opkit::save_params(ctx, make_box_iou_loss_params(V, std::string(reduction), eps));
    return {loss};
  }

  static variable_list backward(AutogradContext* ctx, const variable_list& grad_output) {
    const auto saved = ctx->get_saved_variables();
    const auto p = opkit::saved_params<BoxIouLossParams>(ctx);
    auto [g1, g2] = loss_backward_op().call(grad_output[0], saved[0], saved[1], box_iou_variant_name(V),
                                            reduction_name(p.reduction), p.eps);
    return {g1, g2, at::Tensor(), at::Tensor()};
  }
};

template <BoxIouVariant V>
at::Tensor loss_autograd(const at::Tensor& boxes1, const at::Tensor& boxes2, c10::string_view reduction, double eps) {
  return LossFunction<V>::apply(boxes1, boxes2, reduction, eps)[0];
}

// The backward op is itself differentiable only once: its own backward (double backward) is refused.
std::tuple<at::Tensor, at::Tensor> loss_backward_autograd(const at::Tensor& grad, const at::Tensor& boxes1,
                                                          const at::Tensor& boxes2, c10::string_view variant,
                                                          c10::string_view reduction, double eps) {
  return opkit::DifferentiableOnce<LossBackwardSchema>::run(loss_backward_op(), "box IoU losses", grad, boxes1, boxes2,
                                                            variant, reduction, eps);
}

template <BoxIouVariant V>
void define_loss(torch::Library& m, const char* schema) {
  opkit::define_raw<LossSchema>(m, schema, &loss_kernel<V>, &loss_meta<V>, &loss_autograd<V>);
}

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) {
  using namespace detops;
  using V = BoxIouVariant;
  using Pair = at::Tensor(const at::Tensor&, const at::Tensor&);
  using PairEps = at::Tensor(const at::Tensor&, const at::Tensor&, double);
  opkit::define_raw<Pair>(m, "box_iou(Tensor boxes1, Tensor boxes2) -> Tensor", &box_iou_kernel, &box_iou_meta,
                          &pairwise_autograd<V::kIoU>);
  opkit::define_raw<Pair>(m, "generalized_box_iou(Tensor boxes1, Tensor boxes2) -> Tensor", &generalized_box_iou_kernel,
                          &generalized_box_iou_meta, &pairwise_autograd<V::kGIoU>);
  opkit::define_raw<PairEps>(m, "distance_box_iou(Tensor boxes1, Tensor boxes2, float eps=1e-07) -> Tensor",
                             &distance_box_iou_kernel, &distance_box_iou_meta, &pairwise_autograd<V::kDIoU, double>);
  opkit::define_raw<PairEps>(m, "complete_box_iou(Tensor boxes1, Tensor boxes2, float eps=1e-07) -> Tensor",
                             &complete_box_iou_kernel, &complete_box_iou_meta, &pairwise_autograd<V::kCIoU, double>);
  define_loss<V::kIoU>(m, "iou_loss(Tensor boxes1, Tensor boxes2, str reduction=\"none\", float eps=1e-07) -> Tensor");
  define_loss<V::kGIoU>(
      m, "generalized_box_iou_loss(Tensor boxes1, Tensor boxes2, str reduction=\"none\", float eps=1e-07) -> Tensor");
  define_loss<V::kDIoU>(
      m, "distance_box_iou_loss(Tensor boxes1, Tensor boxes2, str reduction=\"none\", float eps=1e-07) -> Tensor");
  define_loss<V::kCIoU>(
      m, "complete_box_iou_loss(Tensor boxes1, Tensor boxes2, str reduction=\"none\", float eps=1e-07) -> Tensor");
  opkit::define_raw<LossBackwardSchema>(m,
                                        "_box_iou_loss_backward(Tensor grad, Tensor boxes1, Tensor boxes2, str variant, "
                                        "str reduction, float eps) -> (Tensor, Tensor)",
                                        &loss_backward_kernel, &loss_backward_meta, &loss_backward_autograd);
}
