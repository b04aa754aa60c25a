#pragma once
// RoIAlign launchers (CUDA and CPU), framework-free. Parameters: roi_align_params.h.
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <functional>

#include "common/dtype.h"
#include "roi_align/roi_align_params.h"

namespace detops {

// input [batch, channels, height, width] contiguous; rois [num_rois, 5] contiguous
// (batch_index, x1, y1, x2, y2) in the same dtype as input.
struct RoiAlignShape {
  std::int64_t batch = 0, channels = 0, height = 0, width = 0, num_rois = 0;
};

struct RoiAlignForwardArgs {
  RoiAlignShape shape;
  const void* input = nullptr;
  const void* rois = nullptr;
  void* output = nullptr;  // [num_rois, channels, pooled_height, pooled_width] contiguous
  // CUDA only, optional: atomically lowered to the index of the first roi whose batch index is NaN or
  // outside [0, batch); the caller initializes it to ~0ull. Such rois produce zeros.
  unsigned long long* first_invalid_roi = nullptr;
};

// grad_output may have any strides (stride 0 included, as `.sum().backward()` produces). grad_input_acc
// is a zeroed buffer of the accumulation type (double for fp64, float for fp32, fp16 and bf16):
// - CUDA: laid out [batch, height, width, channels] (channels last: the scatter's atomics coalesce); the
//   launcher then writes the result, rounded to the input dtype, to grad_input [batch, channels, height,
//   width]. grad_input is required there.
// - CPU: laid out [batch, channels, height, width]; grad_input is unused, and the caller rounds
//   grad_input_acc to the input dtype afterwards.
struct RoiAlignBackwardArgs {
  RoiAlignShape shape;
  const void* grad_output = nullptr;
  std::array<std::int64_t, 4> grad_output_strides{};
  const void* rois = nullptr;
  void* grad_input_acc = nullptr;
  unsigned long long* first_invalid_roi = nullptr;  // as in RoiAlignForwardArgs
  void* grad_input = nullptr;  // CUDA only: see above
};

// CUDA launchers: validate nothing (the framework layer does), return immediately on empty work,
// check the launch. Asynchronous on `stream`.
void launch_roi_align_forward(const RoiAlignParams& params, const RoiAlignForwardArgs& args, DType dtype,
                              cudaStream_t stream);
void launch_roi_align_backward(const RoiAlignParams& params, const RoiAlignBackwardArgs& args, DType dtype,
                               cudaStream_t stream);

// CPU implementations over the same per-element math; rois with an invalid batch index produce zeros
// (the framework layer rejects them before calling). `parallel_for(begin, end, body)` may run body on
// disjoint sub-ranges concurrently; the forward splits over rois, the backward runs serially (it
// scatters) and is therefore deterministic.
using ParallelFor = std::function<void(std::int64_t, std::int64_t, const std::function<void(std::int64_t, std::int64_t)>&)>;
void run_roi_align_forward_cpu(const RoiAlignParams& params, const RoiAlignForwardArgs& args, DType dtype,
                               const ParallelFor& parallel_for);
void run_roi_align_backward_cpu(const RoiAlignParams& params, const RoiAlignBackwardArgs& args, DType dtype);

}  // namespace detops
