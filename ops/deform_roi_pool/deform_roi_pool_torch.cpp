// torch.ops.detops.deform_roi_pool and modulated_deform_roi_pool (mmcv's deform_roi_pool and the modulated
// form of its ModulatedDeformRoIPoolPack: mmcv's argument order and defaults), and their one backward op
// _deform_roi_pool_backward (gradients for input, offset and mask; differentiable once). Declared with the
// op kit (docs/op-kit.md); the RoI family's checks and launch skeleton (common/torch_roi.h).
#include "deform_roi_pool/deform_roi_pool_torch.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <cmath>

#include "common/torch_roi.h"

namespace detops {
namespace {

using P = DeformRoiPoolParams;
constexpr const char* kOp = "deform_roi_pool";
constexpr const char* kModulatedOp = "modulated_deform_roi_pool";

void check_params(const char* op, const P& p) {
  check_roi_pooling_params(op, p, NoCheck{}, EmptyGrid::kAccepted);
  TORCH_CHECK_VALUE(p.sampling_ratio <= kDeformRoiPoolMaxSamplingGrid, op, ": sampling_ratio must be <= ",
                    kDeformRoiPoolMaxSamplingGrid, " (or <= 0 for an adaptive grid); got ", p.sampling_ratio);
  TORCH_CHECK_VALUE(std::isfinite(p.gamma), op, ": gamma must be a finite number; got ", p.gamma);
}

// offset [K, 2, ph, pw] (rows = 2) or mask [K, 1, ph, pw] (rows = 1), when defined: input's device and dtype
// (fp16 / bf16 features with fp32 offsets are refused, TypeError naming both).
void check_bin_tensor(const char* op, const char* name, const at::Tensor& t, std::int64_t rows, const at::Tensor& input,
                      std::int64_t num_rois, const P& p) {
  if (!t.defined()) return;
  const opkit::Shape expected{num_rois, rows, p.pooled_height, p.pooled_width};
  TORCH_CHECK_VALUE(t.sizes() == at::IntArrayRef(expected), op, ": ", name, " must have shape ", shape_string(expected),
                    rows == 2 ? " (rois, 2 (x, y), pooled_height, pooled_width)" : " (rois, 1, pooled_height, pooled_width)",
                    "; got ", shape_string(t.sizes()));
  check_same_device(op, "input", input, name, t);
  check_same_dtype(op, "input", input, name, t);
}

// modulated_deform_roi_pool's mask is `Tensor?` in the schema only so that None reaches this message (a `Tensor`
// argument given None fails inside the dispatcher with "tensor does not have a device").
void require_mask(const at::Tensor& mask) {
  TORCH_CHECK_VALUE(mask.defined(), kModulatedOp, ": mask must be a tensor [K, 1, pooled_height, pooled_width]; got None");
}

at::Tensor contiguous_or_undefined(const at::Tensor& t) { return t.defined() ? t.contiguous() : at::Tensor(); }
void* data_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// The CUDA launchers' buffer for a channels-last copy of input: [batch, height, width, channels].
at::Tensor channels_last_workspace(const RoiShape& s, const at::Tensor& input) {
  return at::empty({s.batch, s.height, s.width, s.channels}, input.options());
}

at::Tensor forward(const char* op, const at::Tensor& input, const at::Tensor& rois, const at::Tensor& offset,
                   const at::Tensor& mask, const P& params) {
  const DType dtype = check_roi_forward(op, input, rois, [&] { check_params(op, params); });
  const auto s = roi_shape<RoiShape>(shape4(input), rois);
  check_roi_feature_map(op, s);
  check_bin_tensor(op, "offset", offset, 2, input, s.num_rois, params);
  check_bin_tensor(op, "mask", mask, 1, input, s.num_rois, params);
  at::Tensor output = at::empty(roi_output_shape(s, params), input.options());
  if (output.numel() == 0) return output;
  // CUDA reads the map channels last when common/roi_nhwc.h's rule says so: input itself when it is channels last,
  // else the launcher's copy in a workspace.
  const RoiMapOperand map = roi_map_operand(input, s, params.pooled_height * params.pooled_width, true);
  const at::Tensor rois_c = rois.contiguous();
  const at::Tensor offset_c = contiguous_or_undefined(offset), mask_c = contiguous_or_undefined(mask);
  DeformRoiPoolForwardArgs args{{s, nullptr, rois_c.data_ptr(), output.data_ptr()}, data_or_null(offset_c),
                                data_or_null(mask_c)};
  map.set(args);
  run_roi_launcher(op, "input", input, rois_c, params, args, dtype, &launch_deform_roi_pool_forward,
                   &run_deform_roi_pool_forward_cpu);
  return output;
}

}  // namespace

at::Tensor deform_roi_pool_forward(const at::Tensor& input, const at::Tensor& rois, const at::Tensor& offset,
                                   const DeformRoiPoolParams& params) {
  return forward(kOp, input, rois, offset, at::Tensor(), params);
}

at::Tensor modulated_deform_roi_pool_forward(const at::Tensor& input, const at::Tensor& rois, const at::Tensor& offset,
                                             const at::Tensor& mask, const DeformRoiPoolParams& params) {
  require_mask(mask);
  return forward(kModulatedOp, input, rois, offset, mask, params);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> deform_roi_pool_backward(const at::Tensor& grad, const at::Tensor& input,
                                                                        const at::Tensor& rois, const at::Tensor& offset,
                                                                        const at::Tensor& mask,
                                                                        const DeformRoiPoolParams& params) {
  check_rois(kOp, rois, "grad", &grad);
  const DType dtype = floating_dtype_or_not_implemented(grad, kOp, "grad");
  check_input_4d(kOp, input);
  check_same_device(kOp, "grad", grad, "input", input);
  check_same_dtype(kOp, "grad", grad, "input", input);
  check_params(kOp, params);
  const auto s = roi_shape<RoiShape>(shape4(input), rois);
  check_roi_feature_map(kOp, s);
  check_roi_grad_shape(kOp, grad, roi_output_shape(s, params));
  check_bin_tensor(kOp, "offset", offset, 2, input, s.num_rois, params);
  check_bin_tensor(kOp, "mask", mask, 1, input, s.num_rois, params);
  const at::Tensor grad_offset_acc = offset.defined() ? zeros_acc(shape4(offset), grad) : at::empty({0}, grad.options());
  const at::Tensor grad_mask_acc = mask.defined() ? zeros_acc(shape4(mask), grad) : at::empty({0}, grad.options());
  const auto results = [&](const at::Tensor& grad_input) {
    return std::make_tuple(grad_input, to_grad_dtype(grad_offset_acc, grad), to_grad_dtype(grad_mask_acc, grad));
  };
  if (grad.numel() == 0 || input.numel() == 0) return results(at::zeros(input.sizes(), grad.options()));
  const at::Tensor rois_c = rois.contiguous();
  const at::Tensor offset_c = contiguous_or_undefined(offset), mask_c = contiguous_or_undefined(mask);
  const bool values = offset.defined() || mask.defined();  // the offset and mask gradients read the input
  DeformRoiPoolBackwardArgs args{{s, grad.data_ptr(), strides4(grad), rois_c.data_ptr()}};
  args.offset = data_or_null(offset_c);
  args.mask = data_or_null(mask_c);
  args.grad_offset_acc = offset.defined() ? grad_offset_acc.data_ptr() : nullptr;
  args.grad_mask_acc = mask.defined() ? grad_mask_acc.data_ptr() : nullptr;
  at::Tensor grad_input, input_read;
  run_roi_op(
      kOp, "grad", grad, rois_c, s.batch,
      [&](cudaStream_t stream, unsigned long long* invalid) {
        // Channels last, as the scatter walks the map (deform_roi_pool.h): input itself when it is, else the
        // launcher's copy in a workspace.
        at::Tensor workspace;
        if (values) {
          args.input_channels_last = input.is_contiguous(at::MemoryFormat::ChannelsLast);
          input_read = args.input_channels_last ? input : input.contiguous();
          if (!args.input_channels_last) workspace = channels_last_workspace(s, input);
        }
        const at::Tensor acc_nhwc = zeros_acc({s.batch, s.height, s.width, s.channels}, grad);
        grad_input = at::empty(input.sizes(), grad.options());
        args.input = data_or_null(input_read);
        args.channels_last_workspace = data_or_null(workspace);
        args.grad_input_acc = acc_nhwc.data_ptr();
        args.grad_input = grad_input.data_ptr();
        args.first_invalid_roi = invalid;
        launch_deform_roi_pool_backward(params, args, dtype, stream);
      },
      [&] {
        if (values) input_read = input.contiguous();
        const at::Tensor acc = zeros_acc(shape4(input), grad);
        args.input = data_or_null(input_read);
        args.grad_input_acc = acc.data_ptr();
        run_deform_roi_pool_backward_cpu(params, args, dtype);
        grad_input = to_grad_dtype(acc, grad);
      },
      "detops::_deform_roi_pool_backward (CUDA)");
  return results(grad_input);
}

namespace {

// Shape-only kernels for meta tensors (torch.compile's fake tensors).
at::Tensor forward_meta(const char* op, const at::Tensor& input, const at::Tensor& rois, const at::Tensor& offset,
                        const at::Tensor& mask, const P& p) {
  check_input_4d(op, input);
  check_rois(op, rois, nullptr, nullptr);
  check_bin_tensor(op, "offset", offset, 2, input, rois.size(0), p);
  check_bin_tensor(op, "mask", mask, 1, input, rois.size(0), p);
  return at::empty({rois.size(0), input.size(1), p.pooled_height, p.pooled_width}, input.options());
}

at::Tensor deform_meta(const at::Tensor& input, const at::Tensor& rois, const at::Tensor& offset, const P& p) {
  return forward_meta(kOp, input, rois, offset, at::Tensor(), p);
}

at::Tensor modulated_meta(const at::Tensor& input, const at::Tensor& rois, const at::Tensor& offset,
                          const at::Tensor& mask, const P& p) {
  require_mask(mask);
  return forward_meta(kModulatedOp, input, rois, offset, mask, p);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_meta(const at::Tensor& grad, const at::Tensor& input,
                                                             const at::Tensor&, const at::Tensor& offset,
                                                             const at::Tensor& mask, const P&) {
  const auto like = [&](const at::Tensor& t) {
    return t.defined() ? at::empty(t.sizes(), grad.options()) : at::empty({0}, grad.options());
  };
  return {at::empty(input.sizes(), grad.options()), like(offset), like(mask)};
}

using opkit::Field;
using opkit::OptionalTensor;
using opkit::Tensor;
constexpr char kOutputSizeName[] = "deform_roi_pool: output_size";
constexpr char kModulatedOutputSizeName[] = "modulated_deform_roi_pool: output_size";
using OutputSize = opkit::IntPair<&P::pooled_height, &P::pooled_width, kOutputSizeName>;
using ModulatedOutputSize = opkit::IntPair<&P::pooled_height, &P::pooled_width, kModulatedOutputSizeName>;

struct Backward : opkit::OpDef<P> {
  using Returns = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
  static constexpr const char* kSchema =
      "_deform_roi_pool_backward(Tensor grad, Tensor input, Tensor rois, Tensor? offset, Tensor? mask, "
      "int[2] output_size, float spatial_scale, int sampling_ratio, float gamma) -> (Tensor, Tensor, Tensor)";
  using Args = opkit::Args<Tensor, Tensor, Tensor, OptionalTensor, OptionalTensor, OutputSize, Field<&P::spatial_scale>,
                           Field<&P::sampling_ratio>, Field<&P::gamma>>;
  static constexpr auto kCompute = &deform_roi_pool_backward;
  static constexpr auto kMeta = &backward_meta;
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kOnce;
  static constexpr const char* kOpName = kOp;
};

// Both forwards save their tensor arguments (input, rois, offset[, mask]) and take their gradients from the
// one Backward op, each only where asked for; rois get none.
template <bool Modulated>
struct ForwardDef : opkit::OpDef<P> {
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kFunction;
  static opkit::TensorList saved(const opkit::TensorList& inputs, const opkit::TensorList&) { return inputs; }
  static opkit::variable_list backward(const opkit::Saved<P>& s, const opkit::variable_list& grads) {
    const opkit::TensorList& t = s.tensors;
    const at::Tensor mask = Modulated ? t[3] : at::Tensor();
    const auto [grad_input, grad_offset, grad_mask] =
        opkit::call<Backward>({grads[0], t[0], t[1], t[2], mask}, s.params);
    opkit::variable_list out{s.needs_grad(0) ? grad_input : at::Tensor(), at::Tensor(),
                             t[2].defined() && s.needs_grad(2) ? grad_offset : at::Tensor()};
    // needs_grad counts the tensors given (autograd's input edges): with offset None, mask is edge 2.
    if (Modulated) out.push_back(s.needs_grad(t[2].defined() ? 3 : 2) ? grad_mask : at::Tensor());
    return out;
  }
};

struct Forward : ForwardDef<false> {
  static constexpr const char* kSchema =
      "deform_roi_pool(Tensor input, Tensor rois, Tensor? offset, int[2] output_size, float spatial_scale=1.0, "
      "int sampling_ratio=0, float gamma=0.1) -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, OptionalTensor, OutputSize, Field<&P::spatial_scale>,
                           Field<&P::sampling_ratio>, Field<&P::gamma>>;
  static constexpr auto kCompute = &deform_roi_pool_forward;
  static constexpr auto kMeta = &deform_meta;
};

struct ModulatedForward : ForwardDef<true> {
  static constexpr const char* kSchema =
      "modulated_deform_roi_pool(Tensor input, Tensor rois, Tensor? offset, Tensor? mask, int[2] output_size, "
      "float spatial_scale=1.0, int sampling_ratio=0, float gamma=0.1) -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, OptionalTensor, OptionalTensor, ModulatedOutputSize, Field<&P::spatial_scale>,
                           Field<&P::sampling_ratio>, Field<&P::gamma>>;
  static constexpr auto kCompute = &modulated_deform_roi_pool_forward;
  static constexpr auto kMeta = &modulated_meta;
};

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) {
  detops::opkit::define<detops::Forward, detops::ModulatedForward, detops::Backward>(m);
}
