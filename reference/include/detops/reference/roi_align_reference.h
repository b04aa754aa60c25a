#pragma once
// RoIAlign reference in double, written from the op's definition (docs/ops/roi_align.md). Shares
// nothing with the kernels but the parameter struct.
#include <array>

#include "detops/reference/tensor.h"
#include "roi_align/roi_align_params.h"

namespace detops::reference {

// input [N, C, H, W], rois [K, 5] -> [K, C, pooled_height, pooled_width].
// Throws std::invalid_argument for a roi whose batch index is not in [0, N).
Tensor4d roi_align_forward(const RoiAlignParams& params, const Tensor4d& input, const Matrixd& rois);

// The exact adjoint of roi_align_forward (which is linear in input): grad_output [K, C, ph, pw] ->
// grad_input of shape input_shape.
Tensor4d roi_align_backward(const RoiAlignParams& params, const Tensor4d& grad_output, const Matrixd& rois,
                            const std::array<Eigen::Index, 4>& input_shape);

}  // namespace detops::reference
