#pragma once
// RoIPool reference in double, written from the op's definition (docs/ops/roi_pool.md). Shares
// nothing with the kernels but the parameter struct.
#include <array>
#include <cstdint>

#include "detops/reference/tensor.h"
#include "roi_pool/roi_pool_params.h"

namespace detops::reference {

// Flat plane indices h * W + w (or -1), same layout as Tensor4d.
using Index4d = Eigen::Tensor<std::int64_t, 4, Eigen::RowMajor>;

struct RoiPoolResult {
  Tensor4d output;  // [K, C, pooled_height, pooled_width]
  Index4d argmax;   // same shape
};

// input [N, C, H, W], rois [K, 5] -> max of each bin and where it is. params.exact_max chooses the
// values a bin's max is taken over: false (torchvision's), those above -FLT_MAX (-FLT_MAX with argmax -1
// when there are none); true, every non-NaN value (NaN with argmax -1 when there are none). The output is
// in fp64: a kernel in fp16 / bf16 stores -FLT_MAX as -inf, so compare with this output rounded to the
// dtype. Throws std::invalid_argument for a roi whose batch index is not in [0, N).
RoiPoolResult roi_pool_forward(const RoiPoolParams& params, const Tensor4d& input, const Matrixd& rois);

// The derivative of roi_pool_forward's output with respect to input, applied to grad_output
// [K, C, ph, pw]: each grad_output element goes to the input element its bin's max came from (this
// reference's own argmax, recomputed from input). Returns grad_input of input's shape.
Tensor4d roi_pool_backward(const RoiPoolParams& params, const Tensor4d& grad_output, const Tensor4d& input,
                           const Matrixd& rois);

}  // namespace detops::reference
