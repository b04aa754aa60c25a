#pragma once
// Accumulation types and conversions shared by kernels and CPU implementations.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/macros.h"

namespace detops {

// Half types accumulate in float; float in float; double in double.
template <typename T> struct AccType { using type = float; };
template <> struct AccType<double> { using type = double; };
template <typename T> using acc_t = typename AccType<T>::type;

template <typename Acc, typename T>
DETOPS_HD Acc to_acc(T value) { return static_cast<Acc>(value); }

template <typename T, typename Acc>
DETOPS_HD T from_acc(Acc value) { return static_cast<T>(value); }

// NaN-safe finiteness test usable on host and device for float and double.
template <typename Acc>
DETOPS_HD bool is_finite(Acc v) { return v == v && v - v == Acc(0); }

}  // namespace detops
