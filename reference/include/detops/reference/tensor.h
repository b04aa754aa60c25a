#pragma once
// Dense double-precision containers the references work on: row-major Eigen tensors and matrices, so
// element (n, c, h, w) or (i, j) sits where a contiguous torch tensor keeps it; Vectord for 1-D.
#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>

namespace detops::reference {

using Tensor4d = Eigen::Tensor<double, 4, Eigen::RowMajor>;
using Matrixd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vectord = Eigen::VectorXd;

}  // namespace detops::reference
