#pragma once
// CARAFE reference in double, written from the definition (docs/ops/carafe.md). Shares nothing with the kernels
// but the parameter struct.
#include "carafe/carafe_params.h"
#include "detops/reference/tensor.h"

namespace detops::reference {

// features [N, C, H, W], masks [N, k k G, H s, W s] -> [N, C, H s, W s]:
// out[n, c, y, x] = sum over i, j < k of masks[n, g k k + i k + j, y, x] * features[n, c, y / s + i - r, x / s + j - r],
// g = c / (C / G), r = (k - 1) / 2, the sum over the taps whose feature position lies on the map.
Tensor4d carafe_forward(const CarafeParams& params, const Tensor4d& features, const Tensor4d& masks);

// The gradients of <grad_output, carafe_forward(features, masks)> (bilinear: linear in each argument) with
// respect to features and masks.
struct CarafeGrads {
  Tensor4d features, masks;
};
CarafeGrads carafe_backward(const CarafeParams& params, const Tensor4d& features, const Tensor4d& masks,
                            const Tensor4d& grad_output);

}  // namespace detops::reference
