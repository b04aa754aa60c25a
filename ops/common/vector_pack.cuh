#pragma once
// 16-byte vector loads and stores of any element type, for bandwidth-bound elementwise kernels: one
// 128-bit memory instruction moves 4 fp32, 8 fp16/bf16 or 2 fp64 elements.
#include <cstdint>

namespace detops {

template <typename T>
struct alignas(16) Pack {
  static constexpr int kN = static_cast<int>(16 / sizeof(T));
  T v[kN];
};

// Pack i of `base` (element i * Pack<T>::kN); base must be 16-byte aligned.
template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* base, std::int64_t i) {
  return reinterpret_cast<const Pack<T>*>(base)[i];
}
template <typename T>
__device__ __forceinline__ void store_pack(T* base, std::int64_t i, const Pack<T>& p) {
  reinterpret_cast<Pack<T>*>(base)[i] = p;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

}  // namespace detops
