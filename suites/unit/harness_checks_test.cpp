// The finite-difference checks' gradient targets and the Eigen bridge's 1-D / 2-D conversions.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <string>

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

// The checks keep the last case's data by the OpCase's address (a registry's cases live as long as the process):
// every spec here is kept too, so that no two share an address.
const OpSpec& kept(OpSpec op) {
  static std::deque<OpSpec> specs;
  specs.push_back(std::move(op));
  return specs.back();
}

const OpSpec& spec_with(bool with_target) {
  OpSpec op;
  op.name = "held_sum";
  op.cases.push_back(OpCase{"held", 7, [with_target](std::uint64_t) { return held_sum_case(with_target); }, {}});
  return kept(std::move(op));
}

TEST(FiniteDifferenceChecks, DifferentiateTheForwardByDefault) {
  const OpSpec& op = spec_with(false);
  const CheckResult r = check_gradient_finite_differences(op, op.cases[0], Device::kCpu);
  EXPECT_TRUE(r.outcome == Outcome::kMismatch) << r.message;
  EXPECT_EQ(r.properties.at("fd_function"), "forward");
  const CheckResult ref = check_reference_gradient(op, op.cases[0]);
  EXPECT_TRUE(ref.outcome == Outcome::kMismatch) << ref.message;
}

TEST(FiniteDifferenceChecks, DifferentiateTheGradientTargetWhenGiven) {
  const OpSpec& op = spec_with(true);
  const CheckResult r = check_gradient_finite_differences(op, op.cases[0], Device::kCpu);
  EXPECT_TRUE(r.outcome == Outcome::kPassed) << r.message;
  EXPECT_EQ(r.properties.at("fd_function"), "gradient_target");
  EXPECT_EQ(r.properties.at("fd_points"), "4");
  const CheckResult ref = check_reference_gradient(op, op.cases[0]);
  EXPECT_TRUE(ref.outcome == Outcome::kPassed) << ref.message;
}

// A row-separable loss (CaseData::fd_rows): rows of x [N, 3] with a per-row integer k [N] and shared weights w [3],
// l_n = (k_n + 1) * sum_c w_c x_nc^2 * h_n (h_n = x0_n0 of the held point x0 with `held`, whose gradient the
// backward leaves out; else 1), reduced by `reduction` ("none": [N]; "sum" / "mean": 0-dim). `bug` plants a bug in
// the backward, or (kNotSeparable) a factor of all rows in the function.
enum class RowBug { kNone, kMeanOverRowsMinusOne, kRowsSwapped, kNotSeparable };

CaseData row_case(const std::string& reduction, bool held, RowBug bug, std::int64_t rows = 200) {
  CaseData d;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  d.inputs = {at::randn({rows, 3}, gen, f64) + 2.0, at::randint(0, 3, {rows}, gen, at::TensorOptions().dtype(at::kLong)),
              at::tensor({0.5, 1.5, -0.75}, f64)};
  d.differentiable = {0, 2};
  const bool mean = reduction == "mean";
  const auto reduce = [reduction](const at::Tensor& per_row) {
    if (reduction == "none") return per_row;
    return reduction == "mean" ? per_row.mean() : per_row.sum();
  };
  // value(x, x0): the per-row terms; a mean over all rows of x inside each term makes it not separable.
  const auto value = [bug](const Tensors& x, const at::Tensor& x0_first) {
    at::Tensor per_row = (x[1].to(at::kDouble) + 1) * (x[0] * x[0] * x[2]).sum(1) * x0_first;
    if (bug == RowBug::kNotSeparable) per_row = per_row * x[0].select(1, 0).mean();
    return per_row;
  };
  auto target = [value, reduce](const Tensors& x, const Tensors& x0) {
    return Tensors{reduce(value(x, x0[0].select(1, 0)))};
  };
  auto forward = [value, reduce, held](const Tensors& x) {
    return Tensors{reduce(value(x, held ? x[0].select(1, 0).detach() : at::ones({x[0].size(0)}, x[0].options())))};
  };
  // The gradient of <g, f> with x0 held (or 1): d/dx_nc = g_n * (k_n + 1) * 2 w_c x_nc * x0_n0; d/dw_c likewise.
  auto backward = [reduction, mean, held, bug](const Tensors& x, const Tensors& g) {
    const std::int64_t n = x[0].size(0);
    at::Tensor gn = reduction == "none" ? g[0] : g[0].expand({n});
    if (mean) gn = gn / (bug == RowBug::kMeanOverRowsMinusOne ? static_cast<double>(n - 1) : static_cast<double>(n));
    const at::Tensor scale = gn * (x[1].to(at::kDouble) + 1) * (held ? x[0].select(1, 0) : at::ones({n}, x[0].options()));
    at::Tensor gx = 2 * x[0] * x[2] * scale.unsqueeze(1);
    if (bug == RowBug::kRowsSwapped) gx = gx.roll(1, 0);
    const at::Tensor gw = (x[0] * x[0] * scale.unsqueeze(1)).sum(0);
    return Tensors{gx, gw};
  };
  d.op_forward = forward;
  d.reference_forward = forward;
  d.op_backward = backward;
  d.reference_backward = backward;
  if (held) {
    d.op_gradient_target = target;
    d.reference_gradient_target = target;
  }
  d.fd_rows = CaseData::FdRows{{0, 1}, [mean](std::int64_t n) { return mean ? 1.0 / static_cast<double>(n) : 1.0; }};
  return d;
}

const OpSpec& row_spec(std::function<CaseData()> make) {
  OpSpec op;
  op.name = "rows";
  op.cases.push_back(OpCase{"rows", 5, [make](std::uint64_t) { return make(); }, {}});
  return kept(std::move(op));
}

TEST(FiniteDifferencesByRows, AgreeWithTheBackwardForEveryReductionAndAHeldTerm) {
  for (const char* reduction : {"none", "sum", "mean"}) {
    for (bool held : {false, true}) {
      const OpSpec& op = row_spec([=] { return row_case(reduction, held, RowBug::kNone); });
      for (const CheckResult& r : {check_gradient_finite_differences(op, op.cases[0], Device::kCpu),
                                   check_reference_gradient(op, op.cases[0])}) {
        EXPECT_TRUE(r.outcome == Outcome::kPassed) << reduction << " held " << held << ": " << r.message;
        EXPECT_EQ(r.properties.at("fd_evaluation"), "cpu (by rows)") << reduction;
        EXPECT_EQ(r.properties.at("fd_rows_inputs"), "0") << reduction;  // w (input 2) is shared: evaluated whole
        EXPECT_EQ(r.properties.at("fd_points"), "99") << reduction;      // 96 of x's 600 elements, all 3 of w's
      }
    }
  }
}

TEST(FiniteDifferencesByRows, CatchABackwardThatAveragesOverTheWrongCount) {
  const OpSpec& op = row_spec([] { return row_case("mean", false, RowBug::kMeanOverRowsMinusOne); });
  EXPECT_TRUE(check_reference_gradient(op, op.cases[0]).outcome == Outcome::kMismatch);
}

TEST(FiniteDifferencesByRows, CatchABackwardThatGivesARowAnotherRowsGradient) {
  for (const char* reduction : {"none", "sum"}) {
    const OpSpec& op = row_spec([=] { return row_case(reduction, false, RowBug::kRowsSwapped); });
    EXPECT_TRUE(check_reference_gradient(op, op.cases[0]).outcome == Outcome::kMismatch) << reduction;
  }
}

// A function declared separable that is not (each row's term scaled by the mean of all rows): the row problem's
// derivative is not the whole function's, and the check fails rather than passes.
TEST(FiniteDifferencesByRows, AFunctionWronglyDeclaredSeparableFails) {
  for (bool declared : {true, false}) {
    const OpSpec& op = row_spec([declared] {
      CaseData d = row_case("sum", false, RowBug::kNotSeparable);
      if (!declared) d.fd_rows.reset();
      // Its true gradient, the mean's term included, so that only the evaluation by rows can be wrong: with
      // F = g * m * sum_n a_n S_n (a_n = k_n + 1, S_n = sum_c w_c x_nc^2, m = mean_n x_n0),
      // dF/dx_nc = g (m a_n 2 w_c x_nc + [c = 0] sum_j a_j S_j / N), dF/dw_c = g m sum_n a_n x_nc^2.
      d.reference_backward = [](const Tensors& x, const Tensors& g) {
        const at::Tensor a = x[1].to(at::kDouble) + 1, m = x[0].select(1, 0).mean();
        const at::Tensor total = (a * (x[0] * x[0] * x[2]).sum(1)).sum();
        at::Tensor gx = 2 * x[0] * x[2] * (a * m).unsqueeze(1);
        gx.select(1, 0).add_(total / static_cast<double>(x[0].size(0)));
        const at::Tensor gw = (x[0] * x[0] * (a * m).unsqueeze(1)).sum(0);
        return Tensors{gx * g[0], gw * g[0]};
      };
      return d;
    });
    // Undeclared, the whole function's differences agree with that gradient.
    const CheckResult r = check_reference_gradient(op, op.cases[0]);
    EXPECT_TRUE(r.outcome == (declared ? Outcome::kMismatch : Outcome::kPassed)) << declared << ": " << r.message;
  }
}

TEST(FiniteDifferencesByRows, NotUsedWhereTheyDoNotApply) {
  // One row: nothing to save; a 0-dim output without a reduced_scale; an output whose rows are not the inputs'.
  const OpSpec& one = row_spec([] { return row_case("sum", false, RowBug::kNone, 1); });
  EXPECT_EQ(check_reference_gradient(one, one.cases[0]).properties.at("fd_evaluation"), "cpu");
  const OpSpec& no_scale = row_spec([] {
    CaseData d = row_case("mean", false, RowBug::kNone);
    d.fd_rows->reduced_scale = nullptr;
    return d;
  });
  const CheckResult r = check_reference_gradient(no_scale, no_scale.cases[0]);
  EXPECT_EQ(r.properties.at("fd_evaluation"), "cpu");
  EXPECT_TRUE(r.outcome == Outcome::kPassed) << r.message;  // the whole function, differentiated as before
  const OpSpec& other_rows = row_spec([] {
    CaseData d = row_case("none", false, RowBug::kNone);
    const auto f = d.reference_forward;
    d.reference_forward = [f](const Tensors& x) { return Tensors{at::cat({f(x)[0], at::zeros({1}, at::kDouble)})}; };
    const auto b = d.reference_backward;
    d.reference_backward = [b](const Tensors& x, const Tensors& g) { return b(x, {g[0].narrow(0, 0, x[0].size(0))}); };
    return d;
  });
  const CheckResult o = check_reference_gradient(other_rows, other_rows.cases[0]);
  EXPECT_EQ(o.properties.at("fd_evaluation"), "cpu");
  EXPECT_TRUE(o.outcome == Outcome::kPassed) << o.message;
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
