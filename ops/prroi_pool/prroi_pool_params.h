#pragma once
// Precise RoI Pooling (PrRoIPool, Jiang et al. 2018) parameters, mmcv semantics. The one contract shared
// by the CUDA kernels, the CPU implementation, the Eigen reference, the op spec and the torch binding.
#include <cstdint>

namespace detops {

struct PrRoiPoolParams {
  double spatial_scale = 1.0;      // maps roi coordinates (input-image space) onto the feature map, > 0
  std::int64_t pooled_height = 1;  // output bins per roi, > 0
  std::int64_t pooled_width = 1;
};

// The smallest bin width and height (feature-map pixels) that pools: the smallest normal double. A roi
// with narrower bins (0 or negative width or height included) gives zeros and no gradient; this keeps
// 1 / bin size finite.
inline constexpr double kPrRoiMinBinSize = 2.2250738585072014e-308;

}  // namespace detops
