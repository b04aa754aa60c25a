#pragma once
// ps_roi_align and ps_roi_pool references in double, written from the ops' definitions
// (docs/ops/ps_roi.md). Share nothing with the kernels but the parameter structs.
#include <array>

#include "detops/reference/tensor.h"
#include "ps_roi/ps_roi_params.h"

namespace detops::reference {

// input [N, C_in, H, W], rois [K, 5] -> [K, C_in / (ph * pw), ph, pw]. Throws std::invalid_argument
// when C_in is not a multiple of ph * pw or a roi's batch index is not in [0, N).
Tensor4d ps_roi_align_forward(const PsRoiAlignParams& params, const Tensor4d& input, const Matrixd& rois);
Tensor4d ps_roi_pool_forward(const PsRoiPoolParams& params, const Tensor4d& input, const Matrixd& rois);

// The backwards: grad_output [K, C_out, ph, pw] -> grad_input of shape input_shape. Each is the exact
// adjoint of a linear map: the forward, except for ps_roi_pool without exact_bins, whose backward (as
// torchvision's) is the adjoint of ps_roi_pool_gradient_target.
Tensor4d ps_roi_align_backward(const PsRoiAlignParams& params, const Tensor4d& grad_output, const Matrixd& rois,
                               const std::array<Eigen::Index, 4>& input_shape);
Tensor4d ps_roi_pool_backward(const PsRoiPoolParams& params, const Tensor4d& grad_output, const Matrixd& rois,
                              const std::array<Eigen::Index, 4>& input_shape);

// ps_roi_pool's forward with the backward's bins: with exact_bins the forward itself; without, torchvision's
// bins clipped to [0, H) x [0, W) instead of the forward's [0, H-1) x [0, W-1). Its gradient is
// ps_roi_pool_backward.
Tensor4d ps_roi_pool_gradient_target(const PsRoiPoolParams& params, const Tensor4d& input, const Matrixd& rois);

// The forwards' second output: [K, C_in / (ph * pw), ph, pw], element (k, c, i, j) = (c * ph + i) * pw + j,
// the input channel that element reads.
Tensor4d ps_roi_channel_mapping(Eigen::Index num_rois, Eigen::Index channels, Eigen::Index pooled_height,
                                Eigen::Index pooled_width);

}  // namespace detops::reference
