#pragma once
// Deformable RoI pooling (mmcv's deform_roi_pool and the modulated form of its ModulatedDeformRoIPoolPack)
// parameters. The one contract shared by the CUDA kernels, the CPU implementation, the Eigen reference, the
// op spec and the torch binding. Definition: docs/ops/deform_roi_pool.md.
#include <cstdint>

namespace detops {

struct DeformRoiPoolParams {
  double spatial_scale = 1.0;       // maps roi coordinates (input-image space) onto the feature map
  std::int64_t pooled_height = 1;   // output bins per roi (mmcv's output_size), >= 0 (0: an empty output)
  std::int64_t pooled_width = 1;
  std::int64_t sampling_ratio = 0;  // > 0: that many samples per bin side; <= 0: adaptive ceil(roi / pooled)
  double gamma = 0.1;               // bin (ph, pw) moves by gamma * roi_w * offset[k, 0, ph, pw] in x (roi_h, 1: y)
};

// Upper bound on the samples per bin side, RoIAlign's (kRoiAlignMaxSamplingGrid, whose geometry the kernels
// reuse; deform_roi_pool_kernel.cuh asserts they agree): an adaptive grid is min(ceil(bin extent), this), a
// larger sampling_ratio is rejected.
inline constexpr std::int64_t kDeformRoiPoolMaxSamplingGrid = 1024;

}  // namespace detops
