// The finite-difference checks' gradient targets and the Eigen bridge's 1-D / 2-D conversions.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "detops/harness/checks.h"
#include "kit/eigen_bridge.h"

namespace detops::harness {
namespace {

// f(x) = x * sum(x), whose "backward" holds sum(x) constant: grad_x = g * sum(x). That is the gradient
// of f(x; x0) = x * sum(x0) at x0, not of f itself.
CaseData held_sum_case(bool with_target) {
  CaseData d;
  d.inputs = {at::tensor({0.5, -1.25, 2.0, 0.75}, at::kDouble)};
  d.differentiable = {0};
  auto forward = [](const Tensors& in) { return Tensors{in[0] * in[0].sum()}; };
  auto backward = [](const Tensors& in, const Tensors& g) { return Tensors{g[0] * in[0].sum()}; };
  d.op_forward = forward;
  d.reference_forward = forward;
  d.op_backward = backward;
  d.reference_backward = backward;
  if (with_target) {
    auto target = [](const Tensors& x, const Tensors& x0) { return Tensors{x[0] * x0[0].sum()}; };
    d.op_gradient_target = target;
    d.reference_gradient_target = target;
  }
  return d;
}

OpSpec spec_with(bool with_target) {
  OpSpec op;
  op.name = "held_sum";
  op.cases.push_back(OpCase{"held", 7, [with_target](std::uint64_t) { return held_sum_case(with_target); }, {}});
  return op;
}

TEST(FiniteDifferenceChecks, DifferentiateTheForwardByDefault) {
  const OpSpec op = spec_with(false);
  const CheckResult r = check_gradient_finite_differences(op, op.cases[0], Device::kCpu);
  EXPECT_TRUE(r.outcome == Outcome::kMismatch) << r.message;
  EXPECT_EQ(r.properties.at("fd_function"), "forward");
  const CheckResult ref = check_reference_gradient(op, op.cases[0]);
  EXPECT_TRUE(ref.outcome == Outcome::kMismatch) << ref.message;
}

TEST(FiniteDifferenceChecks, DifferentiateTheGradientTargetWhenGiven) {
  const OpSpec op = spec_with(true);
  const CheckResult r = check_gradient_finite_differences(op, op.cases[0], Device::kCpu);
  EXPECT_TRUE(r.outcome == Outcome::kPassed) << r.message;
  EXPECT_EQ(r.properties.at("fd_function"), "gradient_target");
  EXPECT_EQ(r.properties.at("fd_points"), "4");
  const CheckResult ref = check_reference_gradient(op, op.cases[0]);
  EXPECT_TRUE(ref.outcome == Outcome::kPassed) << ref.message;
}

TEST(EigenBridge, VectorAndMatrixRoundTrips) {
  using kit::from_matrix, kit::from_vector, kit::to_matrix, kit::to_vector;
  const at::Tensor v = at::tensor({1.5, -2.0, 3.25}, at::kFloat);
  const reference::Vectord ev = to_vector(v);
  ASSERT_EQ(ev.size(), 3);
  EXPECT_EQ(ev(1), -2.0);
  EXPECT_TRUE(from_vector(ev).equal(v.to(at::kDouble)));
  // A transposed (column-major) view: the matrix keeps the logical (row, col) layout.
  const at::Tensor m = at::arange(6, at::kDouble).view({2, 3}).t();
  const reference::Matrixd em = to_matrix(m);
  ASSERT_EQ(em.rows(), 3);
  ASSERT_EQ(em.cols(), 2);
  EXPECT_EQ(em(2, 1), 5.0);
  EXPECT_TRUE(from_matrix(em).equal(m.contiguous()));
  EXPECT_EQ(from_matrix(reference::Matrixd(0, 4)).sizes(), at::IntArrayRef({0, 4}));
  EXPECT_THROW(to_vector(m), std::invalid_argument);
}

}  // namespace
}  // namespace detops::harness
