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
// contiguous, in input's dtype. input_channels_last / channels_last_workspace: common/roi_args.h.
//
// CUDA's forward has two kernels. Channels first: a thread per output element, whose bilinear taps are scattered
// reads (a channel's plane per thread). Channels last: RoIAlign's (common/roi_bins_nhwc.cuh) with each bin moved
// by its offsets; common/roi_nhwc.h says when it runs.
struct DeformRoiPoolForwardArgs : RoiForwardArgs {
  const void* offset = nullptr;
  const void* mask = nullptr;
};

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
