// torch.ops.detops.ps_roi_align and torch.ops.detops.ps_roi_pool: schemas, CPU and CUDA implementations,
// Meta and autograd. torchvision's schemas (and their _*_backward ops) with one trailing option each,
// defaulting to torchvision's answer: ps_roi_align's zero_empty_bins and ps_roi_pool's exact_bins
// (ps_roi_params.h), so they replace torch.ops.torchvision.ps_roi_align / ps_roi_pool unchanged. Declared
// with the op kit (docs/op-kit.md).
#include "ps_roi/ps_roi_torch.h"

#include <ATen/ops/empty.h>

#include "common/torch_roi.h"

namespace detops {
namespace {

using opkit::Dim;
using opkit::Field;
using opkit::Tensor;

// What differs between the two ops (their schemas among it); everything else below is shared.
struct AlignOp {
  using Params = PsRoiAlignParams;
  using P = Params;
  static constexpr const char* kName = "ps_roi_align";
  static constexpr const char* kSchema =
      "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
      "int sampling_ratio, bool zero_empty_bins=False) -> (Tensor, Tensor)";
  using Args = RoiForwardSchemaArgs<P, Field<&P::sampling_ratio>, Field<&P::zero_empty_bins>>;
  static constexpr const char* kBackwardSchema =
      "_ps_roi_align_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
      "int pooled_height, int pooled_width, int sampling_ratio, int batch_size, int channels, int height, "
      "int width) -> Tensor";
  using BackwardArgs = opkit::Args<Tensor, Tensor, Tensor, Field<&P::spatial_scale>, Field<&P::pooled_height>,
                                   Field<&P::pooled_width>, Field<&P::sampling_ratio>, Dim<0>, Dim<1>, Dim<2>, Dim<3>>;
  static constexpr const char* kBackwardAlert = "detops::_ps_roi_align_backward (CUDA)";
  static void check_extra(const Params& p) {
    TORCH_CHECK_VALUE(p.sampling_ratio <= kPsRoiAlignMaxSamplingGrid, kName, ": sampling_ratio must be <= ",
                      kPsRoiAlignMaxSamplingGrid, " (or <= 0 for an adaptive grid); got ", p.sampling_ratio);
  }
  static constexpr auto launch_forward = &launch_ps_roi_align_forward;
  static constexpr auto launch_backward = &launch_ps_roi_align_backward;
  static constexpr auto cpu_forward = &run_ps_roi_align_forward_cpu;
  static constexpr auto cpu_backward = &run_ps_roi_align_backward_cpu;
};

struct PoolOp {
  using Params = PsRoiPoolParams;
  using P = Params;
  static constexpr const char* kName = "ps_roi_pool";
  static constexpr const char* kSchema =
      "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
      "bool exact_bins=False) -> (Tensor, Tensor)";
  using Args = RoiForwardSchemaArgs<P, Field<&P::exact_bins>>;
  static constexpr const char* kBackwardSchema =
      "_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
      "int pooled_height, int pooled_width, int batch_size, int channels, int height, int width, "
      "bool exact_bins=False) -> Tensor";
  using BackwardArgs = RoiBackwardSchema<Tensor>::Args<P, Field<&P::exact_bins>>;
  static constexpr const char* kBackwardAlert = "detops::_ps_roi_pool_backward (CUDA)";
  static void check_extra(const Params&) {}
  static constexpr auto launch_forward = &launch_ps_roi_pool_forward;
  static constexpr auto launch_backward = &launch_ps_roi_pool_backward;
  static constexpr auto cpu_forward = &run_ps_roi_pool_forward_cpu;
  static constexpr auto cpu_backward = &run_ps_roi_pool_backward_cpu;
};

template <typename Op>
void check_params(const typename Op::Params& p) {
  check_roi_pooling_params(Op::kName, p, [&] {
    TORCH_CHECK_VALUE(p.pooled_height <= kPsRoiMaxChannels && p.pooled_width <= kPsRoiMaxChannels, Op::kName,
                      ": pooled_height and pooled_width must be <= ", kPsRoiMaxChannels, "; got ", p.pooled_height,
                      " and ", p.pooled_width);
  });
  Op::check_extra(p);
}

// C_in must be a multiple of ph * pw (both <= 2^31 - 1 here, so the product fits) and fit channel_mapping's int32.
template <typename Op>
void check_channels(std::int64_t channels, const typename Op::Params& p) {
  const std::int64_t bins = p.pooled_height * p.pooled_width;
  TORCH_CHECK_VALUE(channels <= kPsRoiMaxChannels, Op::kName, ": input channels must be <= ", kPsRoiMaxChannels,
                    " (channel_mapping is int32); got ", channels);
  TORCH_CHECK(channels % bins == 0, Op::kName, ": input channels (", channels,
                    ") must be a multiple of pooled_height * pooled_width (", p.pooled_height, " * ", p.pooled_width,
                    " = ", bins, ")");
}

template <typename Op>
opkit::Shape output_shape(const PsRoiShape& s, const typename Op::Params& p) {
  return {s.num_rois, s.channels / (p.pooled_height * p.pooled_width), p.pooled_height, p.pooled_width};
}

template <typename Op>
std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& input, const at::Tensor& rois,
                                           const typename Op::Params& params) {
  const DType dtype = check_roi_forward(Op::kName, input, rois, [&] { check_params<Op>(params); });
  const auto s = roi_shape<PsRoiShape>(shape4(input), rois);
  check_channels<Op>(s.channels, params);
  check_roi_feature_map(Op::kName, s);
  const auto shape = output_shape<Op>(s, params);
  at::Tensor output = at::empty(shape, input.options());
  at::Tensor channel_mapping = at::empty(shape, input.options().dtype(at::kInt));
  if (output.numel() == 0) return {output, channel_mapping};
  const at::Tensor input_c = input.contiguous(), rois_c = rois.contiguous();
  PsRoiForwardArgs args{{s, input_c.data_ptr(), rois_c.data_ptr(), output.data_ptr()},
                        channel_mapping.data_ptr<std::int32_t>()};
  run_roi_launcher(Op::kName, "input", input, rois_c, params, args, dtype, Op::launch_forward,
                   Op::cpu_forward);
  return {output, channel_mapping};
}

template <typename Op>
at::Tensor backward(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& channel_mapping,
                    const typename Op::Params& params, std::array<std::int64_t, 4> input_shape) {
  const auto check_mapping = [&] {
    check_same_device(Op::kName, "grad", grad, "channel_mapping", channel_mapping);
    TORCH_CHECK_TYPE(channel_mapping.scalar_type() == at::kInt, Op::kName,
                     ": channel_mapping must be int32 (the forward's second output); got ",
                     channel_mapping.scalar_type());
  };
  const DType dtype = check_roi_backward(Op::kName, grad, rois, input_shape, check_mapping,
                                         [&] { check_params<Op>(params); });
  const auto s = roi_shape<PsRoiShape>(input_shape, rois);
  check_channels<Op>(s.channels, params);
  check_roi_feature_map(Op::kName, s);
  const auto expected = output_shape<Op>(s, params);
  check_roi_grad_shape(Op::kName, grad, expected,
                       "(rois, channels / (pooled_height * pooled_width), pooled_height, pooled_width)");
  TORCH_CHECK_VALUE(channel_mapping.sizes() == at::IntArrayRef(expected), Op::kName,
                    ": channel_mapping must have grad's shape ", shape_string(expected), "; got ",
                    shape_string(channel_mapping.sizes()));
  at::Tensor grad_input_acc = zeros_acc(input_shape, grad);
  if (grad.numel() == 0 || grad_input_acc.numel() == 0) return grad_input_acc.to(grad.scalar_type());
  const at::Tensor rois_c = rois.contiguous();
  PsRoiBackwardArgs args{s, grad.data_ptr(), strides4(grad), rois_c.data_ptr(), grad_input_acc.data_ptr()};
  run_roi_launcher(Op::kName, "grad", grad, rois_c, params, args, dtype,
                   Op::launch_backward, Op::cpu_backward, Op::kBackwardAlert);
  return to_grad_dtype(grad_input_acc, grad);
}

// Shape-only forward for meta tensors (torch.compile's fake tensors).
template <typename Op>
std::tuple<at::Tensor, at::Tensor> forward_meta(const at::Tensor& input, const at::Tensor& rois,
                                                const typename Op::Params& params) {
  check_input_4d(Op::kName, input);
  check_rois(Op::kName, rois, nullptr, nullptr);
  check_params<Op>(params);
  const PsRoiShape s = roi_shape<PsRoiShape>(shape4(input), rois);
  check_channels<Op>(s.channels, params);
  return roi_meta_outputs<std::tuple<at::Tensor, at::Tensor>>(input, output_shape<Op>(s, params));
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

// The definitions of both ops' forward and backward.
template <typename Op>
struct Backward : RoiBackwardDef<typename Op::Params> {
  static constexpr const char* kSchema = Op::kBackwardSchema;
  using Args = typename Op::BackwardArgs;
  static constexpr auto kCompute = &backward<Op>;
  static constexpr const char* kOpName = Op::kName;
};

template <typename Op>
struct Forward : RoiForwardDef<typename Op::Params, Backward<Op>, std::tuple<at::Tensor, at::Tensor>> {
  static constexpr const char* kSchema = Op::kSchema;
  using Args = typename Op::Args;
  static constexpr auto kCompute = &forward<Op>;
  static constexpr auto kMeta = &forward_meta<Op>;
};

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) {
  using detops::AlignOp, detops::PoolOp;
  detops::opkit::define<detops::Forward<AlignOp>, detops::Backward<AlignOp>, detops::Forward<PoolOp>,
                        detops::Backward<PoolOp>>(m);
}
