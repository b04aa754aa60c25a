#pragma once
// Masked 2-D convolution reference in double, written from the definition (docs/ops/masked_conv2d.md). Shares
// nothing with the kernels but the parameter struct.
#include "detops/reference/tensor.h"
#include "masked_conv2d/masked_conv2d_params.h"

namespace detops::reference {

// features [N, C_in, H, W]; mask [N or 1, 1, H_out, W_out] (its values, as doubles; a [1, ...] mask applies to
// every image); weight [C_out, C_in, kh, kw]; bias: null or C_out values -> [N, C_out, H_out, W_out]: the
// zero-padded, strided cross-correlation plus bias where the mask is > 0, 0 elsewhere.
Tensor4d masked_conv2d_forward(const MaskedConv2dParams& params, const Tensor4d& features, const Tensor4d& mask,
                               const Tensor4d& weight, const Vectord* bias);

// The gradients of <grad_output, masked_conv2d_forward(features, weight, bias)> (the forward is linear in
// each of them): with respect to features, weight and bias (bias: C_out values, whether or not the forward
// had one).
struct MaskedConv2dGrads {
  Tensor4d features, weight;
  Vectord bias;
};
MaskedConv2dGrads masked_conv2d_backward(const MaskedConv2dParams& params, const Tensor4d& features,
                                         const Tensor4d& mask, const Tensor4d& weight, const Tensor4d& grad_output);

}  // namespace detops::reference
