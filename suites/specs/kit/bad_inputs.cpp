#include "kit/bad_inputs.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>

namespace detops::kit {

at::TensorOptions f32_on(const at::Device& d) { return at::TensorOptions().dtype(at::kFloat).device(d); }

at::Tensor other_device(const at::Tensor& t, const at::Device& d) { return d.is_cpu() ? t.to(at::kMeta) : t.cpu(); }

void BadInputs::add(std::string name, BadCall call, std::vector<std::string> words) {
  cases.push_back({std::move(name), std::move(call), std::move(words)});
}

at::Tensor good_rois(const at::Device& d) {
  return at::tensor({0.0f, 1.0f, 1.0f, 5.0f, 6.0f, 1.0f, 0.0f, 0.0f, 4.0f, 4.0f}, f32_on(at::kCPU)).view({2, 5}).to(d);
}

void add_roi_op_bad_inputs(BadInputs& bad, const RoiOpBadInputs& op) {
  using F = RoiParamFault;
  const auto fwd = op.forward;
  const auto bwd = op.backward;
  const std::int64_t c_in = op.input_channels, c_out = op.output_channels;
  auto input = [c_in](const at::Device& d) { return at::rand({2, c_in, 8, 8}, f32_on(d)); };
  auto call = [=](F fault) { return [=](const at::Device& d) { fwd(input(d), good_rois(d), fault); }; };
  auto with_batch_index = [=](std::int64_t row, double value) {
    return [=](const at::Device& d) {
      at::Tensor r = good_rois(d);
      r[row][0] = value;
      fwd(input(d), r, F::kNone);
    };
  };
  bad.add("rois_wrong_columns", [=](const at::Device& d) { fwd(input(d), good_rois(d).slice(1, 0, 4), F::kNone); },
          {"rois", "[K, 5]"});
  bad.add("rois_1d", [=](const at::Device& d) { fwd(input(d), good_rois(d).view({-1}), F::kNone); }, {"rois", "[K, 5]"});
  bad.add("input_3d", [=](const at::Device& d) { fwd(input(d)[0], good_rois(d), F::kNone); }, {"input", "4-D"});
  bad.add("batch_index_out_of_range", with_batch_index(1, 2), {"rois[1, 0]", "[0, 2)"});
  bad.add("batch_index_negative", with_batch_index(0, op.negative_batch_index), {"rois[0, 0]", "[0, 2)"});
  bad.add("batch_index_nan", with_batch_index(1, NAN), {"rois[1, 0]", "batch index"});
  bad.add("backward_batch_index_out_of_range", [=](const at::Device& d) {
            at::Tensor r = good_rois(d);
            r[0][0] = 7;
            bwd(at::ones({2, c_out, 2, 2}, f32_on(d)), r);
          },
          {"rois[0, 0]", "[0, 2)"});
  bad.add("rois_dtype_mismatch", [=](const at::Device& d) { fwd(input(d), good_rois(d).to(at::kDouble), F::kNone); },
          {"rois dtype", "input dtype"});
  bad.add("integer_input", [=](const at::Device& d) { fwd(input(d).to(at::kInt), good_rois(d).to(at::kInt), F::kNone); },
          {"input", "float64, float32, float16 or bfloat16"});
  bad.add("rois_on_other_device", [=](const at::Device& d) { fwd(input(d), other_device(good_rois(d), d), F::kNone); },
          {"input and rois", "same device"});
  if (op.empty_grid_accepted) {
    bad.add("pooled_height_negative", call(F::kNegativePooledHeight), {"pooled_height", "non-negative", "-1"});
    bad.add("pooled_width_negative", call(F::kNegativePooledWidth), {"pooled_width", "non-negative", "-3"});
  } else {
    bad.add("pooled_height_zero", call(F::kZeroPooledHeight), {"pooled_height", "positive"});
    bad.add("pooled_width_negative", call(F::kNegativePooledWidth), {"pooled_width", "positive"});
  }
  bad.add("spatial_scale_zero", call(F::kZeroSpatialScale), op.spatial_scale_words);
  bad.add("empty_feature_map_with_rois", [=](const at::Device& d) {
            fwd(at::rand({2, c_in, 0, 8}, f32_on(d)), good_rois(d), F::kNone);
          },
          {"height and width"});
  bad.add("backward_grad_wrong_shape", [=](const at::Device& d) { bwd(at::ones({2, c_out, 3, 2}, f32_on(d)), good_rois(d)); },
          {"grad", "[2, " + std::to_string(c_out) + ", 2, 2]"});
}

}  // namespace detops::kit
