// torch.ops.detops.prroi_pool: schema, CPU and CUDA implementations, autograd (gradients for input and
// rois). Arguments in roi_pool's order (input, rois, spatial_scale, pooled_height, pooled_width); the
// semantics are mmcv's PrRoIPool (docs/ops/prroi_pool.md). Declared with the op kit (docs/op-kit.md).
#include "prroi_pool/prroi_pool_torch.h"

#include <ATen/ops/empty.h>

#include "common/torch_roi.h"

namespace detops {
namespace {

constexpr const char* kOp = "prroi_pool";

void check_params(const PrRoiPoolParams& p) { check_roi_pooling_params(kOp, p); }

}  // namespace

at::Tensor prroi_pool_forward(const at::Tensor& input, const at::Tensor& rois, const PrRoiPoolParams& params) {
  return run_roi_forward(kOp, input, rois, params, [&] { check_params(params); }, &launch_prroi_pool_forward,
                         &run_prroi_pool_forward_cpu);
}

at::Tensor prroi_pool_backward(const at::Tensor& grad, const at::Tensor& rois, const PrRoiPoolParams& params,
                               std::array<std::int64_t, 4> input_shape) {
  const DType dtype = check_roi_backward(kOp, grad, rois, input_shape, NoCheck{}, [&] { check_params(params); });
  const auto s = roi_shape<PrRoiPoolShape>(input_shape, rois);
  check_roi_feature_map(kOp, s);
  check_roi_grad_shape(kOp, grad, roi_output_shape(s, params));
  at::Tensor grad_input_acc = zeros_acc(input_shape, grad);
  if (grad.numel() == 0 || grad_input_acc.numel() == 0) return grad_input_acc.to(grad.scalar_type());
  const at::Tensor rois_c = rois.contiguous();
  PrRoiPoolBackwardArgs args{s, grad.data_ptr(), strides4(grad), rois_c.data_ptr(), grad_input_acc.data_ptr()};
  run_roi_launcher(kOp, "grad", grad, rois_c, params, args, dtype, &launch_prroi_pool_backward,
                   &run_prroi_pool_backward_cpu, "detops::_prroi_pool_backward (CUDA)");
  return to_grad_dtype(grad_input_acc, grad);
}

at::Tensor prroi_pool_rois_backward(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& rois,
                                    const PrRoiPoolParams& params) {
  const DType dtype = floating_dtype_of(grad, kOp, "grad");
  check_input_4d(kOp, input);
  check_same_device(kOp, "grad", grad, "input", input);
  check_same_dtype(kOp, "grad", grad, "input", input);
  check_rois(kOp, rois, "grad", &grad);
  check_params(params);
  const auto s = roi_shape<PrRoiPoolShape>(shape4(input), rois);
  check_roi_feature_map(kOp, s);
  check_roi_grad_shape(kOp, grad, roi_output_shape(s, params));
  at::Tensor grad_rois = at::empty({s.num_rois, 5}, rois.options());  // contiguous; every element is written
  if (s.num_rois == 0) return grad_rois;
  const at::Tensor input_c = input.contiguous(), rois_c = rois.contiguous();
  PrRoiPoolRoisBackwardArgs args{{s, grad.data_ptr(), strides4(grad), rois_c.data_ptr()}, input_c.data_ptr(),
                                 grad_rois.data_ptr()};
  run_roi_launcher(kOp, "grad", grad, rois_c, params, args, dtype,
                   &launch_prroi_pool_rois_backward, &run_prroi_pool_rois_backward_cpu);
  return grad_rois;
}

namespace {

// Shape-only implementation for meta tensors (torch.compile's fake tensors).
at::Tensor prroi_pool_rois_backward_meta(const at::Tensor&, const at::Tensor&, const at::Tensor& rois,
                                         const PrRoiPoolParams&) {
  return at::empty({rois.size(0), 5}, rois.options());
}

using P = PrRoiPoolParams;
using opkit::Field;
using opkit::Tensor;

struct Backward : RoiBackwardDef<P> {
  static constexpr const char* kSchema =
      "_prroi_pool_backward(Tensor grad, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
      "int batch_size, int channels, int height, int width) -> Tensor";
  using Args = RoiBackwardSchema<>::Args<P>;
  static constexpr auto kCompute = &prroi_pool_backward;
  static constexpr const char* kOpName = kOp;
};

struct RoisBackward : opkit::OpDef<P> {
  static constexpr const char* kSchema =
      "_prroi_pool_rois_backward(Tensor grad, Tensor input, Tensor rois, float spatial_scale, int pooled_height, "
      "int pooled_width) -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Tensor, Field<&P::spatial_scale>, Field<&P::pooled_height>,
                           Field<&P::pooled_width>>;
  static constexpr auto kCompute = &prroi_pool_rois_backward;
  static constexpr auto kMeta = &prroi_pool_rois_backward_meta;
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kOnce;
  static constexpr const char* kOpName = kOp;
};

// Gradients for input and rois: input is saved for the rois gradient (mmcv saves it too).
struct Forward : opkit::OpDef<P> {
  static constexpr const char* kSchema =
      "prroi_pool(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width) -> Tensor";
  using Args = RoiForwardSchemaArgs<P>;
  static constexpr auto kCompute = &prroi_pool_forward;
  static constexpr RoiForwardMeta<at::Tensor> kMeta{kOp};  // shapes only (torch.compile's fake tensors)
  static constexpr opkit::Autograd kAutograd = opkit::Autograd::kFunction;
  static opkit::TensorList saved(const opkit::TensorList& inputs, const opkit::TensorList&) { return inputs; }
  static opkit::variable_list backward(const opkit::Saved<P>& s, const opkit::variable_list& grads) {
    const at::Tensor &input = s.tensors[0], &rois = s.tensors[1];
    at::Tensor grad_input, grad_rois;
    if (s.needs_grad(0)) grad_input = opkit::call<Backward>({grads[0], rois}, s.params, s.input_shape);
    if (s.needs_grad(1)) grad_rois = opkit::call<RoisBackward>({grads[0], input, rois}, s.params);
    return {grad_input, grad_rois};
  }
};

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) {
  detops::opkit::define<detops::Forward, detops::Backward, detops::RoisBackward>(m);
}
