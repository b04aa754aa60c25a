#pragma once
// RoIAlign launchers (CUDA and CPU), framework-free. Parameters: roi_align_params.h; shape and args:
// common/roi_args.h.
#include "common/entry_points.h"
#include "common/roi_args.h"
#include "detops/core/dtype.h"
#include "roi_align/roi_align_params.h"

namespace detops {

using RoiAlignShape = RoiShape;
// output [num_rois, channels, pooled_height, pooled_width].
using RoiAlignForwardArgs = RoiForwardArgs;

// grad_input_acc:
// - CUDA: laid out [batch, height, width, channels] (channels last: the scatter's atomics coalesce); the
//   launcher then writes the result, rounded to the input dtype, to grad_input [batch, channels, height,
//   width]. grad_input is required there.
// - CPU: laid out [batch, channels, height, width]; grad_input is unused, and the caller rounds
//   grad_input_acc to the input dtype afterwards.
struct RoiAlignBackwardArgs : RoiBackwardArgs {
  void* grad_input = nullptr;  // CUDA only: see above
};

// CPU implementations over the same per-element math; rois with an invalid batch index produce zeros
// (the framework layer rejects them before calling). The forward splits over rois, the backward runs
// serially (it scatters) and is therefore deterministic.
DETOPS_DECLARE_ENTRY(RoiAlignParams, RoiAlignForwardArgs, roi_align_forward);
DETOPS_DECLARE_ENTRY_SERIAL_CPU(RoiAlignParams, RoiAlignBackwardArgs, roi_align_backward);

}  // namespace detops
