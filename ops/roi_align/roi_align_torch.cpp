// torch.ops.detops.roi_align: schema, CPU and CUDA implementations, autograd. Same schema as
// torch.ops.torchvision.roi_align so it can replace it unchanged. Declared with the op kit (docs/op-kit.md).
#include "roi_align/roi_align_torch.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include "common/torch_roi.h"

namespace detops {
namespace {

constexpr const char* kOp = "roi_align";

void check_params(const RoiAlignParams& p) {
  check_roi_pooling_params(kOp, p, NoCheck{}, EmptyGrid::kAccepted);
  TORCH_CHECK_VALUE(p.sampling_ratio <= kRoiAlignMaxSamplingGrid, kOp, ": sampling_ratio must be <= ",
                    kRoiAlignMaxSamplingGrid, " (or <= 0 for an adaptive grid); got ", p.sampling_ratio);
}

}  // namespace

at::Tensor roi_align_forward(const at::Tensor& input, const at::Tensor& rois, const RoiAlignParams& params) {
  return run_roi_forward(kOp, input, rois, params, [&] { check_params(params); }, &launch_roi_align_forward,
                         &run_roi_align_forward_cpu, /*nhwc_kernel=*/true);
}

at::Tensor roi_align_backward(const at::Tensor& grad, const at::Tensor& rois, const RoiAlignParams& params,
                              std::array<std::int64_t, 4> input_shape) {
  const DType dtype = check_roi_backward(kOp, grad, rois, input_shape, NoCheck{}, [&] { check_params(params); });
  const auto s = roi_shape<RoiAlignShape>(input_shape, rois);
  check_roi_feature_map(kOp, s);
  check_roi_grad_shape(kOp, grad, roi_output_shape(s, params));
  if (grad.numel() == 0 || s.batch * s.channels * s.height * s.width == 0) {
    return at::zeros(input_shape, grad.options());
  }
  const at::Tensor rois_c = rois.contiguous();
  RoiAlignBackwardArgs args{{s, grad.data_ptr(), strides4(grad), rois_c.data_ptr()}};
  at::Tensor grad_input;
  run_roi_op(
      kOp, "grad", grad, rois_c, s.batch,
      [&](cudaStream_t stream, unsigned long long* invalid) {
        // Accumulated channels last, then transposed into grad_input (roi_align.h).
        const at::Tensor acc_nhwc = zeros_acc({s.batch, s.height, s.width, s.channels}, grad);
        grad_input = at::empty(input_shape, grad.options());
        args.grad_input_acc = acc_nhwc.data_ptr();
        args.grad_input = grad_input.data_ptr();
        args.first_invalid_roi = invalid;
        launch_roi_align_backward(params, args, dtype, stream);
      },
      [&] {
        const at::Tensor acc = zeros_acc(input_shape, grad);
        args.grad_input_acc = acc.data_ptr();
        run_roi_align_backward_cpu(params, args, dtype);
        grad_input = to_grad_dtype(acc, grad);
      },
      "detops::_roi_align_backward (CUDA)");
  return grad_input;
}

namespace {

using P = RoiAlignParams;
using opkit::Field;

struct Backward : RoiBackwardDef<P> {
  static constexpr const char* kSchema =
      "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
      "int batch_size, int channels, int height, int width, int sampling_ratio, bool aligned) -> Tensor";
  using Args = RoiBackwardSchema<>::Args<P, Field<&P::sampling_ratio>, Field<&P::aligned>>;
  static constexpr auto kCompute = &roi_align_backward;
  static constexpr const char* kOpName = kOp;
};

struct Forward : RoiForwardDef<P, Backward> {
  static constexpr const char* kSchema =
      "roi_align(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
      "int sampling_ratio, bool aligned) -> Tensor";
  using Args = RoiForwardSchemaArgs<P, Field<&P::sampling_ratio>, Field<&P::aligned>>;
  static constexpr auto kCompute = &roi_align_forward;
  static constexpr RoiForwardMeta<at::Tensor> kMeta{kOp};  // shapes only (torch.compile's fake tensors)
};

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) { detops::opkit::define<detops::Forward, detops::Backward>(m); }
