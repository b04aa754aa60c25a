#pragma once
// The last step of the CUDA side of the deterministic chunked reductions (the CPU's is chunked_sum,
// common/parallel_for.h): an op's kernel has summed fixed chunks into acc_t<T> partial sums with a fixed tree;
// chunked_sum_finish_kernel adds the partial sums in a fixed order. CUDA only.
#include <cstdint>

#include "common/block_reduce.cuh"
#include "common/numeric.h"

namespace detops {
namespace {  // each op's .cu file has its own instantiations, as it has its own kernels

// out[0] = T(the sum of partials[0, chunks) * scale), one block of Threads threads: thread t adds partials t,
// t + Threads, ... in order, then block_sum. The order depends only on Threads: bitwise reproducible.
template <typename T, int Threads>
__global__ void __launch_bounds__(Threads)
    chunked_sum_finish_kernel(std::int64_t chunks, const acc_t<T>* __restrict__ partials, acc_t<T> scale,
                              T* __restrict__ out) {
  using Acc = acc_t<T>;
  __shared__ Acc shared[Threads / 32];
  Acc sum = Acc(0);
  for (std::int64_t c = threadIdx.x; c < chunks; c += Threads) sum += partials[c];
  const Acc total = block_sum<Acc, Threads>(sum, shared);
  if (threadIdx.x == 0) out[0] = from_acc<T>(total * scale);
}

}  // namespace
}  // namespace detops
