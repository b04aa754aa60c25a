#pragma once
// The upstream gradient of a loss as its backward reads it, for the args structs of the loss ops (box IoU
// losses, focal losses). Framework-free.
#include <cstdint>

#include "common/numeric.h"

namespace detops {

// The upstream gradient of loss i is data[i * stride] * scale: stride 1 for a contiguous 'none' gradient; 0 for
// an expanded one or the 0-d gradient of 'mean' / 'sum', scale then the reduction's (1 / N for 'mean'). data is in
// the type the op's args document (the loss's dtype, or its accumulation type).
struct UpstreamGrad {
  const void* data = nullptr;
  std::int64_t stride = 1;
  double scale = 1.0;

  // Loss i's upstream gradient in Acc, data being T: Acc(data[i * stride]) * Acc(scale). For host loops.
  template <typename T, typename Acc>
  Acc at(std::int64_t i) const {
    return to_acc<Acc>(static_cast<const T*>(data)[i * stride]) * static_cast<Acc>(scale);
  }
};

}  // namespace detops
