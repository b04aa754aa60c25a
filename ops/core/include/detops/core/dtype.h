#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace detops {

// The floating-point types every op supports. Half types are stored as CUDA's __half / __nv_bfloat16
// and accumulate in float; fp64 accumulates in double.
enum class DType : std::uint8_t { kFloat64, kFloat32, kFloat16, kBFloat16 };

inline const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return "fp64";
    case DType::kFloat32: return "fp32";
    case DType::kFloat16: return "fp16";
    case DType::kBFloat16: return "bf16";
  }
  throw std::invalid_argument("dtype_name: unknown DType value " + std::to_string(static_cast<int>(dtype)));
}

inline constexpr DType kAllDTypes[] = {DType::kFloat64, DType::kFloat32, DType::kFloat16, DType::kBFloat16};

}  // namespace detops
