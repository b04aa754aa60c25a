#pragma once
// Helpers for the torch bindings (ATen-facing; never included by kernels or references).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <sstream>
#include <string>

#include "detops/core/cuda_check.h"
#include "detops/core/dtype.h"

namespace detops {

inline std::string shape_string(at::IntArrayRef sizes) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < sizes.size(); ++i) os << (i ? ", " : "") << sizes[i];
  os << ']';
  return os.str();
}

// Maps a tensor's dtype to DType, or fails naming the op and the argument.
inline DType floating_dtype_of(const at::Tensor& t, const char* op, const char* arg) {
  switch (t.scalar_type()) {
    case at::kDouble: return DType::kFloat64;
    case at::kFloat: return DType::kFloat32;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    default:
      TORCH_CHECK_TYPE(false, op, ": ", arg, " must be float64, float32, float16 or bfloat16; got ", t.scalar_type());
  }
}

inline at::ScalarType accumulation_scalar_type(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : at::kFloat;
}

inline void check_same_device(const char* op, const char* name_a, const at::Tensor& a, const char* name_b,
                              const at::Tensor& b) {
  TORCH_CHECK(a.device() == b.device(), op, ": ", name_a, " and ", name_b, " must be on the same device; got ",
              name_a, " on ", a.device(), " and ", name_b, " on ", b.device());
}

inline void check_same_dtype(const char* op, const char* name_a, const at::Tensor& a, const char* name_b,
                             const at::Tensor& b) {
  TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), op, ": ", name_b, " dtype (", b.scalar_type(),
                   ") must match ", name_a, " dtype (", a.scalar_type(), ")");
}

inline std::function<void(std::int64_t, std::int64_t, const std::function<void(std::int64_t, std::int64_t)>&)>
aten_parallel_for() {
  return [](std::int64_t begin, std::int64_t end, const std::function<void(std::int64_t, std::int64_t)>& body) {
    at::parallel_for(begin, end, /*grain_size=*/1, body);
  };
}

// A device-side "first invalid row" slot, initialized to ~0 with a memset (no extra kernel), read back
// after the launch. Reading synchronizes the stream, so it is skipped while the stream is being
// captured into a CUDA graph (invalid rows then produce zeros, as documented per op).
class FirstInvalidRow {
 public:
  FirstInvalidRow(const at::Tensor& like, cudaStream_t stream) : stream_(stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    DETOPS_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
    if (status != cudaStreamCaptureStatusNone) return;
    slot_ = at::empty({1}, like.options().dtype(at::kLong));
    DETOPS_CUDA_CHECK(cudaMemsetAsync(slot_.data_ptr(), 0xFF, sizeof(unsigned long long), stream));
  }
  unsigned long long* get() {
    return slot_.defined() ? reinterpret_cast<unsigned long long*>(slot_.data_ptr()) : nullptr;
  }
  // Returns the index of the first invalid row, or -1.
  std::int64_t read() const {
    if (!slot_.defined()) return -1;
    unsigned long long value = 0;
    DETOPS_CUDA_CHECK(cudaMemcpyAsync(&value, slot_.data_ptr(), sizeof(value), cudaMemcpyDeviceToHost, stream_));
    DETOPS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return value == ~0ull ? -1 : static_cast<std::int64_t>(value);
  }

 private:
  cudaStream_t stream_;
  at::Tensor slot_;
};

}  // namespace detops
