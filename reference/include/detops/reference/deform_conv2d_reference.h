#pragma once
// Deformable 2-D convolution reference (DCNv1 / DCNv2) in double, written from the definition in
// deform_conv2d/deform_conv2d_params.h (docs/ops/deform_conv2d.md). Shares nothing with the kernels but the
// parameter struct.
#include "deform_conv2d/deform_conv2d_params.h"
#include "detops/reference/tensor.h"

namespace detops::reference {

// input [B, C_in, H, W]; weight [C_out, C_in / groups, kh, kw]; offset [B, 2 * offset_groups * kh * kw, H_out,
// W_out]; mask: [B, offset_groups * kh * kw, H_out, W_out] when params.use_mask, else null (every m = 1); bias:
// null or C_out values -> [B, C_out, H_out, W_out].
//
// abs_terms: every term of every sum replaced by its absolute value, so each element is the sum of |terms|
// behind it (the harness's comparison magnitude). The bilinear weights are >= 0, so for the forward this is
// the forward on |input|, |weight|, |mask|, |bias|.
Tensor4d deform_conv2d_forward(const DeformConv2dParams& params, const Tensor4d& input, const Tensor4d& weight,
                               const Tensor4d& offset, const Tensor4d* mask, const Vectord* bias,
                               bool abs_terms = false);

// The gradients of <grad_output, deform_conv2d_forward(...)> with respect to input, weight, offset, mask and
// bias (bias: C_out values, whether or not the forward had one; mask: empty [0, 0, 0, 0] without one). Where
// the forward is differentiable this is its adjoint; at its kinks (a sample coordinate on an integer) the
// offset gradient is the derivative of the cell [floor, floor + 1], with torchvision's border: it is taken
// for coordinates in [-1, H) x [-1, W), so at exactly -1, where the forward is 0, it is the right derivative
// (row / column 0's values). A sample with a NaN coordinate contributes to no gradient.
// abs_terms: as for the forward; the offset gradient's differences of corner values become sums of |values|.
struct DeformConv2dGrads {
  Tensor4d input, weight, offset, mask;
  Vectord bias;
};
DeformConv2dGrads deform_conv2d_backward(const DeformConv2dParams& params, const Tensor4d& input,
                                         const Tensor4d& weight, const Tensor4d& offset, const Tensor4d* mask,
                                         const Tensor4d& grad_output, bool abs_terms = false);

}  // namespace detops::reference
