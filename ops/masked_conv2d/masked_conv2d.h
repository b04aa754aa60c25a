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
// (n, y, x) (the caller's compaction of mask > 0), count < 2^31. Every tensor is contiguous, in the features'
// dtype T unless said otherwise.
struct MaskedConv2dPositions {
  const std::int64_t* positions = nullptr;  // [count, 3]
  std::int64_t count = 0;
};

// What every entry point is given first: the problem's shape and its selected positions. The CUDA launchers
// also need `blas` (a cublasHandle_t for the device, e.g. ATen's current handle: they bind it to their stream)
// and `workspace`: at least masked_conv2d_workspace(...).bytes bytes, 256-byte aligned; their fp32 GEMMs may
// use TF32 when allow_tf32 (the binding sets it from torch.backends.cuda.matmul.allow_tf32, as mmcv's addmm
// follows it). The CPU entry points ignore the three.
struct MaskedConv2dProblem {
  MaskedConv2dShape s;
  MaskedConv2dPositions sel;
  void* blas = nullptr;
  void* workspace = nullptr;
  std::int64_t workspace_bytes = 0;
  bool allow_tf32 = false;
};

// out [N, C_out, H_out, W_out]: CUDA writes every element; the CPU writes the selected positions only (out must
// hold zeros).
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
  void* grad_features = nullptr;
};

// grad [N, C_out, H_out, W_out], features -> grad_weight [C_out, C_in, kh, kw] and grad_bias [C_out], every
// element written.
struct MaskedConv2dBackwardWeightArgs : MaskedConv2dProblem {
  const void* grad = nullptr;
  const void* features = nullptr;
  void* grad_weight = nullptr;
  void* grad_bias = nullptr;
};

// ---------------------------------------------------------------------------------------------------
// CUDA: explicit im2col and cuBLAS GEMMs over chunks of the selected positions. A chunk takes c positions
// (masked_conv2d_chunk_positions): params.chunk_positions when set (a test hook), else as many as keep each
// chunk buffer within kMaskedConv2dChunkBudget elements, at least kMaskedConv2dLdAlign. A chunk buffer is
// position-contiguous, rows of ld = c rounded up to kMaskedConv2dLdAlign elements (aligned GEMM operands).
inline constexpr std::int64_t kMaskedConv2dChunkBudget = std::int64_t{1} << 27;  // 128 Mi elements
inline constexpr std::int64_t kMaskedConv2dLdAlign = 16;

constexpr std::int64_t masked_conv2d_chunk_positions(const MaskedConv2dShape& s, const MaskedConv2dParams& p,
                                                     std::int64_t count) {
  const std::int64_t widest = s.taps() > s.out_channels ? s.taps() : s.out_channels;
  std::int64_t len = p.chunk_positions;
  if (len <= 0) {
    len = kMaskedConv2dChunkBudget / (widest > 0 ? widest : 1) / kMaskedConv2dLdAlign * kMaskedConv2dLdAlign;
    if (len < kMaskedConv2dLdAlign) len = kMaskedConv2dLdAlign;
  }
  return len < count ? len : count;
}

constexpr std::int64_t masked_conv2d_chunk_ld(std::int64_t chunk_positions) {
  return (chunk_positions + kMaskedConv2dLdAlign - 1) / kMaskedConv2dLdAlign * kMaskedConv2dLdAlign;
}

enum class MaskedConv2dPass { kForward, kBackwardInput, kBackwardWeight };

// The CUDA launchers' workspace, byte offsets of its parts (each 256-byte aligned), for `count` selected
// positions, T of `element_bytes` and its accumulation type acc of `acc_bytes`:
//   rows         int32 [N H_out W_out]  forward, backward input: each output position's row in sel (its index
//                                       among the selected positions), -1 where not selected
//   columns      T [C_in kh kw, ld]     forward, backward weight: the chunk's im2col, columns[t, r] the feature
//                                       under tap t = (c, i, j) of position r, 0 in the padding;
//                acc [C_in kh kw, ld]   backward input: d(im2col), the GEMM's result in acc (not rounded to a
//                                       half type: no double rounding, no overflow of a partial term)
//   selected     acc [C_out, ld]        forward: the chunk's outputs without the bias;
//                T [C_out, ld]          backward: grad at the chunk's positions
//   accumulator  acc                    backward, only with more than one chunk: the running sums across
//                                       chunks, [N C_in H W] (input) or [C_out C_in kh kw + C_out] (weight:
//                                       the weight's, then the bias')
struct MaskedConv2dWorkspace {
  std::int64_t rows = 0, columns = 0, selected = 0, accumulator = 0;
  std::int64_t bytes = 0;  // the total
};

constexpr std::int64_t masked_conv2d_align256(std::int64_t bytes) { return (bytes + 255) / 256 * 256; }

constexpr MaskedConv2dWorkspace masked_conv2d_workspace(const MaskedConv2dShape& s, const MaskedConv2dParams& p,
                                                       std::int64_t count, MaskedConv2dPass pass,
                                                       std::int64_t element_bytes, std::int64_t acc_bytes) {
  MaskedConv2dWorkspace w;
  const std::int64_t chunk = masked_conv2d_chunk_positions(s, p, count), ld = masked_conv2d_chunk_ld(chunk);
  const bool chunked = chunk < count;
  std::int64_t at = 0;
  const auto take = [&at](std::int64_t bytes) {
    const std::int64_t here = at;
    at += masked_conv2d_align256(bytes);
    return here;
  };
  if (pass != MaskedConv2dPass::kBackwardWeight) w.rows = take(s.batch * s.out_height * s.out_width * 4);
  w.columns = take(s.taps() * ld * (pass == MaskedConv2dPass::kBackwardInput ? acc_bytes : element_bytes));
  w.selected = take(s.out_channels * ld * (pass == MaskedConv2dPass::kForward ? acc_bytes : element_bytes));
  if (chunked && pass == MaskedConv2dPass::kBackwardInput) {
    w.accumulator = take(s.batch * s.in_channels * s.height * s.width * acc_bytes);
  } else if (chunked && pass == MaskedConv2dPass::kBackwardWeight) {
    w.accumulator = take(s.out_channels * (s.taps() + 1) * acc_bytes);
  }
  w.bytes = at;
  return w;
}

// CUDA launchers: per chunk, a gather kernel writes the chunk's columns (the features' im2col, or grad at the
// positions: the im2col of grad's 1x1 view), then cuBLAS (tensor cores with fp32 accumulation for fp16 / bf16;
// fp32 in fp32 unless allow_tf32; fp64 in fp64):
//   forward          selected [C_out, c] = weight [C_out, K] columns [K, c]; one kernel then writes every
//                    output element: bias + selected at a selected position, 0 elsewhere (no memset)
//   backward input   d(im2col) [K, c] = weight^T grad_selected; grad_features by a gather over the kernel taps
//                    of each input pixel, in tap order, in acc (chunks in order through the accumulator)
//   backward weight  grad_weight [C_out, K] (+)= grad_selected columns^T (a GEMM in acc, chunks in order);
//                    grad_bias a fixed-order block sum of grad_selected per channel
// with K = C_in kh kw. Each GEMM runs over the chunk's c positions rounded up to kMaskedConv2dLdAlign (the
// gathers write zero columns in [c, padded)): cuBLAS's fast kernels need aligned extents. No atomics; cuBLAS
// GEMMs are bitwise reproducible on one GPU model: deterministic.
//
// CPU (masked_conv2d_kernel.cuh, masked_conv2d_cpu.cpp): the same sums as implicit GEMMs over the positions,
// each result one thread's fixed-order sum in acc (the weight gradient over fixed position chunks added in
// order): deterministic for any split. Its buffers are its own.
DETOPS_DECLARE_ENTRY(MaskedConv2dParams, MaskedConv2dForwardArgs, masked_conv2d_forward);
DETOPS_DECLARE_ENTRY(MaskedConv2dParams, MaskedConv2dBackwardInputArgs, masked_conv2d_backward_input);
DETOPS_DECLARE_ENTRY(MaskedConv2dParams, MaskedConv2dBackwardWeightArgs, masked_conv2d_backward_weight);

}  // namespace detops
