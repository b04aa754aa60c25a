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
  // false (default, torchvision's answer): a bin with no samples (an adaptive grid over a zero-size roi) is
  // 0 / 0 = NaN. true: such a bin is 0.
  bool zero_empty_bins = false;
};

struct PsRoiPoolParams {
  double spatial_scale = 1.0;
  std::int64_t pooled_height = 1;
  std::int64_t pooled_width = 1;
  // false (default, torchvision's answer): bin boundaries floor(i * b), ceil((i + 1) * b) with
  // b = roi_size / bins in the accumulation type; the forward clips bins to [0, H-1) x [0, W-1) (it never
  // reads the map's last row and column), the backward to [0, H) x [0, W), so the backward is not the
  // forward's gradient where a bin reaches the last row or column.
  // true (DetOps's definition): boundaries in exact integer arithmetic (the same in every dtype), bins
  // clipped to [0, H) x [0, W) in both directions: the backward is the forward's exact adjoint.
  bool exact_bins = false;
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
