// Masked 2-D convolution as torch ops: torch.ops.detops.masked_conv2d (mmcv.ops.masked_conv2d's arguments,
// order and defaults, without its limits: any batch, stride and padding, optional bias) and its two backward
// ops, each differentiable once. The mask gets no gradient. Registered with the op kit (docs/op-kit.md).
#include "masked_conv2d/masked_conv2d_torch.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/zeros.h>

#include "common/torch_op_kit.h"
#include "common/torch_utils.h"

namespace detops {
namespace {

constexpr const char* kOp = "masked_conv2d";

void check_params(const MaskedConv2dParams& p) {
  TORCH_CHECK_VALUE(p.padding_h >= 0 && p.padding_w >= 0, kOp, ": padding must be >= 0; got (", p.padding_h, ", ",
                    p.padding_w, ")");
  TORCH_CHECK_VALUE(p.stride_h >= 1 && p.stride_w >= 1, kOp, ": stride must be >= 1; got (", p.stride_h, ", ",
                    p.stride_w, ")");
}

// The problem's shape from the features' sizes, weight and params, after checking every size.
MaskedConv2dShape shape_of(at::IntArrayRef features, const at::Tensor& weight, const MaskedConv2dParams& p) {
  TORCH_CHECK_VALUE(features.size() == 4, kOp, ": features must be a 4-D tensor [N, C_in, H, W]; got shape ",
                    shape_string(features));
  TORCH_CHECK_VALUE(weight.dim() == 4, kOp, ": weight must be a 4-D tensor [C_out, C_in, kh, kw]; got shape ",
                    shape_string(weight.sizes()));
  TORCH_CHECK_VALUE(weight.size(1) == features[1], kOp, ": weight must have C_in = features.size(1) = ", features[1],
                    " input channels (groups = 1); got weight shape ", shape_string(weight.sizes()));
  TORCH_CHECK_VALUE(weight.size(2) >= 1 && weight.size(3) >= 1, kOp,
                    ": weight's kernel (kh, kw) must be at least 1 x 1; got weight shape ", shape_string(weight.sizes()));
  check_params(p);
  MaskedConv2dShape s{features[0], features[1], features[2], features[3], weight.size(0), weight.size(2), weight.size(3)};
  TORCH_CHECK_VALUE(s.height + 2 * p.padding_h >= s.kernel_h && s.width + 2 * p.padding_w >= s.kernel_w, kOp,
                    ": the padded input (H + 2 * padding_h, W + 2 * padding_w) = (", s.height + 2 * p.padding_h, ", ",
                    s.width + 2 * p.padding_w, ") must be at least the kernel (", s.kernel_h, ", ", s.kernel_w, ")");
  TORCH_CHECK_VALUE(s.taps() < (std::int64_t{1} << 31) - 64, kOp, ": weight's C_in * kh * kw must be below 2^31; got ",
                    s.taps());
  s.out_height = masked_conv2d_out_size(s.height, s.kernel_h, p.padding_h, p.stride_h);
  s.out_width = masked_conv2d_out_size(s.width, s.kernel_w, p.padding_w, p.stride_w);
  return s;
}

void check_mask(const at::Tensor& mask, const MaskedConv2dShape& s) {
  TORCH_CHECK_TYPE(!at::isComplexType(mask.scalar_type()), kOp,
                   ": mask must be a bool, integer or floating-point tensor; got ", mask.scalar_type());
  TORCH_CHECK_VALUE(mask.dim() == 3 && (mask.size(0) == s.batch || mask.size(0) == 1) &&
                        mask.size(1) == s.out_height && mask.size(2) == s.out_width,
                    kOp, ": mask must have shape [", s.batch, ", ", s.out_height, ", ", s.out_width, "] or [1, ",
                    s.out_height, ", ", s.out_width, "] (one value per output position [N, H_out, W_out]); got shape ",
                    shape_string(mask.sizes()));
}

// Every check of the forward (the Meta kernel's too): dtypes, shapes and devices. Returns the shape.
MaskedConv2dShape check_forward(const at::Tensor& features, const at::Tensor& mask, const at::Tensor& weight,
                                const at::Tensor& bias, const MaskedConv2dParams& p) {
  floating_dtype_of(features, kOp, "features");
  check_same_dtype(kOp, "features", features, "weight", weight);
  const MaskedConv2dShape s = shape_of(features.sizes(), weight, p);
  check_mask(mask, s);
  check_same_device(kOp, "features", features, "mask", mask);
  check_same_device(kOp, "features", features, "weight", weight);
  if (bias.defined()) {
    check_same_dtype(kOp, "features", features, "bias", bias);
    TORCH_CHECK_VALUE(bias.dim() == 1 && bias.size(0) == s.out_channels, kOp, ": bias must have shape [",
                      s.out_channels, "] (one value per output channel) or be None; got shape ",
                      shape_string(bias.sizes()));
    check_same_device(kOp, "features", features, "bias", bias);
  }
  return s;
}

// The backward ops' checks of grad (the forward's output shape, features' dtype, the device of `like`).
void check_grad(const at::Tensor& grad, const at::Tensor& like, const char* like_name, const MaskedConv2dShape& s) {
  floating_dtype_of(grad, kOp, "grad");
  check_same_dtype(kOp, like_name, like, "grad", grad);
  const std::vector<std::int64_t> out{s.batch, s.out_channels, s.out_height, s.out_width};
  TORCH_CHECK_VALUE(grad.sizes() == at::IntArrayRef(out), kOp, ": grad must have the output's shape ",
                    shape_string(out), "; got ", shape_string(grad.sizes()));
  check_same_device(kOp, like_name, like, "grad", grad);
}

// mask > 0 over the output positions [N, H_out, W_out] (a [1, ...] mask broadcast over the batch).
at::Tensor selected(const at::Tensor& mask, const MaskedConv2dShape& s) {
  return mask.gt(0).expand({s.batch, s.out_height, s.out_width});
}

// The compaction of the selection: [P, 3] int64 rows (n, y, x) in increasing order (at::nonzero; on CUDA it
// waits for the count). P < 2^31: the CUDA launchers' map of rows is int32.
struct Selection {
  at::Tensor positions;
  MaskedConv2dPositions view() const { return {positions.data_ptr<std::int64_t>(), positions.size(0)}; }
  std::int64_t count() const { return positions.size(0); }
};

Selection compact(const at::Tensor& sel) {
  TORCH_INTERNAL_ASSERT(sel.dim() == 3, "masked_conv2d: the selection is [N, H_out, W_out]");
  Selection out{at::nonzero(sel).contiguous()};
  TORCH_CHECK_VALUE(out.count() < (std::int64_t{1} << 31), kOp, ": mask selects ", out.count(),
                    " positions; at most 2^31 - 1 are supported");
  return out;
}

// The launcher (CUDA: with ATen's cuBLAS handle, TF32 as torch's matmuls allow it, and its workspace for
// `pass`) or the CPU implementation, on the device of `like`.
template <typename A>
void run(const at::Tensor& like, const MaskedConv2dParams& p, MaskedConv2dPass pass, A& args,
         Launcher<MaskedConv2dParams, A>* launch, CpuEntry<MaskedConv2dParams, A>* cpu) {
  const DType dtype = floating_dtype_of(like, kOp, "features");
  run_on_device(
      kOp, "features", like,
      [&](cudaStream_t stream) {
        const auto bytes_of = [](at::ScalarType t) { return static_cast<std::int64_t>(c10::elementSize(t)); };
        const std::int64_t bytes =
            masked_conv2d_workspace(args.s, p, args.sel.count, pass, bytes_of(like.scalar_type()),
                                    bytes_of(accumulation_scalar_type(like.scalar_type())))
                .bytes;
        const at::Tensor work = at::empty({bytes}, like.options().dtype(at::kByte));
        args.workspace = work.data_ptr();
        args.workspace_bytes = bytes;
        args.blas = at::cuda::getCurrentCUDABlasHandle();
        args.allow_tf32 = at::globalContext().allowTF32CuBLAS();
        launch(p, args, dtype, stream);
      },
      [&] { cpu(p, args, dtype, aten_parallel_for()); });
}

void* data_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

}  // namespace

at::Tensor masked_conv2d_forward(const at::Tensor& features, const at::Tensor& mask, const at::Tensor& weight,
                                 const at::Tensor& bias, const MaskedConv2dParams& params) {
  const MaskedConv2dShape s = check_forward(features, mask, weight, bias, params);
  const std::vector<std::int64_t> shape{s.batch, s.out_channels, s.out_height, s.out_width};
  const Selection sel = compact(selected(mask, s));
  if (sel.count() == 0) return at::zeros(shape, features.options());
  // CUDA writes every output element (0 where not selected); the CPU the selected positions only.
  at::Tensor out = features.is_cuda() ? at::empty(shape, features.options()) : at::zeros(shape, features.options());
  const at::Tensor x = features.contiguous(), w = weight.contiguous();
  const at::Tensor b = bias.defined() ? bias.contiguous() : at::Tensor();
  MaskedConv2dForwardArgs args{{s, sel.view()}, x.data_ptr(), w.data_ptr(), data_or_null(b), out.data_ptr()};
  run(features, params, MaskedConv2dPass::kForward, args, &launch_masked_conv2d_forward, &run_masked_conv2d_forward_cpu);
  return out;
}

at::Tensor masked_conv2d_backward_input(const at::Tensor& grad, const at::Tensor& mask, const at::Tensor& weight,
                                        const MaskedConv2dParams& params, std::array<std::int64_t, 4> features_shape) {
  floating_dtype_of(weight, kOp, "weight");
  const MaskedConv2dShape s = shape_of(features_shape, weight, params);
  check_grad(grad, weight, "weight", s);
  check_mask(mask, s);
  check_same_device(kOp, "grad", grad, "mask", mask);
  const Selection sel = compact(selected(mask, s));
  if (sel.count() == 0) return at::zeros(features_shape, grad.options());
  at::Tensor grad_features = at::empty(features_shape, grad.options());  // every element written
  const at::Tensor g = grad.contiguous(), w = weight.contiguous();
  MaskedConv2dBackwardInputArgs args{{s, sel.view()}, g.data_ptr(), w.data_ptr(), grad_features.data_ptr()};
  run(grad, params, MaskedConv2dPass::kBackwardInput, args, &launch_masked_conv2d_backward_input,
      &run_masked_conv2d_backward_input_cpu);
  return grad_features;
}

std::tuple<at::Tensor, at::Tensor> masked_conv2d_backward_weight(const at::Tensor& grad, const at::Tensor& features,
                                                                 const at::Tensor& mask, const at::Tensor& weight,
                                                                 const MaskedConv2dParams& params) {
  const MaskedConv2dShape s = check_forward(features, mask, weight, at::Tensor(), params);
  check_grad(grad, features, "features", s);
  const Selection sel = compact(selected(mask, s));
  const at::TensorOptions o = features.options();
  if (sel.count() == 0) return {at::zeros(weight.sizes(), o), at::zeros({s.out_channels}, o)};
  at::Tensor grad_weight = at::empty(weight.sizes(), o), grad_bias = at::empty({s.out_channels}, o);  // all written
  const at::Tensor g = grad.contiguous(), x = features.contiguous();
  MaskedConv2dBackwardWeightArgs args{{s, sel.view()}, g.data_ptr(), x.data_ptr(), grad_weight.data_ptr(),
                                      grad_bias.data_ptr()};
  run(grad, params, MaskedConv2dPass::kBackwardWeight, args, &launch_masked_conv2d_backward_weight,
      &run_masked_conv2d_backward_weight_cpu);
  return {grad_weight, grad_bias};
}

namespace {

// Shape-only kernels for meta tensors (torch.compile's fake tensors), with the forward's checks.
at::Tensor masked_conv2d_meta(const at::Tensor& features, const at::Tensor& mask, const at::Tensor& weight,
                              const at::Tensor& bias, const MaskedConv2dParams& p) {
  const MaskedConv2dShape s = check_forward(features, mask, weight, bias, p);
  return at::empty({s.batch, s.out_channels, s.out_height, s.out_width}, features.options());
}

std::tuple<at::Tensor, at::Tensor> backward_weight_meta(const at::Tensor&, const at::Tensor& features, const at::Tensor&,
                                                        const at::Tensor& weight, const MaskedConv2dParams&) {
  return {at::empty(weight.sizes(), features.options()), at::empty({weight.size(0)}, features.options())};
}

using P = MaskedConv2dParams;
using opkit::Dim;
using opkit::OptionalTensor;
using opkit::Tensor;
constexpr char kPadding[] = "masked_conv2d: padding";
constexpr char kStride[] = "masked_conv2d: stride";
using Padding = opkit::IntPair<&P::padding_h, &P::padding_w, kPadding>;
using Stride = opkit::IntPair<&P::stride_h, &P::stride_w, kStride>;

// The backward ops: differentiable once ("masked_conv2d: double backward is not supported").
struct BackwardDef : opkit::OpDef<P> {
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kOnce;
  static constexpr const char* kOpName = kOp;
};

struct BackwardInput : BackwardDef {
  static constexpr const char* kSchema =
      "_masked_conv2d_backward_input(Tensor grad, Tensor mask, Tensor weight, int batch_size, int channels, "
      "int height, int width, int[2] padding, int[2] stride) -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Tensor, Dim<0>, Dim<1>, Dim<2>, Dim<3>, Padding, Stride>;
  static constexpr auto kCompute = &masked_conv2d_backward_input;
  static constexpr opkit::EmptyOfInputShape kMeta{};
};

struct BackwardWeight : BackwardDef {
  using Returns = std::tuple<at::Tensor, at::Tensor>;
  static constexpr const char* kSchema =
      "_masked_conv2d_backward_weight(Tensor grad, Tensor features, Tensor mask, Tensor weight, int[2] padding, "
      "int[2] stride) -> (Tensor, Tensor)";
  using Args = opkit::Args<Tensor, Tensor, Tensor, Tensor, Padding, Stride>;
  static constexpr auto kCompute = &masked_conv2d_backward_weight;
  static constexpr auto kMeta = &backward_weight_meta;
};

// Gradients for features (BackwardInput), weight and bias (BackwardWeight, run once for both), each only
// when asked for; none for the mask.
struct Forward : opkit::OpDef<P> {
  static constexpr const char* kSchema =
      "masked_conv2d(Tensor features, Tensor mask, Tensor weight, Tensor? bias=None, int[2] padding=0, "
      "int[2] stride=1) -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Tensor, OptionalTensor, Padding, Stride>;
  static constexpr auto kCompute = &masked_conv2d_forward;
  static constexpr auto kMeta = &masked_conv2d_meta;
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kFunction;
  static opkit::TensorList saved(const opkit::TensorList& inputs, const opkit::TensorList&) { return inputs; }
  static opkit::variable_list backward(const opkit::Saved<P>& s, const opkit::variable_list& grads) {
    const at::Tensor &features = s.tensors[0], &mask = s.tensors[1], &weight = s.tensors[2], &bias = s.tensors[3];
    const bool bias_grad = bias.defined() && s.needs_grad(3);
    at::Tensor grad_features, grad_weight, grad_bias;
    if (s.needs_grad(0)) grad_features = opkit::call<BackwardInput>({grads[0], mask, weight}, s.params, s.input_shape);
    if (s.needs_grad(2) || bias_grad) {
      std::tie(grad_weight, grad_bias) = opkit::call<BackwardWeight>({grads[0], features, mask, weight}, s.params);
    }
    return {grad_features, at::Tensor(), s.needs_grad(2) ? grad_weight : at::Tensor(),
            bias_grad ? grad_bias : at::Tensor()};
  }
};

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) {
  detops::opkit::define<detops::Forward, detops::BackwardInput, detops::BackwardWeight>(m);
}
