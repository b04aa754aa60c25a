#pragma once
// Grid sizing for 1-D grid-stride kernels over 64-bit element counts.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "detops/core/cuda_check.h"

namespace detops {

inline int current_device_sm_count() {
  int device = 0;
  DETOPS_CUDA_CHECK(cudaGetDevice(&device));
  int sms = 0;
  DETOPS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// Enough blocks to fill the device several times over, never more than the work needs; the kernel
// loops with a grid stride, so any element count (including > 2^31) is covered.
inline unsigned grid_for(std::int64_t elements, int threads_per_block, int blocks_per_sm = 32) {
  const std::int64_t needed = (elements + threads_per_block - 1) / threads_per_block;
  const std::int64_t cap = static_cast<std::int64_t>(current_device_sm_count()) * blocks_per_sm;
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min(needed, cap)));
}

}  // namespace detops
