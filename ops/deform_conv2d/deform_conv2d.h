#pragma once
// Deformable 2-D convolution launchers (CUDA and CPU), framework-free. Parameters and definition:
// deform_conv2d_params.h.
#include <cstdint>

#include "common/entry_points.h"
#include "deform_conv2d/deform_conv2d_params.h"
#include "detops/core/dtype.h"

namespace detops {

struct DeformConv2dShape {
  std::int64_t batch = 0, in_channels = 0, height = 0, width = 0;  // input [B, C_in, H, W]
  std::int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;       // weight [C_out, C_in / groups, kh, kw]
  std::int64_t out_height = 0, out_width = 0;                      // out [B, C_out, H_out, W_out]
  constexpr std::int64_t kernel_taps() const { return kernel_h * kernel_w; }
  constexpr std::int64_t positions() const { return out_height * out_width; }
  // The im2col rows of one sample: C_in * kh * kw, row c * kh * kw + k (input channel c, tap k = i * kw + j).
  constexpr std::int64_t column_rows() const { return in_channels * kernel_h * kernel_w; }
};

// Every tensor is contiguous, in one dtype T (the input's). The CUDA launchers run their GEMMs with cuBLAS on
// `blas` (a cublasHandle_t bound to `stream`, e.g. ATen's current handle) and need `workspace`: at least
// deform_conv2d_workspace_bytes(...) bytes, 256-byte aligned. The CPU entry points ignore both.
struct DeformConv2dProblem {
  DeformConv2dShape s;
  void* blas = nullptr;
  void* workspace = nullptr;
  std::int64_t workspace_bytes = 0;
};

struct DeformConv2dForwardArgs : DeformConv2dProblem {
  const void* input = nullptr;
  const void* weight = nullptr;
  const void* offset = nullptr;
  const void* mask = nullptr;  // null unless params.use_mask
  const void* bias = nullptr;  // [C_out] or null (no bias)
  void* out = nullptr;         // [B, C_out, H_out, W_out], every element written
};

// grad [B, C_out, H_out, W_out] -> the five gradients, every element of each written.
struct DeformConv2dBackwardArgs : DeformConv2dProblem {
  const void* grad = nullptr;
  const void* input = nullptr;
  const void* weight = nullptr;
  const void* offset = nullptr;
  const void* mask = nullptr;  // null unless params.use_mask
  void* grad_input = nullptr;
  void* grad_weight = nullptr;
  void* grad_offset = nullptr;
  void* grad_mask = nullptr;  // null unless params.use_mask
  void* grad_bias = nullptr;
};

// The samples per chunk: as many as fit in `column_capacity` elements of columns, at least 1, at most the batch.
constexpr std::int64_t deform_conv2d_batch_chunk(const DeformConv2dShape& s, std::int64_t column_capacity) {
  const std::int64_t per_sample = s.column_rows() * s.positions();
  if (per_sample <= 0 || s.batch <= 1) return s.batch < 1 ? 1 : s.batch;
  const std::int64_t fit = column_capacity / per_sample;
  return fit < 1 ? 1 : (fit > s.batch ? s.batch : fit);
}

// The columns of one chunk: all samples' when they take at most kDeformConv2dColumnBudget elements, else as
// many samples' as fit (at least one).
inline constexpr std::int64_t kDeformConv2dColumnBudget = std::int64_t{1} << 27;  // 128 Mi elements

constexpr std::int64_t deform_conv2d_column_capacity(const DeformConv2dShape& s) {
  const std::int64_t per_sample = s.column_rows() * s.positions();
  if (per_sample <= 0) return 0;
  const std::int64_t fit = kDeformConv2dColumnBudget / per_sample;
  const std::int64_t samples = fit < 1 ? 1 : (fit > s.batch ? s.batch : fit);
  return samples * per_sample;
}

// The CUDA launchers' workspace, carved in this order (each part 256-byte aligned), for one chunk of
// n = deform_conv2d_batch_chunk(s, deform_conv2d_column_capacity(s)) samples, T of `element_bytes` and its
// accumulation type of `acc_bytes`:
//   columns        n * P_pad * C_in kh kw   T    the chunk's samples, channels last: [n, P_pad, groups, kh kw,
//                                                C_in / groups] (rows past P zero)
//   input_cl       n * H W * C_in       T    the chunk's input, channels last [n, H, W, C_in]
//   weight_cl      C_out * C_in kh kw / groups    T    weight as [C_out, kh kw, C_in / groups]
// and for the backward also
//   grad_columns   n * P_pad * C_in kh kw   acc
//   grad_input_cl  n * H W * C_in       acc  the chunk's input gradient, channels last
//   grad_weight_cl C_out * C_in kh kw / groups    acc
//   partials       kDeformConv2dWideThreads / 32 * 3   acc   per warp of a point spread over several warps: its
//                                                partial offset (dy, dx) and mask gradient sums
// and, only when P_pad != P,
//   padded         n * C_out * P_pad    T    the forward's GEMM output, the backward's copy of grad (zeros past P)
// where P_pad = deform_conv2d_padded_positions: P rounded up to 16 bytes of T (unless that adds more than P / 8
// rows: then P). The GEMMs run over P_pad positions,
// so every operand's contiguous extent is 16-byte aligned: with P itself (25 x 42 = 1050 at ResNet-50's stage
// 5) cuBLAS falls back to its align-2 / align-1 kernels, 2-4x slower.
// The most threads the CUDA launchers give the points of a chunk that has few (a 1x1 map of 2^31 channels has one
// point per tap): 2^21, up to 2^20 per point.
inline constexpr std::int64_t kDeformConv2dWideThreads = std::int64_t{1} << 21;

struct DeformConv2dWorkspace {
  std::int64_t columns = 0, input_cl = 0, weight_cl = 0, grad_columns = 0, grad_input_cl = 0, grad_weight_cl = 0;
  std::int64_t partials = 0;
  std::int64_t padded = -1;  // -1: no padded part (P is aligned)
  std::int64_t bytes = 0;    // the total
};

// The output positions' leading dimension in the GEMMs: P rounded up to 16 bytes of T, where that adds at most
// P / 8 rows; else P (a map of a few positions, e.g. 1x1 with 2^31 channels, would multiply its columns'
// memory, and its GEMMs are short in P anyway).
constexpr std::int64_t deform_conv2d_position_align(std::int64_t element_bytes) {
  return element_bytes >= 16 ? 1 : 16 / element_bytes;
}
constexpr std::int64_t deform_conv2d_padded_positions(const DeformConv2dShape& s, std::int64_t element_bytes) {
  const std::int64_t a = deform_conv2d_position_align(element_bytes), p = s.positions();
  const std::int64_t padded = (p + a - 1) / a * a;
  return (padded - p) * 8 <= p ? padded : p;
}
// ResNet-50's stage 5 (25 x 42 = 1050 positions) in fp16 is padded to 1056; a 1x1 map and 4 x 5 in fp16 (24
// would add 4 > 20 / 8 rows) are not; fp64 pads to even.
static_assert(deform_conv2d_padded_positions(DeformConv2dShape{2, 512, 25, 42, 512, 3, 3, 25, 42}, 2) == 1056);
static_assert(deform_conv2d_padded_positions(DeformConv2dShape{1, 8, 1, 1, 1, 1, 1, 1, 1}, 4) == 1);
static_assert(deform_conv2d_padded_positions(DeformConv2dShape{1, 2, 4, 5, 3, 3, 3, 4, 5}, 2) == 20);
static_assert(deform_conv2d_padded_positions(DeformConv2dShape{1, 3, 9, 10, 2, 3, 3, 9, 9}, 8) == 82);

constexpr std::int64_t deform_conv2d_align256(std::int64_t bytes) { return (bytes + 255) / 256 * 256; }

constexpr DeformConv2dWorkspace deform_conv2d_workspace(const DeformConv2dShape& s, std::int64_t groups,
                                                       std::int64_t element_bytes, std::int64_t acc_bytes,
                                                       bool backward) {
  DeformConv2dWorkspace w;
  const std::int64_t n = deform_conv2d_batch_chunk(s, deform_conv2d_column_capacity(s));
  const std::int64_t padded = deform_conv2d_padded_positions(s, element_bytes);
  const std::int64_t columns = n * padded * s.column_rows(), pixels = n * s.height * s.width * s.in_channels;
  const std::int64_t weight = groups > 0 ? s.out_channels * s.column_rows() / groups : 0;
  std::int64_t at = 0;
  const auto take = [&at](std::int64_t bytes) {
    const std::int64_t here = at;
    at += deform_conv2d_align256(bytes);
    return here;
  };
  w.columns = take(columns * element_bytes);
  w.input_cl = take(pixels * element_bytes);
  w.weight_cl = take(weight * element_bytes);
  if (backward) {
    w.grad_columns = take(columns * acc_bytes);
    w.grad_input_cl = take(pixels * acc_bytes);
    w.grad_weight_cl = take(weight * acc_bytes);
    w.partials = take(kDeformConv2dWideThreads / 32 * 3 * acc_bytes);
  }
  if (padded != s.positions()) w.padded = take(n * s.out_channels * padded * element_bytes);
  w.bytes = at;
  return w;
}

// CUDA: the input chunk and the weight turned channels last, then the deformable im2col (a sample point's
// bilinear weights formed once and applied to a run of channels with 16-byte loads and stores) and one
// strided-batched cuBLAS GEMM per weight group writing `out` (bias first, beta = 1). The backward: the
// columns' gradient weight^T grad (GEMM, acc output), then one pass over the sample points that scatters the
// input gradient with atomicAdd into a channels-last acc buffer (not deterministic, as torchvision's), sums
// the offset and mask gradients over the offset group's channels (a fixed lane order and shuffle tree) and
// writes the columns again for the weight gradient, grad columns^T over the samples in order (GEMM, acc
// output); the bias gradient a fixed-order sum.
//
// CPU: the same sums as loops (each output element one thread's fixed-order sum; the input gradient's
// scatter runs serially per sample), deterministic.
DETOPS_DECLARE_ENTRY(DeformConv2dParams, DeformConv2dForwardArgs, deform_conv2d_forward);
DETOPS_DECLARE_ENTRY(DeformConv2dParams, DeformConv2dBackwardArgs, deform_conv2d_backward);

}  // namespace detops
