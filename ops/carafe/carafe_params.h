#pragma once
// CARAFE, content-aware reassembly of features (mmcv.ops.carafe; docs/ops/carafe.md): features [N, C, H, W]
// and per-position reassembly kernels masks [N, k k G, H s, W s] -> out [N, C, H s, W s],
//   out[n, c, y, x] = sum over i, j < k of masks[n, g k k + i k + j, y, x] * features[n, c, y / s + i - r, x / s + j - r]
// with r = (k - 1) / 2, g = c / (C / G) (the channel's group) and integer division; taps whose feature
// position lies outside the map are absent (mmcv's kernels skip them). The one contract shared by the CUDA
// kernels, the CPU implementation, the Eigen reference, the op spec and the torch binding.
#include <cstdint>

namespace detops {

struct CarafeParams {
  std::int64_t kernel_size = 5;   // k: the reassembly window k x k, odd, >= 1
  std::int64_t group_size = 1;    // G: channel groups sharing one mask each; C % G == 0
  std::int64_t scale_factor = 2;  // s: the upsampling factor, >= 1
};

// The window's half width r: tap (i, j) reads the feature at offset (i - r, j - r) from the source pixel.
constexpr std::int64_t carafe_radius(const CarafeParams& p) { return (p.kernel_size - 1) / 2; }

// The masks' channels, k k G: group g's kernel is channels [g k k, (g + 1) k k), tap (i, j) at g k k + i k + j.
constexpr std::int64_t carafe_mask_channels(const CarafeParams& p) {
  return p.kernel_size * p.kernel_size * p.group_size;
}

}  // namespace detops
