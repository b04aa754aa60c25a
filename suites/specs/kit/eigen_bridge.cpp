#include "kit/eigen_bridge.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

namespace detops::kit {

reference::Tensor4d to_tensor4d(const at::Tensor& t) {
  if (t.dim() != 4) throw std::invalid_argument("to_tensor4d: expected a 4-D tensor");
  const at::Tensor c = t.detach().to(at::kCPU).to(at::kDouble).contiguous();
  reference::Tensor4d out(c.size(0), c.size(1), c.size(2), c.size(3));
  std::copy_n(c.data_ptr<double>(), c.numel(), out.data());
  return out;
}

reference::Matrixd to_matrix(const at::Tensor& t) {
  if (t.dim() != 2) throw std::invalid_argument("to_matrix: expected a 2-D tensor");
  const at::Tensor c = t.detach().to(at::kCPU).to(at::kDouble).contiguous();
  reference::Matrixd out(c.size(0), c.size(1));
  std::copy_n(c.data_ptr<double>(), c.numel(), out.data());
  return out;
}

reference::Vectord to_vector(const at::Tensor& t) {
  if (t.dim() != 1) throw std::invalid_argument("to_vector: expected a 1-D tensor");
  const at::Tensor c = t.detach().to(at::kCPU).to(at::kDouble).contiguous();
  reference::Vectord out(c.size(0));
  std::copy_n(c.data_ptr<double>(), c.numel(), out.data());
  return out;
}

at::Tensor from_tensor4d(const reference::Tensor4d& t) {
  at::Tensor out = at::empty({t.dimension(0), t.dimension(1), t.dimension(2), t.dimension(3)}, at::kDouble);
  std::copy_n(t.data(), t.size(), out.data_ptr<double>());
  return out;
}

at::Tensor from_matrix(const reference::Matrixd& m) {
  at::Tensor out = at::empty({m.rows(), m.cols()}, at::kDouble);
  std::copy_n(m.data(), m.size(), out.data_ptr<double>());
  return out;
}

at::Tensor from_vector(const reference::Vectord& v) {
  at::Tensor out = at::empty({v.size()}, at::kDouble);
  std::copy_n(v.data(), v.size(), out.data_ptr<double>());
  return out;
}

}  // namespace detops::kit
