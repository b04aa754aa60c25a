#pragma once
// Dense double-precision containers the references work on: row-major Eigen tensors, so element
// (n, c, h, w) sits where a contiguous NCHW torch tensor keeps it.
#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>

namespace detops::reference {

using Tensor4d = Eigen::Tensor<double, 4, Eigen::RowMajor>;
using Matrixd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace detops::reference
