#pragma once
// RoIPool (Fast R-CNN max pooling over roi bins) parameters, torchvision semantics. The one contract
// shared by the CUDA kernels, the CPU implementation, the Eigen reference, the op spec and the torch
// binding.
#include <cstdint>

namespace detops {

struct RoiPoolParams {
  double spatial_scale = 1.0;      // maps roi coordinates (input-image space) onto the feature map
  std::int64_t pooled_height = 1;  // output bins per roi, >= 0 (0: an empty output)
  std::int64_t pooled_width = 1;
  // How a non-empty bin's max starts (docs/ops/roi_pool.md, Definition).
  // false (default, torchvision's answer): at -FLT_MAX with argmax -1, replaced only by a strictly greater
  // value. A bin with nothing above -FLT_MAX (only NaN, -inf or, in fp64, values <= -FLT_MAX) gives
  // -FLT_MAX in the input's dtype (-inf in fp16 and bf16) and argmax -1.
  // true (DetOps's exact max): the largest non-NaN value, -inf and fp64 values below -FLT_MAX included,
  // at its first position; a bin of NaNs only gives NaN with argmax -1.
  bool exact_max = false;
};

// Scaled, rounded roi coordinates are clamped to [-limit, limit] before they become integers, so any
// input (inf and 1e30 included) gives defined integer arithmetic: roi extents stay below 2^31 + 2 and
// every bin edge fits an int64. torchvision converts them to int unchecked (undefined for |v| >= 2^31);
// for |round(x * spatial_scale)| <= 2^30 the two agree.
inline constexpr std::int64_t kRoiPoolCoordinateLimit = std::int64_t{1} << 30;

// argmax is int32, as torchvision's: the flat index h * W + w within one H x W plane, so H * W must be
// at most this (checked by the binding).
inline constexpr std::int64_t kRoiPoolMaxPlaneElements = 2147483647;

}  // namespace detops
