#pragma once
// When the RoIAlign-family forwards (roi_align, deform_roi_pool, modulated_deform_roi_pool) read the feature map
// channels last on CUDA (common/roi_bins_nhwc.cuh). Plain C++: the torch bindings decide with it (and allocate the
// workspace) before calling the launchers.
//
// The channels-last kernel runs a block per (roi, 16 L channels, group of up to 64 bins), 16 lanes per bin, L
// channels per lane (roi_nhwc_lane_channels: 16 bytes of a pixel per lane, 256 per bin). It runs when the input
// already is channels last or there are at least map / 4 output elements: the copy to channels last reads and
// writes the map once (about 0.07 ms for FPN P2 of two 800x1344 images in fp32 on an H200), which the faster
// gather repays only when the rois sample enough of it. Measured on the H200 (fp32): 100 rois x 14x14 bins over
// P2 (map / 7 outputs) ran 0.13 ms channels first and 0.16 ms with the copy; 1000 rois x 7x7 (map / 2.8) 0.35
// against 0.21 ms.
#include <cstddef>
#include <cstdint>

#include "common/roi_args.h"

namespace detops {

// Channels per lane: 16 bytes of a pixel (2 fp64, 4 fp32, 8 fp16/bf16), one 16-byte load per pixel.
constexpr int roi_nhwc_lane_channels(std::size_t element_size) {
  return element_size >= 16 ? 1 : static_cast<int>(16 / element_size);
}

inline bool roi_forward_channels_last(std::int64_t bins, const RoiShape& s, bool input_channels_last) {
  if (bins <= 0) return false;
  if (input_channels_last) return true;
  return s.num_rois * s.channels * bins >= s.batch * s.channels * s.height * s.width / 4;
}

// RoIPool's forward (roi_pool/roi_pool_nhwc.cuh) reads channels last when the input already is, or when there are
// at least map / 8 output elements, so the copy (reading and writing the map once) repays sooner than for
// roi_align. Per output both of RoIPool's kernels read the whole bin, where roi_align's channels-first kernel reads
// 4 taps per sample, 16 per output with sampling_ratio 2, and breaks even between map / 7 and map / 2.8 outputs
// (above). Detector rois pooled 7x7 at 1/4 have larger bins: 25 pixels per output on average for RPN proposals of
// 4-400 px, 65 for boxes of 16-640 px (counted with the bin edges' floor / ceil, overlaps and clipping), 1.6-4x
// roi_align's reads per output, so the copy is repaid at 1.6-4x fewer outputs: map / 8 (2000 proposals on
// [2, 256, 200, 336] are map * 0.73, 100 box-head rois map / 28 and stay channels first). Rois of a few pixels
// (a read or two per output) above the threshold pay the copy without earning it back: at most the copy's time.
// Beyond kRoiPoolNhwcMaxBins bins per roi (the kernel counts bins in int) the channels-first kernel runs.
constexpr std::int64_t kRoiPoolNhwcMaxBins = std::int64_t{1} << 30;

inline bool roi_pool_forward_channels_last(std::int64_t bins, const RoiShape& s, bool input_channels_last) {
  if (bins <= 0 || bins > kRoiPoolNhwcMaxBins) return false;
  if (input_channels_last) return true;
  return s.num_rois * s.channels * bins >= s.batch * s.channels * s.height * s.width / 8;
}

}  // namespace detops
