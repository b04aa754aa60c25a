#pragma once
// RoIPool's channels-last forward (CUDA only; no libtorch): the max of each bin over a [batch, height, width,
// channels] map (the input itself, or its copy; common/roi_nhwc.h's roi_pool_forward_channels_last says when).
//
// A pixel's channels of one tile are read by P lanes (P = 1, 2, 4 or 8, the fewest that cover the channels), each
// lane 16 bytes (L = 16 / element size channels: roi_nhwc_lane_channels); the P lanes are a subgroup, and a
// subgroup scans one bin, so a warp scans 32 / P bins at once, each of its loads one contiguous run of up to 128
// bytes per bin. A lane keeps kUnroll pixel loads in flight. Per channel the scan is roi_pool_bin_max's: rows
// then columns in order, from the same start, replacing the max only by a strictly greater value, so the max and
// argmax are bit-identical to the channels-first kernel's (and the CPU's), exact_max's fallback included.
//
// Block items: (channel tile, group of bins), tile-major, a block each, so the blocks in flight read one 128-byte
// slice of every pixel (17 MB for the [2, 256, 200, 336] map in every dtype), which L2 keeps between overlapping
// rois. An item holds as many bins as the block has subgroups (256 / P): a roi's bins split in equal groups when
// it has more (7 x 7 at P = 8: two items of 25 and 24 bins), else as many whole rois as fit. The block stages the
// item's maxima and argmax in shared memory and writes output[k, c, bins] and argmax channel by channel, one
// contiguous run per (roi, channel).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "common/channels_last.cuh"
#include "common/kernel_launch.cuh"
#include "common/numeric.h"
#include "common/readonly_load.h"
#include "common/roi_cuda.cuh"
#include "common/roi_nhwc.h"
#include "detops/core/cuda_check.h"
#include "roi_pool/roi_pool_kernel.cuh"

namespace detops {
namespace roi_pool_nhwc {

constexpr int kThreads = 256;
constexpr int kMaxPixelLanes = 8;  // 8 lanes x 16 bytes: a 128-byte slice of a pixel
constexpr int kUnroll = 4;         // pixel loads in flight per lane (16-byte loads; 2 for element loads)

// How a launch splits the work; computed on the host (layout()).
struct Layout {
  int lane_shift = 0;     // log2 P: lanes per pixel
  int tile_channels = 0;  // P * L, the channels of one block item
  int capacity = 0;       // bins per item at most: the block's subgroups, kThreads / P
  int groups = 1;         // items per roi (bins > capacity: groups of group_bins), else 1
  int group_bins = 0;     // groups > 1: bins per group, the last one's may be fewer
  int rois_per_item = 1;  // groups == 1: whole rois per item
  std::int64_t tiles = 0, items_per_tile = 0;
};

inline Layout layout(const RoiShape& s, std::int64_t bins, int lane_channels) {
  Layout lay;
  const std::int64_t lanes = (s.channels + lane_channels - 1) / lane_channels;
  while ((1 << lay.lane_shift) < lanes && (1 << lay.lane_shift) < kMaxPixelLanes) ++lay.lane_shift;
  lay.tile_channels = lane_channels << lay.lane_shift;
  lay.capacity = kThreads >> lay.lane_shift;
  if (bins > lay.capacity) {
    lay.groups = static_cast<int>((bins + lay.capacity - 1) / lay.capacity);
    lay.group_bins = static_cast<int>((bins + lay.groups - 1) / lay.groups);
    lay.items_per_tile = s.num_rois * lay.groups;
  } else {
    lay.group_bins = static_cast<int>(bins);
    lay.rois_per_item = static_cast<int>(lay.capacity / bins);
    lay.items_per_tile = (s.num_rois + lay.rois_per_item - 1) / lay.rois_per_item;
  }
  lay.tiles = (s.channels + lay.tile_channels - 1) / lay.tile_channels;
  return lay;
}

__host__ __device__ constexpr std::size_t align16(std::size_t n) { return (n + 15) / 16 * 16; }

// Shared memory: the item's maxima [capacity][tile_channels + 1] of T, then its argmax, the same of int32.
template <typename T>
std::size_t staging_bytes(const Layout& lay) {
  const std::size_t cells = static_cast<std::size_t>(lay.capacity) * (lay.tile_channels + 1);
  return align16(cells * sizeof(T)) + cells * sizeof(std::int32_t);
}

// The 16 bytes of one pixel a lane reads: L channels.
template <typename T>
struct alignas(16) Chunk {
  T v[16 / sizeof(T)];
};

// One 16-byte load when Vec (channels a multiple of L, map 16-byte aligned), else the lane's `valid` channels
// one by one (the others are left as they are, or zero, and never compared). 2-byte types are loaded into the
// halves of 32-bit words, so a chunk takes 4 registers as with the 16-byte load (held one per register, the
// element loads took 128-178 registers a thread).
template <bool Vec, typename T>
__device__ __forceinline__ void load_chunk(const T* __restrict__ p, int valid, Chunk<T>& c) {
  constexpr int L = 16 / sizeof(T);
  if constexpr (Vec) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    std::memcpy(&c, &raw, sizeof(raw));
  } else if constexpr (sizeof(T) == 2) {
    const unsigned short* q = reinterpret_cast<const unsigned short*>(p);
    unsigned words[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned lo = 2 * i < valid ? __ldg(q + 2 * i) : 0u;
      const unsigned hi = 2 * i + 1 < valid ? __ldg(q + 2 * i + 1) : 0u;
      words[i] = lo | (hi << 16);
    }
    std::memcpy(&c, words, sizeof(words));
  } else {
#pragma unroll
    for (int j = 0; j < L; ++j) {
      if (j < valid) c.v[j] = load_readonly(p + j);
    }
  }
}

// The max and argmax of one non-empty bin for the lane's channels, in roi_pool_bin_max's order and with its
// rules (strict >, the start of exact_max or -FLT_MAX, exact_max's fallback to the first non-NaN). image points
// at the lane's first channel of pixel 0; a pixel's offset is its plane index times `channels` (Index).
template <bool Vec, typename T, typename Acc, typename Index>
__device__ __forceinline__ void scan_bin(const RoiPoolBin& bin, const T* __restrict__ image, int width, Index channels,
                                         int valid, bool exact_max, Acc (&best)[16 / sizeof(T)],
                                         std::int32_t (&arg)[16 / sizeof(T)]) {
  constexpr int L = 16 / sizeof(T);
  const int cols = static_cast<int>(bin.wend - bin.wstart);
  const int n = static_cast<int>(bin.hend - bin.hstart) * cols;  // within one plane: < 2^31
  // Plane indices as unsigned: one row past the plane (the step after the last pixel) stays defined.
  const unsigned first =
      static_cast<unsigned>(bin.hstart) * static_cast<unsigned>(width) + static_cast<unsigned>(bin.wstart);
  const unsigned row_step = static_cast<unsigned>(width - cols) + 1u;  // a row's last column -> next row's first
  const Acc start =
      exact_max ? -std::numeric_limits<Acc>::infinity() : -static_cast<Acc>(std::numeric_limits<float>::max());
#pragma unroll
  for (int j = 0; j < L; ++j) {
    best[j] = start;
    arg[j] = -1;
  }
  unsigned pix = first;
  int col = 0;
  // The next pixel: one column on, or the next row's first.
  auto step = [&] {
    const bool wrap = ++col == cols;
    col = wrap ? 0 : col;
    pix += wrap ? row_step : 1u;
  };
  auto take = [&](const Chunk<T>& c, unsigned at) {
#pragma unroll
    for (int j = 0; j < L; ++j) {
      if (!Vec && j >= valid) continue;
      const Acc v = to_acc<Acc>(c.v[j]);
      if (v > best[j]) {  // strict: ties keep the first maximum; NaN never wins
        best[j] = v;
        arg[j] = static_cast<std::int32_t>(at);
      }
    }
  };
  constexpr int U = Vec ? kUnroll : 2;  // element loads: L per pixel, and registers for each
  int i = 0;
  for (; i + U <= n; i += U) {  // U pixels' loads issued before the first comparison
    Chunk<T> chunk[U];
    unsigned at[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      at[u] = pix;
      load_chunk<Vec>(image + static_cast<Index>(pix) * channels, valid, chunk[u]);
      step();
    }
#pragma unroll
    for (int u = 0; u < U; ++u) take(chunk[u], at[u]);
  }
  for (; i < n; ++i) {
    Chunk<T> c;
    load_chunk<Vec>(image + static_cast<Index>(pix) * channels, valid, c);
    take(c, pix);
    step();
  }
  if (!exact_max) return;
  bool missing[L];
  bool any = false;
#pragma unroll
  for (int j = 0; j < L; ++j) {
    missing[j] = (Vec || j < valid) && arg[j] < 0;
    any = any || missing[j];
  }
  if (!any) return;
  // Nothing above -inf in these channels: their bin holds only -inf and NaN. The first -inf is the max; NaNs
  // alone have none (argmax -1) and report the bin's first element, as roi_pool_bin_max.
  Chunk<T> c;
  load_chunk<Vec>(image + static_cast<Index>(first) * channels, valid, c);
#pragma unroll
  for (int j = 0; j < L; ++j) {
    if (missing[j]) best[j] = to_acc<Acc>(c.v[j]);
  }
  pix = first;
  col = 0;
  for (int e = 0; e < n && any; ++e) {
    load_chunk<Vec>(image + static_cast<Index>(pix) * channels, valid, c);
    any = false;
#pragma unroll
    for (int j = 0; j < L; ++j) {
      if (missing[j]) {
        const Acc v = to_acc<Acc>(c.v[j]);
        if (v == v) {
          best[j] = v;
          arg[j] = static_cast<std::int32_t>(pix);
          missing[j] = false;
        }
      }
      any = any || missing[j];
    }
    step();
  }
}

// a / b for a, b >= 0: in 32 bits when both fit, which costs a fraction of a 64-bit division.
__device__ __forceinline__ std::int64_t divide(std::int64_t a, std::int64_t b) {
  if (((a | b) >> 32) == 0) return static_cast<std::int64_t>(static_cast<unsigned>(a) / static_cast<unsigned>(b));
  return a / b;
}

// Block item (tile t, bins [b_first, b_first + nb) counted from roi k_first's first bin) covers channels
// [t * tile_channels, +tile_channels). Subgroup g (threads [g P, g P + P)) takes the item's bin g; lane l of it
// holds channels c0 + L l .. c0 + L l + L - 1. Pixel offsets within an image are Index (32-bit when an image has
// fewer than 2^31 elements); image offsets are 64-bit. Invalid rois give 0 and -1 and are reported once (tile 0,
// bin 0, the subgroup's first lane).
template <bool Vec, typename T, typename Index>
__global__ void __launch_bounds__(kThreads, Vec ? 4 : 3)
    roi_pool_nhwc_forward_kernel(RoiPoolParams p, RoiPoolShape s, Layout lay, const T* __restrict__ input_nhwc,
                                 const T* __restrict__ rois, T* __restrict__ output, std::int32_t* __restrict__ argmax,
                                 unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  constexpr int L = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char roi_pool_nhwc_smem[];
  const int pitch = lay.tile_channels + 1;
  T* staged = reinterpret_cast<T*>(roi_pool_nhwc_smem);
  std::int32_t* staged_arg = reinterpret_cast<std::int32_t*>(
      roi_pool_nhwc_smem + align16(static_cast<std::size_t>(lay.capacity) * pitch * sizeof(T)));
  const int pooled_w = static_cast<int>(p.pooled_width);
  const int bins = static_cast<int>(p.pooled_height) * pooled_w;
  const int lane = static_cast<int>(threadIdx.x) & ((1 << lay.lane_shift) - 1);
  const int sub = static_cast<int>(threadIdx.x) >> lay.lane_shift;
  const int width = static_cast<int>(s.width);
  const Index channels = static_cast<Index>(s.channels);
  const std::int64_t image_elements = s.height * s.width * s.channels;
  // The loop bounds depend only on blockIdx / gridDim, so every thread of a block reaches each barrier.
  for (std::int64_t item = blockIdx.x; item < lay.items_per_tile * lay.tiles; item += gridDim.x) {
    const std::int64_t t = divide(item, lay.items_per_tile), rest = item - t * lay.items_per_tile;
    const std::int64_t c0 = t * lay.tile_channels;
    const int tile_channels = static_cast<int>(std::min<std::int64_t>(lay.tile_channels, s.channels - c0));
    std::int64_t k_first;
    int b_first, nb;
    if (lay.groups > 1) {
      k_first = divide(rest, lay.groups);
      b_first = static_cast<int>(rest - k_first * lay.groups) * lay.group_bins;
      nb = std::min(lay.group_bins, bins - b_first);
    } else {
      k_first = rest * lay.rois_per_item;
      b_first = 0;
      nb = static_cast<int>(std::min<std::int64_t>(lay.rois_per_item, s.num_rois - k_first)) * bins;
    }
    const int valid = tile_channels - L * lane;  // channels of this lane inside the tile (<= 0: none)
    if (sub < nb) {
      const int local = b_first + sub;
      const int r = lay.rois_per_item > 1 ? local / bins : 0, b = local - r * bins;
      const std::int64_t k = k_first + r;
      const RoiPoolGeometry<Acc> g = roi_pool_geometry<T, Acc>(p, rois + k * 5, s.batch);
      Acc best[L];
      std::int32_t arg[L];
#pragma unroll
      for (int j = 0; j < L; ++j) {
        best[j] = Acc(0);
        arg[j] = -1;
      }
      if (g.batch < 0) {
        if (t == 0 && b == 0 && lane == 0) report_first_invalid(first_invalid_roi, k);
      } else if (valid > 0) {
        const int ph = b / pooled_w, pw = b - ph * pooled_w;
        const RoiPoolBin bin = roi_pool_bin(g, ph, pw, s.height, s.width);
        if (!bin.empty()) {
          scan_bin<Vec, T, Acc, Index>(bin, input_nhwc + g.batch * image_elements + c0 + L * lane, width, channels,
                                       valid, p.exact_max, best, arg);
        }
      }
#pragma unroll
      for (int j = 0; j < L; ++j) {
        if (j < valid) {
          staged[sub * pitch + L * lane + j] = from_acc<T>(best[j]);
          staged_arg[sub * pitch + L * lane + j] = arg[j];
        }
      }
    }
    __syncthreads();
    // A warp per channel, its lanes over the item's bins: one contiguous run per (roi, channel).
    for (int c = static_cast<int>(threadIdx.x) / 32; c < tile_channels; c += kThreads / 32) {
      const std::int64_t channel_base = (k_first * s.channels + c0 + c) * bins;
      for (int slot = static_cast<int>(threadIdx.x) % 32; slot < nb; slot += 32) {
        const int local = b_first + slot;
        const int r = lay.rois_per_item > 1 ? local / bins : 0, b = local - r * bins;
        const std::int64_t o = channel_base + r * s.channels * bins + b;
        output[o] = staged[slot * pitch + c];
        argmax[o] = staged_arg[slot * pitch + c];
      }
    }
    __syncthreads();
  }
}

}  // namespace roi_pool_nhwc

// The channels-last forward over args' map: the input itself when args.input_channels_last, else its
// channels-last copy, transposed into args.channels_last_workspace first.
template <typename T>
void launch_roi_pool_nhwc_forward(const RoiPoolParams& p, const RoiPoolForwardArgs& args, cudaStream_t stream) {
  namespace d = roi_pool_nhwc;
  const RoiShape& s = args.shape;
  const std::int64_t bins = p.pooled_height * p.pooled_width;
  if (s.num_rois == 0 || s.channels == 0 || bins == 0) return;
  if (bins > kRoiPoolNhwcMaxBins) throw std::invalid_argument("roi_pool: too many bins for the channels-last forward");
  const T* input = channels_last_map<T>("roi_pool", args.input, args.input_channels_last, args.channels_last_workspace,
                                        s.batch, s.channels, s.height * s.width, stream);
  constexpr int L = roi_nhwc_lane_channels(sizeof(T));
  static_assert(L * sizeof(T) == 16, "a lane reads 16 bytes");
  const d::Layout lay = d::layout(s, bins, L);
  const bool vec = s.channels % L == 0 && reinterpret_cast<std::uintptr_t>(input) % 16 == 0;
  const bool fits32 = s.height * s.width * s.channels < (std::int64_t{1} << 31);
  auto kernel = vec ? (fits32 ? &d::roi_pool_nhwc_forward_kernel<true, T, std::int32_t>
                              : &d::roi_pool_nhwc_forward_kernel<true, T, std::int64_t>)
                    : (fits32 ? &d::roi_pool_nhwc_forward_kernel<false, T, std::int32_t>
                              : &d::roi_pool_nhwc_forward_kernel<false, T, std::int64_t>);
  const std::size_t smem = d::staging_bytes<T>(lay);
  // A block per item (the grid-stride loop covers any excess): blocks start in item order, so the items in flight
  // are a window of one or two channel tiles. A grid capped below the item count would have each resident block
  // walk every tile in turn.
  const unsigned blocks =
      static_cast<unsigned>(std::min<std::int64_t>(lay.items_per_tile * lay.tiles, std::numeric_limits<int>::max()));
  kernel<<<blocks, d::kThreads, smem, stream>>>(p, s, lay, input, static_cast<const T*>(args.rois),
                                                static_cast<T*>(args.output), args.argmax, args.first_invalid_roi);
  DETOPS_CHECK_LAUNCH();
}

// Registers the channels-last kernels of one (T, Index) for the kernel-image check.
template <typename T, typename Index>
void register_roi_pool_nhwc(const std::string& targs) {
  register_instantiation("roi_pool", "roi_pool_nhwc_forward_kernel", "true, " + targs,
                         &roi_pool_nhwc::roi_pool_nhwc_forward_kernel<true, T, Index>);
  register_instantiation("roi_pool", "roi_pool_nhwc_forward_kernel", "false, " + targs,
                         &roi_pool_nhwc::roi_pool_nhwc_forward_kernel<false, T, Index>);
}

}  // namespace detops
