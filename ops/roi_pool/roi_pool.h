#pragma once
// RoIPool launchers (CUDA and CPU), framework-free. Parameters: roi_pool_params.h; shape and args:
// common/roi_args.h. height * width <= kRoiPoolMaxPlaneElements.
#include <cstdint>

#include "common/entry_points.h"
#include "common/roi_args.h"
#include "detops/core/dtype.h"
#include "roi_pool/roi_pool_params.h"

namespace detops {

using RoiPoolShape = RoiShape;

// output [num_rois, channels, pooled_height, pooled_width]; invalid rois give output 0 and argmax -1.
struct RoiPoolForwardArgs : RoiForwardArgs {
  std::int32_t* argmax = nullptr;  // output's shape, contiguous: h * width + w of the max, -1 where none
};

// argmax is the forward's, contiguous.
struct RoiPoolBackwardArgs : RoiBackwardArgs {
  const std::int32_t* argmax = nullptr;
  // CUDA only, optional: atomically lowered to the flat index (into argmax) of the first argmax value
  // outside [-1, height * width); such elements are skipped. Initialized to ~0ull by the caller.
  unsigned long long* first_invalid_argmax = nullptr;
};

// CPU: invalid rois and argmax values outside [-1, H*W) are skipped as on CUDA (the framework layer
// rejects them before calling). The forward splits over rois, the backward over channels (each channel's
// plane is summed in the fixed roi, ph, pw order, so the backward is deterministic).
DETOPS_DECLARE_ENTRY(RoiPoolParams, RoiPoolForwardArgs, roi_pool_forward);
DETOPS_DECLARE_ENTRY(RoiPoolParams, RoiPoolBackwardArgs, roi_pool_backward);

}  // namespace detops
