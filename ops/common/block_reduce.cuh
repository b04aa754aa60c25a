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

// The maximum (Max) or the sum of v over a group of Threads threads: a warp (32; every lane of it) or the whole
// block (a multiple of 32, at most 1024), returned in every thread of the group. A butterfly of shuffles in each
// warp (the pairings are commutative, so every lane computes the same value; a max may differ in the sign of a
// zero), then, for a block, the warps' values through `shared` (at least Threads / 32 elements), read in the same
// order by every thread: deterministic. Every thread of the group must call it. A sum propagates NaN; a max keeps
// the left operand where a comparison is false.
template <bool Max, int Threads, typename Acc>
__device__ __forceinline__ Acc group_all_reduce(Acc v, Acc* shared) {
  static_assert(Threads % 32 == 0 && Threads <= 1024, "a warp or whole warps of one block");
  const auto op = [](Acc a, Acc b) { return Max ? (b > a ? b : a) : a + b; };
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (Threads > 32) {
    if ((threadIdx.x & 31) == 0) shared[threadIdx.x / 32] = v;
    __syncthreads();
    v = shared[0];
#pragma unroll
    for (int w = 1; w < Threads / 32; ++w) v = op(v, shared[w]);
    __syncthreads();
  }
  return v;
}

}  // namespace detops
