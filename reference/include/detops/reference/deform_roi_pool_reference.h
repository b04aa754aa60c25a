#pragma once
// Deformable RoI pooling reference in double, written from the op's definition (docs/ops/deform_roi_pool.md):
// mmcv's deform_roi_pool and its modulated form. Shares nothing with the kernels but the parameter struct.
#include "deform_roi_pool/deform_roi_pool_params.h"
#include "detops/reference/tensor.h"

namespace detops::reference {

// input [N, C, H, W], rois [K, 5], offset [K, 2, ph, pw] (nullptr: no offsets), mask [K, 1, ph, pw] (nullptr:
// none) -> [K, C, ph, pw]. Throws std::invalid_argument for a roi whose batch index is not in [0, N).
Tensor4d deform_roi_pool_forward(const DeformRoiPoolParams& params, const Tensor4d& input, const Matrixd& rois,
                                 const Tensor4d* offset, const Tensor4d* mask);

// The gradients of sum(grad_output * forward) with respect to input, offset and mask (offset and mask: [0, 0,
// 0, 0] when absent), and beside each the sum of |terms| behind every element (the scale its rounding error
// has; the offset gradient is a sum of signed slopes).
struct DeformRoiPoolGrads {
  Tensor4d input, offset, mask;
  Tensor4d input_magnitude, offset_magnitude, mask_magnitude;
};

DeformRoiPoolGrads deform_roi_pool_backward(const DeformRoiPoolParams& params, const Tensor4d& grad_output,
                                            const Tensor4d& input, const Matrixd& rois, const Tensor4d* offset,
                                            const Tensor4d* mask);

}  // namespace detops::reference
