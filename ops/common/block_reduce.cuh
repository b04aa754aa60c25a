#pragma once
// Block-wide reductions in a fixed order (deterministic), for CUDA kernels.
#include <cuda_runtime.h>

namespace detops {

// The sum of one value per thread of the block: a shuffle tree within each warp, the warps' sums through
// `shared` (at least Threads / 32 elements), then a shuffle tree over them in warp 0. The order of the
// additions depends only on Threads, so the result is bitwise reproducible. The result is valid in thread
// 0. Every thread of the block must call it; Threads (the block size) is a multiple of 32, at most 1024.
// `shared` may be reused as soon as the call returns.
template <typename Acc, int Threads>
__device__ __forceinline__ Acc block_sum(Acc v, Acc* shared) {
  static_assert(Threads % 32 == 0 && Threads <= 1024, "whole warps, at most 32 of them");
  constexpr unsigned kAll = 0xffffffffu;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(kAll, v, o);
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  Acc total = Acc(0);
  if (warp == 0) {
    total = lane < Threads / 32 ? shared[lane] : Acc(0);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) total += __shfl_down_sync(kAll, total, o);
  }
  __syncthreads();
  return total;
}

}  // namespace detops
