// The box IoU family as torch ops: torch.ops.detops.box_iou / generalized_box_iou / distance_box_iou /
// complete_box_iou (pairwise, forward only) and iou_loss / generalized_box_iou_loss /
// distance_box_iou_loss / complete_box_iou_loss (element-wise, with backward). Argument names, order and
// defaults follow torchvision.ops so the ops can replace it unchanged. Registered with the op kit
// (docs/op-kit.md); the string arguments make these hand-written (opkit::define_raw).
#include "box_iou/box_iou_torch.h"

#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <c10/cuda/CUDAGuard.h>

#include <cmath>

#include "common/torch_op_kit.h"
#include "common/torch_utils.h"

namespace detops {
namespace {

void check_boxes(const char* op, const char* name, const char* rows, const at::Tensor& boxes) {
  TORCH_CHECK_VALUE(boxes.dim() == 2 && boxes.size(1) == 4, op, ": ", name, " must be a 2-D tensor [", rows,
                    ", 4] of (x1, y1, x2, y2); got shape ", shape_string(boxes.sizes()));
}

// Shapes, dtypes and devices of a pair of box tensors; returns their DType.
DType check_box_pair(const char* op, const at::Tensor& boxes1, const at::Tensor& boxes2, const char* rows2) {
  check_boxes(op, "boxes1", "N", boxes1);
  check_boxes(op, "boxes2", rows2, boxes2);
  const DType dtype = floating_dtype_of(boxes1, op, "boxes1");
  check_same_device(op, "boxes1", boxes1, "boxes2", boxes2);
  check_same_dtype(op, "boxes1", boxes1, "boxes2", boxes2);
  TORCH_CHECK(boxes1.is_cpu() || boxes1.is_cuda(), op, ": boxes1 must be a CPU or CUDA tensor; got ", boxes1.device());
  return dtype;
}

void check_eps(const char* op, double eps) {
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps >= 0, op, ": eps must be a finite number >= 0; got ", eps);
}

void check_same_count(const char* op, const at::Tensor& boxes1, const at::Tensor& boxes2) {
  TORCH_CHECK_VALUE(boxes1.size(0) == boxes2.size(0), op,
                    ": boxes1 and boxes2 must have the same number of boxes (the loss is element-wise); got ",
                    boxes1.size(0), " and ", boxes2.size(0));
}

cudaStream_t current_stream(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

// The dtype of every output: the accumulation type (float64 for float64 boxes, float32 otherwise), as
// torchvision's ops upcast half-precision boxes and return float32.
at::TensorOptions output_options(const at::Tensor& boxes) {
  return boxes.options().dtype(accumulation_scalar_type(boxes.scalar_type()));
}

at::Tensor loss_forward_impl(const at::Tensor& boxes1, const at::Tensor& boxes2, const at::Tensor& alpha_boxes1,
                             const at::Tensor& alpha_boxes2, const BoxIouLossParams& params) {
  const char* op = box_iou_loss_op_name(params.variant);
  const DType dtype = check_box_pair(op, boxes1, boxes2, "N");
  check_same_count(op, boxes1, boxes2);
  check_eps(op, params.eps);
  const std::int64_t n = boxes1.size(0);
  const bool reduce = params.reduction != LossReduction::kNone;
  const at::Tensor b1 = boxes1.contiguous(), b2 = boxes2.contiguous();
  const at::Tensor losses = at::empty({n}, output_options(boxes1));
  BoxIouLossForwardArgs args{n, b1.data_ptr(), b2.data_ptr(), nullptr, nullptr, losses.data_ptr()};
  at::Tensor a1, a2;
  if (alpha_boxes1.defined()) {
    TORCH_CHECK_VALUE(alpha_boxes1.sizes() == boxes1.sizes() && alpha_boxes2.sizes() == boxes1.sizes(), op,
                      ": alpha_boxes1 and alpha_boxes2 must have boxes1's shape ", shape_string(boxes1.sizes()));
    check_same_device(op, "boxes1", boxes1, "alpha_boxes1", alpha_boxes1);
    check_same_device(op, "boxes1", boxes1, "alpha_boxes2", alpha_boxes2);
    check_same_dtype(op, "boxes1", boxes1, "alpha_boxes1", alpha_boxes1);
    check_same_dtype(op, "boxes1", boxes1, "alpha_boxes2", alpha_boxes2);
    a1 = alpha_boxes1.contiguous();
    a2 = alpha_boxes2.contiguous();
    args.alpha_boxes1 = a1.data_ptr();
    args.alpha_boxes2 = a2.data_ptr();
  }
  if (n > 0) {
    if (boxes1.is_cuda()) {
      c10::cuda::CUDAGuard guard(boxes1.device());
      launch_box_iou_loss_forward(params, args, dtype, current_stream(boxes1));
    } else {
      run_box_iou_loss_forward_cpu(params, args, dtype, aten_parallel_for());
    }
  }
  if (!reduce) return losses;
  c10::OptionalDeviceGuard guard(boxes1.device());
  at::Tensor total = losses.sum();  // an empty sum is 0, so the mean of no pairs is 0 (as torchvision)
  if (params.reduction == LossReduction::kMean && n > 0) total = total.div(static_cast<double>(n));
  return total;
}

}  // namespace

LossReduction parse_loss_reduction(const std::string& reduction, const char* op) {
  if (reduction == "none") return LossReduction::kNone;
  if (reduction == "mean") return LossReduction::kMean;
  if (reduction == "sum") return LossReduction::kSum;
  TORCH_CHECK_VALUE(false, op, ": reduction must be 'none', 'mean' or 'sum'; got '", reduction, "'");
}

const char* loss_reduction_name(LossReduction reduction) {
  switch (reduction) {
    case LossReduction::kNone: return "none";
    case LossReduction::kMean: return "mean";
    case LossReduction::kSum: return "sum";
  }
  TORCH_CHECK_VALUE(false, "box_iou: unknown reduction code ", static_cast<int>(reduction));
}

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
  BoxIouLossParams p{variant, parse_loss_reduction(reduction, op), eps};
  check_eps(op, eps);
  return p;
}

at::Tensor box_iou_pairwise(const at::Tensor& boxes1, const at::Tensor& boxes2, const BoxIouParams& params) {
  const char* op = box_iou_pairwise_op_name(params.variant);
  const DType dtype = check_box_pair(op, boxes1, boxes2, "M");
  check_eps(op, params.eps);
  const std::int64_t n = boxes1.size(0), m = boxes2.size(0);
  at::Tensor out = at::empty({n, m}, output_options(boxes1));
  if (out.numel() == 0) return out;
  const at::Tensor b1 = boxes1.contiguous(), b2 = boxes2.contiguous();
  const BoxIouPairwiseArgs args{n, m, b1.data_ptr(), b2.data_ptr(), out.data_ptr()};
  if (boxes1.is_cuda()) {
    c10::cuda::CUDAGuard guard(boxes1.device());
    launch_box_iou_pairwise(params, args, dtype, current_stream(boxes1));
  } else {
    run_box_iou_pairwise_cpu(params, args, dtype, aten_parallel_for());
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
  const DType dtype = check_box_pair(op, boxes1, boxes2, "N");
  check_same_count(op, boxes1, boxes2);
  check_eps(op, params.eps);
  check_same_device(op, "boxes1", boxes1, "grad", grad);
  const at::ScalarType loss_type = accumulation_scalar_type(boxes1.scalar_type());
  TORCH_CHECK_TYPE(grad.scalar_type() == loss_type, op, ": grad dtype (", grad.scalar_type(), ") must be the loss's dtype, ",
                   loss_type, " for ", boxes1.scalar_type(), " boxes");
  const std::int64_t n = boxes1.size(0);
  const bool reduce = params.reduction != LossReduction::kNone;
  if (reduce) {
    TORCH_CHECK_VALUE(grad.dim() == 0, op, ": grad must be a 0-d tensor for reduction '",
                      loss_reduction_name(params.reduction), "'; got shape ", shape_string(grad.sizes()));
  } else {
    TORCH_CHECK_VALUE(grad.dim() == 1 && grad.size(0) == n, op, ": grad must have shape [", n,
                      "] for reduction 'none'; got shape ", shape_string(grad.sizes()));
  }
  at::Tensor grad1 = at::empty({n, 4}, boxes1.options()), grad2 = at::empty({n, 4}, boxes1.options());
  if (n == 0) return {grad1, grad2};
  const at::Tensor b1 = boxes1.contiguous(), b2 = boxes2.contiguous();
  const double scale = params.reduction == LossReduction::kMean ? 1.0 / static_cast<double>(n) : 1.0;
  const BoxIouLossBackwardArgs args{n,           grad.data_ptr(), reduce ? 0 : grad.stride(0), scale,
                                    b1.data_ptr(), b2.data_ptr(),  grad1.data_ptr(),           grad2.data_ptr()};
  if (boxes1.is_cuda()) {
    c10::cuda::CUDAGuard guard(boxes1.device());
    launch_box_iou_loss_backward(params, args, dtype, current_stream(boxes1));
  } else {
    run_box_iou_loss_backward_cpu(params, args, dtype, aten_parallel_for());
  }
  return {grad1, grad2};
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

// Shape-only implementations for meta tensors (torch.compile's fake tensors).
at::Tensor pairwise_meta(const char* op, const at::Tensor& boxes1, const at::Tensor& boxes2) {
  check_boxes(op, "boxes1", "N", boxes1);
  check_boxes(op, "boxes2", "M", boxes2);
  return at::empty({boxes1.size(0), boxes2.size(0)}, output_options(boxes1));
}
at::Tensor box_iou_meta(const at::Tensor& b1, const at::Tensor& b2) { return pairwise_meta("box_iou", b1, b2); }
at::Tensor generalized_box_iou_meta(const at::Tensor& b1, const at::Tensor& b2) {
  return pairwise_meta("generalized_box_iou", b1, b2);
}
at::Tensor distance_box_iou_meta(const at::Tensor& b1, const at::Tensor& b2, double) {
  return pairwise_meta("distance_box_iou", b1, b2);
}
at::Tensor complete_box_iou_meta(const at::Tensor& b1, const at::Tensor& b2, double) {
  return pairwise_meta("complete_box_iou", b1, b2);
}

template <BoxIouVariant V>
at::Tensor loss_meta(const at::Tensor& boxes1, const at::Tensor& boxes2, c10::string_view reduction, double eps) {
  const char* op = box_iou_loss_op_name(V);
  check_boxes(op, "boxes1", "N", boxes1);
  check_boxes(op, "boxes2", "N", boxes2);
  check_same_count(op, boxes1, boxes2);
  const BoxIouLossParams p = make_box_iou_loss_params(V, std::string(reduction), eps);
  if (p.reduction == LossReduction::kNone) return at::empty({boxes1.size(0)}, output_options(boxes1));
  return at::empty({}, output_options(boxes1));
}

std::tuple<at::Tensor, at::Tensor> loss_backward_meta(const at::Tensor&, const at::Tensor& boxes1,
                                                      const at::Tensor& boxes2, c10::string_view, c10::string_view,
                                                      double) {
  return {at::empty(boxes1.sizes(), boxes1.options()), at::empty(boxes2.sizes(), boxes2.options())};
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
                                            loss_reduction_name(p.reduction), p.eps);
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
