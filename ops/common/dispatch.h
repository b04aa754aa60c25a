#pragma once
// dispatch_floating(dtype, op_name, fn): calls fn(TypeTag<T>{}) with T one of double, float, __half,
// __nv_bfloat16. The one place where a DType becomes a C++ type; loud on anything else.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "detops/core/dtype.h"

namespace detops {

template <typename T>
struct TypeTag {
  using type = T;
};

template <typename Fn>
decltype(auto) dispatch_floating(DType dtype, const char* op_name, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat64: return fn(TypeTag<double>{});
    case DType::kFloat32: return fn(TypeTag<float>{});
    case DType::kFloat16: return fn(TypeTag<__half>{});
    case DType::kBFloat16: return fn(TypeTag<__nv_bfloat16>{});
  }
  throw std::invalid_argument(std::string(op_name) + ": unsupported dtype code " +
                              std::to_string(static_cast<int>(dtype)));
}

}  // namespace detops
