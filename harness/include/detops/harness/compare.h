#pragma once
// Element-wise comparison of an output against its expected values.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "detops/harness/outcome.h"
#include "detops/harness/tolerance.h"

namespace detops::harness {

struct CompareResult {
  Outcome outcome = Outcome::kPassed;
  double max_abs_error = 0;          // over elements where both are finite
  double max_rel_error = 0;          // |a - e| / |e| over finite elements with e != 0
  std::int64_t worst_index = -1;     // flat index of the element furthest past its tolerance (or largest error)
  std::vector<std::int64_t> worst_coords;
  double worst_actual = 0, worst_expected = 0;
  std::int64_t mismatches = 0;
  std::int64_t numel = 0;
  std::vector<std::int64_t> shape;
  std::string dtype;                 // of `actual`
  Tolerance tolerance;
  std::string message;               // why it is not passed, in words

  std::string describe() const;      // one line: outcome, errors, worst element, counts
};

// Compares `actual` (any dtype, device, strides) with `expected` (any floating or integer dtype).
// Floating: NaN must match NaN at the same position, +-inf must match exactly, finite values within
// |a - e| <= atol + rtol * max(|e|, magnitude). `magnitude` (optional, same shape) is the sum of the
// absolute values of the terms that produced each expected element: a rounding-error bound for sums
// grows with it, not with a result that cancels to near 0. Integer or bool `actual`: exact equality
// (tol is ignored). Shape differences are a mismatch.
CompareResult compare_tensors(const at::Tensor& actual, const at::Tensor& expected, Tolerance tol,
                              const at::Tensor& magnitude = at::Tensor());

// True when both tensors have the same shape and dtype and identical bytes (NaN payloads included).
bool bitwise_equal(const at::Tensor& a, const at::Tensor& b);

}  // namespace detops::harness
