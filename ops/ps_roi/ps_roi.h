#pragma once
// ps_roi_align and ps_roi_pool launchers (CUDA and CPU), framework-free. Parameters: ps_roi_params.h.
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <functional>

#include "common/dtype.h"
#include "ps_roi/ps_roi_params.h"

namespace detops {

// input [batch, channels, height, width] contiguous, channels = C_in (a multiple of pooled_height *
// pooled_width); rois [num_rois, 5] contiguous (batch_index, x1, y1, x2, y2) in input's dtype.
struct PsRoiShape {
  std::int64_t batch = 0, channels = 0, height = 0, width = 0, num_rois = 0;
};

struct PsRoiForwardArgs {
  PsRoiShape shape;
  const void* input = nullptr;
  const void* rois = nullptr;
  // Both [num_rois, C_out, pooled_height, pooled_width] contiguous, C_out = channels / (ph * pw); the
  // flat index of element (k, c, i, j) is k * channels + c_in with c_in = (c * ph + i) * pw + j.
  void* output = nullptr;
  std::int32_t* channel_mapping = nullptr;  // receives c_in for every element
  // CUDA only, optional: atomically lowered to the index of the first roi whose batch index is NaN or
  // outside [0, batch); the caller initializes it to ~0ull. Such rois produce zeros.
  unsigned long long* first_invalid_roi = nullptr;
};

// grad_output [num_rois, C_out, ph, pw] may have any strides (stride 0 included, as `.sum().backward()`
// produces). grad_input_acc is a zeroed [batch, channels, height, width] buffer of the accumulation
// type: double for fp64, float for fp32, fp16 and bf16 (the caller rounds it to the dtype afterwards).
// The channel of every element follows from its position (see PsRoiForwardArgs); no mapping is read.
struct PsRoiBackwardArgs {
  PsRoiShape shape;
  const void* grad_output = nullptr;
  std::array<std::int64_t, 4> grad_output_strides{};
  const void* rois = nullptr;
  void* grad_input_acc = nullptr;
  unsigned long long* first_invalid_roi = nullptr;  // as in PsRoiForwardArgs
};

// CUDA launchers: validate nothing (the framework layer does), return immediately on empty work, check
// the launch. Asynchronous on `stream`.
void launch_ps_roi_align_forward(const PsRoiAlignParams& params, const PsRoiForwardArgs& args, DType dtype,
                                 cudaStream_t stream);
void launch_ps_roi_align_backward(const PsRoiAlignParams& params, const PsRoiBackwardArgs& args, DType dtype,
                                  cudaStream_t stream);
void launch_ps_roi_pool_forward(const PsRoiPoolParams& params, const PsRoiForwardArgs& args, DType dtype,
                                cudaStream_t stream);
void launch_ps_roi_pool_backward(const PsRoiPoolParams& params, const PsRoiBackwardArgs& args, DType dtype,
                                 cudaStream_t stream);

// CPU implementations over the same per-element math; rois with an invalid batch index produce zeros
// (the framework layer rejects them before calling). `parallel_for(begin, end, body)` may run body on
// disjoint sub-ranges concurrently; the forwards split over rois, the backwards run serially (they
// scatter) and are therefore deterministic.
using PsRoiParallelFor =
    std::function<void(std::int64_t, std::int64_t, const std::function<void(std::int64_t, std::int64_t)>&)>;
void run_ps_roi_align_forward_cpu(const PsRoiAlignParams& params, const PsRoiForwardArgs& args, DType dtype,
                                  const PsRoiParallelFor& parallel_for);
void run_ps_roi_align_backward_cpu(const PsRoiAlignParams& params, const PsRoiBackwardArgs& args, DType dtype);
void run_ps_roi_pool_forward_cpu(const PsRoiPoolParams& params, const PsRoiForwardArgs& args, DType dtype,
                                 const PsRoiParallelFor& parallel_for);
void run_ps_roi_pool_backward_cpu(const PsRoiPoolParams& params, const PsRoiBackwardArgs& args, DType dtype);

}  // namespace detops
