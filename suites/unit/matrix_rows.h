#pragma once
// A reference::Matrixd written out row by row in a test: rows<5>({{0, 1, 2, 3, 4}, ...}). A row of the
// wrong length is a test bug: it throws.
#include <initializer_list>
#include <stdexcept>

#include "detops/reference/tensor.h"

namespace detops::reference {

template <Eigen::Index Cols>
Matrixd rows(std::initializer_list<std::initializer_list<double>> values) {
  Matrixd m(static_cast<Eigen::Index>(values.size()), Cols);
  Eigen::Index r = 0;
  for (const auto& row : values) {
    if (static_cast<Eigen::Index>(row.size()) != Cols) throw std::invalid_argument("rows<Cols>: a row of another length");
    Eigen::Index c = 0;
    for (double v : row) m(r, c++) = v;
    ++r;
  }
  return m;
}

}  // namespace detops::reference
