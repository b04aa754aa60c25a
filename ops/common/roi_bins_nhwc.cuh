#pragma once
// The channels-last forward of the RoIAlign family (roi_align, deform_roi_pool, modulated_deform_roi_pool):
// the average of a bin's bilinear samples over a [batch, height, width, channels] map, a block per (roi, 16 L
// channels, group of up to 64 bins), a team of 16 lanes (half a warp) per bin, L channels per lane (16 bytes of a
// pixel; the rule for when this kernel runs is common/roi_nhwc.h). CUDA only; no libtorch.
//
// A bin's samples form a grid (rows y_i x columns x_j), and a sample's bilinear weights are the product of a row
// weight and a column weight (common/bilinear.h, bilinear_axis). So the bin's sum over samples and taps is
//     sum over rows r and columns c of Wy(r) * Wx(c) * map[r, c],
// where Wy(r) adds the weights every sample row gives map row r (likewise Wx). Each map pixel the bin touches is
// read once, instead of once per tap of every sample that touches it: with the adaptive grid (a sample about
// every pixel) that is about 4x fewer reads. The row and column lists (merged taps, in sample order) live in
// shared memory: per roi when every bin has the roi's geometry (roi_align; when they fit), per team and bin otherwise
// (deform_roi_pool); the same lists give the same sums, so deform_roi_pool without offsets equals roi_align bit
// for bit. A bin whose grid has more than kMaxAxisSamples samples on a side falls back to the loop over samples
// and taps (bins over 32 pixels only).
//
// Bins: the op's policy (roi_align's RoiAlignBins, deform_roi_pool's DeformRoiBins):
//   using State = ...;  static constexpr bool kBinsShareGeometry;  the per-roi part; whether bin() ignores bin
//   __device__ State roi(std::int64_t k) const;                   reads roi k
//   __device__ std::int64_t batch(const State&) const;            its image, -1 when invalid
//   __device__ RoiAlignGeometry<Acc> bin(const State&, std::int64_t k, std::int64_t bin) const;
//   __device__ bool scales() const;  __device__ Acc scale(std::int64_t k, std::int64_t bin) const;
//   std::int64_t pooled_height, pooled_width;
// The bin's value is sum / count, times scale(k, bin) when scales().
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "common/bilinear.h"
#include "common/channels_last.cuh"
#include "common/kernel_launch.cuh"
#include "common/numeric.h"
#include "common/roi_args.h"
#include "common/roi_cuda.cuh"
#include "common/roi_nhwc.h"
#include "detops/core/cuda_check.h"
#include "roi_align/roi_align_kernel.cuh"

namespace detops {
namespace roi_nhwc_detail {

constexpr int kThreads = 256;
// Lanes per bin: a team reads 16 x 16 bytes of a pixel (two full 128-byte lines). Half a warp rather than a
// whole one so a block item's channel slice is 256 bytes of every pixel: items run slice by slice (below), and
// the slice of a 256-channel fp32 FPN P2 map of two 800x1344 images is then 34 MB, which the H200's L2 keeps
// between the overlapping rois that read it; with 32 lanes the 69 MB slice did not fit, and the box head's
// gather read the map about 7 times from DRAM (1.06 GB for a 138 MB map, measured with the metrics pass).
constexpr int kTeamLanes = 16;
constexpr int kTeams = kThreads / kTeamLanes;
constexpr int kTileLanes = kTeamLanes;
constexpr int kMaxAxisSamples = 32;  // per side of a bin's grid; lists hold 2 taps per sample
constexpr int kMaxAxisTaps = 2 * kMaxAxisSamples;

// One merged tap of an axis: the pixel offset along it (row * width * channels, or column * channels) and the
// summed weight.
template <typename Acc, typename Index>
struct AxisTap {
  Index offset;
  Acc weight;
};

template <typename Acc, typename Index>
struct AxisList {
  AxisTap<Acc, Index> taps[kMaxAxisTaps];
};

// Bins per block item: at most kItemBins, split evenly (item_bins): a roi's bins in one item up to 8 x 8 (the box
// head's 7 x 7), else in groups (the mask head's 14 x 14 in 4 of 49), so no block carries a large roi's many
// bins alone (with the adaptive grid a 100-pixel roi's bins cost 100x a small one's).
constexpr int kItemBins = 64;

__host__ __device__ constexpr int item_groups(int bins) { return (bins + kItemBins - 1) / kItemBins; }
__host__ __device__ constexpr int item_bins(int bins) { return (bins + item_groups(bins) - 1) / item_groups(bins); }

// The lists a block keeps: with Shared (every bin of a roi has the roi's geometry: roi_align, when the lists fit
// kSharedListBytes) one row list per bin row and one column list per bin column, built once per block item by
// pooled_height + pooled_width threads at once; else (deform_roi_pool) a row and a column list per team, rebuilt
// per bin by its lanes 0 and 1.
constexpr std::size_t kSharedListBytes = 48 * 1024;

template <typename Acc, typename Index>
std::size_t lists_bytes(bool shared, std::int64_t pooled_height, std::int64_t pooled_width) {
  const std::size_t lists = shared ? static_cast<std::size_t>(pooled_height + pooled_width) : 2 * kTeams;
  return lists * (sizeof(AxisList<Acc, Index>) + sizeof(int));
}

__host__ __device__ constexpr std::size_t align16(std::size_t n) { return (n + 15) / 16 * 16; }

// The shared memory of a block: the output tile ([item_bins][16 L + 1] of T), the lists, their tap counts.
template <int L, typename T, typename Index>
std::size_t block_bytes(bool shared, std::int64_t pooled_height, std::int64_t pooled_width) {
  const int per = item_bins(static_cast<int>(pooled_height * pooled_width));
  return align16(static_cast<std::size_t>(per) * (kTileLanes * L + 1) * sizeof(T)) +
         lists_bytes<acc_t<T>, Index>(shared, pooled_height, pooled_width);
}

// Appends tap (offset, w) to a list in sample order, adding it to an equal tap among the last two: consecutive
// samples share at most their two taps, so that merges every repeat.
template <typename Acc, typename Index>
__device__ __forceinline__ void push_tap(AxisTap<Acc, Index>* list, int& n, Index offset, Acc w) {
  if (n > 0 && list[n - 1].offset == offset) {
    list[n - 1].weight += w;
  } else if (n > 1 && list[n - 2].offset == offset) {
    list[n - 2].weight += w;
  } else {
    list[n].offset = offset;
    list[n].weight = w;
    ++n;
  }
}

// The merged taps of one axis of bin (ph, pw): rows (axis 0, offsets scaled by stride = width * channels) or
// columns (axis 1, stride = channels). The grid has at most kMaxAxisSamples samples on that side.
template <typename Acc, typename Index>
__device__ void build_axis(const RoiAlignGeometry<Acc>& g, int axis, Index ph, Index pw, Index extent, Index stride,
                           AxisTap<Acc, Index>* list, int* count) {
  const int samples = axis == 0 ? g.grid_h : g.grid_w;
  int n = 0;
  for (int i = 0; i < samples; ++i) {
    const Acc v = axis == 0 ? roi_align_sample_y(g, ph, i) : roi_align_sample_x(g, pw, i);
    const BilinearAxis<Acc, Index> a = bilinear_axis(v, extent);
    if (!a.valid) continue;
    push_tap(list, n, a.low * stride, a.w_low);
    push_tap(list, n, a.high * stride, a.w_high);
  }
  *count = n;
}

// L consecutive channels of one pixel: one 8- or 16-byte load when Vec (the channel count is a multiple of L
// and the map aligned to the load), else L loads of the channels below `valid`.
template <int L, bool Vec, typename T, typename Acc>
__device__ __forceinline__ void load_lane(const T* __restrict__ p, int valid, Acc (&v)[L]) {
  if constexpr (Vec && sizeof(T) * L == 16) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    T parts[L];
    std::memcpy(parts, &raw, sizeof(raw));
#pragma unroll
    for (int j = 0; j < L; ++j) v[j] = to_acc<Acc>(parts[j]);
  } else if constexpr (Vec && sizeof(T) * L == 8) {
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(p));
    T parts[L];
    std::memcpy(parts, &raw, sizeof(raw));
#pragma unroll
    for (int j = 0; j < L; ++j) v[j] = to_acc<Acc>(parts[j]);
  } else {
#pragma unroll
    for (int j = 0; j < L; ++j) v[j] = j < valid ? to_acc<Acc>(p[j]) : Acc(0);
  }
}

// sum += the bin's weighted pixels: rows x columns of the two lists, walked as one flat loop (kUnroll
// independent loads in flight), each pixel weighted by its row weight times its column weight.
template <int L, bool Vec, typename T, typename Acc, typename Index>
__device__ __forceinline__ void gather_lists(const T* __restrict__ image, int valid, const AxisTap<Acc, Index>* rows,
                                             int row_count, const AxisTap<Acc, Index>* cols, int col_count,
                                             Acc (&sum)[L]) {
  constexpr int kUnroll = 8;
  const int n = row_count * col_count;
  int r = 0, c = 0;
#pragma unroll kUnroll
  for (int i = 0; i < n; ++i) {
    const AxisTap<Acc, Index> row = rows[r], col = cols[c];
    Acc v[L];
    load_lane<L, Vec>(image + (row.offset + col.offset), valid, v);
    const Acc w = row.weight * col.weight;
#pragma unroll
    for (int j = 0; j < L; ++j) sum[j] += w * v[j];
    if (++c == col_count) {
      c = 0;
      ++r;
    }
  }
}

// Block item (tile, k, group) covers bins [b0, b1) (group of `per` bins) of roi k's channels [16 L tile,
// 16 L (tile + 1)); items run tile-major, so the blocks in flight read one slice of every pixel, which L2 keeps
// between the rois that overlap. Lane l of a team holds channels c0 + L l .. c0 + L l + L - 1. Team t (lanes
// 16 t .. 16 t + 15 of the block; a team never spans two warps) computes bins b0 + t, b0 + t + teams, ... into
// tile[bin - b0][c] (row pitch 16 L + 1); the team's own lanes are its only sync partners. Then the block writes
// output[k, c, b0 .. b1) for its channels. Pixel offsets are Index (32-bit when an image of the map has fewer
// than 2^31 elements); image offsets are 64-bit.
template <int L, bool Vec, bool kShared, typename T, typename Index, typename Bins>
__global__ void __launch_bounds__(kThreads)
    roi_bins_nhwc_kernel(Bins bins_of, RoiShape s, const T* __restrict__ input_nhwc, T* __restrict__ output,
                         unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  using List = AxisList<Acc, Index>;
  constexpr int kTileChannels = kTileLanes * L, kPitch = kTileChannels + 1;
  extern __shared__ __align__(16) unsigned char roi_nhwc_smem[];
  const int pooled_h = static_cast<int>(bins_of.pooled_height), pooled_w = static_cast<int>(bins_of.pooled_width);
  const int bins = pooled_h * pooled_w;
  const int groups = item_groups(bins), per = item_bins(bins);
  T* tile = reinterpret_cast<T*>(roi_nhwc_smem);
  const int list_count = kShared ? pooled_h + pooled_w : 2 * kTeams;
  List* lists = reinterpret_cast<List*>(roi_nhwc_smem + align16(static_cast<std::size_t>(per) * kPitch * sizeof(T)));
  int* tap_counts = reinterpret_cast<int*>(lists + list_count);
  const std::int64_t tiles = (s.channels + kTileChannels - 1) / kTileChannels;
  const std::int64_t items_per_tile = s.num_rois * groups;
  const int lane = static_cast<int>(threadIdx.x % kTeamLanes);
  const int team = static_cast<int>(threadIdx.x / kTeamLanes);
  const unsigned team_mask = ((1u << kTeamLanes) - 1u) << (threadIdx.x % 32 / kTeamLanes * kTeamLanes);
  const Index height = static_cast<Index>(s.height), width = static_cast<Index>(s.width);
  const Index channels = static_cast<Index>(s.channels);
  // The loop bounds depend only on blockIdx / gridDim, so every thread of a block reaches each barrier.
  for (std::int64_t item = blockIdx.x; item < items_per_tile * tiles; item += gridDim.x) {
    const std::int64_t t = item / items_per_tile, rest = item - t * items_per_tile, c0 = t * kTileChannels;
    const std::int64_t k = rest / groups;
    const int b0 = static_cast<int>(rest - k * groups) * per, b1 = b0 + per < bins ? b0 + per : bins;
    const int tile_channels = static_cast<int>(s.channels - c0 < kTileChannels ? s.channels - c0 : kTileChannels);
    const int valid = tile_channels - L * lane;  // channels of this lane inside the tile (<= 0: none)
    const auto state = bins_of.roi(k);
    const std::int64_t batch = bins_of.batch(state);
    if (batch < 0 && threadIdx.x == 0 && c0 == 0 && b0 == 0) report_first_invalid(first_invalid_roi, k);
    const T* image = batch < 0 ? nullptr : input_nhwc + batch * s.height * s.width * s.channels + c0 + L * lane;
    bool roi_lists = false;  // kShared: the roi's lists are built (its grid fits them)
    if constexpr (kShared) {
      if (image != nullptr) {
        const RoiAlignGeometry<Acc> g = bins_of.bin(state, k, 0);
        roi_lists = g.grid_h <= kMaxAxisSamples && g.grid_w <= kMaxAxisSamples;
        if (roi_lists) {
          for (int i = static_cast<int>(threadIdx.x); i < list_count; i += kThreads) {
            const int axis = i < pooled_h ? 0 : 1;
            build_axis(g, axis, static_cast<Index>(i), static_cast<Index>(i - pooled_h), axis == 0 ? height : width,
                       axis == 0 ? width * channels : channels, lists[i].taps, tap_counts + i);
          }
        }
      }
      __syncthreads();
    }
    for (int bin = b0 + team; bin < b1; bin += kTeams) {
      const int ph = bin / pooled_w, pw = bin - ph * pooled_w;
      Acc sum[L];
#pragma unroll
      for (int j = 0; j < L; ++j) sum[j] = Acc(0);
      Acc count = Acc(1);
      if (image != nullptr) {
        const RoiAlignGeometry<Acc> g = bins_of.bin(state, k, bin);
        count = g.count;
        bool separable = roi_lists;
        const List* rows = lists + ph;
        const List* cols = lists + pooled_h + pw;
        int row_count = 0, col_count = 0;
        if constexpr (kShared) {
          if (separable) {
            row_count = tap_counts[ph];
            col_count = tap_counts[pooled_h + pw];
          }
        } else {
          separable = g.grid_h <= kMaxAxisSamples && g.grid_w <= kMaxAxisSamples;
          rows = lists + 2 * team;
          cols = lists + 2 * team + 1;
          if (separable) {
            if (lane < 2) {
              build_axis(g, lane, static_cast<Index>(ph), static_cast<Index>(pw), lane == 0 ? height : width,
                         lane == 0 ? width * channels : channels, lists[2 * team + lane].taps,
                         tap_counts + 2 * team + lane);
            }
            __syncwarp(team_mask);
            row_count = tap_counts[2 * team];
            col_count = tap_counts[2 * team + 1];
          }
        }
        if (separable) {
          if (valid > 0) gather_lists<L, Vec>(image, valid, rows->taps, row_count, cols->taps, col_count, sum);
          if constexpr (!kShared) __syncwarp(team_mask);  // the team's lists are rebuilt for its next bin
        } else if (valid > 0) {
          // A grid of more than kMaxAxisSamples on a side: the loop over samples and their taps.
          roi_align_for_each_sample(g, height, width, static_cast<Index>(ph), static_cast<Index>(pw),
                                    [&](const BilinearTaps<Acc, Index>& tap) {
            Acc a[L], b[L], c[L], d[L];
            load_lane<L, Vec>(image + (tap.y_low * width + tap.x_low) * channels, valid, a);
            load_lane<L, Vec>(image + (tap.y_low * width + tap.x_high) * channels, valid, b);
            load_lane<L, Vec>(image + (tap.y_high * width + tap.x_low) * channels, valid, c);
            load_lane<L, Vec>(image + (tap.y_high * width + tap.x_high) * channels, valid, d);
#pragma unroll
            for (int j = 0; j < L; ++j) sum[j] += tap.w_ll * a[j] + tap.w_lh * b[j] + tap.w_hl * c[j] + tap.w_hh * d[j];
          });
        }
      }
      const Acc m = image != nullptr && bins_of.scales() ? bins_of.scale(k, bin) : Acc(1);
#pragma unroll
      for (int j = 0; j < L; ++j) {
        if (j < valid) {
          const Acc v = sum[j] / count;
          tile[(bin - b0) * kPitch + L * lane + j] = from_acc<T>(bins_of.scales() ? v * m : v);
        }
      }
    }
    __syncthreads();
    T* out = output + (k * s.channels + c0) * bins + b0;
    const int nb = b1 - b0, run = tile_channels * nb;
    for (int e = threadIdx.x; e < run; e += blockDim.x) {
      const int c = e / nb, b = e - c * nb;
      out[static_cast<std::int64_t>(c) * bins + b] = tile[b * kPitch + c];
    }
    __syncthreads();
  }
}

}  // namespace roi_nhwc_detail

// The map channels last (channels_last_map over the RoI shape).
template <typename T>
const T* roi_channels_last_input(const char* op, const void* input, bool input_channels_last, void* workspace,
                                 const RoiShape& s, cudaStream_t stream) {
  return channels_last_map<T>(op, input, input_channels_last, workspace, s.batch, s.channels, s.height * s.width,
                              stream);
}

// Runs the channels-last forward of `bins_of` (the policy above) over args' map (its channels-last copy made
// first when args holds a channels-first input and a workspace). Lanes load 16 bytes of a pixel.
template <typename T, typename Bins>
void launch_roi_bins_nhwc(const char* op, const Bins& bins_of, const RoiForwardArgs& args, cudaStream_t stream) {
  const RoiShape& s = args.shape;
  const std::int64_t bins = bins_of.pooled_height * bins_of.pooled_width;
  if (s.num_rois == 0 || s.channels == 0 || bins == 0) return;
  if (bins > std::numeric_limits<int>::max() / 2) throw std::invalid_argument(std::string(op) + ": too many bins");
  constexpr int L = roi_nhwc_lane_channels(sizeof(T));
  const T* input = roi_channels_last_input<T>(op, args.input, args.input_channels_last, args.channels_last_workspace,
                                              s, stream);
  const bool fits32 = s.height * s.width * s.channels < (std::int64_t{1} << 31);
  const bool vec = s.channels % L == 0 && reinterpret_cast<std::uintptr_t>(input) % (L * sizeof(T)) == 0;
  auto run = [&](auto index_tag) {
    using Index = typename decltype(index_tag)::type;
    const bool shared =
        Bins::kBinsShareGeometry &&
        roi_nhwc_detail::lists_bytes<acc_t<T>, Index>(true, bins_of.pooled_height, bins_of.pooled_width) <=
            roi_nhwc_detail::kSharedListBytes;
    using roi_nhwc_detail::roi_bins_nhwc_kernel;
    auto kernel = shared ? (vec ? &roi_bins_nhwc_kernel<L, true, true, T, Index, Bins>
                                : &roi_bins_nhwc_kernel<L, false, true, T, Index, Bins>)
                         : (vec ? &roi_bins_nhwc_kernel<L, true, false, T, Index, Bins>
                                : &roi_bins_nhwc_kernel<L, false, false, T, Index, Bins>);
    const std::size_t smem =
        roi_nhwc_detail::block_bytes<L, T, Index>(shared, bins_of.pooled_height, bins_of.pooled_width);
    if (smem > 48 * 1024) {
      DETOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    }
    const std::int64_t groups = roi_nhwc_detail::item_groups(static_cast<int>(bins));
    constexpr std::int64_t kTileChannels = roi_nhwc_detail::kTileLanes * L;
    const std::int64_t items = s.num_rois * groups * ((s.channels + kTileChannels - 1) / kTileChannels);
    const unsigned blocks = grid_for(items * roi_nhwc_detail::kThreads, roi_nhwc_detail::kThreads);
    kernel<<<blocks, roi_nhwc_detail::kThreads, smem, stream>>>(bins_of, s, input, static_cast<T*>(args.output),
                                                                 args.first_invalid_roi);
    DETOPS_CHECK_LAUNCH();
  };
  fits32 ? run(TypeTag<std::int32_t>{}) : run(TypeTag<std::int64_t>{});
}

// Registers the channels-last kernels of one (T, Index, Bins) for the kernel-image check.
template <typename T, typename Index, typename Bins>
void register_roi_bins_nhwc(const char* op, const std::string& targs) {
  constexpr int L = roi_nhwc_lane_channels(sizeof(T));
  const std::string l = std::to_string(L) + ", ";
  using roi_nhwc_detail::roi_bins_nhwc_kernel;
  register_instantiation(op, "roi_bins_nhwc_kernel", l + "true, false, " + targs,
                         &roi_bins_nhwc_kernel<L, true, false, T, Index, Bins>);
  register_instantiation(op, "roi_bins_nhwc_kernel", l + "false, false, " + targs,
                         &roi_bins_nhwc_kernel<L, false, false, T, Index, Bins>);
  if constexpr (Bins::kBinsShareGeometry) {
    register_instantiation(op, "roi_bins_nhwc_kernel", l + "true, true, " + targs,
                           &roi_bins_nhwc_kernel<L, true, true, T, Index, Bins>);
    register_instantiation(op, "roi_bins_nhwc_kernel", l + "false, true, " + targs,
                           &roi_bins_nhwc_kernel<L, false, true, T, Index, Bins>);
  }
}

}  // namespace detops
