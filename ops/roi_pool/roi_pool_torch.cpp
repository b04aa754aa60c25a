// torch.ops.detops.roi_pool: schema, CPU and CUDA implementations, autograd. Same schema as
// torch.ops.torchvision.roi_pool (argmax int32 included) so it can replace it unchanged.
#include "roi_pool/roi_pool_torch.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>
#include <string>

#include "common/roi_checks.h"
#include "common/torch_autograd.h"
#include "common/torch_utils.h"

namespace detops {
namespace {

constexpr const char* kOp = "roi_pool";

void check_params(const RoiPoolParams& p) {
  TORCH_CHECK_VALUE(p.pooled_height > 0, kOp, ": pooled_height must be positive; got ", p.pooled_height);
  TORCH_CHECK_VALUE(p.pooled_width > 0, kOp, ": pooled_width must be positive; got ", p.pooled_width);
  TORCH_CHECK_VALUE(std::isfinite(p.spatial_scale) && p.spatial_scale > 0, kOp,
                    ": spatial_scale must be a positive finite number; got ", p.spatial_scale);
}

RoiPoolShape shape_of(std::array<std::int64_t, 4> in, std::int64_t num_rois) {
  return RoiPoolShape{in[0], in[1], in[2], in[3], num_rois};
}

void check_map(const RoiPoolShape& s) {
  check_roi_feature_map(kOp, s.num_rois, s.channels, s.height, s.width);
  // Checked before any overflow: both are non-negative, so the product is tested by division.
  TORCH_CHECK_VALUE(s.width == 0 || s.height <= kRoiPoolMaxPlaneElements / s.width, kOp,
                    ": input height * width must be at most ", kRoiPoolMaxPlaneElements,
                    " because argmax is int32 (as in torchvision); got H=", s.height, ", W=", s.width);
}

[[noreturn]] void raise_invalid_argmax(std::int64_t flat, std::int32_t value, const at::Tensor& argmax,
                                       std::int64_t plane_elements) {
  std::array<std::int64_t, 4> at_index{};
  for (std::int64_t d = 3; d >= 0; --d) {
    at_index[d] = flat % argmax.size(d);
    flat /= argmax.size(d);
  }
  TORCH_CHECK_INDEX(false, kOp, ": argmax", shape_string(at_index), " = ", value,
                    " is not a flat index of an input plane: expected -1 or a value in [0, H * W = ",
                    plane_elements, ")");
}

void check_cpu_argmax(const at::Tensor& argmax_c, std::int64_t plane_elements) {
  const std::int32_t* a = argmax_c.data_ptr<std::int32_t>();
  for (std::int64_t i = 0; i < argmax_c.numel(); ++i) {
    if (a[i] != -1 && !(a[i] >= 0 && a[i] < plane_elements)) raise_invalid_argmax(i, a[i], argmax_c, plane_elements);
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> roi_pool_forward(const at::Tensor& input, const at::Tensor& rois,
                                                    const RoiPoolParams& params) {
  TORCH_CHECK_VALUE(input.dim() == 4, kOp, ": input must be a 4-D tensor [N, C, H, W]; got shape ",
                    shape_string(input.sizes()));
  const DType dtype = floating_dtype_of(input, kOp, "input");
  check_rois_tensor(kOp, rois, "input", input);
  check_params(params);
  const RoiPoolShape s = shape_of({input.size(0), input.size(1), input.size(2), input.size(3)}, rois.size(0));
  check_map(s);
  const std::array<std::int64_t, 4> out_shape{s.num_rois, s.channels, params.pooled_height, params.pooled_width};
  at::Tensor output = at::empty(out_shape, input.options());
  at::Tensor argmax = at::empty(out_shape, input.options().dtype(at::kInt));
  if (output.numel() == 0) return {output, argmax};
  const at::Tensor input_c = input.contiguous();
  const at::Tensor rois_c = rois.contiguous();
  RoiPoolForwardArgs args{s, input_c.data_ptr(), rois_c.data_ptr(), output.data_ptr(), argmax.data_ptr<std::int32_t>()};
  if (input.is_cuda()) {
    c10::cuda::CUDAGuard guard(input.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(input.device().index()).stream();
    FirstInvalidRow invalid(input, stream);
    args.first_invalid_roi = invalid.get();
    launch_roi_pool_forward(params, args, dtype, stream);
    raise_if_invalid_roi(kOp, invalid.read(), rois_c, s.batch);
  } else {
    TORCH_CHECK(input.is_cpu(), kOp, ": input must be a CPU or CUDA tensor; got ", input.device());
    check_roi_batch_indices_cpu(kOp, rois_c, s.batch);
    run_roi_pool_forward_cpu(params, args, dtype, aten_parallel_for());
  }
  return {output, argmax};
}

at::Tensor roi_pool_backward(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& argmax,
                             const RoiPoolParams& params, std::array<std::int64_t, 4> input_shape) {
  const DType dtype = floating_dtype_of(grad, kOp, "grad");
  check_rois_tensor(kOp, rois, "grad", grad);
  check_params(params);
  for (std::int64_t d : input_shape) {
    TORCH_CHECK_VALUE(d >= 0, kOp, ": input shape for the backward must be non-negative; got ",
                      shape_string(input_shape));
  }
  const RoiPoolShape s = shape_of(input_shape, rois.size(0));
  check_map(s);
  const std::array<std::int64_t, 4> expected{s.num_rois, s.channels, params.pooled_height, params.pooled_width};
  TORCH_CHECK_VALUE(grad.sizes() == at::IntArrayRef(expected), kOp, ": grad must have shape ",
                    shape_string(expected), " (rois, channels, pooled_height, pooled_width); got ",
                    shape_string(grad.sizes()));
  check_same_device(kOp, "grad", grad, "argmax", argmax);
  TORCH_CHECK_TYPE(argmax.scalar_type() == at::kInt, kOp, ": argmax must be int32 (as roi_pool returns it); got ",
                   argmax.scalar_type());
  TORCH_CHECK_VALUE(argmax.sizes() == at::IntArrayRef(expected), kOp, ": argmax must have shape ",
                    shape_string(expected), " (the shape of grad); got ", shape_string(argmax.sizes()));
  const at::ScalarType acc_type = accumulation_scalar_type(grad.scalar_type());
  at::Tensor grad_input_acc = at::zeros(input_shape, grad.options().dtype(acc_type));
  if (grad.numel() == 0 || grad_input_acc.numel() == 0) return grad_input_acc.to(grad.scalar_type());
  const at::Tensor rois_c = rois.contiguous();
  const at::Tensor argmax_c = argmax.contiguous();
  const std::int64_t plane_elements = s.height * s.width;
  RoiPoolBackwardArgs args{s,
                           grad.data_ptr(),
                           {grad.stride(0), grad.stride(1), grad.stride(2), grad.stride(3)},
                           rois_c.data_ptr(),
                           argmax_c.data_ptr<std::int32_t>(),
                           grad_input_acc.data_ptr()};
  if (grad.is_cuda()) {
    c10::cuda::CUDAGuard guard(grad.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(grad.device().index()).stream();
    FirstInvalidRow invalid_roi(grad, stream);
    FirstInvalidRow invalid_argmax(grad, stream);
    args.first_invalid_roi = invalid_roi.get();
    args.first_invalid_argmax = invalid_argmax.get();
    launch_roi_pool_backward(params, args, dtype, stream);
    raise_if_invalid_roi(kOp, invalid_roi.read(), rois_c, s.batch);
    const std::int64_t bad = invalid_argmax.read();
    if (bad >= 0) raise_invalid_argmax(bad, argmax_c.view(-1)[bad].item<std::int32_t>(), argmax_c, plane_elements);
  } else {
    TORCH_CHECK(grad.is_cpu(), kOp, ": grad must be a CPU or CUDA tensor; got ", grad.device());
    check_roi_batch_indices_cpu(kOp, rois_c, s.batch);
    check_cpu_argmax(argmax_c, plane_elements);
    run_roi_pool_backward_cpu(params, args, dtype, aten_parallel_for());
  }
  return grad_input_acc.scalar_type() == grad.scalar_type() ? grad_input_acc : grad_input_acc.to(grad.scalar_type());
}

namespace {

RoiPoolParams make_params(double spatial_scale, std::int64_t pooled_height, std::int64_t pooled_width) {
  return RoiPoolParams{spatial_scale, pooled_height, pooled_width};
}

std::tuple<at::Tensor, at::Tensor> roi_pool_kernel(const at::Tensor& input, const at::Tensor& rois,
                                                   double spatial_scale, std::int64_t pooled_height,
                                                   std::int64_t pooled_width) {
  return roi_pool_forward(input, rois, make_params(spatial_scale, pooled_height, pooled_width));
}

at::Tensor roi_pool_backward_kernel(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& argmax,
                                    double spatial_scale, std::int64_t pooled_height, std::int64_t pooled_width,
                                    std::int64_t batch_size, std::int64_t channels, std::int64_t height,
                                    std::int64_t width) {
  return roi_pool_backward(grad, rois, argmax, make_params(spatial_scale, pooled_height, pooled_width),
                           {batch_size, channels, height, width});
}

// Shape-only implementations for meta tensors (torch.compile's fake tensors).
std::tuple<at::Tensor, at::Tensor> roi_pool_meta(const at::Tensor& input, const at::Tensor& rois, double,
                                                 std::int64_t pooled_height, std::int64_t pooled_width) {
  TORCH_CHECK_VALUE(input.dim() == 4, kOp, ": input must be a 4-D tensor [N, C, H, W]; got shape ",
                    shape_string(input.sizes()));
  TORCH_CHECK_VALUE(rois.dim() == 2 && rois.size(1) == 5, kOp, ": rois must be a 2-D tensor [K, 5]; got shape ",
                    shape_string(rois.sizes()));
  const std::array<std::int64_t, 4> shape{rois.size(0), input.size(1), pooled_height, pooled_width};
  return {at::empty(shape, input.options()), at::empty(shape, input.options().dtype(at::kInt))};
}

at::Tensor roi_pool_backward_meta(const at::Tensor& grad, const at::Tensor&, const at::Tensor&, double, std::int64_t,
                                  std::int64_t, std::int64_t batch_size, std::int64_t channels, std::int64_t height,
                                  std::int64_t width) {
  return at::empty({batch_size, channels, height, width}, grad.options());
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class RoiPoolFunction : public torch::autograd::Function<RoiPoolFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& rois,
                               double spatial_scale, std::int64_t pooled_height, std::int64_t pooled_width) {
    ctx->saved_data["spatial_scale"] = spatial_scale;
    ctx->saved_data["pooled_height"] = pooled_height;
    ctx->saved_data["pooled_width"] = pooled_width;
    ctx->saved_data["input_shape"] = input.sizes().vec();
    at::AutoDispatchBelowADInplaceOrView guard;
    static const auto op = find_typed_op<decltype(roi_pool_kernel)>("detops::roi_pool");
    auto [output, argmax] = op.call(input, rois, spatial_scale, pooled_height, pooled_width);
    ctx->save_for_backward({rois, argmax});
    ctx->mark_non_differentiable({argmax});
    return {output, argmax};
  }

  static variable_list backward(AutogradContext* ctx, const variable_list& grad_output) {
    const variable_list saved = ctx->get_saved_variables();
    const auto shape = ctx->saved_data["input_shape"].toIntVector();
    static const auto op = find_typed_op<decltype(roi_pool_backward_kernel)>("detops::_roi_pool_backward");
    at::Tensor grad_input = op.call(grad_output[0], saved[0], saved[1], ctx->saved_data["spatial_scale"].toDouble(),
                                    ctx->saved_data["pooled_height"].toInt(), ctx->saved_data["pooled_width"].toInt(),
                                    shape[0], shape[1], shape[2], shape[3]);
    return {grad_input, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> roi_pool_autograd(const at::Tensor& input, const at::Tensor& rois,
                                                     double spatial_scale, std::int64_t pooled_height,
                                                     std::int64_t pooled_width) {
  const variable_list out = RoiPoolFunction::apply(input, rois, spatial_scale, pooled_height, pooled_width);
  return {out[0], out[1]};
}

at::Tensor roi_pool_backward_autograd(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& argmax,
                                      double spatial_scale, std::int64_t pooled_height, std::int64_t pooled_width,
                                      std::int64_t batch_size, std::int64_t channels, std::int64_t height,
                                      std::int64_t width) {
  static const auto op = find_typed_op<decltype(roi_pool_backward_kernel)>("detops::_roi_pool_backward");
  return DifferentiableOnce<decltype(roi_pool_backward_kernel)>::run(
      op, kOp, grad, rois, argmax, spatial_scale, pooled_height, pooled_width, batch_size, channels, height, width);
}

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) {
  m.def("roi_pool(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width) "
        "-> (Tensor, Tensor)");
  m.def("_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, int pooled_height, "
        "int pooled_width, int batch_size, int channels, int height, int width) -> Tensor");
}

TORCH_LIBRARY_IMPL(detops, CPU, m) {
  m.impl("roi_pool", &detops::roi_pool_kernel);
  m.impl("_roi_pool_backward", &detops::roi_pool_backward_kernel);
}

TORCH_LIBRARY_IMPL(detops, CUDA, m) {
  m.impl("roi_pool", &detops::roi_pool_kernel);
  m.impl("_roi_pool_backward", &detops::roi_pool_backward_kernel);
}

TORCH_LIBRARY_IMPL(detops, Meta, m) {
  m.impl("roi_pool", &detops::roi_pool_meta);
  m.impl("_roi_pool_backward", &detops::roi_pool_backward_meta);
}

TORCH_LIBRARY_IMPL(detops, Autograd, m) {
  m.impl("roi_pool", &detops::roi_pool_autograd);
  m.impl("_roi_pool_backward", &detops::roi_pool_backward_autograd);
}
