#include "detops/harness/tolerance.h"

#include <stdexcept>

namespace detops::harness {

Tolerance default_tolerance(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return {1e-10, 1e-10};
    case DType::kFloat32: return {1e-5, 1e-5};
    case DType::kFloat16: return {1e-3, 2e-3};
    case DType::kBFloat16: return {8e-3, 1.6e-2};
  }
  throw std::invalid_argument("default_tolerance: unknown dtype");
}

Tolerance scaled(Tolerance t, const ToleranceScale& s) {
  if ((s.atol != 1 || s.rtol != 1) && s.reason.empty()) {
    throw std::invalid_argument("scaled: a tolerance scale other than 1 must state its reason");
  }
  return {t.atol * s.atol, t.rtol * s.rtol};
}

}  // namespace detops::harness
