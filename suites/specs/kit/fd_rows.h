#pragma once
// CaseData::fd_rows for the losses whose terms are separable by rows.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "detops/harness/op_spec.h"

namespace detops::kit {

// A loss separable by the rows of `inputs` whose 'mean' divides its sum by the rows (reduced_scale 1 / N) and whose
// 'sum' does not (1); a 'none' output has the rows itself and never uses the factor.
inline harness::CaseData::FdRows loss_fd_rows(std::vector<std::size_t> inputs, bool mean) {
  return {std::move(inputs), [mean](std::int64_t rows) { return mean ? 1.0 / static_cast<double>(rows) : 1.0; }};
}

}  // namespace detops::kit
