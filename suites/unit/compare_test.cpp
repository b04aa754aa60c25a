// The comparison helpers against known pairs.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "detops/harness/checks.h"
#include "detops/harness/compare.h"

namespace detops::harness {
namespace {

const Tolerance kTol{1e-6, 1e-3};

at::Tensor vec(std::vector<double> v) { return at::tensor(v, at::kDouble); }

TEST(CompareTensors, IdenticalTensorsPassWithZeroError) {
  const CompareResult r = compare_tensors(vec({1, -2, 3.5}), vec({1, -2, 3.5}), kTol);
  EXPECT_TRUE(r.outcome == Outcome::kPassed);
  EXPECT_EQ(r.max_abs_error, 0);
  EXPECT_EQ(r.mismatches, 0);
  EXPECT_EQ(r.worst_index, -1);
  EXPECT_EQ(r.numel, 3);
}

TEST(CompareTensors, ReportsWorstElementAndCounts) {
  // Element 1 is off by 0.1 (far outside), element 2 by 2e-3 on 10 (inside: 1e-6 + 1e-2).
  const CompareResult r = compare_tensors(vec({1, 2.1, 10.002}), vec({1, 2, 10}), kTol);
  EXPECT_TRUE(r.outcome == Outcome::kMismatch);
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_EQ(r.worst_index, 1);
  EXPECT_NEAR(r.max_abs_error, 0.1, 1e-12);
  EXPECT_NEAR(r.max_rel_error, 0.05, 1e-12);
  EXPECT_DOUBLE_EQ(r.worst_actual, 2.1);
  EXPECT_DOUBLE_EQ(r.worst_expected, 2.0);
}

TEST(CompareTensors, ToleranceBoundaryIsInclusive) {
  // |a - e| == atol + rtol * |e| exactly (values chosen exactly representable): passes.
  const CompareResult r = compare_tensors(vec({2.5}), vec({2.0}), Tolerance{0.5, 0.0});
  EXPECT_TRUE(r.outcome == Outcome::kPassed);
  const CompareResult r2 = compare_tensors(vec({2.5}), vec({2.0}), Tolerance{0.25, 0.0});
  EXPECT_TRUE(r2.outcome == Outcome::kMismatch);
}

TEST(CompareTensors, NaNMustMatchNaNByPosition) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(compare_tensors(vec({nan, 1}), vec({nan, 1}), kTol).outcome == Outcome::kPassed);
  const CompareResult r = compare_tensors(vec({1, nan}), vec({nan, 1}), kTol);
  EXPECT_TRUE(r.outcome == Outcome::kMismatch);
  EXPECT_EQ(r.mismatches, 2);
  EXPECT_TRUE(compare_tensors(vec({0}), vec({nan}), kTol).outcome == Outcome::kMismatch);
}

TEST(CompareTensors, InfinityMustMatchExactly) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(compare_tensors(vec({inf, -inf}), vec({inf, -inf}), kTol).outcome == Outcome::kPassed);
  EXPECT_TRUE(compare_tensors(vec({inf}), vec({-inf}), kTol).outcome == Outcome::kMismatch);
  EXPECT_TRUE(compare_tensors(vec({1e308}), vec({inf}), kTol).outcome == Outcome::kMismatch);
}

TEST(CompareTensors, IntegerOutputsMatchExactlyWhateverTheTolerance) {
  const at::Tensor a = at::tensor({3, 4, 5}, at::kLong), e = at::tensor({3, 4, 6}, at::kLong);
  const CompareResult r = compare_tensors(a, e, Tolerance{10, 10});
  EXPECT_TRUE(r.outcome == Outcome::kMismatch);
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_EQ(r.worst_index, 2);
  EXPECT_TRUE(compare_tensors(a, a.clone(), Tolerance{}).outcome == Outcome::kPassed);
}

TEST(CompareTensors, MagnitudeScalesTheRelativeTermForCancellingSums) {
  // A sum of terms of size ~100 that cancels to 0.001: an error of 1e-4 is 1e-6 of the terms (fine
  // for rtol 1e-3 against the magnitude) but 10% of the result (a mismatch without the magnitude).
  const at::Tensor actual = vec({0.0011}), expected = vec({0.001}), magnitude = vec({200.0});
  EXPECT_TRUE(compare_tensors(actual, expected, Tolerance{1e-6, 1e-3}).outcome == Outcome::kMismatch);
  EXPECT_TRUE(compare_tensors(actual, expected, Tolerance{1e-6, 1e-3}, magnitude).outcome == Outcome::kPassed);
  // The magnitude never tightens: max(|e|, magnitude) is used.
  EXPECT_TRUE(compare_tensors(vec({10.005}), vec({10.0}), Tolerance{0, 1e-3}, vec({0.0})).outcome == Outcome::kPassed);
  EXPECT_THROW(compare_tensors(vec({1, 2}), vec({1, 2}), Tolerance{}, vec({1})), std::invalid_argument);
}

TEST(CompareTensors, ShapeMismatchIsAMismatchNotACrash) {
  const CompareResult r = compare_tensors(at::zeros({2, 3}, at::kDouble), at::zeros({3, 2}, at::kDouble), kTol);
  EXPECT_TRUE(r.outcome == Outcome::kMismatch);
  EXPECT_NE(r.message.find("shape"), std::string::npos);
}

TEST(CompareTensors, EmptyTensorsPass) {
  EXPECT_TRUE(compare_tensors(at::zeros({0, 4}), at::zeros({0, 4}, at::kDouble), kTol).outcome == Outcome::kPassed);
}

TEST(CompareTensors, WorstCoordinatesOfNonContiguousHalfInput) {
  // actual is a transposed fp16 view; the comparison follows logical indices, not memory order.
  at::Tensor expected = at::arange(6, at::kDouble).view({2, 3});
  at::Tensor actual = expected.clone().t().contiguous().t().to(at::kHalf);
  actual[1][2] = 9.0;
  const CompareResult r = compare_tensors(actual, expected, Tolerance{1e-3, 1e-3});
  EXPECT_TRUE(r.outcome == Outcome::kMismatch);
  EXPECT_EQ(r.worst_index, 5);
  EXPECT_EQ(r.worst_coords, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(r.dtype, "Half");
}

TEST(CompareTensors, DescribeNamesOutcomeAndWorstElement) {
  const CompareResult r = compare_tensors(vec({1, 5}), vec({1, 2}), kTol);
  const std::string d = r.describe();
  EXPECT_NE(d.find("mismatch"), std::string::npos);
  EXPECT_NE(d.find("[1]"), std::string::npos);
  EXPECT_NE(d.find("mismatches=1/2"), std::string::npos);
}

// Operands of 2^20 elements or more that all lie on one CUDA device are compared there: every figure must be the
// host loop's, bit for bit: the maxima, the mismatch count, and the worst element (the first of the largest
// excess: here two elements tie for it, and NaN / inf mismatches, which count as infinite excess, come later).
TEST(CompareTensors, DeviceComparisonGivesTheHostLoopsFiguresExactly) {
  if (!cuda_available()) GTEST_SKIP() << "the device comparison needs a GPU: " << cuda_unavailable_reason();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(20261125);
  const std::int64_t rows = 1024, cols = 1031;  // 1,055,744 elements: past the 2^20 threshold
  const at::Tensor expected = at::randn({rows, cols}, gen, at::TensorOptions().dtype(at::kDouble));
  at::Tensor actual = expected + 1e-7 * at::randn({rows, cols}, gen, at::TensorOptions().dtype(at::kDouble));
  const at::Tensor magnitude = expected.abs() + at::rand({rows, cols}, gen, at::TensorOptions().dtype(at::kDouble));
  auto a = actual.view(-1), e = expected.view(-1);
  e[10] = 0.0;                 // a zero expected value: no relative error there
  a[10] = 1e-9;
  for (const std::int64_t i : {777, 900000}) {  // two equal excesses (exact in fp16 too): the first one is the worst
    e[i] = 1.0;
    a[i] = 1.5;
    magnitude.view(-1)[i] = 1.0;
  }
  e[900001] = 0.0;
  a[900001] = 0.0;
  a[5000] = std::numeric_limits<double>::quiet_NaN();  // NaN in one only: a mismatch
  a[5001] = std::numeric_limits<double>::quiet_NaN();  // NaN in both: agreement
  e[5001] = std::numeric_limits<double>::quiet_NaN();
  a[6000] = INFINITY;                                   // inf against a finite value
  a[6001] = -INFINITY;                                  // matching infinities
  e[6001] = -INFINITY;
  const Tolerance tol{1e-6, 1e-3};
  at::Tensor finite_actual = actual.clone();  // the NaN and the inf mismatch replaced: the tie decides the worst
  finite_actual.view(-1)[5000] = e[5000].item<double>();
  finite_actual.view(-1)[6000] = e[6000].item<double>();
  for (const bool nonfinite : {true, false})
  for (const bool with_magnitude : {false, true}) {
    for (const at::ScalarType st : {at::kDouble, at::kHalf}) {
      const at::Tensor act = (nonfinite ? actual : finite_actual).to(st);
      const at::Tensor mag = with_magnitude ? magnitude : at::Tensor();
      const CompareResult host = compare_tensors(act, expected, tol, mag);
      const CompareResult device = compare_tensors(act.to(at::kCUDA), expected.to(at::kCUDA), tol,
                                                   with_magnitude ? mag.to(at::kCUDA) : at::Tensor());
      SCOPED_TRACE(std::string(c10::toString(st)) + (with_magnitude ? " with magnitude" : "") +
                   (nonfinite ? " with NaN and inf" : ""));
      EXPECT_TRUE(host.outcome == Outcome::kMismatch);
      EXPECT_TRUE(device.outcome == host.outcome);
      EXPECT_EQ(device.mismatches, host.mismatches);
      EXPECT_EQ(host.mismatches, nonfinite ? 4 : 2);  // 777, 900000 (and the NaN and inf ones)
      EXPECT_EQ(device.max_abs_error, host.max_abs_error);
      EXPECT_EQ(device.max_rel_error, host.max_rel_error);
      EXPECT_EQ(device.worst_index, host.worst_index);
      EXPECT_EQ(device.worst_coords, host.worst_coords);
      const auto same = [](double x, double y) { return (std::isnan(x) && std::isnan(y)) || x == y; };
      EXPECT_TRUE(same(device.worst_actual, host.worst_actual)) << device.worst_actual << " vs " << host.worst_actual;
      EXPECT_TRUE(same(device.worst_expected, host.worst_expected)) << device.worst_expected << " vs " << host.worst_expected;
      if (nonfinite) {
        EXPECT_EQ(host.worst_index, 5000);  // the first infinite excess: a NaN where a number was expected
      } else {
        EXPECT_EQ(host.worst_index, 777);
      }
      EXPECT_EQ(device.describe(), host.describe());
    }
  }
  // Within tolerance everywhere: passed, no worst element past it, the same figures.
  const at::Tensor close = expected.clone().view(-1).narrow(0, 20, 1 << 20);
  const at::Tensor near = close + 1e-9;
  const CompareResult host = compare_tensors(near, close, tol), device = compare_tensors(near.cuda(), close.cuda(), tol);
  EXPECT_TRUE(host.outcome == Outcome::kPassed && device.outcome == Outcome::kPassed);
  EXPECT_EQ(device.describe(), host.describe());
}

TEST(BitwiseEqual, DistinguishesLastBitAndNaNPayloads) {
  const at::Tensor a = vec({1.0, 2.0});
  at::Tensor b = a.clone();
  EXPECT_TRUE(bitwise_equal(a, b));
  b[1] = std::nextafter(2.0, 3.0);
  EXPECT_FALSE(bitwise_equal(a, b));
  EXPECT_FALSE(bitwise_equal(a, a.to(at::kFloat)));
}

TEST(ToleranceTable, ScalingRequiresAReason) {
  EXPECT_THROW(scaled(default_tolerance(DType::kFloat32), ToleranceScale{10, 1, ""}), std::invalid_argument);
  const Tolerance t = scaled(default_tolerance(DType::kFloat32), ToleranceScale{10, 2, "coordinate rounding"});
  EXPECT_DOUBLE_EQ(t.atol, 1e-4);
  EXPECT_DOUBLE_EQ(t.rtol, 2e-5);
}

}  // namespace
}  // namespace detops::harness
