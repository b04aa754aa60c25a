#pragma once
// CARAFE launchers (CUDA) and CPU implementations, framework-free. Parameters: carafe_params.h.
#include <cstdint>

#include "carafe/carafe_params.h"
#include "common/entry_points.h"
#include "detops/core/dtype.h"

namespace detops {

// features [N, C, H, W]; masks [N, k k G, H s, W s]; out and grad [N, C, H s, W s] (k, G, s: the params). Every
// tensor is contiguous, in the features' dtype T.
struct CarafeShape {
  std::int64_t batch = 0, channels = 0, height = 0, width = 0;
};

// A CPU work item of the forward and of the features' gradient (and of the CUDA fallback kernels for windows
// past the shared-memory budget) computes up to kCarafeChannelChunk channels of one group at one pixel, so the
// pixel's k k mask values are read once per chunk instead of once per channel (carafe_kernel.cuh). The tiled
// CUDA kernels' tile and chunk sizes are in carafe_cuda.cu.
inline constexpr int kCarafeChannelChunk = 8;

// out [N, C, H s, W s], every element written.
struct CarafeForwardArgs {
  CarafeShape s;
  const void* features = nullptr;
  const void* masks = nullptr;
  void* out = nullptr;
};

// grad [N, C, H s, W s], masks -> grad_features [N, C, H, W], every element written.
struct CarafeBackwardFeaturesArgs {
  CarafeShape s;
  const void* grad = nullptr;
  const void* masks = nullptr;
  void* grad_features = nullptr;
};

// grad, features -> grad_masks [N, k k G, H s, W s], every element written.
struct CarafeBackwardMasksArgs {
  CarafeShape s;
  const void* grad = nullptr;
  const void* features = nullptr;
  void* grad_masks = nullptr;
};

// CUDA launchers and CPU implementations (common/entry_points.h). No atomics: every output and gradient
// element is one thread's sum in a fixed order (carafe_kernel.cuh), the same on both devices, so results are
// bitwise reproducible and the CPU's equal the GPU's up to the devices' fused multiply-adds.
DETOPS_DECLARE_ENTRY(CarafeParams, CarafeForwardArgs, carafe_forward);
DETOPS_DECLARE_ENTRY(CarafeParams, CarafeBackwardFeaturesArgs, carafe_backward_features);
DETOPS_DECLARE_ENTRY(CarafeParams, CarafeBackwardMasksArgs, carafe_backward_masks);

}  // namespace detops
