#pragma once
// C++ entry points of torch.ops.detops.nms and torch.ops.detops.batched_nms (CPU and CUDA tensors).
// The harness calls these directly.
#include <ATen/core/Tensor.h>

#include "nms/nms_params.h"

namespace detops {

// boxes [N, 4] (x1, y1, x2, y2), any floating dtype and strides; scores [N], any floating dtype, same
// device -> int64 [K]: indices into boxes of the kept boxes, by decreasing score (ties in index order).
at::Tensor nms_forward(const at::Tensor& boxes, const at::Tensor& scores, const NmsParams& params);

// As nms_forward, but a box only suppresses boxes of its own class: idxs [N], any integer dtype.
at::Tensor batched_nms_forward(const at::Tensor& boxes, const at::Tensor& scores, const at::Tensor& idxs,
                               const NmsParams& params);

}  // namespace detops
