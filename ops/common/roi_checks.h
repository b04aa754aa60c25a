#pragma once
// Argument checks shared by the bindings of ops that take rois [K, 5] of (batch_index, x1, y1, x2, y2).
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "common/torch_utils.h"

namespace detops {

inline void check_rois_tensor(const char* op, const at::Tensor& rois, const char* like_name, const at::Tensor& like) {
  TORCH_CHECK_VALUE(rois.dim() == 2 && rois.size(1) == 5, op,
                    ": rois must be a 2-D tensor [K, 5] of (batch_index, x1, y1, x2, y2); got shape ",
                    shape_string(rois.sizes()));
  check_same_device(op, like_name, like, "rois", rois);
  check_same_dtype(op, like_name, like, "rois", rois);
}

// Batch indices of CPU rois are checked before the op runs; CUDA rois are checked by the kernel itself
// (see FirstInvalidRow and raise_if_invalid_roi), so no extra kernel or early sync is needed.
inline void check_roi_batch_indices_cpu(const char* op, const at::Tensor& rois_c, std::int64_t batch) {
  const at::Tensor col = rois_c.select(1, 0).to(at::kDouble).contiguous();
  const double* b = col.data_ptr<double>();
  for (std::int64_t k = 0; k < col.numel(); ++k) {
    TORCH_CHECK_INDEX(b[k] >= 0 && b[k] < static_cast<double>(batch), op, ": rois[", k, ", 0] = ", b[k],
                      " is not a batch index of input: expected a value in [0, ", batch, ")");
  }
}

// Raises for the first roi a CUDA kernel found with an invalid batch index (first_invalid >= 0).
inline void raise_if_invalid_roi(const char* op, std::int64_t first_invalid, const at::Tensor& rois_c,
                                 std::int64_t batch) {
  if (first_invalid < 0) return;
  const double value = rois_c[first_invalid][0].item<double>();
  TORCH_CHECK_INDEX(false, op, ": rois[", first_invalid, ", 0] = ", value,
                    " is not a batch index of input: expected a value in [0, ", batch, ")");
}

// Rois need a feature map to sample: H and W must be positive whenever there is work.
inline void check_roi_feature_map(const char* op, std::int64_t num_rois, std::int64_t channels, std::int64_t height,
                                  std::int64_t width) {
  TORCH_CHECK_VALUE(num_rois == 0 || channels == 0 || (height > 0 && width > 0), op,
                    ": input height and width must be positive when rois is non-empty; got H=", height, ", W=", width);
}

}  // namespace detops
