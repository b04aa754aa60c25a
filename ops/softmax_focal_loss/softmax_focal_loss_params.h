#pragma once
// Softmax focal loss in mmcv's form (mmcv.ops.softmax_focal_loss; docs/ops/softmax_focal_loss.md). The one
// contract shared by the CUDA kernels, the CPU implementation, the Eigen reference, the op spec and the torch
// binding.
//
// input [N, C] logits, target int64 [N], weight [C] or none. Row n with target t >= 0 (t < C):
//   loss_n = -alpha * (1 - p_t)^gamma * log(p_t) * weight[t],   p = softmax(input[n, :])
// A negative target marks an ignored row (mmcv's `label >= 0` test): loss 0, gradient 0, weight not read.
// 'none' -> [N]; 'mean' -> the sum / N (ignored rows counted, as mmcv); 'sum'.
#include <cstdint>

namespace detops {

enum class SoftmaxFocalLossReduction : std::uint8_t { kNone, kMean, kSum };

struct SoftmaxFocalLossParams {
  double gamma = 2.0;   // finite (negative values accepted, as mmcv takes them)
  double alpha = 0.25;  // finite, used as given (mmcv has no range rule)
  SoftmaxFocalLossReduction reduction = SoftmaxFocalLossReduction::kMean;
};

// 'mean' / 'sum' sum the row losses of fixed chunks of this many consecutive rows into partial sums (in the
// accumulation type), then the partial sums in order: the result does not depend on the device's size or
// the thread count, and no partial sum ever lives in a half type.
inline constexpr std::int64_t kSoftmaxFocalChunkRows = 64;

constexpr std::int64_t softmax_focal_loss_chunk_count(std::int64_t rows) {
  return (rows + kSoftmaxFocalChunkRows - 1) / kSoftmaxFocalChunkRows;
}

// CUDA: rows of at least this many classes are reduced by a whole block (256 threads), shorter rows by the tile
// kernels.
inline constexpr std::int64_t kSoftmaxFocalBlockRowClasses = 2048;

}  // namespace detops
