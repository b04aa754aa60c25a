#pragma once
// Deformable RoI pooling launchers (CUDA and CPU), framework-free. Parameters: deform_roi_pool_params.h;
// shape and args: common/roi_args.h; definition: docs/ops/deform_roi_pool.md. One set of kernels serves
// both ops: deform_roi_pool (mask == nullptr) and modulated_deform_roi_pool (output * mask).
#include <cstddef>
#include <cstdint>

#include "common/entry_points.h"
#include "common/roi_args.h"
#include "deform_roi_pool/deform_roi_pool_params.h"
#include "detops/core/dtype.h"

namespace detops {

// output [num_rois, channels, pooled_height, pooled_width]. offset [num_rois, 2, pooled_height, pooled_width]
// (x shifts, then y shifts; nullptr: none) and mask [num_rois, 1, pooled_height, pooled_width] (nullptr: 1),
// contiguous, in input's dtype.
// CUDA only: input_channels_last: input is laid out [batch, height, width, channels]. channels_last_workspace: a
// [batch, height, width, channels] buffer of input's dtype; when set and input is channels first, the launcher
// writes input's channels-last copy there and runs the channels-last kernel on it (a tiled transpose,
// common/channels_last.cuh); see deform_roi_pool_forward_channels_last.
struct DeformRoiPoolForwardArgs : RoiForwardArgs {
  const void* offset = nullptr;
  const void* mask = nullptr;
  bool input_channels_last = false;
  void* channels_last_workspace = nullptr;
};

// CUDA's forward has two kernels. Channels first: a thread per output element, whose bilinear taps are scattered
// reads (a channel's plane per thread). Channels last: a block per (roi, 32 L channels), a warp per bin with L
// channels per lane (L = deform_roi_pool_lane_channels: 256 bytes of a pixel per warp), so each tap is L coalesced
// reads and the sample grid is computed once per bin and warp; the block stages its [32 L, bins] output tile in
// shared memory (deform_roi_pool_tile_bytes) and writes it contiguously. The channels-last kernel runs when its
// tile fits in kDeformRoiPoolTileBytes and either the input already is channels last or there are at least
// map / 16 output elements: the copy to channels last reads and writes the map once, which the coalesced gathers
// repay only when the rois sample enough of it (a threshold chosen from that byte count, not tuned).
inline constexpr std::size_t kDeformRoiPoolTileBytes = 96 * 1024;

constexpr int deform_roi_pool_lane_channels(std::size_t element_size) {
  return element_size >= 8 ? 1 : static_cast<int>(8 / element_size);
}

// The channels-last kernel's shared memory: bins x (32 L + 1) elements (0 when it would pass the limit).
inline std::size_t deform_roi_pool_tile_bytes(const DeformRoiPoolParams& p, std::size_t element_size) {
  const std::int64_t bins = p.pooled_height * p.pooled_width;
  const std::size_t row = (32 * static_cast<std::size_t>(deform_roi_pool_lane_channels(element_size)) + 1) * element_size;
  if (bins <= 0 || static_cast<std::size_t>(bins) > kDeformRoiPoolTileBytes / row) return 0;
  return static_cast<std::size_t>(bins) * row;
}

inline bool deform_roi_pool_forward_channels_last(const DeformRoiPoolParams& p, const RoiShape& s,
                                                  std::size_t element_size, bool input_channels_last) {
  if (deform_roi_pool_tile_bytes(p, element_size) == 0) return false;
  if (input_channels_last) return true;
  const std::int64_t bins = p.pooled_height * p.pooled_width;
  const std::int64_t outputs = s.num_rois * s.channels * bins;
  return outputs >= s.batch * s.channels * s.height * s.width / 16;
}

// grad_input_acc as RoIAlign's (roi_align.h): on CUDA laid out [batch, height, width, channels] and written,
// rounded, to grad_input [batch, channels, height, width] by the launcher; on the CPU laid out [batch,
// channels, height, width], grad_input unused. input is read only when grad_offset_acc or grad_mask_acc is
// set: CPU [batch, channels, height, width]; CUDA reads it channels last, as the scatter walks the map: input
// is [batch, height, width, channels] when input_channels_last, else [batch, channels, height, width] and
// channels_last_workspace (as the forward's) receives its channels-last copy first. grad_offset_acc [num_rois,
// 2, ph, pw] (when offset is set) and grad_mask_acc [num_rois, 1, ph, pw] (when mask is set) are zeroed buffers
// of the accumulation type; nullptr: not wanted.
struct DeformRoiPoolBackwardArgs : RoiBackwardArgs {
  const void* input = nullptr;
  const void* offset = nullptr;
  const void* mask = nullptr;
  void* grad_offset_acc = nullptr;
  void* grad_mask_acc = nullptr;
  void* grad_input = nullptr;  // CUDA only
  bool input_channels_last = false;        // CUDA only
  void* channels_last_workspace = nullptr;  // CUDA only
};

// CPU: invalid rois produce zeros (the framework layer rejects them before calling); the forward splits over
// rois, the backward runs serially (it scatters) and is deterministic. CUDA: the backward accumulates with
// atomicAdd (grad_input per sample, grad_offset / grad_mask per warp segment) and is not deterministic.
DETOPS_DECLARE_ENTRY(DeformRoiPoolParams, DeformRoiPoolForwardArgs, deform_roi_pool_forward);
DETOPS_DECLARE_ENTRY_SERIAL_CPU(DeformRoiPoolParams, DeformRoiPoolBackwardArgs, deform_roi_pool_backward);

}  // namespace detops
