#pragma once
// The kernel plumbing the RoI family's .cu files share (CUDA only; no libtorch), outside the per-element
// math: the 1-D grid-stride loop, the invalid-roi report and the 32/64-bit index-width launch.
//   grid_stride_for<Index>(total, [&](Index i) { ... })    body for each i this thread owns (return = continue)
//   report_first_invalid(first_invalid_roi, k)             atomicMin of k (a roi, an element) into the optional slot
//   launch_index_width(kernel_of, total, threads, fits, stream, args...)
//       kernel_of(TypeTag<std::int32_t>{}) when every index the loop forms fits 32 bits (and `fits`),
//       else kernel_of(TypeTag<std::int64_t>{}), over grid_for(total, threads) blocks
//   launch_roi_indexed(what, dtype, total, threads, fits, stream, kernel_of(T tag, Index tag), args...)
//   launch_roi_grid_stride(what, dtype, total, threads, stream, kernel_of(T tag), args...)
//       a launcher's body: nothing on empty work (total == 0), else the dtype's kernel
#include <cstdint>
#include <type_traits>
#include <utility>

#include "common/kernel_launch.cuh"

namespace detops {

// The type a TypeTag names, for kernel_of lambdas: &kernel<type_of<decltype(tag)>>.
template <typename Tag>
using type_of = typename std::decay_t<Tag>::type;

// The first index of this thread and the stride of a 1-D grid-stride loop, in Index arithmetic.
template <typename Index>
__device__ __forceinline__ Index grid_stride_first() {
  return static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + static_cast<Index>(threadIdx.x);
}

template <typename Index>
__device__ __forceinline__ Index grid_stride_step() {
  return static_cast<Index>(blockDim.x) * static_cast<Index>(gridDim.x);
}

template <typename Index, typename Body>
__device__ __forceinline__ void grid_stride_for(Index total, Body&& body) {
  const Index stride = grid_stride_step<Index>();
  for (Index i = grid_stride_first<Index>(); i < total; i += stride) body(i);
}

// Lowers the caller's first-invalid slot (when there is one: first_invalid_roi, RoIPool's
// first_invalid_argmax) to index k.
template <typename Index>
__device__ __forceinline__ void report_first_invalid(unsigned long long* slot, Index k) {
  if (slot != nullptr) atomicMin(slot, static_cast<unsigned long long>(k));
}

template <typename KernelOf, typename... Args>
void launch_index_width(KernelOf&& kernel_of, std::int64_t total, int threads, bool fits, cudaStream_t stream,
                        Args&&... args) {
  constexpr std::int64_t kLimit = std::int64_t{1} << 31;
  const unsigned blocks = grid_for(total, threads);
  const bool use32 = total + static_cast<std::int64_t>(blocks) * threads < kLimit && fits;
  launch_kernel(use32 ? kernel_of(TypeTag<std::int32_t>{}) : kernel_of(TypeTag<std::int64_t>{}), blocks, threads,
                stream, std::forward<Args>(args)...);
}

template <typename KernelOf, typename... Args>
void launch_roi_indexed(const char* what, DType dtype, std::int64_t total, int threads, bool fits, cudaStream_t stream,
                        KernelOf&& kernel_of, Args&&... args) {
  if (total == 0) return;
  dispatch_floating(dtype, what, [&](auto tag) {
    launch_index_width([&](auto index) { return kernel_of(tag, index); }, total, threads, fits, stream, args...);
  });
}

template <typename KernelOf, typename... Args>
void launch_roi_grid_stride(const char* what, DType dtype, std::int64_t total, int threads, cudaStream_t stream,
                            KernelOf&& kernel_of, Args&&... args) {
  if (total == 0) return;
  dispatch_floating(dtype, what, [&](auto tag) { launch_grid_stride(kernel_of(tag), total, threads, stream, args...); });
}

}  // namespace detops
