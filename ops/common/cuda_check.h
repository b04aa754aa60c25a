#pragma once
// DETOPS_CUDA_CHECK(call): throws std::runtime_error naming the file, line, the call's text and
// CUDA's own error string. DETOPS_CHECK_LAUNCH(): the same for the last kernel launch.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace detops {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + expr + " failed: " +
                           cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace detops

#define DETOPS_CUDA_CHECK(expr)                                           \
  do {                                                                    \
    const cudaError_t detops_err_ = (expr);                               \
    if (detops_err_ != cudaSuccess) {                                     \
      ::detops::throw_cuda_error(detops_err_, #expr, __FILE__, __LINE__); \
    }                                                                     \
  } while (0)

#define DETOPS_CHECK_LAUNCH() DETOPS_CUDA_CHECK(cudaGetLastError())
