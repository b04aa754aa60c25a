#pragma once
// RoIPool launchers (CUDA and CPU), framework-free. Parameters: roi_pool_params.h.
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <functional>

#include "common/dtype.h"
#include "roi_pool/roi_pool_params.h"

namespace detops {

// input [batch, channels, height, width] contiguous; rois [num_rois, 5] contiguous
// (batch_index, x1, y1, x2, y2) in the same dtype as input. height * width <= kRoiPoolMaxPlaneElements.
struct RoiPoolShape {
  std::int64_t batch = 0, channels = 0, height = 0, width = 0, num_rois = 0;
};

struct RoiPoolForwardArgs {
  RoiPoolShape shape;
  const void* input = nullptr;
  const void* rois = nullptr;
  void* output = nullptr;           // [num_rois, channels, pooled_height, pooled_width] contiguous, input dtype
  std::int32_t* argmax = nullptr;   // same shape, contiguous: h * width + w of the max, -1 where none
  // CUDA only, optional: atomically lowered to the index of the first roi whose batch index is NaN or
  // outside [0, batch); the caller initializes it to ~0ull. Such rois produce output 0 and argmax -1.
  unsigned long long* first_invalid_roi = nullptr;
};

// grad_output may have any strides (stride 0 included, as `.sum().backward()` produces). argmax is the
// forward's, contiguous. grad_input_acc is a zeroed [batch, channels, height, width] buffer of the
// accumulation type: double for fp64, float for fp32, fp16 and bf16 (the caller rounds it afterwards).
struct RoiPoolBackwardArgs {
  RoiPoolShape shape;
  const void* grad_output = nullptr;
  std::array<std::int64_t, 4> grad_output_strides{};
  const void* rois = nullptr;
  const std::int32_t* argmax = nullptr;
  void* grad_input_acc = nullptr;
  unsigned long long* first_invalid_roi = nullptr;  // as in RoiPoolForwardArgs
  // CUDA only, optional: atomically lowered to the flat index (into argmax) of the first argmax value
  // outside [-1, height * width); such elements are skipped. Initialized to ~0ull by the caller.
  unsigned long long* first_invalid_argmax = nullptr;
};

// CUDA launchers: validate nothing (the framework layer does), return immediately on empty work,
// check the launch. Asynchronous on `stream`.
void launch_roi_pool_forward(const RoiPoolParams& params, const RoiPoolForwardArgs& args, DType dtype,
                             cudaStream_t stream);
void launch_roi_pool_backward(const RoiPoolParams& params, const RoiPoolBackwardArgs& args, DType dtype,
                              cudaStream_t stream);

// CPU implementations over the same per-element math; rois with an invalid batch index and argmax values
// outside [-1, H*W) are skipped as on CUDA (the framework layer rejects them before calling).
// `parallel_for(begin, end, body)` may run body on disjoint sub-ranges concurrently: the forward splits
// over rois, the backward over channels (each channel's plane is summed in the fixed roi, ph, pw order,
// so the backward is deterministic). Same type as RoIAlign's ParallelFor (a redeclaration of one alias).
using ParallelFor = std::function<void(std::int64_t, std::int64_t, const std::function<void(std::int64_t, std::int64_t)>&)>;
void run_roi_pool_forward_cpu(const RoiPoolParams& params, const RoiPoolForwardArgs& args, DType dtype,
                              const ParallelFor& parallel_for);
void run_roi_pool_backward_cpu(const RoiPoolParams& params, const RoiPoolBackwardArgs& args, DType dtype,
                               const ParallelFor& parallel_for);

}  // namespace detops
