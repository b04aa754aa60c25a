// torch.ops.detops.prroi_pool: schema, CPU and CUDA implementations, autograd (gradients for input and
// rois). Arguments in roi_pool's order (input, rois, spatial_scale, pooled_height, pooled_width); the
// semantics are mmcv's PrRoIPool (docs/ops/prroi_pool.md).
#include "prroi_pool/prroi_pool_torch.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>

#include "common/roi_checks.h"
#include "common/torch_autograd.h"
#include "common/torch_utils.h"

namespace detops {
namespace {

constexpr const char* kOp = "prroi_pool";

void check_params(const PrRoiPoolParams& p) {
  TORCH_CHECK_VALUE(p.pooled_height > 0, kOp, ": pooled_height must be positive; got ", p.pooled_height);
  TORCH_CHECK_VALUE(p.pooled_width > 0, kOp, ": pooled_width must be positive; got ", p.pooled_width);
  TORCH_CHECK_VALUE(std::isfinite(p.spatial_scale) && p.spatial_scale > 0, kOp,
                    ": spatial_scale must be a positive finite number; got ", p.spatial_scale);
}

void check_input_4d(const at::Tensor& input) {
  TORCH_CHECK_VALUE(input.dim() == 4, kOp, ": input must be a 4-D tensor [N, C, H, W]; got shape ",
                    shape_string(input.sizes()));
}

PrRoiPoolShape shape_of(std::array<std::int64_t, 4> in, std::int64_t num_rois) {
  return PrRoiPoolShape{in[0], in[1], in[2], in[3], num_rois};
}

void check_grad_shape(const at::Tensor& grad, const PrRoiPoolShape& s, const PrRoiPoolParams& p) {
  const std::array<std::int64_t, 4> expected{s.num_rois, s.channels, p.pooled_height, p.pooled_width};
  TORCH_CHECK_VALUE(grad.sizes() == at::IntArrayRef(expected), kOp, ": grad must have shape ", shape_string(expected),
                    " (rois, channels, pooled_height, pooled_width); got ", shape_string(grad.sizes()));
}

std::array<std::int64_t, 4> strides_of(const at::Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }

cudaStream_t current_stream(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

}  // namespace

at::Tensor prroi_pool_forward(const at::Tensor& input, const at::Tensor& rois, const PrRoiPoolParams& params) {
  check_input_4d(input);
  const DType dtype = floating_dtype_of(input, kOp, "input");
  check_rois_tensor(kOp, rois, "input", input);
  check_params(params);
  const PrRoiPoolShape s = shape_of({input.size(0), input.size(1), input.size(2), input.size(3)}, rois.size(0));
  check_roi_feature_map(kOp, s.num_rois, s.channels, s.height, s.width);
  at::Tensor output = at::empty({s.num_rois, s.channels, params.pooled_height, params.pooled_width}, input.options());
  if (output.numel() == 0) return output;
  const at::Tensor input_c = input.contiguous();
  const at::Tensor rois_c = rois.contiguous();
  PrRoiPoolForwardArgs args{s, input_c.data_ptr(), rois_c.data_ptr(), output.data_ptr()};
  if (input.is_cuda()) {
    c10::cuda::CUDAGuard guard(input.device());
    const cudaStream_t stream = current_stream(input);
    FirstInvalidRow invalid(input, stream);
    args.first_invalid_roi = invalid.get();
    launch_prroi_pool_forward(params, args, dtype, stream);
    raise_if_invalid_roi(kOp, invalid.read(), rois_c, s.batch);
  } else {
    TORCH_CHECK(input.is_cpu(), kOp, ": input must be a CPU or CUDA tensor; got ", input.device());
    check_roi_batch_indices_cpu(kOp, rois_c, s.batch);
    run_prroi_pool_forward_cpu(params, args, dtype, aten_parallel_for());
  }
  return output;
}

at::Tensor prroi_pool_backward(const at::Tensor& grad, const at::Tensor& rois, const PrRoiPoolParams& params,
                               std::array<std::int64_t, 4> input_shape) {
  const DType dtype = floating_dtype_of(grad, kOp, "grad");
  check_rois_tensor(kOp, rois, "grad", grad);
  check_params(params);
  for (std::int64_t d : input_shape) {
    TORCH_CHECK_VALUE(d >= 0, kOp, ": input shape for the backward must be non-negative; got ",
                      shape_string(input_shape));
  }
  const PrRoiPoolShape s = shape_of(input_shape, rois.size(0));
  check_roi_feature_map(kOp, s.num_rois, s.channels, s.height, s.width);
  check_grad_shape(grad, s, params);
  at::Tensor grad_input_acc = at::zeros(input_shape, grad.options().dtype(accumulation_scalar_type(grad.scalar_type())));
  if (grad.numel() == 0 || grad_input_acc.numel() == 0) return grad_input_acc.to(grad.scalar_type());
  const at::Tensor rois_c = rois.contiguous();
  PrRoiPoolBackwardArgs args{s, grad.data_ptr(), strides_of(grad), rois_c.data_ptr(), grad_input_acc.data_ptr()};
  if (grad.is_cuda()) {
    c10::cuda::CUDAGuard guard(grad.device());
    const cudaStream_t stream = current_stream(grad);
    FirstInvalidRow invalid(grad, stream);
    args.first_invalid_roi = invalid.get();
    launch_prroi_pool_backward(params, args, dtype, stream);
    raise_if_invalid_roi(kOp, invalid.read(), rois_c, s.batch);
  } else {
    TORCH_CHECK(grad.is_cpu(), kOp, ": grad must be a CPU or CUDA tensor; got ", grad.device());
    check_roi_batch_indices_cpu(kOp, rois_c, s.batch);
    run_prroi_pool_backward_cpu(params, args, dtype, aten_parallel_for());
  }
  return grad_input_acc.scalar_type() == grad.scalar_type() ? grad_input_acc : grad_input_acc.to(grad.scalar_type());
}

at::Tensor prroi_pool_rois_backward(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& rois,
                                    const PrRoiPoolParams& params) {
  const DType dtype = floating_dtype_of(grad, kOp, "grad");
  check_input_4d(input);
  check_same_device(kOp, "grad", grad, "input", input);
  check_same_dtype(kOp, "grad", grad, "input", input);
  check_rois_tensor(kOp, rois, "grad", grad);
  check_params(params);
  const PrRoiPoolShape s = shape_of({input.size(0), input.size(1), input.size(2), input.size(3)}, rois.size(0));
  check_roi_feature_map(kOp, s.num_rois, s.channels, s.height, s.width);
  check_grad_shape(grad, s, params);
  at::Tensor grad_rois = at::empty({s.num_rois, 5}, rois.options());  // contiguous; every element is written
  if (s.num_rois == 0) return grad_rois;
  const at::Tensor input_c = input.contiguous();
  const at::Tensor rois_c = rois.contiguous();
  PrRoiPoolRoisBackwardArgs args{s, grad.data_ptr(), strides_of(grad), input_c.data_ptr(), rois_c.data_ptr(),
                                 grad_rois.data_ptr()};
  if (grad.is_cuda()) {
    c10::cuda::CUDAGuard guard(grad.device());
    const cudaStream_t stream = current_stream(grad);
    FirstInvalidRow invalid(grad, stream);
    args.first_invalid_roi = invalid.get();
    launch_prroi_pool_rois_backward(params, args, dtype, stream);
    raise_if_invalid_roi(kOp, invalid.read(), rois_c, s.batch);
  } else {
    TORCH_CHECK(grad.is_cpu(), kOp, ": grad must be a CPU or CUDA tensor; got ", grad.device());
    check_roi_batch_indices_cpu(kOp, rois_c, s.batch);
    run_prroi_pool_rois_backward_cpu(params, args, dtype, aten_parallel_for());
  }
  return grad_rois;
}

namespace {

PrRoiPoolParams make_params(double spatial_scale, std::int64_t pooled_height, std::int64_t pooled_width) {
  return PrRoiPoolParams{spatial_scale, pooled_height, pooled_width};
}

at::Tensor prroi_pool_kernel(const at::Tensor& input, const at::Tensor& rois, double spatial_scale,
                             std::int64_t pooled_height, std::int64_t pooled_width) {
  return prroi_pool_forward(input, rois, make_params(spatial_scale, pooled_height, pooled_width));
}

at::Tensor prroi_pool_backward_kernel(const at::Tensor& grad, const at::Tensor& rois, double spatial_scale,
                                      std::int64_t pooled_height, std::int64_t pooled_width, std::int64_t batch_size,
                                      std::int64_t channels, std::int64_t height, std::int64_t width) {
  return prroi_pool_backward(grad, rois, make_params(spatial_scale, pooled_height, pooled_width),
                             {batch_size, channels, height, width});
}

at::Tensor prroi_pool_rois_backward_kernel(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& rois,
                                           double spatial_scale, std::int64_t pooled_height, std::int64_t pooled_width) {
  return prroi_pool_rois_backward(grad, input, rois, make_params(spatial_scale, pooled_height, pooled_width));
}

// Shape-only implementations for meta tensors (torch.compile's fake tensors).
at::Tensor prroi_pool_meta(const at::Tensor& input, const at::Tensor& rois, double, std::int64_t pooled_height,
                           std::int64_t pooled_width) {
  check_input_4d(input);
  TORCH_CHECK_VALUE(rois.dim() == 2 && rois.size(1) == 5, kOp, ": rois must be a 2-D tensor [K, 5]; got shape ",
                    shape_string(rois.sizes()));
  return at::empty({rois.size(0), input.size(1), pooled_height, pooled_width}, input.options());
}

at::Tensor prroi_pool_backward_meta(const at::Tensor& grad, const at::Tensor&, double, std::int64_t, std::int64_t,
                                    std::int64_t batch_size, std::int64_t channels, std::int64_t height,
                                    std::int64_t width) {
  return at::empty({batch_size, channels, height, width}, grad.options());
}

at::Tensor prroi_pool_rois_backward_meta(const at::Tensor&, const at::Tensor&, const at::Tensor& rois, double,
                                         std::int64_t, std::int64_t) {
  return at::empty({rois.size(0), 5}, rois.options());
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class PrRoiPoolFunction : public torch::autograd::Function<PrRoiPoolFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& rois,
                               double spatial_scale, std::int64_t pooled_height, std::int64_t pooled_width) {
    ctx->saved_data["spatial_scale"] = spatial_scale;
    ctx->saved_data["pooled_height"] = pooled_height;
    ctx->saved_data["pooled_width"] = pooled_width;
    ctx->saved_data["input_shape"] = input.sizes().vec();
    at::AutoDispatchBelowADInplaceOrView guard;
    static const auto op = find_typed_op<decltype(prroi_pool_kernel)>("detops::prroi_pool");
    at::Tensor output = op.call(input, rois, spatial_scale, pooled_height, pooled_width);
    ctx->save_for_backward({input, rois});  // input only for the rois gradient (mmcv saves it too)
    return {output};
  }

  static variable_list backward(AutogradContext* ctx, const variable_list& grad_output) {
    const variable_list saved = ctx->get_saved_variables();
    const double scale = ctx->saved_data["spatial_scale"].toDouble();
    const std::int64_t ph = ctx->saved_data["pooled_height"].toInt(), pw = ctx->saved_data["pooled_width"].toInt();
    at::Tensor grad_input, grad_rois;
    if (ctx->needs_input_grad(0)) {
      const auto shape = ctx->saved_data["input_shape"].toIntVector();
      static const auto op = find_typed_op<decltype(prroi_pool_backward_kernel)>("detops::_prroi_pool_backward");
      grad_input = op.call(grad_output[0], saved[1], scale, ph, pw, shape[0], shape[1], shape[2], shape[3]);
    }
    if (ctx->needs_input_grad(1)) {
      static const auto op = find_typed_op<decltype(prroi_pool_rois_backward_kernel)>("detops::_prroi_pool_rois_backward");
      grad_rois = op.call(grad_output[0], saved[0], saved[1], scale, ph, pw);
    }
    return {grad_input, grad_rois, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor prroi_pool_autograd(const at::Tensor& input, const at::Tensor& rois, double spatial_scale,
                               std::int64_t pooled_height, std::int64_t pooled_width) {
  return PrRoiPoolFunction::apply(input, rois, spatial_scale, pooled_height, pooled_width)[0];
}

at::Tensor prroi_pool_backward_autograd(const at::Tensor& grad, const at::Tensor& rois, double spatial_scale,
                                        std::int64_t pooled_height, std::int64_t pooled_width, std::int64_t batch_size,
                                        std::int64_t channels, std::int64_t height, std::int64_t width) {
  static const auto op = find_typed_op<decltype(prroi_pool_backward_kernel)>("detops::_prroi_pool_backward");
  return DifferentiableOnce<decltype(prroi_pool_backward_kernel)>::run(
      op, kOp, grad, rois, spatial_scale, pooled_height, pooled_width, batch_size, channels, height, width);
}

at::Tensor prroi_pool_rois_backward_autograd(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& rois,
                                             double spatial_scale, std::int64_t pooled_height,
                                             std::int64_t pooled_width) {
  static const auto op = find_typed_op<decltype(prroi_pool_rois_backward_kernel)>("detops::_prroi_pool_rois_backward");
  return DifferentiableOnce<decltype(prroi_pool_rois_backward_kernel)>::run(
      op, kOp, grad, input, rois, spatial_scale, pooled_height, pooled_width);
}

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) {
  m.def("prroi_pool(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width) -> Tensor");
  m.def("_prroi_pool_backward(Tensor grad, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
        "int batch_size, int channels, int height, int width) -> Tensor");
  m.def("_prroi_pool_rois_backward(Tensor grad, Tensor input, Tensor rois, float spatial_scale, int pooled_height, "
        "int pooled_width) -> Tensor");
}

TORCH_LIBRARY_IMPL(detops, CPU, m) {
  m.impl("prroi_pool", &detops::prroi_pool_kernel);
  m.impl("_prroi_pool_backward", &detops::prroi_pool_backward_kernel);
  m.impl("_prroi_pool_rois_backward", &detops::prroi_pool_rois_backward_kernel);
}

TORCH_LIBRARY_IMPL(detops, CUDA, m) {
  m.impl("prroi_pool", &detops::prroi_pool_kernel);
  m.impl("_prroi_pool_backward", &detops::prroi_pool_backward_kernel);
  m.impl("_prroi_pool_rois_backward", &detops::prroi_pool_rois_backward_kernel);
}

TORCH_LIBRARY_IMPL(detops, Meta, m) {
  m.impl("prroi_pool", &detops::prroi_pool_meta);
  m.impl("_prroi_pool_backward", &detops::prroi_pool_backward_meta);
  m.impl("_prroi_pool_rois_backward", &detops::prroi_pool_rois_backward_meta);
}

TORCH_LIBRARY_IMPL(detops, Autograd, m) {
  m.impl("prroi_pool", &detops::prroi_pool_autograd);
  m.impl("_prroi_pool_backward", &detops::prroi_pool_backward_autograd);
  m.impl("_prroi_pool_rois_backward", &detops::prroi_pool_rois_backward_autograd);
}
