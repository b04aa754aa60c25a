#pragma once
// The checks a suite runs for each (op, case, dtype, device). Each returns a CheckResult: an outcome,
// the comparison figures and the properties to attach to the test's JSON record.
#include <map>
#include <string>
#include <vector>

#include "detops/harness/check_result.h"
#include "detops/harness/compare.h"
#include "detops/harness/op_spec.h"

namespace detops::harness {

// Whether CUDA tests can run here, and if not, why (cudaGetDeviceCount's error in words).
bool cuda_available();
const std::string& cuda_unavailable_reason();

// The torch dtype of a DType.
at::ScalarType scalar_type_of(DType dtype);

// Rounds the master inputs to `dtype` on `device` (floating inputs only).
Tensors materialize_inputs(const Tensors& master, DType dtype, Device device);

// Op forward vs reference forward in `dtype`; runs the op twice and records bitwise reproducibility
// (a declared-deterministic op that is not reproducible fails).
CheckResult check_forward(const OpSpec& op, const OpCase& c, DType dtype, Device device);
// Op backward vs reference backward in `dtype` (check (c)); reproducibility as above.
CheckResult check_backward(const OpSpec& op, const OpCase& c, DType dtype, Device device);
// Central finite differences of the op's fp64 forward vs its fp64 backward (check (a)).
CheckResult check_gradient_finite_differences(const OpSpec& op, const OpCase& c, Device device);
// Central finite differences of the reference forward vs the reference backward (check (b)).
CheckResult check_reference_gradient(const OpSpec& op, const OpCase& c);
// The bad input raises an error whose message names what it must; then valid_call still works.
CheckResult check_bad_input(const OpSpec& op, const BadInputCase& b, Device device);
// Runs an op's extra check (skipped with the reason when it needs CUDA and CUDA is unavailable);
// exceptions become an error outcome.
CheckResult run_extra_check(const ExtraCheck& e);

// Figures of a CheckResult's comparisons (max errors, mismatches, worst index, one line per
// comparison) as properties, and the outcome and message of the first comparison that failed.
void summarize(CheckResult& r);

}  // namespace detops::harness
