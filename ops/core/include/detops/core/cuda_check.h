#pragma once
// The one pair of CUDA error macros, for the ops and the harness alike:
//   DETOPS_CUDA_CHECK(call)       throws std::runtime_error naming the file, line, the call's text and
//                                 CUDA's error name and string; DETOPS_CHECK_LAUNCH() does the same for
//                                 the last kernel launch.
//   DETOPS_CUDA_CHECK_NOTHROW(call) for destructors and cleanup paths, where throwing would terminate:
//                                 it prints the same line to stderr and carries on.
// Both clear CUDA's sticky last-error slot for non-sticky errors (cudaGetLastError), so a later,
// unrelated check does not report this failure again.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace detops {

inline std::string cuda_error_text(cudaError_t err, const char* expr, const char* file, int line) {
  return std::string(file) + ":" + std::to_string(line) + ": " + expr + " failed: " + cudaGetErrorName(err) + " (" +
         cudaGetErrorString(err) + ")";
}

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  cudaGetLastError();
  throw std::runtime_error(cuda_error_text(err, expr, file, line));
}

inline void report_cuda_error(cudaError_t err, const char* expr, const char* file, int line) noexcept {
  cudaGetLastError();
  std::fprintf(stderr, "[detops] %s\n", cuda_error_text(err, expr, file, line).c_str());
}

}  // namespace detops

// DETOPS_CUDA_CHECK_WITH_(expr, on_error): on_error(err, text, file, line) when expr is not cudaSuccess.
#define DETOPS_CUDA_CHECK_WITH_(expr, on_error)                \
  do {                                                          \
    const cudaError_t detops_err_ = (expr);                     \
    if (detops_err_ != cudaSuccess) {                           \
      on_error(detops_err_, #expr, __FILE__, __LINE__);         \
    }                                                           \
  } while (0)

#define DETOPS_CUDA_CHECK(expr) DETOPS_CUDA_CHECK_WITH_(expr, ::detops::throw_cuda_error)
#define DETOPS_CUDA_CHECK_NOTHROW(expr) DETOPS_CUDA_CHECK_WITH_(expr, ::detops::report_cuda_error)

#define DETOPS_CHECK_LAUNCH() DETOPS_CUDA_CHECK(cudaGetLastError())
