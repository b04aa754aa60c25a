// torch.ops.detops.roi_align: schema, CPU and CUDA implementations, autograd. Same schema as
// torch.ops.torchvision.roi_align so it can replace it unchanged.
#include "roi_align/roi_align_torch.h"

#include <ATen/Context.h>
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

constexpr const char* kOp = "roi_align";

void check_params(const RoiAlignParams& p) {
  TORCH_CHECK_VALUE(p.pooled_height > 0, kOp, ": pooled_height must be positive; got ", p.pooled_height);
  TORCH_CHECK_VALUE(p.pooled_width > 0, kOp, ": pooled_width must be positive; got ", p.pooled_width);
  TORCH_CHECK_VALUE(std::isfinite(p.spatial_scale) && p.spatial_scale > 0, kOp,
                    ": spatial_scale must be a positive finite number; got ", p.spatial_scale);
  TORCH_CHECK_VALUE(p.sampling_ratio <= kRoiAlignMaxSamplingGrid, kOp, ": sampling_ratio must be <= ",
                    kRoiAlignMaxSamplingGrid, " (or <= 0 for an adaptive grid); got ", p.sampling_ratio);
}

RoiAlignShape shape_of(std::array<std::int64_t, 4> in, std::int64_t num_rois) {
  return RoiAlignShape{in[0], in[1], in[2], in[3], num_rois};
}

}  // namespace

at::Tensor roi_align_forward(const at::Tensor& input, const at::Tensor& rois, const RoiAlignParams& params) {
  TORCH_CHECK_VALUE(input.dim() == 4, kOp, ": input must be a 4-D tensor [N, C, H, W]; got shape ",
                    shape_string(input.sizes()));
  const DType dtype = floating_dtype_of(input, kOp, "input");
  check_rois_tensor(kOp, rois, "input", input);
  check_params(params);
  const RoiAlignShape s = shape_of({input.size(0), input.size(1), input.size(2), input.size(3)}, rois.size(0));
  check_roi_feature_map(kOp, s.num_rois, s.channels, s.height, s.width);
  at::Tensor output = at::empty({s.num_rois, s.channels, params.pooled_height, params.pooled_width}, input.options());
  if (output.numel() == 0) return output;
  const at::Tensor input_c = input.contiguous();
  const at::Tensor rois_c = rois.contiguous();
  RoiAlignForwardArgs args{s, input_c.data_ptr(), rois_c.data_ptr(), output.data_ptr()};
  if (input.is_cuda()) {
    c10::cuda::CUDAGuard guard(input.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(input.device().index()).stream();
    FirstInvalidRow invalid(input, stream);
    args.first_invalid_roi = invalid.get();
    launch_roi_align_forward(params, args, dtype, stream);
    raise_if_invalid_roi(kOp, invalid.read(), rois_c, s.batch);
  } else {
    TORCH_CHECK(input.is_cpu(), kOp, ": input must be a CPU or CUDA tensor; got ", input.device());
    check_roi_batch_indices_cpu(kOp, rois_c, s.batch);
    run_roi_align_forward_cpu(params, args, dtype, aten_parallel_for());
  }
  return output;
}

at::Tensor roi_align_backward(const at::Tensor& grad, const at::Tensor& rois, const RoiAlignParams& params,
                              std::array<std::int64_t, 4> input_shape) {
  const DType dtype = floating_dtype_of(grad, kOp, "grad");
  check_rois_tensor(kOp, rois, "grad", grad);
  check_params(params);
  for (std::int64_t d : input_shape) {
    TORCH_CHECK_VALUE(d >= 0, kOp, ": input shape for the backward must be non-negative; got ",
                      shape_string(input_shape));
  }
  const RoiAlignShape s = shape_of(input_shape, rois.size(0));
  check_roi_feature_map(kOp, s.num_rois, s.channels, s.height, s.width);
  const std::array<std::int64_t, 4> expected{s.num_rois, s.channels, params.pooled_height, params.pooled_width};
  TORCH_CHECK_VALUE(grad.sizes() == at::IntArrayRef(expected), kOp, ": grad must have shape ",
                    shape_string(expected), " (rois, channels, pooled_height, pooled_width); got ",
                    shape_string(grad.sizes()));
  const at::ScalarType acc_type = accumulation_scalar_type(grad.scalar_type());
  if (grad.numel() == 0 || s.batch * s.channels * s.height * s.width == 0) {
    return at::zeros(input_shape, grad.options());
  }
  const at::Tensor rois_c = rois.contiguous();
  RoiAlignBackwardArgs args{s, grad.data_ptr(), {grad.stride(0), grad.stride(1), grad.stride(2), grad.stride(3)},
                            rois_c.data_ptr()};
  if (grad.is_cuda()) {
    // atomicAdd scatter: not bitwise reproducible. Refuse (or warn) under deterministic mode.
    at::globalContext().alertNotDeterministic("detops::_roi_align_backward (CUDA)");
    c10::cuda::CUDAGuard guard(grad.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(grad.device().index()).stream();
    // Accumulated channels last, then transposed into grad_input (roi_align.h).
    const at::Tensor acc_nhwc = at::zeros({s.batch, s.height, s.width, s.channels}, grad.options().dtype(acc_type));
    at::Tensor grad_input = at::empty(input_shape, grad.options());
    args.grad_input_acc = acc_nhwc.data_ptr();
    args.grad_input = grad_input.data_ptr();
    FirstInvalidRow invalid(grad, stream);
    args.first_invalid_roi = invalid.get();
    launch_roi_align_backward(params, args, dtype, stream);
    raise_if_invalid_roi(kOp, invalid.read(), rois_c, s.batch);
    return grad_input;
  }
  TORCH_CHECK(grad.is_cpu(), kOp, ": grad must be a CPU or CUDA tensor; got ", grad.device());
  check_roi_batch_indices_cpu(kOp, rois_c, s.batch);
  at::Tensor grad_input_acc = at::zeros(input_shape, grad.options().dtype(acc_type));
  args.grad_input_acc = grad_input_acc.data_ptr();
  run_roi_align_backward_cpu(params, args, dtype);
  return grad_input_acc.scalar_type() == grad.scalar_type() ? grad_input_acc : grad_input_acc.to(grad.scalar_type());
}

namespace {

RoiAlignParams make_params(double spatial_scale, std::int64_t pooled_height, std::int64_t pooled_width,
                           std::int64_t sampling_ratio, bool aligned) {
  return RoiAlignParams{spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned};
}

at::Tensor roi_align_kernel(const at::Tensor& input, const at::Tensor& rois, double spatial_scale,
                            std::int64_t pooled_height, std::int64_t pooled_width, std::int64_t sampling_ratio,
                            bool aligned) {
  return roi_align_forward(input, rois, make_params(spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned));
}

at::Tensor roi_align_backward_kernel(const at::Tensor& grad, const at::Tensor& rois, double spatial_scale,
                                     std::int64_t pooled_height, std::int64_t pooled_width, std::int64_t batch_size,
                                     std::int64_t channels, std::int64_t height, std::int64_t width,
                                     std::int64_t sampling_ratio, bool aligned) {
  return roi_align_backward(grad, rois, make_params(spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned),
                            {batch_size, channels, height, width});
}

// Shape-only implementation for meta tensors (torch.compile's fake tensors).
at::Tensor roi_align_meta(const at::Tensor& input, const at::Tensor& rois, double, std::int64_t pooled_height,
                          std::int64_t pooled_width, std::int64_t, bool) {
  TORCH_CHECK_VALUE(input.dim() == 4, kOp, ": input must be a 4-D tensor [N, C, H, W]; got shape ",
                    shape_string(input.sizes()));
  TORCH_CHECK_VALUE(rois.dim() == 2 && rois.size(1) == 5, kOp, ": rois must be a 2-D tensor [K, 5]; got shape ",
                    shape_string(rois.sizes()));
  return at::empty({rois.size(0), input.size(1), pooled_height, pooled_width}, input.options());
}

at::Tensor roi_align_backward_meta(const at::Tensor& grad, const at::Tensor&, double, std::int64_t, std::int64_t,
                                   std::int64_t batch_size, std::int64_t channels, std::int64_t height,
                                   std::int64_t width, std::int64_t, bool) {
  return at::empty({batch_size, channels, height, width}, grad.options());
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class RoiAlignFunction : public torch::autograd::Function<RoiAlignFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& rois,
                               double spatial_scale, std::int64_t pooled_height, std::int64_t pooled_width,
                               std::int64_t sampling_ratio, bool aligned) {
    ctx->saved_data["spatial_scale"] = spatial_scale;
    ctx->saved_data["pooled_height"] = pooled_height;
    ctx->saved_data["pooled_width"] = pooled_width;
    ctx->saved_data["sampling_ratio"] = sampling_ratio;
    ctx->saved_data["aligned"] = aligned;
    ctx->saved_data["input_shape"] = input.sizes().vec();
    ctx->save_for_backward({rois});
    at::AutoDispatchBelowADInplaceOrView guard;
    static const auto op = find_typed_op<decltype(roi_align_kernel)>("detops::roi_align");
    return {op.call(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)};
  }

  static variable_list backward(AutogradContext* ctx, const variable_list& grad_output) {
    const at::Tensor rois = ctx->get_saved_variables()[0];
    const auto shape = ctx->saved_data["input_shape"].toIntVector();
    static const auto op = find_typed_op<decltype(roi_align_backward_kernel)>("detops::_roi_align_backward");
    at::Tensor grad_input = op.call(grad_output[0], rois, ctx->saved_data["spatial_scale"].toDouble(),
                                    ctx->saved_data["pooled_height"].toInt(), ctx->saved_data["pooled_width"].toInt(),
                                    shape[0], shape[1], shape[2], shape[3], ctx->saved_data["sampling_ratio"].toInt(),
                                    ctx->saved_data["aligned"].toBool());
    return {grad_input, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor roi_align_autograd(const at::Tensor& input, const at::Tensor& rois, double spatial_scale,
                              std::int64_t pooled_height, std::int64_t pooled_width, std::int64_t sampling_ratio,
                              bool aligned) {
  return RoiAlignFunction::apply(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)[0];
}

at::Tensor roi_align_backward_autograd(const at::Tensor& grad, const at::Tensor& rois, double spatial_scale,
                                       std::int64_t pooled_height, std::int64_t pooled_width, std::int64_t batch_size,
                                       std::int64_t channels, std::int64_t height, std::int64_t width,
                                       std::int64_t sampling_ratio, bool aligned) {
  static const auto op = find_typed_op<decltype(roi_align_backward_kernel)>("detops::_roi_align_backward");
  return DifferentiableOnce<decltype(roi_align_backward_kernel)>::run(
      op, kOp, grad, rois, spatial_scale, pooled_height, pooled_width, batch_size, channels, height, width,
      sampling_ratio, aligned);
}

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) {
  m.def("roi_align(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
        "int sampling_ratio, bool aligned) -> Tensor");
  m.def("_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
        "int batch_size, int channels, int height, int width, int sampling_ratio, bool aligned) -> Tensor");
}

TORCH_LIBRARY_IMPL(detops, CPU, m) {
  m.impl("roi_align", &detops::roi_align_kernel);
  m.impl("_roi_align_backward", &detops::roi_align_backward_kernel);
}

TORCH_LIBRARY_IMPL(detops, CUDA, m) {
  m.impl("roi_align", &detops::roi_align_kernel);
  m.impl("_roi_align_backward", &detops::roi_align_backward_kernel);
}

TORCH_LIBRARY_IMPL(detops, Meta, m) {
  m.impl("roi_align", &detops::roi_align_meta);
  m.impl("_roi_align_backward", &detops::roi_align_backward_meta);
}

TORCH_LIBRARY_IMPL(detops, Autograd, m) {
  m.impl("roi_align", &detops::roi_align_autograd);
  m.impl("_roi_align_backward", &detops::roi_align_backward_autograd);
}
