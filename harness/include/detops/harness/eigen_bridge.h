#pragma once
// Copies between torch tensors and the references' Eigen containers (always through fp64, CPU).
#include <ATen/core/Tensor.h>

#include "detops/reference/tensor.h"

namespace detops::harness {

reference::Tensor4d to_tensor4d(const at::Tensor& t);  // 4-D, any dtype/device/strides
reference::Matrixd to_matrix(const at::Tensor& t);     // 2-D, any dtype/device/strides
at::Tensor from_tensor4d(const reference::Tensor4d& t); // fp64 CPU, contiguous

}  // namespace detops::harness
