#pragma once
// Division of a non-negative 32-bit index by a divisor fixed at launch: n / d as one multiply-high, an add and a
// shift (the round-up method of Granlund and Montgomery, "Division by invariant integers using multiplication",
// 1994, the form PyTorch's IntDivider uses), where a 32-bit division by a value the compiler does not know takes
// about 20 instructions on the GPU. The constants are formed on the host (the constructor divides in 64 bits).
// Exact for 0 <= n < 2^31 and every divisor >= 1; divisors of 2^31 and more give 0, the quotient of any such n.
// 64-bit indices divide plainly. Framework-free; compiles under nvcc (host and device) and a plain C++ compiler
// (suites/unit/fast_divisor_test.cpp checks the host path, the same arithmetic).
#include <cstdint>

#include "common/macros.h"

namespace detops {

struct FastDivisor {
  std::int64_t d = 1;
  std::uint32_t magic = 1, shift = 0;

  FastDivisor() = default;
  // v < 1 is taken as 1 (the callers never divide by 0; the constructor must not loop on it).
  explicit FastDivisor(std::int64_t v) : d(v > 0 ? v : 1) {
    if (d >= (std::int64_t{1} << 31)) {
      shift = 31;  // magic 1: (umulhi(n, 1) + n) >> 31 = n >> 31 = 0 for n < 2^31
      return;
    }
    while ((std::int64_t{1} << shift) < d) ++shift;  // 2^shift >= d > 2^(shift - 1)
    const std::uint64_t ud = static_cast<std::uint64_t>(d);
    // magic = floor(2^32 (2^shift - d) / d) + 1 < 2^32; n / d = (umulhi(n, magic) + n) >> shift for n < 2^31.
    magic = static_cast<std::uint32_t>((std::uint64_t{1} << 32) * ((std::uint64_t{1} << shift) - ud) / ud + 1);
  }

  // n / d for 0 <= n < 2^31 (Index 32 bits) or any n >= 0 (Index 64 bits).
  template <typename Index>
  DETOPS_HD Index div(Index n) const {
    if constexpr (sizeof(Index) == 4) {
      const std::uint32_t u = static_cast<std::uint32_t>(n);
#ifdef __CUDA_ARCH__
      const std::uint32_t hi = __umulhi(u, magic);
#else
      const std::uint32_t hi = static_cast<std::uint32_t>((static_cast<std::uint64_t>(u) * magic) >> 32);
#endif
      return static_cast<Index>((hi + u) >> shift);  // hi <= u < 2^31: the sum fits 32 bits
    } else {
      return n / static_cast<Index>(d);
    }
  }
};

}  // namespace detops
