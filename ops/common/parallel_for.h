#pragma once
// The CPU implementations' parallel loop, handed in by the framework layer (aten_parallel_for) so the
// ops stay framework-free: parallel_for(begin, end, body) may run body(b, e) on disjoint sub-ranges of
// [begin, end) concurrently.
#include <cstdint>
#include <functional>

namespace detops {

using ParallelFor = std::function<void(std::int64_t, std::int64_t, const std::function<void(std::int64_t, std::int64_t)>&)>;

// body(i) for every i in [0, n), the range split by parallel_for.
template <typename Body>
void parallel_for_each(const ParallelFor& parallel_for, std::int64_t n, Body&& body) {
  parallel_for(0, n, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) body(i);
  });
}

}  // namespace detops
