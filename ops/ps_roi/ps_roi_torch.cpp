// torch.ops.detops.ps_roi_align and torch.ops.detops.ps_roi_pool: schemas, CPU and CUDA implementations,
// Meta and autograd. Same schemas as torch.ops.torchvision.ps_roi_align / ps_roi_pool (and their
// _*_backward ops), so they can replace them unchanged.
#include "ps_roi/ps_roi_torch.h"

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

// What differs between the two ops; everything else below is shared.
struct AlignOp {
  using Params = PsRoiAlignParams;
  static constexpr const char* kName = "ps_roi_align";
  static void check_extra(const Params& p) {
    TORCH_CHECK_VALUE(p.sampling_ratio <= kPsRoiAlignMaxSamplingGrid, kName, ": sampling_ratio must be <= ",
                      kPsRoiAlignMaxSamplingGrid, " (or <= 0 for an adaptive grid); got ", p.sampling_ratio);
  }
  static void launch_forward(const Params& p, const PsRoiForwardArgs& a, DType d, cudaStream_t s) {
    launch_ps_roi_align_forward(p, a, d, s);
  }
  static void launch_backward(const Params& p, const PsRoiBackwardArgs& a, DType d, cudaStream_t s) {
    launch_ps_roi_align_backward(p, a, d, s);
  }
  static void cpu_forward(const Params& p, const PsRoiForwardArgs& a, DType d) {
    run_ps_roi_align_forward_cpu(p, a, d, aten_parallel_for());
  }
  static void cpu_backward(const Params& p, const PsRoiBackwardArgs& a, DType d) { run_ps_roi_align_backward_cpu(p, a, d); }
};

struct PoolOp {
  using Params = PsRoiPoolParams;
  static constexpr const char* kName = "ps_roi_pool";
  static void check_extra(const Params&) {}
  static void launch_forward(const Params& p, const PsRoiForwardArgs& a, DType d, cudaStream_t s) {
    launch_ps_roi_pool_forward(p, a, d, s);
  }
  static void launch_backward(const Params& p, const PsRoiBackwardArgs& a, DType d, cudaStream_t s) {
    launch_ps_roi_pool_backward(p, a, d, s);
  }
  static void cpu_forward(const Params& p, const PsRoiForwardArgs& a, DType d) {
    run_ps_roi_pool_forward_cpu(p, a, d, aten_parallel_for());
  }
  static void cpu_backward(const Params& p, const PsRoiBackwardArgs& a, DType d) { run_ps_roi_pool_backward_cpu(p, a, d); }
};

template <typename Op>
void check_params(const typename Op::Params& p) {
  TORCH_CHECK_VALUE(p.pooled_height > 0, Op::kName, ": pooled_height must be positive; got ", p.pooled_height);
  TORCH_CHECK_VALUE(p.pooled_width > 0, Op::kName, ": pooled_width must be positive; got ", p.pooled_width);
  TORCH_CHECK_VALUE(p.pooled_height <= kPsRoiMaxChannels && p.pooled_width <= kPsRoiMaxChannels, Op::kName,
                    ": pooled_height and pooled_width must be <= ", kPsRoiMaxChannels, "; got ", p.pooled_height,
                    " and ", p.pooled_width);
  TORCH_CHECK_VALUE(std::isfinite(p.spatial_scale) && p.spatial_scale > 0, Op::kName,
                    ": spatial_scale must be a positive finite number; got ", p.spatial_scale);
  Op::check_extra(p);
}

// C_in must be a multiple of ph * pw (both <= 2^31 - 1 here, so the product fits) and fit channel_mapping's int32.
template <typename Op>
void check_channels(std::int64_t channels, const typename Op::Params& p) {
  const std::int64_t bins = p.pooled_height * p.pooled_width;
  TORCH_CHECK_VALUE(channels <= kPsRoiMaxChannels, Op::kName, ": input channels must be <= ", kPsRoiMaxChannels,
                    " (channel_mapping is int32); got ", channels);
  TORCH_CHECK_VALUE(channels % bins == 0, Op::kName, ": input channels (", channels,
                    ") must be a multiple of pooled_height * pooled_width (", p.pooled_height, " * ", p.pooled_width,
                    " = ", bins, ")");
}

template <typename Op>
std::array<std::int64_t, 4> output_shape(const PsRoiShape& s, const typename Op::Params& p) {
  return {s.num_rois, s.channels / (p.pooled_height * p.pooled_width), p.pooled_height, p.pooled_width};
}

template <typename Op>
std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& input, const at::Tensor& rois,
                                           const typename Op::Params& params) {
  TORCH_CHECK_VALUE(input.dim() == 4, Op::kName, ": input must be a 4-D tensor [N, C, H, W]; got shape ",
                    shape_string(input.sizes()));
  const DType dtype = floating_dtype_of(input, Op::kName, "input");
  check_rois_tensor(Op::kName, rois, "input", input);
  check_params<Op>(params);
  const PsRoiShape s{input.size(0), input.size(1), input.size(2), input.size(3), rois.size(0)};
  check_channels<Op>(s.channels, params);
  check_roi_feature_map(Op::kName, s.num_rois, s.channels, s.height, s.width);
  const auto shape = output_shape<Op>(s, params);
  at::Tensor output = at::empty(shape, input.options());
  at::Tensor channel_mapping = at::empty(shape, input.options().dtype(at::kInt));
  if (output.numel() == 0) return {output, channel_mapping};
  const at::Tensor input_c = input.contiguous();
  const at::Tensor rois_c = rois.contiguous();
  PsRoiForwardArgs args{s, input_c.data_ptr(), rois_c.data_ptr(), output.data_ptr(),
                        channel_mapping.data_ptr<std::int32_t>()};
  if (input.is_cuda()) {
    c10::cuda::CUDAGuard guard(input.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(input.device().index()).stream();
    FirstInvalidRow invalid(input, stream);
    args.first_invalid_roi = invalid.get();
    Op::launch_forward(params, args, dtype, stream);
    raise_if_invalid_roi(Op::kName, invalid.read(), rois_c, s.batch);
  } else {
    TORCH_CHECK(input.is_cpu(), Op::kName, ": input must be a CPU or CUDA tensor; got ", input.device());
    check_roi_batch_indices_cpu(Op::kName, rois_c, s.batch);
    Op::cpu_forward(params, args, dtype);
  }
  return {output, channel_mapping};
}

template <typename Op>
at::Tensor backward(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& channel_mapping,
                    const typename Op::Params& params, std::array<std::int64_t, 4> input_shape) {
  const DType dtype = floating_dtype_of(grad, Op::kName, "grad");
  check_rois_tensor(Op::kName, rois, "grad", grad);
  check_same_device(Op::kName, "grad", grad, "channel_mapping", channel_mapping);
  TORCH_CHECK_TYPE(channel_mapping.scalar_type() == at::kInt, Op::kName,
                   ": channel_mapping must be int32 (the forward's second output); got ", channel_mapping.scalar_type());
  check_params<Op>(params);
  for (std::int64_t d : input_shape) {
    TORCH_CHECK_VALUE(d >= 0, Op::kName, ": input shape for the backward must be non-negative; got ",
                      shape_string(input_shape));
  }
  const PsRoiShape s{input_shape[0], input_shape[1], input_shape[2], input_shape[3], rois.size(0)};
  check_channels<Op>(s.channels, params);
  check_roi_feature_map(Op::kName, s.num_rois, s.channels, s.height, s.width);
  const auto expected = output_shape<Op>(s, params);
  TORCH_CHECK_VALUE(grad.sizes() == at::IntArrayRef(expected), Op::kName, ": grad must have shape ",
                    shape_string(expected), " (rois, channels / (pooled_height * pooled_width), pooled_height, "
                    "pooled_width); got ", shape_string(grad.sizes()));
  TORCH_CHECK_VALUE(channel_mapping.sizes() == at::IntArrayRef(expected), Op::kName,
                    ": channel_mapping must have grad's shape ", shape_string(expected), "; got ",
                    shape_string(channel_mapping.sizes()));
  const at::ScalarType acc_type = accumulation_scalar_type(grad.scalar_type());
  at::Tensor grad_input_acc = at::zeros(input_shape, grad.options().dtype(acc_type));
  if (grad.numel() == 0 || grad_input_acc.numel() == 0) return grad_input_acc.to(grad.scalar_type());
  const at::Tensor rois_c = rois.contiguous();
  PsRoiBackwardArgs args{s, grad.data_ptr(), {grad.stride(0), grad.stride(1), grad.stride(2), grad.stride(3)},
                         rois_c.data_ptr(), grad_input_acc.data_ptr()};
  if (grad.is_cuda()) {
    c10::cuda::CUDAGuard guard(grad.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(grad.device().index()).stream();
    FirstInvalidRow invalid(grad, stream);
    args.first_invalid_roi = invalid.get();
    Op::launch_backward(params, args, dtype, stream);
    raise_if_invalid_roi(Op::kName, invalid.read(), rois_c, s.batch);
  } else {
    TORCH_CHECK(grad.is_cpu(), Op::kName, ": grad must be a CPU or CUDA tensor; got ", grad.device());
    check_roi_batch_indices_cpu(Op::kName, rois_c, s.batch);
    Op::cpu_backward(params, args, dtype);
  }
  return grad_input_acc.scalar_type() == grad.scalar_type() ? grad_input_acc : grad_input_acc.to(grad.scalar_type());
}

// Shape-only forward for meta tensors (torch.compile's fake tensors).
template <typename Op>
std::tuple<at::Tensor, at::Tensor> forward_meta(const at::Tensor& input, const at::Tensor& rois,
                                                const typename Op::Params& params) {
  TORCH_CHECK_VALUE(input.dim() == 4, Op::kName, ": input must be a 4-D tensor [N, C, H, W]; got shape ",
                    shape_string(input.sizes()));
  TORCH_CHECK_VALUE(rois.dim() == 2 && rois.size(1) == 5, Op::kName, ": rois must be a 2-D tensor [K, 5]; got shape ",
                    shape_string(rois.sizes()));
  check_params<Op>(params);
  const PsRoiShape s{input.size(0), input.size(1), input.size(2), input.size(3), rois.size(0)};
  check_channels<Op>(s.channels, params);
  const auto shape = output_shape<Op>(s, params);
  return {at::empty(shape, input.options()), at::empty(shape, input.options().dtype(at::kInt))};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> ps_roi_align_forward(const at::Tensor& input, const at::Tensor& rois,
                                                        const PsRoiAlignParams& params) {
  return forward<AlignOp>(input, rois, params);
}

std::tuple<at::Tensor, at::Tensor> ps_roi_pool_forward(const at::Tensor& input, const at::Tensor& rois,
                                                       const PsRoiPoolParams& params) {
  return forward<PoolOp>(input, rois, params);
}

at::Tensor ps_roi_align_backward(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& channel_mapping,
                                 const PsRoiAlignParams& params, std::array<std::int64_t, 4> input_shape) {
  return backward<AlignOp>(grad, rois, channel_mapping, params, input_shape);
}

at::Tensor ps_roi_pool_backward(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& channel_mapping,
                                const PsRoiPoolParams& params, std::array<std::int64_t, 4> input_shape) {
  return backward<PoolOp>(grad, rois, channel_mapping, params, input_shape);
}

namespace {

// Schema-level kernels (torchvision's argument order).

std::tuple<at::Tensor, at::Tensor> ps_roi_align_kernel(const at::Tensor& input, const at::Tensor& rois,
                                                       double spatial_scale, std::int64_t pooled_height,
                                                       std::int64_t pooled_width, std::int64_t sampling_ratio) {
  return ps_roi_align_forward(input, rois, PsRoiAlignParams{spatial_scale, pooled_height, pooled_width, sampling_ratio});
}

at::Tensor ps_roi_align_backward_kernel(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& channel_mapping,
                                        double spatial_scale, std::int64_t pooled_height, std::int64_t pooled_width,
                                        std::int64_t sampling_ratio, std::int64_t batch_size, std::int64_t channels,
                                        std::int64_t height, std::int64_t width) {
  return ps_roi_align_backward(grad, rois, channel_mapping,
                               PsRoiAlignParams{spatial_scale, pooled_height, pooled_width, sampling_ratio},
                               {batch_size, channels, height, width});
}

std::tuple<at::Tensor, at::Tensor> ps_roi_pool_kernel(const at::Tensor& input, const at::Tensor& rois,
                                                      double spatial_scale, std::int64_t pooled_height,
                                                      std::int64_t pooled_width) {
  return ps_roi_pool_forward(input, rois, PsRoiPoolParams{spatial_scale, pooled_height, pooled_width});
}

at::Tensor ps_roi_pool_backward_kernel(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& channel_mapping,
                                       double spatial_scale, std::int64_t pooled_height, std::int64_t pooled_width,
                                       std::int64_t batch_size, std::int64_t channels, std::int64_t height,
                                       std::int64_t width) {
  return ps_roi_pool_backward(grad, rois, channel_mapping, PsRoiPoolParams{spatial_scale, pooled_height, pooled_width},
                              {batch_size, channels, height, width});
}

std::tuple<at::Tensor, at::Tensor> ps_roi_align_meta(const at::Tensor& input, const at::Tensor& rois,
                                                     double spatial_scale, std::int64_t pooled_height,
                                                     std::int64_t pooled_width, std::int64_t sampling_ratio) {
  return forward_meta<AlignOp>(input, rois, PsRoiAlignParams{spatial_scale, pooled_height, pooled_width, sampling_ratio});
}

at::Tensor ps_roi_align_backward_meta(const at::Tensor& grad, const at::Tensor&, const at::Tensor&, double,
                                      std::int64_t, std::int64_t, std::int64_t, std::int64_t batch_size,
                                      std::int64_t channels, std::int64_t height, std::int64_t width) {
  return at::empty({batch_size, channels, height, width}, grad.options());
}

std::tuple<at::Tensor, at::Tensor> ps_roi_pool_meta(const at::Tensor& input, const at::Tensor& rois,
                                                    double spatial_scale, std::int64_t pooled_height,
                                                    std::int64_t pooled_width) {
  return forward_meta<PoolOp>(input, rois, PsRoiPoolParams{spatial_scale, pooled_height, pooled_width});
}

at::Tensor ps_roi_pool_backward_meta(const at::Tensor& grad, const at::Tensor&, const at::Tensor&, double,
                                     std::int64_t, std::int64_t, std::int64_t batch_size, std::int64_t channels,
                                     std::int64_t height, std::int64_t width) {
  return at::empty({batch_size, channels, height, width}, grad.options());
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Autograd: a gradient for input only; channel_mapping is marked non-differentiable, as in torchvision.
class PsRoiAlignFunction : public torch::autograd::Function<PsRoiAlignFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& rois,
                               double spatial_scale, std::int64_t pooled_height, std::int64_t pooled_width,
                               std::int64_t sampling_ratio) {
    ctx->saved_data["spatial_scale"] = spatial_scale;
    ctx->saved_data["pooled_height"] = pooled_height;
    ctx->saved_data["pooled_width"] = pooled_width;
    ctx->saved_data["sampling_ratio"] = sampling_ratio;
    ctx->saved_data["input_shape"] = input.sizes().vec();
    at::AutoDispatchBelowADInplaceOrView guard;
    static const auto op = find_typed_op<decltype(ps_roi_align_kernel)>("detops::ps_roi_align");
    auto [output, channel_mapping] = op.call(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio);
    ctx->save_for_backward({rois, channel_mapping});
    ctx->mark_non_differentiable({channel_mapping});
    return {output, channel_mapping};
  }

  static variable_list backward(AutogradContext* ctx, const variable_list& grad_output) {
    const auto saved = ctx->get_saved_variables();
    const auto shape = ctx->saved_data["input_shape"].toIntVector();
    static const auto op = find_typed_op<decltype(ps_roi_align_backward_kernel)>("detops::_ps_roi_align_backward");
    at::Tensor grad_input = op.call(grad_output[0], saved[0], saved[1], ctx->saved_data["spatial_scale"].toDouble(),
                                    ctx->saved_data["pooled_height"].toInt(), ctx->saved_data["pooled_width"].toInt(),
                                    ctx->saved_data["sampling_ratio"].toInt(), shape[0], shape[1], shape[2], shape[3]);
    return {grad_input, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

class PsRoiPoolFunction : public torch::autograd::Function<PsRoiPoolFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& rois,
                               double spatial_scale, std::int64_t pooled_height, std::int64_t pooled_width) {
    ctx->saved_data["spatial_scale"] = spatial_scale;
    ctx->saved_data["pooled_height"] = pooled_height;
    ctx->saved_data["pooled_width"] = pooled_width;
    ctx->saved_data["input_shape"] = input.sizes().vec();
    at::AutoDispatchBelowADInplaceOrView guard;
    static const auto op = find_typed_op<decltype(ps_roi_pool_kernel)>("detops::ps_roi_pool");
    auto [output, channel_mapping] = op.call(input, rois, spatial_scale, pooled_height, pooled_width);
    ctx->save_for_backward({rois, channel_mapping});
    ctx->mark_non_differentiable({channel_mapping});
    return {output, channel_mapping};
  }

  static variable_list backward(AutogradContext* ctx, const variable_list& grad_output) {
    const auto saved = ctx->get_saved_variables();
    const auto shape = ctx->saved_data["input_shape"].toIntVector();
    static const auto op = find_typed_op<decltype(ps_roi_pool_backward_kernel)>("detops::_ps_roi_pool_backward");
    at::Tensor grad_input = op.call(grad_output[0], saved[0], saved[1], ctx->saved_data["spatial_scale"].toDouble(),
                                    ctx->saved_data["pooled_height"].toInt(), ctx->saved_data["pooled_width"].toInt(),
                                    shape[0], shape[1], shape[2], shape[3]);
    return {grad_input, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> ps_roi_align_autograd(const at::Tensor& input, const at::Tensor& rois,
                                                         double spatial_scale, std::int64_t pooled_height,
                                                         std::int64_t pooled_width, std::int64_t sampling_ratio) {
  const auto r = PsRoiAlignFunction::apply(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio);
  return {r[0], r[1]};
}

at::Tensor ps_roi_align_backward_autograd(const at::Tensor& grad, const at::Tensor& rois,
                                          const at::Tensor& channel_mapping, double spatial_scale,
                                          std::int64_t pooled_height, std::int64_t pooled_width,
                                          std::int64_t sampling_ratio, std::int64_t batch_size, std::int64_t channels,
                                          std::int64_t height, std::int64_t width) {
  static const auto op = find_typed_op<decltype(ps_roi_align_backward_kernel)>("detops::_ps_roi_align_backward");
  return DifferentiableOnce<decltype(ps_roi_align_backward_kernel)>::run(
      op, AlignOp::kName, grad, rois, channel_mapping, spatial_scale, pooled_height, pooled_width, sampling_ratio,
      batch_size, channels, height, width);
}

std::tuple<at::Tensor, at::Tensor> ps_roi_pool_autograd(const at::Tensor& input, const at::Tensor& rois,
                                                        double spatial_scale, std::int64_t pooled_height,
                                                        std::int64_t pooled_width) {
  const auto r = PsRoiPoolFunction::apply(input, rois, spatial_scale, pooled_height, pooled_width);
  return {r[0], r[1]};
}

at::Tensor ps_roi_pool_backward_autograd(const at::Tensor& grad, const at::Tensor& rois,
                                         const at::Tensor& channel_mapping, double spatial_scale,
                                         std::int64_t pooled_height, std::int64_t pooled_width, std::int64_t batch_size,
                                         std::int64_t channels, std::int64_t height, std::int64_t width) {
  static const auto op = find_typed_op<decltype(ps_roi_pool_backward_kernel)>("detops::_ps_roi_pool_backward");
  return DifferentiableOnce<decltype(ps_roi_pool_backward_kernel)>::run(
      op, PoolOp::kName, grad, rois, channel_mapping, spatial_scale, pooled_height, pooled_width, batch_size,
      channels, height, width);
}

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) {
  m.def("ps_roi_align(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
        "int sampling_ratio) -> (Tensor, Tensor)");
  m.def("_ps_roi_align_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
        "int pooled_height, int pooled_width, int sampling_ratio, int batch_size, int channels, int height, "
        "int width) -> Tensor");
  m.def("ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width) "
        "-> (Tensor, Tensor)");
  m.def("_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
        "int pooled_height, int pooled_width, int batch_size, int channels, int height, int width) -> Tensor");
}

TORCH_LIBRARY_IMPL(detops, CPU, m) {
  m.impl("ps_roi_align", &detops::ps_roi_align_kernel);
  m.impl("_ps_roi_align_backward", &detops::ps_roi_align_backward_kernel);
  m.impl("ps_roi_pool", &detops::ps_roi_pool_kernel);
  m.impl("_ps_roi_pool_backward", &detops::ps_roi_pool_backward_kernel);
}

TORCH_LIBRARY_IMPL(detops, CUDA, m) {
  m.impl("ps_roi_align", &detops::ps_roi_align_kernel);
  m.impl("_ps_roi_align_backward", &detops::ps_roi_align_backward_kernel);
  m.impl("ps_roi_pool", &detops::ps_roi_pool_kernel);
  m.impl("_ps_roi_pool_backward", &detops::ps_roi_pool_backward_kernel);
}

TORCH_LIBRARY_IMPL(detops, Meta, m) {
  m.impl("ps_roi_align", &detops::ps_roi_align_meta);
  m.impl("_ps_roi_align_backward", &detops::ps_roi_align_backward_meta);
  m.impl("ps_roi_pool", &detops::ps_roi_pool_meta);
  m.impl("_ps_roi_pool_backward", &detops::ps_roi_pool_backward_meta);
}

TORCH_LIBRARY_IMPL(detops, Autograd, m) {
  m.impl("ps_roi_align", &detops::ps_roi_align_autograd);
  m.impl("_ps_roi_align_backward", &detops::ps_roi_align_backward_autograd);
  m.impl("ps_roi_pool", &detops::ps_roi_pool_autograd);
  m.impl("_ps_roi_pool_backward", &detops::ps_roi_pool_backward_autograd);
}
