#pragma once
// Position-sensitive RoI pooling (R-FCN) parameters, torchvision semantics: PsRoiAlignParams for
// ps_roi_align and PsRoiPoolParams for ps_roi_pool. The one contract shared by the CUDA kernels, the CPU
// implementation, the Eigen reference, the op specs and the torch binding.
//
// Both ops read input [N, C_in, H, W] with C_in = C_out * pooled_height * pooled_width and write
// [K, C_out, pooled_height, pooled_width]: output channel c at bin (i, j) reads input channel
// (c * pooled_height + i) * pooled_width + j (its "channel mapping").
#include <cstdint>

namespace detops {

struct PsRoiAlignParams {
  double spatial_scale = 1.0;       // maps roi coordinates (input-image space) onto the feature map
  std::int64_t pooled_height = 1;   // output bins per roi, > 0
  std::int64_t pooled_width = 1;
  std::int64_t sampling_ratio = -1; // > 0: that many samples per bin side; <= 0: adaptive ceil(bin size)
  // Always -0.5-shifted (pixel centres), no `aligned` flag, as in torchvision.
};

struct PsRoiPoolParams {
  double spatial_scale = 1.0;
  std::int64_t pooled_height = 1;
  std::int64_t pooled_width = 1;
};

// Upper bound on ps_roi_align's samples per bin side. An adaptive grid is min(ceil(bin size), this), so
// a garbage roi (say 1e9 pixels wide) costs bounded work instead of hanging the device; identical to
// torchvision for every roi whose bins span at most 1024 feature-map pixels. A sampling_ratio above it
// is rejected.
inline constexpr std::int64_t kPsRoiAlignMaxSamplingGrid = 1024;

// ps_roi_pool clamps each scaled roi coordinate to [-this, this] before rounding it to an integer, so
// that infinite or huge coordinates neither overflow the integer bin arithmetic nor cost work (bins are
// clipped to the map anyway). 2^30 is far beyond any feature map.
inline constexpr double kPsRoiPoolMaxCoordinate = 1073741824.0;

// channel_mapping is int32 (as torchvision's), so C_in must not exceed this.
inline constexpr std::int64_t kPsRoiMaxChannels = 2147483647;

}  // namespace detops
