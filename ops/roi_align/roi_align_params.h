#pragma once
// RoIAlign (Mask R-CNN) parameters, torchvision semantics. The one contract shared by the CUDA kernels,
// the CPU implementation, the Eigen reference, the op spec and the torch binding.
#include <cstdint>

namespace detops {

struct RoiAlignParams {
  double spatial_scale = 1.0;       // maps roi coordinates (input-image space) onto the feature map
  std::int64_t pooled_height = 1;   // output bins per roi, >= 0 (0: an empty output)
  std::int64_t pooled_width = 1;
  std::int64_t sampling_ratio = -1; // > 0: that many samples per bin side; <= 0: adaptive ceil(roi/pooled)
  bool aligned = false;             // true: subtract 0.5 from scaled coordinates (pixel centers)
};

// Upper bound on the samples per bin side. An adaptive grid is min(ceil(roi_size / pooled), this), so a
// garbage roi (say 1e9 pixels wide) costs bounded work instead of hanging the device; identical to
// torchvision for every roi whose bins span at most 1024 feature-map pixels. A sampling_ratio above it
// is rejected.
inline constexpr std::int64_t kRoiAlignMaxSamplingGrid = 1024;

}  // namespace detops
