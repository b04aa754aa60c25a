#pragma once
// ps_roi_align and ps_roi_pool launchers (CUDA and CPU), framework-free. Parameters: ps_roi_params.h;
// shape and args: common/roi_args.h.
#include <cstdint>

#include "common/entry_points.h"
#include "common/roi_args.h"
#include "detops/core/dtype.h"
#include "ps_roi/ps_roi_params.h"

namespace detops {

// channels = C_in, a multiple of pooled_height * pooled_width.
using PsRoiShape = RoiShape;

// output and channel_mapping are both [num_rois, C_out, pooled_height, pooled_width] contiguous,
// C_out = channels / (ph * pw); the flat index of element (k, c, i, j) is k * channels + c_in with
// c_in = (c * ph + i) * pw + j.
struct PsRoiForwardArgs : RoiForwardArgs {
  std::int32_t* channel_mapping = nullptr;  // receives c_in for every element
};

// grad_output is [num_rois, C_out, ph, pw]. The channel of every element follows from its position (see
// PsRoiForwardArgs); no mapping is read.
using PsRoiBackwardArgs = RoiBackwardArgs;

// CPU: invalid rois produce zeros (the framework layer rejects them before calling). The forwards split
// over rois, the backwards run serially (they scatter) and are therefore deterministic.
DETOPS_DECLARE_ENTRY(PsRoiAlignParams, PsRoiForwardArgs, ps_roi_align_forward);
DETOPS_DECLARE_ENTRY_SERIAL_CPU(PsRoiAlignParams, PsRoiBackwardArgs, ps_roi_align_backward);
DETOPS_DECLARE_ENTRY(PsRoiPoolParams, PsRoiForwardArgs, ps_roi_pool_forward);
DETOPS_DECLARE_ENTRY_SERIAL_CPU(PsRoiPoolParams, PsRoiBackwardArgs, ps_roi_pool_backward);

}  // namespace detops
