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

// The fixed-chunk sum of the deterministic reductions: partials[c] = the in-order sum of element(i) over
// chunk c, [c * chunk, min((c + 1) * chunk, n)), the chunks split by parallel_for; returns the in-order sum
// of the partials. The result does not depend on the split. partials holds ceil(n / chunk) elements.
template <typename Acc, typename Element>
Acc chunked_sum(const ParallelFor& parallel_for, std::int64_t n, std::int64_t chunk, Acc* partials, Element&& element) {
  const std::int64_t chunks = (n + chunk - 1) / chunk;
  parallel_for_each(parallel_for, chunks, [&](std::int64_t c) {
    const std::int64_t last = (c + 1) * chunk < n ? (c + 1) * chunk : n;
    Acc sum = Acc(0);
    for (std::int64_t i = c * chunk; i < last; ++i) sum += element(i);
    partials[c] = sum;
  });
  Acc total = Acc(0);
  for (std::int64_t c = 0; c < chunks; ++c) total += partials[c];
  return total;
}

}  // namespace detops
