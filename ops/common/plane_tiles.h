#pragma once
// Plane tiles: how a RoI backward accumulates a gradient plane in shared memory instead of with global atomics.
//
// A backward that scatters into grad_input [N, C, H, W] with global atomics needs a zeroed workspace of the
// accumulation type and, for fp16 / bf16, a conversion pass over it afterwards: two full passes over a buffer of
// twice the gradient's size, which at RoI-head shapes cost more than the scatter itself (H200, [2, 256, 200, 336]:
// 30 us of fill and 49 us of conversion around a 190 us roipool scatter). With plane tiles, one block owns a
// contiguous range of one plane (image n, channel c, flat pixels [begin, begin + elements)), sums every
// contribution that lands there in shared memory (fp32, fp64 for fp64), then writes its range once, in the
// gradient's dtype: no workspace, no fill, no conversion, and the atomics are shared-memory ones.
// The price: every block of a plane looks at every roi (a ballot over rois, then only its image's), so a plane
// is cut into at most kMaxPlaneTiles tiles; larger planes keep the global-atomic kernel.
// Framework-free, plain C++ (the CUDA launchers and the bindings include it).
#include <cstddef>
#include <cstdint>

namespace detops {

struct PlaneTiles {
  std::int64_t plane = 0;  // H * W
  std::int64_t elements = 0;  // per tile (the last may be shorter)
  std::int64_t count = 0;     // tiles per plane; 0: the plane-tile kernel does not apply
  std::size_t smem = 0;       // bytes of shared memory per block
};

inline constexpr std::size_t kPlaneTileBytes = 96 * 1024;  // two blocks per SM on sm_80 / sm_90 (opt-in)
inline constexpr std::int64_t kMaxPlaneTiles = 8;

// The tiles of an H x W plane summed in acc_bytes-wide accumulators, for `blocks_per_plane_group` = N * C planes;
// count 0 when the plane needs more than kMaxPlaneTiles tiles or the grid would pass 2^31 - 1 blocks.
inline PlaneTiles plane_tiles(std::int64_t height, std::int64_t width, std::int64_t planes, std::size_t acc_bytes) {
  PlaneTiles t;
  t.plane = height * width;
  if (t.plane <= 0 || planes <= 0) return t;
  const std::int64_t per_tile = static_cast<std::int64_t>(kPlaneTileBytes / acc_bytes);
  t.elements = t.plane < per_tile ? t.plane : per_tile;
  const std::int64_t count = (t.plane + t.elements - 1) / t.elements;
  if (count > kMaxPlaneTiles || planes > (std::int64_t{2147483647} / count)) return PlaneTiles{t.plane, 0, 0, 0};
  t.count = count;
  t.smem = static_cast<std::size_t>(t.elements) * acc_bytes;
  return t;
}

}  // namespace detops
