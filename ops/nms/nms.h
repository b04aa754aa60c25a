#pragma once
// NMS and batched NMS launchers (CUDA and CPU), framework-free. Parameters: nms_params.h. The
// definition (ranking, the IoU of degenerate and non-finite boxes) is in docs/ops/nms.md.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "detops/core/dtype.h"
#include "nms/nms_params.h"

namespace detops {

struct NmsArgs {
  std::int64_t num_boxes = 0;
  const void* boxes = nullptr;            // [num_boxes, 4] contiguous (x1, y1, x2, y2), dtype `boxes_dtype`
  const void* scores = nullptr;           // [num_boxes] contiguous: double when scores_fp64, else float
  bool scores_fp64 = false;
  const std::int64_t* classes = nullptr;  // [num_boxes] contiguous class ids (batched NMS), or nullptr (NMS)
  std::int64_t* keep = nullptr;           // [num_boxes]: the first *num_kept entries are written
  std::int64_t* num_kept = nullptr;       // one value (device memory for CUDA, host memory for the CPU)
};

// Bytes of device workspace launch_nms needs for these arguments and params.
std::size_t nms_cuda_workspace_bytes(const NmsParams& params, std::int64_t num_boxes, DType boxes_dtype,
                                     bool scores_fp64, bool batched);

// Runs NMS on the device, entirely asynchronously on `stream`: sort by score, build the suppression mask
// chunk by chunk and scan it on the device. Nothing is copied to the host. `workspace` must hold
// nms_cuda_workspace_bytes(...) bytes, 256-byte aligned. Validates nothing (the framework layer does).
void launch_nms(const NmsParams& params, const NmsArgs& args, DType boxes_dtype, void* workspace,
                std::size_t workspace_bytes, cudaStream_t stream);

// The CPU implementation over the same per-pair IoU: a stable sort by score, then greedy suppression.
void run_nms_cpu(const NmsParams& params, const NmsArgs& args, DType boxes_dtype);

}  // namespace detops
