#include "detops/harness/compare.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace detops::harness {
namespace {

std::vector<std::int64_t> unravel(std::int64_t flat, const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> coords(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    coords[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return coords;
}

std::string join(const std::vector<std::int64_t>& v) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
  return os.str();
}

// compare_tensors' element loop as fp64 tensor operations where the data lie: on the device, for operands that
// are all there. Each element's figures are the same IEEE operations as the loop's (|a - e|, |a - e| / |e|,
// atol + rtol * scale, err / allowed), so the maxima, the count and the worst element (the first of the largest
// excess, as the loop's strict > keeps the first) are the loop's exactly.
void compare_elements_as_tensors(CompareResult& r, const at::Tensor& actual, const at::Tensor& expected, Tolerance tol,
                                 const at::Tensor& magnitude) {
  const at::Tensor a = actual.detach().to(at::kDouble).reshape({-1});
  const at::Tensor e = expected.detach().to(at::kDouble).reshape({-1});
  const at::Tensor nan_a = a.isnan(), nan_e = e.isnan();
  const at::Tensor any_nan = nan_a.logical_or(nan_e);
  const at::Tensor any_inf = a.isinf().logical_or(e.isinf()).logical_and(any_nan.logical_not());
  const at::Tensor finite = any_nan.logical_or(any_inf).logical_not();
  const at::Tensor err = (a - e).abs();
  const at::Tensor zero = at::zeros({}, a.options());
  r.max_abs_error = at::where(finite, err, zero).max().item<double>();
  const at::Tensor rel_ok = finite.logical_and(e.ne(0));
  r.max_rel_error = at::where(rel_ok, err / at::where(rel_ok, e.abs(), at::ones({}, a.options())), zero).max().item<double>();
  const at::Tensor scale = magnitude.defined()
                               ? at::maximum(e.abs(), magnitude.detach().to(at::kDouble).reshape({-1}).abs())
                               : e.abs();
  const at::Tensor allowed = scale * tol.rtol + tol.atol;
  const at::Tensor inf = at::full({}, INFINITY, a.options());
  const at::Tensor finite_excess =
      at::where(allowed > 0, err / allowed, at::where(err > 0, inf, zero));
  const at::Tensor bad = at::where(any_nan, nan_a.ne(nan_e), at::where(any_inf, a.ne(e), err > allowed));
  const at::Tensor excess = at::where(finite, finite_excess, at::where(bad, inf, zero));
  r.mismatches = bad.sum().item<std::int64_t>();
  const at::Tensor top = excess.max();
  if (top.item<double>() > 0) {
    r.worst_index = excess.argmax().item<std::int64_t>();
    r.worst_actual = a[r.worst_index].item<double>();
    r.worst_expected = e[r.worst_index].item<double>();
  }
}

// compare_tensors' element loop on the host: the figures, the mismatch count and the worst element with its values.
void compare_elements_on_host(CompareResult& r, const at::Tensor& actual, const at::Tensor& expected, Tolerance tol,
                              const at::Tensor& magnitude) {
  const at::Tensor a = actual.detach().to(at::kCPU).to(at::kDouble).contiguous();
  const at::Tensor e = expected.detach().to(at::kCPU).to(at::kDouble).contiguous();
  const at::Tensor m = magnitude.defined() ? magnitude.detach().to(at::kCPU).to(at::kDouble).contiguous() : at::Tensor();
  const double* pa = a.data_ptr<double>();
  const double* pe = e.data_ptr<double>();
  const double* pm = m.defined() ? m.data_ptr<double>() : nullptr;
  double worst_excess = -1;  // |a-e| / (atol + rtol|e|), or +inf for a NaN/inf mismatch
  for (std::int64_t i = 0; i < r.numel; ++i) {
    const double x = pa[i], y = pe[i];
    double excess = 0;
    bool bad = false;
    if (std::isnan(x) || std::isnan(y)) {
      bad = std::isnan(x) != std::isnan(y);
      excess = bad ? INFINITY : 0;
    } else if (std::isinf(x) || std::isinf(y)) {
      bad = x != y;
      excess = bad ? INFINITY : 0;
    } else {
      const double err = std::fabs(x - y);
      r.max_abs_error = std::max(r.max_abs_error, err);
      if (y != 0) r.max_rel_error = std::max(r.max_rel_error, err / std::fabs(y));
      const double scale = pm != nullptr ? std::max(std::fabs(y), std::fabs(pm[i])) : std::fabs(y);
      const double allowed = tol.atol + tol.rtol * scale;
      bad = err > allowed;
      excess = allowed > 0 ? err / allowed : (err > 0 ? INFINITY : 0);
    }
    if (bad) ++r.mismatches;
    if (excess > worst_excess && (bad || excess > 0)) {
      worst_excess = excess;
      r.worst_index = i;
    }
  }
  if (r.worst_index >= 0) {
    r.worst_actual = pa[r.worst_index];
    r.worst_expected = pe[r.worst_index];
  }
}

// Operands past this many elements, all on one CUDA device, are compared there (the loop over 2^28 fp64 elements
// on one CPU core, after copying them to the host, takes seconds).
constexpr std::int64_t kDeviceCompareElements = std::int64_t{1} << 20;

}  // namespace

std::string CompareResult::describe() const {
  std::ostringstream os;
  os.precision(4);
  os << outcome_name(outcome) << ": " << dtype << ' ' << join(shape) << ", max_abs_error=" << max_abs_error
     << ", max_rel_error=" << max_rel_error << ", mismatches=" << mismatches << '/' << numel
     << " (atol=" << tolerance.atol << ", rtol=" << tolerance.rtol << ')';
  if (worst_index >= 0) {
    os.precision(9);
    os << ", worst element " << join(worst_coords) << ": actual=" << worst_actual << " expected=" << worst_expected;
  }
  if (!message.empty()) os << "; " << message;
  return os.str();
}

CompareResult compare_tensors(const at::Tensor& actual, const at::Tensor& expected, Tolerance tol,
                              const at::Tensor& magnitude) {
  CompareResult r;
  r.tolerance = tol;
  r.shape = actual.sizes().vec();
  r.numel = actual.numel();
  r.dtype = std::string(c10::toString(actual.scalar_type()));
  if (actual.sizes() != expected.sizes()) {
    r.outcome = Outcome::kMismatch;
    r.message = "shape " + join(actual.sizes().vec()) + " differs from expected shape " + join(expected.sizes().vec());
    return r;
  }
  const bool integral = !at::isFloatingType(actual.scalar_type()) && !at::isComplexType(actual.scalar_type());
  if (integral) tol = Tolerance{0, 0};
  if (magnitude.defined() && magnitude.sizes() != expected.sizes()) {
    throw std::invalid_argument("compare_tensors: magnitude must have the shape of expected");
  }
  const bool on_device = actual.is_cuda() && expected.device() == actual.device() &&
                         (!magnitude.defined() || magnitude.device() == actual.device());
  if (on_device && r.numel >= kDeviceCompareElements && !at::isComplexType(expected.scalar_type())) {
    compare_elements_as_tensors(r, actual, expected, tol, magnitude);
  } else {
    compare_elements_on_host(r, actual, expected, tol, magnitude);
  }
  if (r.worst_index >= 0) r.worst_coords = unravel(r.worst_index, r.shape);
  if (r.mismatches > 0) {
    r.outcome = Outcome::kMismatch;
    r.message = std::to_string(r.mismatches) + " of " + std::to_string(r.numel) + " elements outside tolerance";
  }
  return r;
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  const at::Tensor ca = a.detach().to(at::kCPU).contiguous(), cb = b.detach().to(at::kCPU).contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(ca.numel()) * ca.element_size()) == 0;
}

}  // namespace detops::harness
