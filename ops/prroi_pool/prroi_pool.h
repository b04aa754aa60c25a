#pragma once
// Precise RoI Pooling launchers (CUDA and CPU), framework-free. Parameters: prroi_pool_params.h; shape
// and args: common/roi_args.h; definition: docs/ops/prroi_pool.md.
#include "common/entry_points.h"
#include "common/roi_args.h"
#include "detops/core/dtype.h"
#include "prroi_pool/prroi_pool_params.h"

namespace detops {

using PrRoiPoolShape = RoiShape;
// output [num_rois, channels, pooled_height, pooled_width].
using PrRoiPoolForwardArgs = RoiForwardArgs;
// The gradient with respect to input.
using PrRoiPoolBackwardArgs = RoiBackwardArgs;

// The gradient with respect to the rois: input as in the forward, grad_input_acc unused. grad_rois is
// [num_rois, 5] contiguous in the rois' dtype; every element is written (column 0, the batch index, with
// 0), each roi's row by one thread (CPU) or one block (CUDA), so no zeroing is needed.
struct PrRoiPoolRoisBackwardArgs : RoiBackwardArgs {
  const void* input = nullptr;
  void* grad_rois = nullptr;
};

// The input backward scatters with atomicAdd on CUDA (not deterministic); the forward and the rois
// backward are (each output written once, fixed order).
//
// CPU: invalid rois produce zeros (the framework layer rejects them before calling). The forward and
// the rois backward split over rois, the input backward over channels (each channel's planes are summed
// in the fixed roi, ph, pw order). All three are deterministic.
DETOPS_DECLARE_ENTRY(PrRoiPoolParams, PrRoiPoolForwardArgs, prroi_pool_forward);
DETOPS_DECLARE_ENTRY(PrRoiPoolParams, PrRoiPoolBackwardArgs, prroi_pool_backward);
DETOPS_DECLARE_ENTRY(PrRoiPoolParams, PrRoiPoolRoisBackwardArgs, prroi_pool_rois_backward);

}  // namespace detops
