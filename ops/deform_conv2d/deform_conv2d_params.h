#pragma once
// Deformable 2-D convolution, DCNv1 and DCNv2 (torchvision.ops.deform_conv2d; docs/ops/deform_conv2d.md): the
// one parameter struct shared by the CUDA kernels, the CPU implementation, the Eigen reference, the op spec
// and the torch binding.
//
// input [B, C_in, H, W], weight [C_out, C_in / groups, kh, kw], offset [B, 2 * offset_groups * kh * kw, H_out,
// W_out], mask [B, offset_groups * kh * kw, H_out, W_out] (DCNv2; absent for DCNv1), bias [C_out]:
//
//   out[b, o, y, x] = bias[o] + sum over the input channels c of o's weight group and the taps k = i * kw + j of
//       weight[o, c - g * C_in / groups, i, j] * m * sample(input[b, c], py, px)
//   with  G = c / (C_in / offset_groups)                               (c's offset group)
//         py = y * stride_h - pad_h + i * dilation_h + offset[b, 2 * (G * kh * kw + k), y, x]
//         px = x * stride_w - pad_w + j * dilation_w + offset[b, 2 * (G * kh * kw + k) + 1, y, x]
//         m  = mask[b, G * kh * kw + k, y, x] (1 without a mask)
//
// sample() is zero-padded bilinear interpolation (torchvision's): 0 when py <= -1, py >= H, px <= -1 or
// px >= W (and when py or px is NaN); otherwise the four corners floor/floor + 1, a corner outside the map
// contributing 0. Its derivative in py / px is the one of the cell [floor, floor + 1] (the right derivative
// at integer coordinates), with torchvision's backward: at py = -1 exactly the forward is 0 but the offset
// gradient is the right derivative (row 0's value), as torchvision's.
#include <cstdint>

namespace detops {

struct DeformConv2dParams {
  std::int64_t stride_h = 1, stride_w = 1;      // >= 1
  std::int64_t pad_h = 0, pad_w = 0;            // >= 0
  std::int64_t dilation_h = 1, dilation_w = 1;  // >= 1
  std::int64_t groups = 1;                      // weight groups: C_in and C_out divisible by it
  std::int64_t offset_groups = 1;               // C_in divisible by it
  bool use_mask = false;                        // DCNv2 (modulated) when true
  // fp32 only: let the GEMMs use TF32 tensor cores (10-bit mantissa products). The binding sets it from
  // torch.backends.cuda.matmul.allow_tf32 (torch.get_float32_matmul_precision() != "highest"), the flag that
  // governs torchvision's deform_conv2d (its GEMMs are at::addmm); false everywhere else (the harness, the CPU).
  bool allow_tf32 = false;
};

// The output's size along one dimension, as torch's conv2d: floor((in + 2 pad - (dilation (k - 1) + 1)) / stride) + 1.
// Requires in + 2 pad >= dilation (k - 1) + 1 (the binding checks it).
constexpr std::int64_t deform_conv2d_out_size(std::int64_t in, std::int64_t kernel, std::int64_t pad,
                                              std::int64_t dilation, std::int64_t stride) {
  return (in + 2 * pad - (dilation * (kernel - 1) + 1)) / stride + 1;
}

}  // namespace detops
