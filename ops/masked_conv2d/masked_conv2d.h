#pragma once
// Masked 2-D convolution launchers (CUDA and CPU), framework-free. Parameters: masked_conv2d_params.h.
#include <cstdint>

#include "common/entry_points.h"
#include "detops/core/dtype.h"
#include "masked_conv2d/masked_conv2d_params.h"

namespace detops {

struct MaskedConv2dShape {
  std::int64_t batch = 0, in_channels = 0, height = 0, width = 0;  // features [N, C_in, H, W]
  std::int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;       // weight [C_out, C_in, kh, kw]
  std::int64_t out_height = 0, out_width = 0;                      // output [N, C_out, H_out, W_out]
  // The reduction length of one output element, C_in * kh * kw: the im2col "taps", tap t being input
  // channel t / (kh kw), kernel row (t % (kh kw)) / kw, kernel column t % kw (weight's own layout).
  constexpr std::int64_t taps() const { return in_channels * kernel_h * kernel_w; }
};

// The selected output positions: `positions` holds `count` rows (n, y, x) of int64, in increasing order of
// (n, y, x) (the caller's compaction of mask > 0). Every tensor is contiguous, in the features' dtype T
// unless said otherwise.
struct MaskedConv2dPositions {
  const std::int64_t* positions = nullptr;  // [count, 3]
  std::int64_t count = 0;
};

// What every entry point is given first: the problem's shape and its selected positions.
struct MaskedConv2dProblem {
  MaskedConv2dShape s;
  MaskedConv2dPositions sel;
};

// out [N, C_out, H_out, W_out] must hold zeros: the launchers write the selected positions only.
struct MaskedConv2dForwardArgs : MaskedConv2dProblem {
  const void* features = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;  // [C_out] or null
  void* out = nullptr;
};

// grad [N, C_out, H_out, W_out] -> grad_features [N, C_in, H, W], every element written.
struct MaskedConv2dBackwardInputArgs : MaskedConv2dProblem {
  const void* grad = nullptr;
  const void* weight = nullptr;
  // int64 [N * H_out * W_out]: position (n, y, x)'s row in sel.positions, or -1 where it is not selected.
  const std::int64_t* rows = nullptr;
  // acc_t<T> workspace of masked_conv2d_dcol_elements(s, sel.count) elements.
  void* dcol = nullptr;
  void* grad_features = nullptr;
};

// grad [N, C_out, H_out, W_out], features -> grad_weight [C_out, C_in, kh, kw] and grad_bias [C_out].
struct MaskedConv2dBackwardWeightArgs : MaskedConv2dProblem {
  const void* grad = nullptr;
  const void* features = nullptr;
  // acc_t<T> workspace of masked_conv2d_weight_partial_elements(s, sel.count) elements.
  void* partials = nullptr;
  void* grad_weight = nullptr;
  void* grad_bias = nullptr;
};

// The backward's d(im2col) buffer: [taps, count] (a column per selected position).
constexpr std::int64_t masked_conv2d_dcol_elements(const MaskedConv2dShape& s, std::int64_t count) {
  return s.taps() * count;
}

// The weight gradient reduces over the selected positions in a fixed split that depends only on their count: at most kMaskedConv2dMaxChunks chunks of at least kMaskedConv2dMinChunk positions (a multiple of
// 16, the kernel's k-tile), each summed into its own [C_out, taps + 1] slice of partials (column `taps`:
// the bias), then the slices in order. So the result is bitwise reproducible on any device.
inline constexpr std::int64_t kMaskedConv2dMaxChunks = 32;
inline constexpr std::int64_t kMaskedConv2dMinChunk = 1024;

constexpr std::int64_t masked_conv2d_chunk_length(std::int64_t count) {
  const std::int64_t by_max = (count + kMaskedConv2dMaxChunks - 1) / kMaskedConv2dMaxChunks;
  const std::int64_t len = by_max > kMaskedConv2dMinChunk ? by_max : kMaskedConv2dMinChunk;
  return (len + 15) / 16 * 16;
}

constexpr std::int64_t masked_conv2d_chunks(std::int64_t count) {
  return count == 0 ? 0 : (count + masked_conv2d_chunk_length(count) - 1) / masked_conv2d_chunk_length(count);
}

constexpr std::int64_t masked_conv2d_weight_partial_elements(const MaskedConv2dShape& s, std::int64_t count) {
  return masked_conv2d_chunks(count) * s.out_channels * (s.taps() + 1);
}

// CUDA launchers (common/entry_points.h). No atomics: every output element is one thread's fixed-order sum
// (the forward and d(im2col): tiled GEMMs whose reduction runs in k order; grad_features: a gather over the
// kernel taps in order; grad_weight / grad_bias: the fixed chunks above, then their sum in order), so every
// result is bitwise reproducible.
//
// CPU implementations of the same products, operands and orders (masked_conv2d_kernel.cuh), each result one
// thread's fixed-order sum: deterministic for any split.
DETOPS_DECLARE_ENTRY(MaskedConv2dParams, MaskedConv2dForwardArgs, masked_conv2d_forward);
DETOPS_DECLARE_ENTRY(MaskedConv2dParams, MaskedConv2dBackwardInputArgs, masked_conv2d_backward_input);
DETOPS_DECLARE_ENTRY(MaskedConv2dParams, MaskedConv2dBackwardWeightArgs, masked_conv2d_backward_weight);

}  // namespace detops
