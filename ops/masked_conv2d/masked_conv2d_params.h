#pragma once
// Masked 2-D convolution (mmcv's masked_conv2d, without its limits; docs/ops/masked_conv2d.md): the
// convolution of features [N, C_in, H, W] with weight [C_out, C_in, kh, kw] (+ bias [C_out]) evaluated only
// at the output positions (n, y, x) whose mask value is > 0, and exactly 0 at every other position. The one
// contract shared by the CUDA kernels, the CPU implementation, the Eigen reference, the op spec and the
// torch binding.
#include <cstdint>

namespace detops {

struct MaskedConv2dParams {
  std::int64_t padding_h = 0, padding_w = 0;  // zero padding, >= 0
  std::int64_t stride_h = 1, stride_w = 1;    // >= 1
  // CUDA only, a test hook: the most selected positions one im2col + GEMM chunk takes (> 0), or 0 for the
  // launchers' own split (masked_conv2d.h). Not in the op's schema; the spec lowers it to cross chunk borders.
  std::int64_t chunk_positions = 0;
  // CUDA only, a test hook: the launchers fill their workspace with 0xFF bytes (NaN in every floating type)
  // before use, so a kernel or GEMM that reads a workspace element nothing wrote (the zero padding of a chunk's
  // rows, say) turns the result into NaN instead of silently using whatever the allocator left there.
  bool poison_workspace = false;
};

// The output's size along one dimension: floor((in + 2 padding - kernel) / stride) + 1, as torch's conv2d.
// Requires in + 2 padding >= kernel (the binding checks it).
constexpr std::int64_t masked_conv2d_out_size(std::int64_t in, std::int64_t kernel, std::int64_t padding,
                                              std::int64_t stride) {
  return (in + 2 * padding - kernel) / stride + 1;
}

// Whether a mask value selects its output position: mmcv's rule, mask > 0. Zero, negative and NaN values do
// not select; a bool mask selects where it is true.
constexpr bool masked_conv2d_selects(double mask_value) { return mask_value > 0; }

}  // namespace detops
