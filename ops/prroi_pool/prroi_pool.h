#pragma once
// Precise RoI Pooling launchers (CUDA and CPU), framework-free. Parameters: prroi_pool_params.h;
// definition: docs/ops/prroi_pool.md.
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <functional>

#include "common/dtype.h"
#include "prroi_pool/prroi_pool_params.h"

namespace detops {

// input [batch, channels, height, width] contiguous; rois [num_rois, 5] contiguous
// (batch_index, x1, y1, x2, y2) in the same dtype as input.
struct PrRoiPoolShape {
  std::int64_t batch = 0, channels = 0, height = 0, width = 0, num_rois = 0;
};

struct PrRoiPoolForwardArgs {
  PrRoiPoolShape shape;
  const void* input = nullptr;
  const void* rois = nullptr;
  void* output = nullptr;  // [num_rois, channels, pooled_height, pooled_width] contiguous, input dtype
  // CUDA only, optional: atomically lowered to the index of the first roi whose batch index is NaN or
  // outside [0, batch); the caller initializes it to ~0ull. Such rois produce zeros.
  unsigned long long* first_invalid_roi = nullptr;
};

// The gradient with respect to input. grad_output may have any strides (stride 0 included, as
// `.sum().backward()` produces). grad_input_acc is a zeroed [batch, channels, height, width] buffer of
// the accumulation type: double for fp64, float for fp32, fp16 and bf16 (the caller rounds it).
struct PrRoiPoolBackwardArgs {
  PrRoiPoolShape shape;
  const void* grad_output = nullptr;
  std::array<std::int64_t, 4> grad_output_strides{};
  const void* rois = nullptr;
  void* grad_input_acc = nullptr;
  unsigned long long* first_invalid_roi = nullptr;  // as in PrRoiPoolForwardArgs
};

// The gradient with respect to the rois. grad_output as above; input and rois as in the forward.
// grad_rois is [num_rois, 5] contiguous in the rois' dtype; every element is written (column 0, the
// batch index, with 0), each roi's row by one thread (CPU) or one block (CUDA), so no zeroing is needed.
struct PrRoiPoolRoisBackwardArgs {
  PrRoiPoolShape shape;
  const void* grad_output = nullptr;
  std::array<std::int64_t, 4> grad_output_strides{};
  const void* input = nullptr;
  const void* rois = nullptr;
  void* grad_rois = nullptr;
  unsigned long long* first_invalid_roi = nullptr;  // as in PrRoiPoolForwardArgs
};

// CUDA launchers: validate nothing (the framework layer does), return immediately on empty work,
// check the launch. Asynchronous on `stream`. The input backward scatters with atomicAdd (not
// deterministic); the forward and the rois backward are (each output written once, fixed order).
void launch_prroi_pool_forward(const PrRoiPoolParams& params, const PrRoiPoolForwardArgs& args, DType dtype,
                               cudaStream_t stream);
void launch_prroi_pool_backward(const PrRoiPoolParams& params, const PrRoiPoolBackwardArgs& args, DType dtype,
                                cudaStream_t stream);
void launch_prroi_pool_rois_backward(const PrRoiPoolParams& params, const PrRoiPoolRoisBackwardArgs& args,
                                     DType dtype, cudaStream_t stream);

// CPU implementations over the same per-element math; rois with an invalid batch index produce zeros
// (the framework layer rejects them before calling). `parallel_for(begin, end, body)` may run body on
// disjoint sub-ranges concurrently: the forward and the rois backward split over rois, the input
// backward over channels (each channel's planes are summed in the fixed roi, ph, pw order). All three
// are deterministic. Same type as RoIAlign's ParallelFor (a redeclaration of one alias).
using ParallelFor = std::function<void(std::int64_t, std::int64_t, const std::function<void(std::int64_t, std::int64_t)>&)>;
void run_prroi_pool_forward_cpu(const PrRoiPoolParams& params, const PrRoiPoolForwardArgs& args, DType dtype,
                                const ParallelFor& parallel_for);
void run_prroi_pool_backward_cpu(const PrRoiPoolParams& params, const PrRoiPoolBackwardArgs& args, DType dtype,
                                 const ParallelFor& parallel_for);
void run_prroi_pool_rois_backward_cpu(const PrRoiPoolParams& params, const PrRoiPoolRoisBackwardArgs& args,
                                      DType dtype, const ParallelFor& parallel_for);

}  // namespace detops
