#pragma once
// The RoI family's binding skeleton (roi_align, roi_pool, ps_roi_align, ps_roi_pool, prroi_pool): the one
// rois check, the shared entry-point checks and the CPU/CUDA launch skeleton. Binding only (libtorch).
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "common/entry_points.h"
#include "common/roi_args.h"
#include "common/roi_nhwc.h"
#include "common/torch_op_kit.h"
#include "common/torch_utils.h"

namespace detops {

// The one rois check: rois [K, 5] of (batch_index, x1, y1, x2, y2) on `like`'s device with its dtype.
// Meta kernels (like == nullptr) check the shape only. Error types are torchvision's for the same
// condition (its kernels index rois.size(1) and check with TORCH_CHECK): IndexError for rois of fewer than
// 2 dimensions, RuntimeError for another shape, device or dtype.
inline void check_rois(const char* op, const at::Tensor& rois, const char* like_name, const at::Tensor* like) {
  TORCH_CHECK_INDEX(rois.dim() >= 2, op, ": rois must be a 2-D tensor [K, 5] of (batch_index, x1, y1, x2, y2); got shape ",
                    shape_string(rois.sizes()));
  TORCH_CHECK(rois.dim() == 2 && rois.size(1) == 5, op,
              ": rois must be a 2-D tensor [K, 5] of (batch_index, x1, y1, x2, y2); got shape ",
              shape_string(rois.sizes()));
  if (like == nullptr) return;
  check_same_device(op, like_name, *like, "rois", rois);
  TORCH_CHECK(like->scalar_type() == rois.scalar_type(), op, ": rois dtype (", rois.scalar_type(), ") must match ",
              like_name, " dtype (", like->scalar_type(), ")");
}

// input [N, C, H, W]: IndexError for fewer dimensions, RuntimeError for more (torchvision's types).
inline void check_input_4d(const char* op, const at::Tensor& input) {
  TORCH_CHECK_INDEX(input.dim() >= 4, op, ": input must be a 4-D tensor [N, C, H, W]; got shape ",
                    shape_string(input.sizes()));
  TORCH_CHECK(input.dim() == 4, op, ": input must be a 4-D tensor [N, C, H, W]; got shape ", shape_string(input.sizes()));
}

// Batch indices of CPU rois are checked before the op runs; CUDA rois are checked by the kernel itself
// (see FirstInvalidRow and raise_if_invalid_roi), so no extra kernel or early sync is needed.
inline void check_roi_batch_indices_cpu(const char* op, const at::Tensor& rois_c, std::int64_t batch) {
  const at::Tensor col = rois_c.select(1, 0).to(at::kDouble).contiguous();
  const double* b = col.data_ptr<double>();
  for (std::int64_t k = 0; k < col.numel(); ++k) {
    TORCH_CHECK_INDEX(b[k] >= 0 && b[k] < static_cast<double>(batch), op, ": rois[", k, ", 0] = ", b[k],
                      " is not a batch index of input: expected a value in [0, ", batch, ")");
  }
}

// Raises for the first roi a CUDA kernel found with an invalid batch index (first_invalid >= 0).
inline void raise_if_invalid_roi(const char* op, std::int64_t first_invalid, const at::Tensor& rois_c,
                                 std::int64_t batch) {
  if (first_invalid < 0) return;
  const double value = rois_c[first_invalid][0].item<double>();
  TORCH_CHECK_INDEX(false, op, ": rois[", first_invalid, ", 0] = ", value,
                    " is not a batch index of input: expected a value in [0, ", batch, ")");
}

// Rois need a feature map to sample: H and W must be positive whenever there is work. S is the op's
// shape struct {batch, channels, height, width, num_rois}.
template <typename S>
void check_roi_feature_map(const char* op, const S& s) {
  TORCH_CHECK_VALUE(s.num_rois == 0 || s.channels == 0 || (s.height > 0 && s.width > 0), op,
                    ": input height and width must be positive when rois is non-empty; got H=", s.height,
                    ", W=", s.width);
}

struct NoCheck {
  void operator()() const {}
};

// Whether a pooled size of 0 is accepted (an empty output, as torchvision's roi_align and roi_pool give) or
// refused (torchvision's PS-RoI ops divide by it and crash; PrRoIPool follows them).
enum class EmptyGrid : bool { kRefused, kAccepted };

// The params checks the RoI ops share (fields pooled_height, pooled_width, spatial_scale), in this order:
// the pooled grid (positive, or non-negative with EmptyGrid::kAccepted), then after_grid() (an op's bound on
// the grid), then a positive finite scale.
template <typename P, typename AfterGrid = NoCheck>
void check_roi_pooling_params(const char* op, const P& p, AfterGrid&& after_grid = {},
                              EmptyGrid empty_grid = EmptyGrid::kRefused) {
  // RuntimeError, as torchvision's for a negative size.
  const std::int64_t least = empty_grid == EmptyGrid::kAccepted ? 0 : 1;
  const char* what = empty_grid == EmptyGrid::kAccepted ? "non-negative" : "positive";
  TORCH_CHECK(p.pooled_height >= least, op, ": pooled_height must be ", what, "; got ", p.pooled_height);
  TORCH_CHECK(p.pooled_width >= least, op, ": pooled_width must be ", what, "; got ", p.pooled_width);
  after_grid();
  TORCH_CHECK_VALUE(std::isfinite(p.spatial_scale) && p.spatial_scale > 0, op,
                    ": spatial_scale must be a positive finite number; got ", p.spatial_scale);
}

// The forward output shape of the ops with one element per (roi, channel, bin).
template <typename P>
opkit::Shape roi_output_shape(const RoiShape& s, const P& p) {
  return {s.num_rois, s.channels, p.pooled_height, p.pooled_width};
}

// The op's shape struct from an [N, C, H, W] shape and the rois.
template <typename S>
S roi_shape(const opkit::Shape& in, const at::Tensor& rois) {
  return S{in[0], in[1], in[2], in[3], rois.size(0)};
}

inline opkit::Shape shape4(const at::Tensor& t) { return {t.size(0), t.size(1), t.size(2), t.size(3)}; }

// The checks every RoI forward starts with: input [N, C, H, W] of a floating dtype, rois like it, then
// check_params(). Returns the dtype.
template <typename CheckParams>
DType check_roi_forward(const char* op, const at::Tensor& input, const at::Tensor& rois, CheckParams&& check_params) {
  check_input_4d(op, input);
  check_rois(op, rois, "input", &input);
  const DType dtype = floating_dtype_or_not_implemented(input, op, "input");
  check_params();
  return dtype;
}

// The checks every RoI backward starts with: grad of a floating dtype, rois like it, `before_params()`,
// check_params(), a non-negative input_shape. Returns the dtype.
template <typename BeforeParams, typename CheckParams>
DType check_roi_backward(const char* op, const at::Tensor& grad, const at::Tensor& rois, const opkit::Shape& input_shape,
                         BeforeParams&& before_params, CheckParams&& check_params) {
  check_rois(op, rois, "grad", &grad);
  const DType dtype = floating_dtype_or_not_implemented(grad, op, "grad");
  before_params();
  check_params();
  for (std::int64_t d : input_shape) {
    TORCH_CHECK(d >= 0, op, ": input shape for the backward must be non-negative; got ",
                      shape_string(input_shape));
  }
  return dtype;
}

// grad must have the forward output's shape; `layout` names its dimensions in the message.
inline void check_roi_grad_shape(const char* op, const at::Tensor& grad, const opkit::Shape& expected,
                                 const char* layout = "(rois, channels, pooled_height, pooled_width)") {
  TORCH_CHECK_VALUE(grad.sizes() == at::IntArrayRef(expected), op, ": grad must have shape ", shape_string(expected),
                    " ", layout, "; got ", shape_string(grad.sizes()));
}

inline std::array<std::int64_t, 4> strides4(const at::Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

// grad_input in the accumulation type (float64 for float64 grads, float32 otherwise), zeroed.
inline at::Tensor zeros_acc(const opkit::Shape& shape, const at::Tensor& grad) {
  return at::zeros(shape, grad.options().dtype(accumulation_scalar_type(grad.scalar_type())));
}

inline at::Tensor to_grad_dtype(const at::Tensor& acc, const at::Tensor& grad) {
  return acc.scalar_type() == grad.scalar_type() ? acc : acc.to(grad.scalar_type());
}

// The launch skeleton of every RoI entry point, on the device of `like` (the input or grad, named
// like_name). CUDA: a device guard, the current stream and a first-invalid-roi slot; cuda(stream, slot)
// launches, after the launch the first invalid roi raises IndexError, then after_cuda() runs (further
// read-backs). CPU: the batch indices are checked, then cpu() runs. Other devices raise.
// nondeterministic names the op for at::globalContext().alertNotDeterministic when its CUDA path
// accumulates with atomics (nullptr: deterministic, no alert).
template <typename Cuda, typename Cpu, typename AfterCuda = NoCheck>
void run_roi_op(const char* op, const char* like_name, const at::Tensor& like, const at::Tensor& rois_c,
                std::int64_t batch, Cuda&& cuda, Cpu&& cpu, const char* nondeterministic = nullptr,
                AfterCuda&& after_cuda = {}) {
  if (like.is_cuda()) {
    // atomicAdd scatter: not bitwise reproducible. Refuse (or warn) under deterministic mode.
    if (nondeterministic != nullptr) at::globalContext().alertNotDeterministic(nondeterministic);
    c10::cuda::CUDAGuard guard(like.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(like.device().index()).stream();
    FirstInvalidRow invalid(like, stream);
    cuda(stream, invalid.get());
    raise_if_invalid_roi(op, invalid.read(), rois_c, batch);
    after_cuda();
    return;
  }
  TORCH_CHECK(like.is_cpu(), op, ": ", like_name, " must be a CPU or CUDA tensor; got ", like.device());
  check_roi_batch_indices_cpu(op, rois_c, batch);
  cpu();
}

// run_roi_op for an entry point that is one launcher call: on CUDA, args.first_invalid_roi is the slot and
// launch(params, args, dtype, stream) runs; on the CPU, cpu(params, args, dtype[, aten_parallel_for()]).
template <typename P, typename A, typename Cpu>
void run_roi_launcher(const char* op, const char* like_name, const at::Tensor& like, const at::Tensor& rois_c,
                      const P& params, A& args, DType dtype, void (*launch)(const P&, const A&, DType, cudaStream_t),
                      Cpu* cpu, const char* nondeterministic = nullptr) {
  run_roi_op(
      op, like_name, like, rois_c, args.shape.batch,
      [&](cudaStream_t stream, unsigned long long* invalid) {
        args.first_invalid_roi = invalid;
        launch(params, args, dtype, stream);
      },
      [&] {
        if constexpr (std::is_invocable_v<Cpu*, const P&, const A&, DType>) {
          cpu(params, args, dtype);
        } else {
          cpu(params, args, dtype, aten_parallel_for());
        }
      },
      nondeterministic);
}

// The whole entry point of a RoI forward with one output [num_rois, channels, pooled_height,
// pooled_width]: the forward checks (check_params() among them), the feature-map check, the output, and
// launch or cpu over RoiForwardArgs.
// The map a forward's launcher reads (roi_args.h): for a CUDA forward with the channels-last kernel
// (nhwc_kernel) that common/roi_nhwc.h's rule picks, input itself when it is channels last, else input
// contiguous plus a [batch, height, width, channels] workspace for the launcher's copy; otherwise input
// contiguous (channels first).
struct RoiMapOperand {
  at::Tensor input, workspace;
  bool channels_last = false;
  void set(RoiForwardArgs& args) const {
    args.input = input.data_ptr();
    args.input_channels_last = channels_last;
    args.channels_last_workspace = workspace.defined() ? workspace.data_ptr() : nullptr;
  }
};

// rule: when the op's channels-last kernel pays (common/roi_nhwc.h); the RoIAlign family's by default.
using RoiChannelsLastRule = bool (*)(std::int64_t bins, const RoiShape& s, bool input_channels_last);

inline RoiMapOperand roi_map_operand(const at::Tensor& input, const RoiShape& s, std::int64_t bins, bool nhwc_kernel,
                                     RoiChannelsLastRule rule = &roi_forward_channels_last) {
  RoiMapOperand m;
  const bool input_channels_last = input.is_contiguous(at::MemoryFormat::ChannelsLast);
  const bool use = nhwc_kernel && input.is_cuda() && rule(bins, s, input_channels_last);
  m.channels_last = use && input_channels_last;
  m.input = m.channels_last ? input : input.contiguous();
  if (use && !input_channels_last) m.workspace = at::empty({s.batch, s.height, s.width, s.channels}, input.options());
  return m;
}

template <typename P, typename CheckParams, typename Cpu>
at::Tensor run_roi_forward(const char* op, const at::Tensor& input, const at::Tensor& rois, const P& params,
                           CheckParams&& check_params, Launcher<P, RoiForwardArgs>* launch, Cpu* cpu,
                           bool nhwc_kernel = false) {
  const DType dtype = check_roi_forward(op, input, rois, check_params);
  const auto s = roi_shape<RoiShape>(shape4(input), rois);
  check_roi_feature_map(op, s);
  at::Tensor output = at::empty(roi_output_shape(s, params), input.options());
  if (output.numel() == 0) return output;
  const RoiMapOperand map = roi_map_operand(input, s, roi_bins(params), nhwc_kernel);
  const at::Tensor rois_c = rois.contiguous();
  RoiForwardArgs args{s, nullptr, rois_c.data_ptr(), output.data_ptr()};
  map.set(args);
  run_roi_launcher(op, "input", input, rois_c, params, args, dtype, launch, cpu);
  return output;
}

// Meta kernel of the RoI forwards: input [N, C, H, W] and rois [K, 5] checked for shape only; the op's
// outputs as empty tensors of output_shape (a second, int32 one when the op has one).
template <typename Returns>
Returns roi_meta_outputs(const at::Tensor& input, const opkit::Shape& output_shape) {
  if constexpr (std::is_same_v<Returns, at::Tensor>) {
    return at::empty(output_shape, input.options());
  } else {
    return {at::empty(output_shape, input.options()), at::empty(output_shape, input.options().dtype(at::kInt))};
  }
}

// The Meta kernel (a definition's kMeta) of the RoI forwards whose output is [K, C, pooled_height,
// pooled_width]: input and rois checked for shape only, under the op's name.
template <typename Returns>
struct RoiForwardMeta {
  const char* op;
  template <typename P>
  Returns operator()(const at::Tensor& input, const at::Tensor& rois, const P& p) const {
    check_input_4d(op, input);
    check_rois(op, rois, nullptr, nullptr);
    return roi_meta_outputs<Returns>(input, {rois.size(0), input.size(1), p.pooled_height, p.pooled_width});
  }
};

// The schema arguments every RoI forward starts with, (Tensor input, Tensor rois, float spatial_scale,
// int pooled_height, int pooled_width), then the op's own.
template <typename P, typename... Own>
using RoiForwardSchemaArgs = opkit::Args<opkit::Tensor, opkit::Tensor, opkit::Field<&P::spatial_scale>,
                                         opkit::Field<&P::pooled_height>, opkit::Field<&P::pooled_width>, Own...>;

// torchvision's order of a RoI backward's schema arguments: (Tensor grad, Tensor rois, Saved... (the
// forward's int32 output, when it has one), float spatial_scale, int pooled_height, int pooled_width,
// int batch_size, int channels, int height, int width), then the op's own: RoiBackwardSchema<...>::Args<P, Own...>.
template <typename... Saved>
struct RoiBackwardSchema {
  template <typename P, typename... Own>
  using Args = opkit::Args<opkit::Tensor, opkit::Tensor, Saved..., opkit::Field<&P::spatial_scale>,
                           opkit::Field<&P::pooled_height>, opkit::Field<&P::pooled_width>, opkit::Dim<0>,
                           opkit::Dim<1>, opkit::Dim<2>, opkit::Dim<3>, Own...>;
};

// The RoI forward ops' definition, shared: schema arguments (input, rois, params fields...), the
// Function autograd that saves rois (and the int32 second output, when there is one) and calls
// Backward with (grad, saved tensors..., params, input shape).
template <typename P, typename Backward, typename R = at::Tensor>
struct RoiForwardDef : opkit::OpDef<P> {
  using Returns = R;
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kFunction;
  static opkit::TensorList saved(const opkit::TensorList& inputs, const opkit::TensorList& outputs) {
    opkit::TensorList s{inputs[1]};
    for (std::size_t i = 1; i < outputs.size(); ++i) s.push_back(outputs[i]);
    return s;
  }
  static opkit::variable_list backward(const opkit::Saved<P>& s, const opkit::variable_list& grads) {
    opkit::TensorList args{grads[0]};
    args.insert(args.end(), s.tensors.begin(), s.tensors.end());
    return {opkit::call<Backward>(args, s.params, s.input_shape)};
  }
};

// The RoI backward ops' definition, shared: differentiable once, Meta gives an input_shape-shaped tensor.
template <typename P>
struct RoiBackwardDef : opkit::OpDef<P> {
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kOnce;
  static constexpr opkit::EmptyOfInputShape kMeta{};
};

}  // namespace detops
