#pragma once
// NMS and batched NMS parameters (torchvision semantics). The one contract shared by the CUDA kernels,
// the CPU implementation, the fp64 reference, the op spec and the torch binding.
#include <cstdint>

namespace detops {

struct NmsParams {
  // A box is suppressed by a kept, higher-ranked box whose IoU with it is strictly greater than this,
  // the IoU (float for fp32/fp16/bf16 boxes, double for fp64) compared with this double exactly. Any
  // value, as torchvision: below 0 every overlapping-or-not box of a defined IoU suppresses, above 1 or
  // NaN nothing does.
  double iou_threshold = 0.5;
  // CUDA only: the most device memory one chunk of the suppression mask may take. The mask is built and
  // consumed in chunks of rows of about this size, so 100,000 boxes need ~64 MiB instead of the 1.25 GB a
  // whole N x N/64 mask would. A chunk is charged its worst case (every 64-bit mask word of its rows set,
  // stored as a 12-byte list entry). Smaller values only make more (smaller) chunks; the result is the same.
  // At least one 64-row block per chunk is always used.
  std::int64_t mask_chunk_bytes = std::int64_t{64} << 20;
  // CUDA only, for tests: false keeps the scan's suppressed-box bitset in global memory, as the scan must
  // when the bitset (N / 8 bytes) does not fit in one block's shared memory (past ~1.6M boxes on an H200).
  // The result is the same either way.
  bool scan_removed_in_shared = true;
};

// Sorted positions are int32 (as is CUB's item count), so at most this many boxes.
inline constexpr std::int64_t kNmsMaxBoxes = 2147483647;

}  // namespace detops
