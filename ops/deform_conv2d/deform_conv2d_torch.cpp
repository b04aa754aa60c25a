// Deformable convolution as torch ops: torch.ops.detops.deform_conv2d with torchvision's schema
// (torch.ops.torchvision.deform_conv2d: every tensor given, the groups and use_mask explicit) and its backward
// op, differentiable once. Registered with the op kit (docs/op-kit.md). Errors follow torchvision's types:
// RuntimeError for shapes and arguments, NotImplementedError for a non-floating dtype.
#include "deform_conv2d/deform_conv2d_torch.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include "common/torch_op_kit.h"
#include "common/torch_utils.h"

namespace detops {
namespace {

constexpr const char* kOp = "deform_conv2d";

void check_params(const DeformConv2dParams& p) {
  TORCH_CHECK(p.stride_h >= 1 && p.stride_w >= 1, kOp, ": stride must be >= 1; got (", p.stride_h, ", ", p.stride_w,
              ")");
  TORCH_CHECK(p.pad_h >= 0 && p.pad_w >= 0, kOp, ": padding must be >= 0; got (", p.pad_h, ", ", p.pad_w, ")");
  TORCH_CHECK(p.dilation_h >= 1 && p.dilation_w >= 1, kOp, ": dilation must be >= 1; got (", p.dilation_h, ", ",
              p.dilation_w, ")");
  TORCH_CHECK(p.groups >= 1, kOp, ": groups must be >= 1; got ", p.groups);
  TORCH_CHECK(p.offset_groups >= 1, kOp, ": offset_groups must be >= 1; got ", p.offset_groups);
}

void check_dims(const char* name, const at::Tensor& t, const char* layout) {
  TORCH_CHECK(t.dim() == 4, kOp, ": ", name, " must be a 4-D tensor ", layout, "; got shape ", shape_string(t.sizes()));
}

void check_rows(const char* name, const at::Tensor& t, const DeformConv2dShape& s, std::int64_t rows,
                const char* what) {
  check_dims(name, t, "[B, rows, H_out, W_out]");
  TORCH_CHECK(t.size(0) == s.batch && t.size(1) == rows && t.size(2) == s.out_height && t.size(3) == s.out_width, kOp,
              ": ", name, " must have shape [", s.batch, ", ", rows, ", ", s.out_height, ", ", s.out_width, "] (", what,
              "); got ", shape_string(t.sizes()));
}

// Every check of the forward (its Meta kernel's too), in torchvision's order where it has one. Returns the shape.
DeformConv2dShape check_forward(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
                                const at::Tensor& mask, const at::Tensor& bias, const DeformConv2dParams& p) {
  floating_dtype_or_not_implemented(input, kOp, "input");
  check_dims("input", input, "[B, C_in, H, W]");
  check_dims("offset", offset, "[B, 2 * offset_groups * kh * kw, H_out, W_out]");
  if (p.use_mask) check_dims("mask", mask, "[B, offset_groups * kh * kw, H_out, W_out]");
  check_dims("weight", weight, "[C_out, C_in / groups, kh, kw]");
  const auto same_dtype = [&](const char* name, const at::Tensor& t) {
    TORCH_CHECK(t.scalar_type() == input.scalar_type(), kOp, ": ", name, " must have input's dtype (",
                input.scalar_type(), "); got ", t.scalar_type(), " (cast ", name, " or input: mixed dtypes are refused)");
    check_same_device(kOp, "input", input, name, t);
  };
  same_dtype("weight", weight);
  same_dtype("offset", offset);
  if (p.use_mask) same_dtype("mask", mask);
  same_dtype("bias", bias);
  check_params(p);
  DeformConv2dShape s{input.size(0), input.size(1), input.size(2), input.size(3), weight.size(0), weight.size(2),
                      weight.size(3)};
  TORCH_CHECK(s.kernel_h >= 1 && s.kernel_w >= 1, kOp, ": weight's kernel (kh, kw) must be at least 1 x 1; got weight shape ",
              shape_string(weight.sizes()));
  TORCH_CHECK(weight.size(1) * p.groups == s.in_channels, kOp, ": weight.size(1) * groups must equal input's channels ",
              s.in_channels, "; got weight shape ", shape_string(weight.sizes()), " and groups ", p.groups);
  TORCH_CHECK(s.out_channels % p.groups == 0, kOp, ": weight.size(0) (output channels) must be divisible by groups ",
              p.groups, "; got ", s.out_channels);
  TORCH_CHECK(s.in_channels % p.offset_groups == 0, kOp, ": input's channels ", s.in_channels,
              " must be divisible by offset_groups ", p.offset_groups);
  s.out_height = deform_conv2d_out_size(s.height, s.kernel_h, p.pad_h, p.dilation_h, p.stride_h);
  s.out_width = deform_conv2d_out_size(s.width, s.kernel_w, p.pad_w, p.dilation_w, p.stride_w);
  TORCH_CHECK(s.out_height > 0 && s.out_width > 0, kOp, ": the output would be empty: (H_out, W_out) = (",
              s.out_height, ", ", s.out_width, ") for input ", shape_string(input.sizes()), ", kernel (", s.kernel_h,
              ", ", s.kernel_w, "), padding (", p.pad_h, ", ", p.pad_w, "), dilation (", p.dilation_h, ", ",
              p.dilation_w, ") and stride (", p.stride_h, ", ", p.stride_w, ")");
  check_rows("offset", offset, s, 2 * p.offset_groups * s.kernel_taps(), "(dy, dx) per offset group and tap");
  if (p.use_mask) check_rows("mask", mask, s, p.offset_groups * s.kernel_taps(), "one per offset group and tap");
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == s.out_channels, kOp, ": bias must have shape [", s.out_channels,
              "]; got ", shape_string(bias.sizes()));
  return s;
}

template <typename A>
void run(const at::Tensor& like, const DeformConv2dParams& p, A& args, Launcher<DeformConv2dParams, A>* launch,
         CpuEntry<DeformConv2dParams, A>* cpu) {
  const DType dtype = floating_dtype_of(like, kOp, "input");
  run_on_device(
      kOp, "input", like,
      [&](cudaStream_t stream) {
        args.blas = at::cuda::getCurrentCUDABlasHandle();
        launch(p, args, dtype, stream);
      },
      [&] { cpu(p, args, dtype, aten_parallel_for()); });
}

// The CUDA launchers' workspace (none on the CPU), its size and pointer set in args.
at::Tensor workspace(const at::Tensor& like, const DeformConv2dParams& p, const DeformConv2dShape& s, bool backward,
                     DeformConv2dProblem& args) {
  const std::int64_t element = static_cast<std::int64_t>(c10::elementSize(like.scalar_type()));
  const std::int64_t acc = static_cast<std::int64_t>(c10::elementSize(accumulation_scalar_type(like.scalar_type())));
  const std::int64_t bytes = like.is_cuda() ? deform_conv2d_workspace(s, p.groups, element, acc, backward).bytes : 0;
  at::Tensor w = at::empty({bytes}, like.options().dtype(at::kByte));
  args.workspace = w.data_ptr();
  args.workspace_bytes = bytes;
  return w;
}

}  // namespace

at::Tensor deform_conv2d_forward(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
                                 const at::Tensor& mask, const at::Tensor& bias, const DeformConv2dParams& params) {
  const DeformConv2dShape s = check_forward(input, weight, offset, mask, bias, params);
  at::Tensor out = at::empty({s.batch, s.out_channels, s.out_height, s.out_width}, input.options());
  if (out.numel() == 0) return out;
  const at::Tensor x = input.contiguous(), w = weight.contiguous(), o = offset.contiguous(), b = bias.contiguous();
  const at::Tensor m = params.use_mask ? mask.contiguous() : at::Tensor();
  DeformConv2dForwardArgs args;
  args.s = s;
  const at::Tensor work = workspace(input, params, s, false, args);
  args.input = x.data_ptr();
  args.weight = w.data_ptr();
  args.offset = o.data_ptr();
  args.mask = m.defined() ? m.data_ptr() : nullptr;
  args.bias = b.data_ptr();
  args.out = out.data_ptr();
  run(input, params, args, &launch_deform_conv2d_forward, &run_deform_conv2d_forward_cpu);
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> deform_conv2d_backward(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
    const at::Tensor& mask, const at::Tensor& bias, const DeformConv2dParams& params) {
  const DeformConv2dShape s = check_forward(input, weight, offset, mask, bias, params);
  TORCH_CHECK(grad.scalar_type() == input.scalar_type(), kOp, ": grad must have input's dtype (", input.scalar_type(),
              "); got ", grad.scalar_type());
  check_same_device(kOp, "input", input, "grad", grad);
  const std::vector<std::int64_t> out_shape{s.batch, s.out_channels, s.out_height, s.out_width};
  TORCH_CHECK(grad.sizes() == at::IntArrayRef(out_shape), kOp, ": grad must have the output's shape ",
              shape_string(out_shape), "; got ", shape_string(grad.sizes()));
  at::Tensor grad_input = at::empty(input.sizes(), input.options());
  at::Tensor grad_weight = at::empty(weight.sizes(), input.options());
  at::Tensor grad_offset = at::empty(offset.sizes(), input.options());
  at::Tensor grad_mask = params.use_mask ? at::empty(mask.sizes(), input.options()) : at::zeros(mask.sizes(), mask.options());
  at::Tensor grad_bias = at::empty(bias.sizes(), input.options());
  if (input.is_cuda()) {
    at::globalContext().alertNotDeterministic("detops::_deform_conv2d_backward (CUDA)");
  }
  const at::Tensor g = grad.contiguous(), x = input.contiguous(), w = weight.contiguous(), o = offset.contiguous();
  const at::Tensor m = params.use_mask ? mask.contiguous() : at::Tensor();
  DeformConv2dBackwardArgs args;
  args.s = s;
  const at::Tensor work = workspace(input, params, s, true, args);
  args.grad = g.data_ptr();
  args.input = x.data_ptr();
  args.weight = w.data_ptr();
  args.offset = o.data_ptr();
  args.mask = m.defined() ? m.data_ptr() : nullptr;
  args.grad_input = grad_input.data_ptr();
  args.grad_weight = grad_weight.data_ptr();
  args.grad_offset = grad_offset.data_ptr();
  args.grad_mask = params.use_mask ? grad_mask.data_ptr() : nullptr;
  args.grad_bias = grad_bias.data_ptr();
  run(input, params, args, &launch_deform_conv2d_backward, &run_deform_conv2d_backward_cpu);
  return {grad_input, grad_weight, grad_offset, grad_mask, grad_bias};
}

namespace {

at::Tensor deform_conv2d_meta(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
                              const at::Tensor& mask, const at::Tensor& bias, const DeformConv2dParams& p) {
  const DeformConv2dShape s = check_forward(input, weight, offset, mask, bias, p);
  return at::empty({s.batch, s.out_channels, s.out_height, s.out_width}, input.options());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward_meta(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
    const at::Tensor& mask, const at::Tensor& bias, const DeformConv2dParams& p) {
  check_forward(input, weight, offset, mask, bias, p);
  return {at::empty(input.sizes(), input.options()), at::empty(weight.sizes(), input.options()),
          at::empty(offset.sizes(), input.options()), at::empty(mask.sizes(), p.use_mask ? input.options() : mask.options()),
          at::empty(bias.sizes(), input.options())};
}

// The params of a call; fp32 GEMMs may use TF32 exactly when torch's matmuls may
// (torch.backends.cuda.matmul.allow_tf32 / torch.set_float32_matmul_precision), as torchvision's at::addmm.
DeformConv2dParams make_params(std::int64_t stride_h, std::int64_t stride_w, std::int64_t pad_h, std::int64_t pad_w,
                               std::int64_t dilation_h, std::int64_t dilation_w, std::int64_t groups,
                               std::int64_t offset_groups, bool use_mask) {
  DeformConv2dParams p{stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, offset_groups, use_mask};
  p.allow_tf32 = at::globalContext().allowTF32CuBLAS();
  return p;
}

using P = DeformConv2dParams;
using opkit::Field;
using opkit::Tensor;
#define DETOPS_DEFORM_CONV2D_SCALARS                                                                         \
  "int stride_h, int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w, int groups, int offset_groups, " \
  "bool use_mask"
struct Backward : opkit::OpDef<P> {
  using Returns = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
  static constexpr const char* kSchema =
      "_deform_conv2d_backward(Tensor grad, Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, "
      DETOPS_DEFORM_CONV2D_SCALARS ") -> (Tensor, Tensor, Tensor, Tensor, Tensor)";
  using Args = opkit::Args<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Field<&P::stride_h>, Field<&P::stride_w>,
                           Field<&P::pad_h>, Field<&P::pad_w>, Field<&P::dilation_h>, Field<&P::dilation_w>,
                           Field<&P::groups>, Field<&P::offset_groups>, Field<&P::use_mask>>;
  static constexpr auto kMakeParams = &make_params;
  static constexpr auto kCompute = &deform_conv2d_backward;
  static constexpr auto kMeta = &backward_meta;
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kOnce;
  static constexpr const char* kOpName = kOp;
};

// Gradients for input, weight, offset, mask (when use_mask) and bias, from one backward call.
struct Forward : opkit::OpDef<P> {
  static constexpr const char* kSchema =
      "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, "
      DETOPS_DEFORM_CONV2D_SCALARS ") -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Tensor, Tensor, Tensor, Field<&P::stride_h>, Field<&P::stride_w>,
                           Field<&P::pad_h>, Field<&P::pad_w>, Field<&P::dilation_h>, Field<&P::dilation_w>,
                           Field<&P::groups>, Field<&P::offset_groups>, Field<&P::use_mask>>;
  static constexpr auto kMakeParams = &make_params;
  static constexpr auto kCompute = &deform_conv2d_forward;
  static constexpr auto kMeta = &deform_conv2d_meta;
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kFunction;
  static opkit::TensorList saved(const opkit::TensorList& inputs, const opkit::TensorList&) { return inputs; }
  static opkit::variable_list backward(const opkit::Saved<P>& s, const opkit::variable_list& grads) {
    at::Tensor gi, gw, go, gm, gb;
    std::tie(gi, gw, go, gm, gb) = opkit::call<Backward>(
        {grads[0], s.tensors[0], s.tensors[1], s.tensors[2], s.tensors[3], s.tensors[4]}, s.params);
    const auto keep = [&](std::size_t i, const at::Tensor& t) { return s.needs_grad(i) ? t : at::Tensor(); };
    return {keep(0, gi), keep(1, gw), keep(2, go), s.params.use_mask ? keep(3, gm) : at::Tensor(), keep(4, gb)};
  }
};
#undef DETOPS_DEFORM_CONV2D_SCALARS

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) { detops::opkit::define<detops::Forward, detops::Backward>(m); }
