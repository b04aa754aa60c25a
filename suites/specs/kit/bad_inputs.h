#pragma once
// The common bad-input catalogue: helpers every spec's bad inputs use, and the entries the RoI ops
// (roi_align, roi_pool, ps_roi_align, ps_roi_pool, prroi_pool) share word for word. A spec adds these and
// then only what is particular to its op.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "detops/harness/op_spec.h"

namespace detops::kit {

using BadCall = std::function<void(const at::Device&)>;

// fp32 options on a device.
at::TensorOptions f32_on(const at::Device& d);

// t on another device than d: meta when d is the CPU, the CPU otherwise.
at::Tensor other_device(const at::Tensor& t, const at::Device& d);

// A bad-input list: add(name, call, words), where call must throw a message holding every word.
struct BadInputs {
  std::vector<harness::BadInputCase> cases;
  void add(std::string name, BadCall call, std::vector<std::string> words);
};

// ---- The RoI ops ----

// Two valid fp32 rois [K = 2, 5] on d: (0, 1, 1, 5, 6) and (1, 0, 0, 4, 4).
at::Tensor good_rois(const at::Device& d);

// Which parameter a forward call breaks (the op maps each onto its own parameter struct).
enum class RoiParamFault {
  kNone,
  kZeroPooledHeight,     // pooled_height 0
  kNegativePooledHeight, // pooled_height -1
  kNegativePooledWidth,  // pooled_width -3
  kZeroSpatialScale,     // spatial_scale 0
};

// p with the fault applied (Params: spatial_scale, pooled_height, pooled_width).
template <typename Params>
Params with_fault(Params p, RoiParamFault fault) {
  if (fault == RoiParamFault::kZeroPooledHeight) p.pooled_height = 0;
  if (fault == RoiParamFault::kNegativePooledHeight) p.pooled_height = -1;
  if (fault == RoiParamFault::kNegativePooledWidth) p.pooled_width = -3;
  if (fault == RoiParamFault::kZeroSpatialScale) p.spatial_scale = 0.0;
  return p;
}

struct RoiOpBadInputs {
  std::int64_t input_channels = 3;   // the valid input is U[0, 1) [2, input_channels, 8, 8]
  std::int64_t output_channels = 3;  // the valid grad is [2, output_channels, 2, 2] (pooled 2 x 2)
  double negative_batch_index = -1;
  std::vector<std::string> spatial_scale_words = {"spatial_scale"};
  // A pooled size of 0 is an empty output (roi_align, roi_pool: torchvision's) rather than a bad input.
  bool empty_grid_accepted = false;
  // The forward with pooled 2 x 2, spatial_scale 1 and the fault applied.
  std::function<void(const at::Tensor& input, const at::Tensor& rois, RoiParamFault fault)> forward;
  // The (features) backward for a [2, input_channels, 8, 8] input and the same parameters.
  std::function<void(const at::Tensor& grad, const at::Tensor& rois)> backward;
};

// rois_wrong_columns, rois_1d, input_3d, batch_index_out_of_range, batch_index_negative, batch_index_nan,
// backward_batch_index_out_of_range, rois_dtype_mismatch, integer_input, rois_on_other_device,
// pooled_height_zero (pooled_height_negative when empty_grid_accepted), pooled_width_negative, spatial_scale_zero, empty_feature_map_with_rois and
// backward_grad_wrong_shape.
void add_roi_op_bad_inputs(BadInputs& bad, const RoiOpBadInputs& op);

}  // namespace detops::kit
