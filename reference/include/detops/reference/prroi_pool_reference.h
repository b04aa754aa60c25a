#pragma once
// Precise RoI Pooling reference in double, written from the op's definition (docs/ops/prroi_pool.md):
// a bin's integral is the sum of the exact integrals of the bilinear polynomial over the unit cells the
// bin overlaps; the roi-coordinate gradient comes from the Leibniz rule (line integrals of the surface
// along the bin's edges). Shares nothing with the kernels but the parameter struct.
#include "detops/reference/tensor.h"
#include "prroi_pool/prroi_pool_params.h"

namespace detops::reference {

// input [N, C, H, W], rois [K, 5] -> [K, C, pooled_height, pooled_width], each bin's average of the
// bilinear surface. Throws std::invalid_argument for a roi whose batch index is not in [0, N).
Tensor4d prroi_pool_forward(const PrRoiPoolParams& params, const Tensor4d& input, const Matrixd& rois);

struct PrRoiPoolGrads {
  Tensor4d input;  // d/d input of sum(grad_output * output), [N, C, H, W]
  Matrixd rois;    // d/d rois of the same, [K, 5]; column 0 (the batch index) is 0
  // [K, 5]: for each roi coordinate, the sum over (c, ph, pw) of |grad_output| * scale * (|weight of the
  // bin's low edge| * |d out / d low edge| + |weight of the high edge| * |d out / d high edge|), the
  // size of the terms whose sum is `rois` (for a magnitude-aware comparison).
  Matrixd rois_magnitude;
};

PrRoiPoolGrads prroi_pool_backward(const PrRoiPoolParams& params, const Tensor4d& grad_output, const Tensor4d& input,
                                   const Matrixd& rois);

}  // namespace detops::reference
