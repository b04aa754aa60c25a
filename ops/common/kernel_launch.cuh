#pragma once
// The launch and kernel-registration code every op's .cu file shares (CUDA only; no libtorch).
//   launch_kernel(kernel, grid, block, stream, args...)      kernel<<<grid, block, 0, stream>>>, checked
//   launch_grid_stride(kernel, elements, threads, stream, ...) the same over grid_for(elements, threads)
//   for_each_floating_type(fn) / for_each_floating_and_index_type(fn)   the instantiations to register
//   register_instantiation(op, "kernel", "double, int32", &kernel<double, std::int32_t>)
// The launchers' type-erased buffers (void*, const void*) are passed as the kernel parameter's typed
// pointer, so a launch names each buffer once and never spells static_cast<const T*>.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "common/dispatch.h"
#include "common/kernel_registry.h"
#include "common/launch.h"
#include "detops/core/cuda_check.h"

namespace detops {

// `from` as the kernel parameter of type To: void* / const void* become To (a typed pointer); anything
// else is passed on unchanged (and converted by the call as a direct launch would).
template <typename To, typename From>
decltype(auto) kernel_arg(From&& from) {
  using F = std::decay_t<From>;
  if constexpr (std::is_pointer_v<To> && (std::is_same_v<F, void*> || std::is_same_v<F, const void*>)) {
    return static_cast<To>(from);
  } else {
    return std::forward<From>(from);
  }
}

// kernel<<<grid, block, 0, stream>>>(args...), then DETOPS_CHECK_LAUNCH().
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "one argument per kernel parameter");
  kernel<<<grid, block, 0, stream>>>(kernel_arg<Params>(std::forward<Args>(args))...);
  DETOPS_CHECK_LAUNCH();
}

// A 1-D grid-stride kernel over `elements` (nothing when there are none): grid_for(elements, threads)
// blocks of `threads`.
template <typename... Params, typename... Args>
void launch_grid_stride(void (*kernel)(Params...), std::int64_t elements, int threads, cudaStream_t stream,
                        Args&&... args) {
  if (elements == 0) return;
  launch_kernel(kernel, grid_for(elements, threads), threads, stream, std::forward<Args>(args)...);
}

// fn(TypeTag<T>{}, "name") for the four floating types, by the names the kernel registry shows.
template <typename Fn>
bool for_each_floating_type(Fn&& fn) {
  fn(TypeTag<double>{}, "double");
  fn(TypeTag<float>{}, "float");
  fn(TypeTag<__half>{}, "half");
  fn(TypeTag<__nv_bfloat16>{}, "bfloat16");
  return true;
}

// fn(TypeTag<T>{}, TypeTag<Index>{}, "T, int32|int64") for each floating T and 32/64-bit index type,
// for kernels that decompose their flat index in 32-bit arithmetic when it fits.
template <typename Fn>
bool for_each_floating_and_index_type(Fn&& fn) {
  return for_each_floating_type([&](auto tag, const char* type) {
    fn(tag, TypeTag<std::int32_t>{}, std::string(type) + ", int32");
    fn(tag, TypeTag<std::int64_t>{}, std::string(type) + ", int64");
  });
}

// Registers `symbol` as "<kernel><<template_args>>" under `op` (register_kernel copies the name).
template <typename Kernel>
void register_instantiation(const char* op, const char* kernel, const std::string& template_args, Kernel* symbol) {
  register_kernel(op, (std::string(kernel) + "<" + template_args + ">").c_str(), reinterpret_cast<const void*>(symbol));
}

}  // namespace detops
