#pragma once
// Helpers for the torch bindings (ATen-facing; never included by kernels or references).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>
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

// The same check with the exception type of torchvision's kernels (their dtype dispatch raises
// NotImplementedError), for ops whose errors follow torchvision's.
inline DType floating_dtype_or_not_implemented(const at::Tensor& t, const char* op, const char* arg) {
  const at::ScalarType s = t.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(s == at::kDouble || s == at::kFloat || s == at::kHalf || s == at::kBFloat16, op, ": ",
                              arg, " must be float64, float32, float16 or bfloat16; got ", s);
  return floating_dtype_of(t, op, arg);
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

// A loss's reduction argument, 'none' | 'mean' | 'sum', as the op's enum (kNone, kMean, kSum); anything
// else raises torchvision's ValueError ("Invalid Value for arg 'reduction'").
template <typename Reduction>
Reduction parse_reduction(const char* op, const std::string& reduction) {
  if (reduction == "none") return Reduction::kNone;
  if (reduction == "mean") return Reduction::kMean;
  if (reduction == "sum") return Reduction::kSum;
  TORCH_CHECK_VALUE(false, op, ": Invalid Value for arg 'reduction': '", reduction,
                    "'. Supported reduction modes: 'none', 'mean', 'sum'");
}

template <typename Reduction>
const char* reduction_name(Reduction reduction) {
  switch (reduction) {
    case Reduction::kNone: return "none";
    case Reduction::kMean: return "mean";
    case Reduction::kSum: return "sum";
  }
  TORCH_CHECK_VALUE(false, "unknown reduction code ", static_cast<int>(reduction));
}

// The gradient a loss's backward receives: a 0-d tensor for 'mean' / 'sum', the loss's shape for 'none'.
inline void check_loss_grad(const char* op, const at::Tensor& grad, at::IntArrayRef loss_shape, bool reduced,
                            const char* reduction) {
  if (reduced) {
    TORCH_CHECK_VALUE(grad.dim() == 0, op, ": grad must be a 0-d tensor for reduction '", reduction, "'; got shape ",
                      shape_string(grad.sizes()));
  } else {
    TORCH_CHECK_VALUE(grad.sizes() == loss_shape, op, ": grad must have the loss's shape ", shape_string(loss_shape),
                      " for reduction 'none'; got shape ", shape_string(grad.sizes()));
  }
}

// The device skeleton of an entry point, on the device of `like` (named like_name): CUDA: a device guard
// and cuda(current stream); CPU: cpu(); any other device raises.
template <typename Cuda, typename Cpu>
void run_on_device(const char* op, const char* like_name, const at::Tensor& like, Cuda&& cuda, Cpu&& cpu) {
  if (like.is_cuda()) {
    c10::cuda::CUDAGuard guard(like.device());
    cuda(c10::cuda::getCurrentCUDAStream(like.device().index()).stream());
    return;
  }
  TORCH_CHECK(like.is_cpu(), op, ": ", like_name, " must be a CPU or CUDA tensor; got ", like.device());
  cpu();
}

}  // namespace detops
