#pragma once
// The RoI family's framework-free shape and argument structs (roi_align, roi_pool, ps_roi_align,
// ps_roi_pool, prroi_pool). Each op's <op>.h names them (aliases) or extends them with its extras by
// derivation. Plain C++: no libtorch, no CUDA.
#include <array>
#include <cstdint>

#include "common/macros.h"
#include "common/parallel_for.h"

namespace detops {

// input [batch, channels, height, width] contiguous; rois [num_rois, 5] contiguous
// (batch_index, x1, y1, x2, y2) in the same dtype as input.
struct RoiShape {
  std::int64_t batch = 0, channels = 0, height = 0, width = 0, num_rois = 0;
};

// output is contiguous in input's dtype, [num_rois, ...] with the op's per-roi element count.
// first_invalid_roi (CUDA only, optional): atomically lowered to the index of the first roi whose batch
// index is NaN or outside [0, batch); the caller initializes it to ~0ull. Such rois produce zeros.
// CUDA only, for the forwards with a channels-last kernel (common/roi_nhwc.h; the others ignore both):
// input_channels_last: input is laid out [batch, height, width, channels]. channels_last_workspace: a [batch,
// height, width, channels] buffer of input's dtype; when set and input is channels first, the launcher writes
// input's channels-last copy there (a tiled transpose) and runs the channels-last kernel on it. With neither,
// the channels-first kernel runs.
struct RoiForwardArgs {
  RoiShape shape;
  const void* input = nullptr;
  const void* rois = nullptr;
  void* output = nullptr;
  unsigned long long* first_invalid_roi = nullptr;
  bool input_channels_last = false;
  void* channels_last_workspace = nullptr;
};

// grad_output [num_rois, C, pooled_height, pooled_width] may have any strides (stride 0 included, as
// `.sum().backward()` produces). grad_input_acc is a zeroed buffer of the accumulation type (double for
// fp64, float for fp32, fp16 and bf16), [batch, channels, height, width] unless the op says otherwise;
// the caller rounds it to the input dtype afterwards. first_invalid_roi as in RoiForwardArgs.
struct RoiBackwardArgs {
  RoiShape shape;
  const void* grad_output = nullptr;
  std::array<std::int64_t, 4> grad_output_strides{};
  const void* rois = nullptr;
  void* grad_input_acc = nullptr;
  unsigned long long* first_invalid_roi = nullptr;
};

// grad_output's strides as one kernel parameter, passed by value: offset(k, c, ph, pw).
struct RoiGradStrides {
  std::int64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  DETOPS_HD std::int64_t offset(std::int64_t k, std::int64_t c, std::int64_t ph, std::int64_t pw) const {
    return k * s0 + c * s1 + ph * s2 + pw * s3;
  }
};

inline RoiGradStrides roi_grad_strides(const RoiBackwardArgs& args) {
  const auto& st = args.grad_output_strides;
  return {st[0], st[1], st[2], st[3]};
}

// The number of pooled bins of one roi and channel.
template <typename Params>
std::int64_t roi_bins(const Params& p) {
  return p.pooled_height * p.pooled_width;
}

// The flat output (grad_output) element count of the ops with one element per (roi, channel, bin).
template <typename Params>
std::int64_t roi_elements(const RoiShape& s, const Params& p) {
  return s.num_rois * s.channels * roi_bins(p);
}

}  // namespace detops
