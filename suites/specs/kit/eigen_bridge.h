#pragma once
// Copies between torch tensors and the references' Eigen containers (always through fp64, CPU).
#include <ATen/core/Tensor.h>

#include "detops/reference/tensor.h"

namespace detops::kit {

reference::Tensor4d to_tensor4d(const at::Tensor& t);  // 4-D, any dtype/device/strides
reference::Matrixd to_matrix(const at::Tensor& t);     // 2-D, any dtype/device/strides
reference::Vectord to_vector(const at::Tensor& t);     // 1-D, any dtype/device/strides
at::Tensor from_tensor4d(const reference::Tensor4d& t); // fp64 CPU, contiguous
at::Tensor from_matrix(const reference::Matrixd& m);    // fp64 CPU, contiguous [rows, cols]
at::Tensor from_vector(const reference::Vectord& v);    // fp64 CPU, contiguous [size]

}  // namespace detops::kit
