// torch.ops.detops.roi_pool: schema, CPU and CUDA implementations, autograd. torchvision's schema
// (argmax int32 included) plus one keyword-only option, exact_max=False (roi_pool_params.h), so it replaces
// torch.ops.torchvision.roi_pool unchanged; _roi_pool_backward is torchvision's as it is (the argmax
// carries the mode). Declared with the op kit (docs/op-kit.md).
#include "roi_pool/roi_pool_torch.h"

#include <ATen/ops/empty.h>

#include <optional>

#include "common/torch_roi.h"

namespace detops {
namespace {

constexpr const char* kOp = "roi_pool";

void check_params(const RoiPoolParams& p) { check_roi_pooling_params(kOp, p, NoCheck{}, EmptyGrid::kAccepted); }

void check_map(const RoiPoolShape& s) {
  check_roi_feature_map(kOp, s);
  // Checked before any overflow: both are non-negative, so the product is tested by division.
  TORCH_CHECK_VALUE(s.width == 0 || s.height <= kRoiPoolMaxPlaneElements / s.width, kOp,
                    ": input height * width must be at most ", kRoiPoolMaxPlaneElements,
                    " because argmax is int32 (as in torchvision); got H=", s.height, ", W=", s.width);
}

[[noreturn]] void raise_invalid_argmax(std::int64_t flat, std::int32_t value, const at::Tensor& argmax,
                                       std::int64_t plane_elements) {
  std::array<std::int64_t, 4> at_index{};
  for (std::int64_t d = 3; d >= 0; --d) {
    at_index[d] = flat % argmax.size(d);
    flat /= argmax.size(d);
  }
  TORCH_CHECK_INDEX(false, kOp, ": argmax", shape_string(at_index), " = ", value,
                    " is not a flat index of an input plane: expected -1 or a value in [0, H * W = ",
                    plane_elements, ")");
}

void check_cpu_argmax(const at::Tensor& argmax_c, std::int64_t plane_elements) {
  const std::int32_t* a = argmax_c.data_ptr<std::int32_t>();
  for (std::int64_t i = 0; i < argmax_c.numel(); ++i) {
    if (a[i] != -1 && !(a[i] >= 0 && a[i] < plane_elements)) raise_invalid_argmax(i, a[i], argmax_c, plane_elements);
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> roi_pool_forward(const at::Tensor& input, const at::Tensor& rois,
                                                    const RoiPoolParams& params) {
  const DType dtype = check_roi_forward(kOp, input, rois, [&] { check_params(params); });
  const auto s = roi_shape<RoiPoolShape>(shape4(input), rois);
  check_map(s);
  at::Tensor output = at::empty(roi_output_shape(s, params), input.options());
  at::Tensor argmax = at::empty(roi_output_shape(s, params), input.options().dtype(at::kInt));
  if (output.numel() == 0) return {output, argmax};
  // CUDA: channels last (the input as it is, or a copy into the workspace) where roi_pool_forward_channels_last
  // says the gather repays it; else channels first.
  const RoiMapOperand map = roi_map_operand(input, s, roi_bins(params), true, &roi_pool_forward_channels_last);
  const at::Tensor rois_c = rois.contiguous();
  RoiPoolForwardArgs args{{s, nullptr, rois_c.data_ptr(), output.data_ptr()}, argmax.data_ptr<std::int32_t>()};
  map.set(args);
  run_roi_launcher(kOp, "input", input, rois_c, params, args, dtype,
                   &launch_roi_pool_forward, &run_roi_pool_forward_cpu);
  return {output, argmax};
}

at::Tensor roi_pool_backward(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& argmax,
                             const RoiPoolParams& params, std::array<std::int64_t, 4> input_shape) {
  const DType dtype = check_roi_backward(kOp, grad, rois, input_shape, NoCheck{}, [&] { check_params(params); });
  const auto s = roi_shape<RoiPoolShape>(input_shape, rois);
  check_map(s);
  const opkit::Shape expected = roi_output_shape(s, params);
  // Error types are torchvision's where it refuses the call: IndexError for a grad of fewer than 4
  // dimensions (its kernels read grad.stride(3)), RuntimeError for an argmax that is not int32.
  TORCH_CHECK_INDEX(grad.dim() >= 4, kOp, ": grad must be a 4-D tensor [K, C, pooled_height, pooled_width]; got shape ",
                    shape_string(grad.sizes()));
  check_roi_grad_shape(kOp, grad, expected);
  check_same_device(kOp, "grad", grad, "argmax", argmax);
  TORCH_CHECK(argmax.scalar_type() == at::kInt, kOp, ": argmax must be int32 (as roi_pool returns it); got ",
              argmax.scalar_type());
  TORCH_CHECK_VALUE(argmax.sizes() == at::IntArrayRef(expected), kOp, ": argmax must have shape ",
                    shape_string(expected), " (the shape of grad); got ", shape_string(argmax.sizes()));
  at::Tensor grad_input_acc = zeros_acc(input_shape, grad);
  if (grad.numel() == 0 || grad_input_acc.numel() == 0) return grad_input_acc.to(grad.scalar_type());
  const at::Tensor rois_c = rois.contiguous();
  const at::Tensor argmax_c = argmax.contiguous();
  const std::int64_t plane_elements = s.height * s.width;
  RoiPoolBackwardArgs args{{s, grad.data_ptr(), strides4(grad), rois_c.data_ptr(), grad_input_acc.data_ptr()},
                           argmax_c.data_ptr<std::int32_t>()};
  std::optional<FirstInvalidRow> invalid_argmax;  // read after the rois check, as the rois are checked first
  run_roi_op(
      kOp, "grad", grad, rois_c, s.batch,
      [&](cudaStream_t stream, unsigned long long* invalid) {
        invalid_argmax.emplace(grad, stream);
        args.first_invalid_roi = invalid;
        args.first_invalid_argmax = invalid_argmax->get();
        launch_roi_pool_backward(params, args, dtype, stream);
      },
      [&] {
        check_cpu_argmax(argmax_c, plane_elements);
        run_roi_pool_backward_cpu(params, args, dtype, aten_parallel_for());
      },
      "detops::_roi_pool_backward (CUDA)",
      [&] {
        const std::int64_t bad = invalid_argmax->read();
        if (bad >= 0) raise_invalid_argmax(bad, argmax_c.view(-1)[bad].item<std::int32_t>(), argmax_c, plane_elements);
      });
  return to_grad_dtype(grad_input_acc, grad);
}

namespace {

using P = RoiPoolParams;
using opkit::Field;

struct Backward : RoiBackwardDef<P> {
  static constexpr const char* kSchema =
      "_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, int pooled_height, "
      "int pooled_width, int batch_size, int channels, int height, int width) -> Tensor";
  using Args = RoiBackwardSchema<opkit::Tensor>::Args<P>;
  static constexpr auto kCompute = &roi_pool_backward;
  static constexpr const char* kOpName = kOp;
};

struct Forward : RoiForwardDef<P, Backward, std::tuple<at::Tensor, at::Tensor>> {
  static constexpr const char* kSchema =
      "roi_pool(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, *, "
      "bool exact_max=False) -> (Tensor, Tensor)";
  using Args = RoiForwardSchemaArgs<P, Field<&P::exact_max>>;
  static constexpr auto kCompute = &roi_pool_forward;
  static constexpr RoiForwardMeta<Returns> kMeta{kOp};  // shapes only (torch.compile's fake tensors)
};

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) { detops::opkit::define<detops::Forward, detops::Backward>(m); }
