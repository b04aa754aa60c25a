// CARAFE as torch ops: torch.ops.detops.carafe (mmcv.ops.carafe's arguments and order) and its two backward
// ops, each differentiable once, each run only for the gradient autograd asks for. Registered with the op kit
// (docs/op-kit.md).
#include "carafe/carafe_torch.h"

#include <ATen/ops/empty.h>
#include <c10/util/safe_numerics.h>

#include <vector>

#include "common/torch_op_kit.h"
#include "common/torch_utils.h"

namespace detops {
namespace {

constexpr const char* kOp = "carafe";

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t out = 0;
  TORCH_CHECK_VALUE(!c10::mul_overflows(a, b, &out), kOp, ": ", what, " overflows int64 (", a, " * ", b, ")");
  return out;
}

// The params, features' sizes and their divisibility by group_size (mmcv's asserts, as ValueError).
CarafeShape shape_of(at::IntArrayRef features, const CarafeParams& p) {
  TORCH_CHECK_VALUE(features.size() == 4, kOp, ": features must be a 4-D tensor [N, C, H, W]; got shape ",
                    shape_string(features));
  TORCH_CHECK_VALUE(p.kernel_size >= 1 && p.kernel_size % 2 == 1, kOp,
                    ": kernel_size must be an odd integer >= 1; got ", p.kernel_size);
  TORCH_CHECK_VALUE(p.group_size >= 1, kOp, ": group_size must be >= 1; got ", p.group_size);
  TORCH_CHECK_VALUE(p.scale_factor >= 1, kOp, ": scale_factor must be >= 1; got ", p.scale_factor);
  TORCH_CHECK_VALUE(features[1] % p.group_size == 0, kOp, ": features' channels C = ", features[1],
                    " must be divisible by group_size = ", p.group_size);
  return {features[0], features[1], features[2], features[3]};
}

// [N, channels, H s, W s]: the output's shape (channels C) or the masks' (k k G).
std::vector<std::int64_t> upsampled(const CarafeShape& s, std::int64_t channels, const CarafeParams& p) {
  return {s.batch, channels, checked_mul(s.height, p.scale_factor, "H * scale_factor"),
          checked_mul(s.width, p.scale_factor, "W * scale_factor")};
}

std::vector<std::int64_t> masks_shape(const CarafeShape& s, const CarafeParams& p) {
  const std::int64_t taps = checked_mul(p.kernel_size, p.kernel_size, "kernel_size^2");
  return upsampled(s, checked_mul(taps, p.group_size, "kernel_size^2 * group_size"), p);
}

void check_masks(const at::Tensor& masks, const CarafeShape& s, const CarafeParams& p) {
  const std::vector<std::int64_t> expected = masks_shape(s, p);
  TORCH_CHECK_VALUE(masks.sizes() == at::IntArrayRef(expected), kOp,
                    ": masks must have shape [N, kernel_size^2 * group_size, H * scale_factor, W * scale_factor] = ",
                    shape_string(expected), "; got ", shape_string(masks.sizes()));
}

void check_grad(const at::Tensor& grad, const CarafeShape& s, const CarafeParams& p) {
  const std::vector<std::int64_t> expected = upsampled(s, s.channels, p);
  TORCH_CHECK_VALUE(grad.sizes() == at::IntArrayRef(expected), kOp, ": grad must have the output's shape ",
                    shape_string(expected), "; got ", shape_string(grad.sizes()));
}

// The checks shared by every entry point: `a`'s dtype, `b`'s dtype and device the same as `a`'s. Mixed dtypes
// (fp16 features with fp32 masks) are refused with both named.
void check_pair(const char* a_name, const at::Tensor& a, const char* b_name, const at::Tensor& b) {
  floating_dtype_of(a, kOp, a_name);
  check_same_dtype(kOp, a_name, a, b_name, b);
  check_same_device(kOp, a_name, a, b_name, b);
}

CarafeShape check_forward(const at::Tensor& features, const at::Tensor& masks, const CarafeParams& p) {
  check_pair("features", features, "masks", masks);
  const CarafeShape s = shape_of(features.sizes(), p);
  check_masks(masks, s, p);
  return s;
}

// The launcher (CUDA) or the CPU implementation, on the device of `like`.
template <typename A>
void run(const at::Tensor& like, const char* like_name, const CarafeParams& p, const A& args,
         Launcher<CarafeParams, A>* launch, CpuEntry<CarafeParams, A>* cpu) {
  const DType dtype = floating_dtype_of(like, kOp, like_name);
  run_on_device(
      kOp, like_name, like, [&](cudaStream_t stream) { launch(p, args, dtype, stream); },
      [&] { cpu(p, args, dtype, aten_parallel_for()); });
}

}  // namespace

at::Tensor carafe_forward(const at::Tensor& features, const at::Tensor& masks, const CarafeParams& params) {
  const CarafeShape s = check_forward(features, masks, params);
  at::Tensor out = at::empty(upsampled(s, s.channels, params), features.options());
  if (out.numel() == 0) return out;
  const at::Tensor x = features.contiguous(), m = masks.contiguous();
  run(features, "features", params, CarafeForwardArgs{s, x.data_ptr(), m.data_ptr(), out.data_ptr()},
      &launch_carafe_forward, &run_carafe_forward_cpu);
  return out;
}

at::Tensor carafe_backward_features(const at::Tensor& grad, const at::Tensor& masks, const CarafeParams& params,
                                    std::array<std::int64_t, 4> features_shape) {
  check_pair("grad", grad, "masks", masks);
  const CarafeShape s = shape_of(features_shape, params);
  check_grad(grad, s, params);
  check_masks(masks, s, params);
  at::Tensor grad_features = at::empty(features_shape, grad.options());
  if (grad.numel() == 0) return grad_features.zero_();
  const at::Tensor g = grad.contiguous(), m = masks.contiguous();
  run(grad, "grad", params, CarafeBackwardFeaturesArgs{s, g.data_ptr(), m.data_ptr(), grad_features.data_ptr()},
      &launch_carafe_backward_features, &run_carafe_backward_features_cpu);
  return grad_features;
}

at::Tensor carafe_backward_masks(const at::Tensor& grad, const at::Tensor& features, const CarafeParams& params) {
  check_pair("features", features, "grad", grad);
  const CarafeShape s = shape_of(features.sizes(), params);
  check_grad(grad, s, params);
  at::Tensor grad_masks = at::empty(masks_shape(s, params), grad.options());
  if (grad.numel() == 0) return grad_masks.zero_();  // C = 0: no channel contributes
  const at::Tensor g = grad.contiguous(), x = features.contiguous();
  run(grad, "grad", params, CarafeBackwardMasksArgs{s, g.data_ptr(), x.data_ptr(), grad_masks.data_ptr()},
      &launch_carafe_backward_masks, &run_carafe_backward_masks_cpu);
  return grad_masks;
}

namespace {

// Shape-only kernels for meta tensors (torch.compile's fake tensors), with the entry points' checks.
at::Tensor carafe_meta(const at::Tensor& features, const at::Tensor& masks, const CarafeParams& p) {
  const CarafeShape s = check_forward(features, masks, p);
  return at::empty(upsampled(s, s.channels, p), features.options());
}

at::Tensor backward_masks_meta(const at::Tensor& grad, const at::Tensor& features, const CarafeParams& p) {
  check_pair("features", features, "grad", grad);
  const CarafeShape s = shape_of(features.sizes(), p);
  check_grad(grad, s, p);
  return at::empty(masks_shape(s, p), grad.options());
}

using P = CarafeParams;
using opkit::Dim;
using opkit::Field;
using opkit::Tensor;

// The backward ops: differentiable once ("carafe: double backward is not supported").
struct BackwardDef : opkit::OpDef<P> {
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kOnce;
  static constexpr const char* kOpName = kOp;
};

struct BackwardFeatures : BackwardDef {
  static constexpr const char* kSchema =
      "_carafe_backward_features(Tensor grad, Tensor masks, int batch_size, int channels, int height, int width, "
      "int kernel_size, int group_size, int scale_factor) -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Dim<0>, Dim<1>, Dim<2>, Dim<3>, Field<&P::kernel_size>,
                           Field<&P::group_size>, Field<&P::scale_factor>>;
  static constexpr auto kCompute = &carafe_backward_features;
  static constexpr opkit::EmptyOfInputShape kMeta{};
};

struct BackwardMasks : BackwardDef {
  static constexpr const char* kSchema =
      "_carafe_backward_masks(Tensor grad, Tensor features, int kernel_size, int group_size, int scale_factor) -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Field<&P::kernel_size>, Field<&P::group_size>, Field<&P::scale_factor>>;
  static constexpr auto kCompute = &carafe_backward_masks;
  static constexpr auto kMeta = &backward_masks_meta;
};

// Gradients for features (BackwardFeatures) and masks (BackwardMasks), each only when asked for.
struct Forward : opkit::OpDef<P> {
  static constexpr const char* kSchema =
      "carafe(Tensor features, Tensor masks, int kernel_size, int group_size, int scale_factor) -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Field<&P::kernel_size>, Field<&P::group_size>, Field<&P::scale_factor>>;
  static constexpr auto kCompute = &carafe_forward;
  static constexpr auto kMeta = &carafe_meta;
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kFunction;
  static opkit::TensorList saved(const opkit::TensorList& inputs, const opkit::TensorList&) { return inputs; }
  static opkit::variable_list backward(const opkit::Saved<P>& s, const opkit::variable_list& grads) {
    const at::Tensor &features = s.tensors[0], &masks = s.tensors[1];
    at::Tensor grad_features, grad_masks;
    if (s.needs_grad(0)) grad_features = opkit::call<BackwardFeatures>({grads[0], masks}, s.params, s.input_shape);
    if (s.needs_grad(1)) grad_masks = opkit::call<BackwardMasks>({grads[0], features}, s.params);
    return {grad_features, grad_masks};
  }
};

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) {
  detops::opkit::define<detops::Forward, detops::BackwardFeatures, detops::BackwardMasks>(m);
}
