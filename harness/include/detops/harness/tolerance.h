#pragma once
// Comparison tolerances: one per-dtype table; an op may scale it for a stated reason.
#include <map>
#include <string>

#include "detops/core/dtype.h"

namespace detops::harness {

// An element passes when |actual - expected| <= atol + rtol * |expected|.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

// The harness-wide table, for outputs of magnitude ~1 computed from inputs already rounded to the dtype
// (the reference sees exactly the rounded values), with fp32 accumulation for the half types:
//   fp64 1e-10 / 1e-10, fp32 1e-5 / 1e-5, fp16 1e-3 / 2e-3, bf16 8e-3 / 1.6e-2.
Tolerance default_tolerance(DType dtype);

struct ToleranceScale {
  double atol = 1;
  double rtol = 1;
  std::string reason;  // required whenever a factor is not 1
};

Tolerance scaled(Tolerance t, const ToleranceScale& s);

// Finite-difference gradient checks (fp64): eps 1e-6, atol 1e-5, rtol 1e-3.
inline constexpr double kFiniteDifferenceEps = 1e-6;
inline constexpr Tolerance kFiniteDifferenceTolerance{1e-5, 1e-3};

}  // namespace detops::harness
