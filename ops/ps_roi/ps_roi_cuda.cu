// ps_roi_align / ps_roi_pool CUDA kernels: a team of lanes per output (forward) or grad_output (backward) element.
//
// Element (k, c, i, j) reads (scatters to) its own input plane, channel c_in = (c * ph + i) * pw + j, so one thread
// per element had the 32 lanes of a warp on 32 planes: every load or atomic a separate sector. Here a warp works
// on one item, (roi k, a chunk of consecutive channels c_in), split into teams of T lanes (T a power of two,
// chosen per item from the width of the roi's bins): team t takes the chunk's elements t, t + 32 / T, ..., so the
// teams of a warp are neighbours in the output; within a team, the lanes take consecutive pixel columns of the bin
// and loop over its rows (and over further columns when the bin is wider than the team), so a team's loads and
// atomics hit consecutive addresses of one row. A team's partial sums are reduced with shuffles in a fixed order
// (the forward stays deterministic). The items' size and order (ItemPlan): the forward's chunks of 64 channels roi
// by roi; the backwards' chunks of 16 (ps_roi_align) and 8 (ps_roi_pool) chunk by chunk, every roi's first chunk
// first, so the atomics in flight fall on a few channels' planes and stay in L2 (H200, docs/ops/ps_roi.md).
//
// ps_roi_align reads each pixel a bin touches once (the separable form in ps_roi_kernel.cuh): the warp's lanes
// first build the roi's ph row lists and pw column lists of merged taps (one list per lane, in shared memory),
// then a pixel's weight is Wy(r) * Wx(c), and the backward adds grad / count * Wy(r) * Wx(c) to each touched pixel
// with one atomic. A roi with a list longer than kPsRoiAlignListTaps takes the loop over samples, the lanes of a team
// on consecutive samples of a sample row (so does every roi when ph + pw > 32, or when a block's lists would need
// more than 48 KB of shared memory: fp64 with ph + pw > 22).
// ps_roi_pool's bins are integer pixel ranges (ps_roi_pool_bin): the team sums (or scatters grad / area to) the
// bin's pixels, lanes on columns, a loop over rows.
//
// 64-bit plane and element offsets; in-plane offsets in Index (32-bit when a plane has fewer than 2^31 pixels).
// Half types accumulate in fp32; the backward adds into the fp32 (fp64 for fp64) grad_input_acc workspace.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "common/dispatch.h"
#include "common/kernel_launch.cuh"
#include "common/readonly_load.h"
#include "common/roi_cuda.cuh"
#include "detops/core/cuda_check.h"
#include "ps_roi/ps_roi_kernel.cuh"

namespace detops {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
// ps_roi_pool's forward (one thread per element): 256-thread blocks, 8 per SM (2048 threads, so at most 32
// registers a thread; the 32-bit-index kernels need no more, the 64-bit-index ones are held to it). The kernel waits
// on scattered loads: at 40 registers (75% occupancy) it ran 16% behind torchvision's on RPN proposals (ncu), at 32
// it is level there, but 11% slower than at 40 on larger boxes (rfcn_1000), where fewer resident threads keep more
// of each bin row in L1 (docs/ops/ps_roi.md, Execution).
constexpr int kPoolForwardThreads = 256;
constexpr int kPoolForwardMinBlocks = 8;
constexpr unsigned kFullMask = 0xffffffffu;
// ps_roi_align builds one list per lane: the roi's ph row lists and pw column lists, when ph + pw <= 32 and a
// block's lists fit kMaxListBytes (no opt-in to more shared memory: fp32 and the halves always; fp64, or Index
// int64, up to ph + pw = 22).
constexpr std::int64_t kMaxLists = 32;
constexpr std::size_t kMaxListBytes = 48 * 1024;

template <typename Acc, typename Index>
using Tap = PsRoiAxisTap<Acc, Index>;

// The smallest power of two >= v, in [1, 32]: the team size for bins `v` pixels wide.
__device__ __forceinline__ int team_size_for(std::int64_t v) {
  int t = 1;
  while (t < 32 && t < v) t <<= 1;
  return t;
}

// The lanes of this lane's team (teams of `team` lanes, aligned within the warp).
__device__ __forceinline__ unsigned team_mask(int team, int lane) {
  return team == 32 ? kFullMask : ((1u << team) - 1u) << (lane & ~(team - 1));
}

// The sum of v over a team, in every lane of it, in a fixed order.
template <typename Acc>
__device__ __forceinline__ Acc team_sum(Acc v, int team, unsigned mask) {
  for (int offset = team / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(mask, v, offset, team);
  return v;
}

__device__ __forceinline__ int warp_max(int v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const int o = __shfl_xor_sync(kFullMask, v, offset);
    v = o > v ? o : v;
  }
  return v;
}

// The warp items of a launch: roi k, channels [begin, end) of it. The loop bounds depend only on the warp's index,
// so every lane of a warp runs the same items (the __syncwarp / __any_sync calls below see the whole warp).
struct WarpItem {
  std::int64_t k;
  int begin, end;
  bool first;  // the roi's first chunk (reports an invalid batch index)
};

// How a launch splits its work into warp items: chunks of `chunk` consecutive channels of one roi, visited
// chunk-major (every roi's chunk 0, then every roi's chunk 1, ...) or roi-major.
struct ItemPlan {
  int chunk;
  bool chunk_major;
};

// The plans (H200, R-FCN shapes; docs/ops/ps_roi.md): the forward roi-major in chunks of 64 channels (a roi's lists
// serve 64 channels); the backwards' global-atomic kernels chunk-major, so that the warps resident at once scatter
// into the planes of a few channels (of every image), which stay in L2.
constexpr ItemPlan kAlignForwardPlan{64, false};
constexpr ItemPlan kAlignBackwardPlan{16, true};
constexpr ItemPlan kPoolBackwardPlan{8, true};

template <typename Body>
__device__ __forceinline__ void for_each_warp_item(const PsRoiShape& s, const ItemPlan& plan, Body&& body) {
  const std::int64_t chunk = plan.chunk;
  const std::int64_t chunks = (s.channels + chunk - 1) / chunk;
  const std::int64_t items = s.num_rois * chunks;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kWarps;
  for (std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; item < items;
       item += stride) {
    std::int64_t k, q;
    if (plan.chunk_major) {
      q = item / s.num_rois;
      k = item - q * s.num_rois;
    } else {
      k = item / chunks;
      q = item - k * chunks;
    }
    const std::int64_t begin = q * chunk, end = begin + chunk < s.channels ? begin + chunk : s.channels;
    body(WarpItem{k, static_cast<int>(begin), static_cast<int>(end), q == 0});
  }
}

// Channel c_in's bin (i, j): c_in = (c * ph + i) * pw + j (C_in < 2^31).
struct Bin {
  int y, x, out_channel;
};

__device__ __forceinline__ Bin bin_of(int c_in, int pooled_height, int pooled_width) {
  const int row = c_in / pooled_width;
  const int c = row / pooled_height;
  return Bin{row - c * pooled_height, c_in - row * pooled_width, c};
}

// ps_roi_align's per-warp shared memory: kMaxLists (at most) lists of kPsRoiAlignListTaps taps, then their counts.
template <typename Acc, typename Index>
__host__ __device__ constexpr std::size_t align_warp_bytes(std::int64_t lists) {
  const std::size_t taps = static_cast<std::size_t>(lists) * kPsRoiAlignListTaps * sizeof(Tap<Acc, Index>);
  return (taps + static_cast<std::size_t>(lists) * sizeof(int) + 15) / 16 * 16;
}

// The lists per warp ps_roi_align asks for (0: none).
std::int64_t align_lists(const PsRoiAlignParams& p) {
  return p.pooled_height + p.pooled_width <= kMaxLists ? p.pooled_height + p.pooled_width : 0;
}

// The item's lists: lane l < ph builds row list l (bin row l, pos = row * width), lane ph + j column list j.
// fit: every list fit (warp-uniform); max_cols: the longest column list.
struct ListsBuilt {
  bool fit;
  int max_cols;
};

template <typename Acc, typename Index>
__device__ __forceinline__ ListsBuilt build_align_lists(const PsRoiAlignGeometry<Acc>& g, int lane, int pooled_height,
                                                        int pooled_width, Index height, Index width,
                                                        Tap<Acc, Index>* lists, int* counts) {
  int n = 0;
  if (lane < pooled_height) {
    n = ps_roi_align_axis_taps(g.start_y, g.bin_h, g.grid_h, lane, height, width,
                               lists + static_cast<std::ptrdiff_t>(lane) * kPsRoiAlignListTaps, kPsRoiAlignListTaps);
  } else if (lane < pooled_height + pooled_width) {
    n = ps_roi_align_axis_taps(g.start_x, g.bin_w, g.grid_w, lane - pooled_height, width, Index(1),
                               lists + static_cast<std::ptrdiff_t>(lane) * kPsRoiAlignListTaps, kPsRoiAlignListTaps);
  }
  if (lane < pooled_height + pooled_width) counts[lane] = n;
  const bool fit = !__any_sync(kFullMask, n < 0);
  const int max_cols = warp_max(lane >= pooled_height ? n : 0);
  __syncwarp();
  return ListsBuilt{fit, max_cols};
}

// The team's share of bin (bin.y, bin.x)'s separable sum: lanes on columns, a loop over rows.
template <typename T, typename Acc, typename Index>
__device__ __forceinline__ Acc align_list_sum(const T* __restrict__ plane, const Tap<Acc, Index>* rows, int row_count,
                                              const Tap<Acc, Index>* cols, int col_count, int team, int team_lane) {
  Acc sum = 0;
  for (int ci = team_lane; ci < col_count; ci += team) {
    const Tap<Acc, Index> col = cols[ci];
    const T* column = plane + col.pos;
#pragma unroll 4
    for (int ri = 0; ri < row_count; ++ri) {
      const Tap<Acc, Index> row = rows[ri];
      sum += (row.weight * col.weight) * to_acc<Acc>(load_readonly(column + row.pos));
    }
  }
  return sum;
}

// The per-sample form of a bin (lists too long): the team's lanes on consecutive samples of each sample row.
template <typename T, typename Acc, typename Index>
__device__ __forceinline__ Acc align_sample_sum(const PsRoiAlignGeometry<Acc>& g, const T* __restrict__ plane,
                                                Index height, Index width, int i, int j, int team, int team_lane) {
  Acc sum = 0;
  for (std::int64_t iy = 0; iy < g.grid_h; ++iy) {
    const BilinearAxis<Acc, Index> ay = bilinear_axis(ps_roi_align_sample_y(g, i, iy), height);
    if (!ay.valid) continue;
    const T* low = plane + ay.low * width;
    const T* high = plane + ay.high * width;
    for (std::int64_t ix = team_lane; ix < g.grid_w; ix += team) {
      const BilinearAxis<Acc, Index> ax = bilinear_axis(ps_roi_align_sample_x(g, j, ix), width);
      if (!ax.valid) continue;
      sum += (ay.w_low * ax.w_low) * to_acc<Acc>(load_readonly(low + ax.low)) +
             (ay.w_low * ax.w_high) * to_acc<Acc>(load_readonly(low + ax.high)) +
             (ay.w_high * ax.w_low) * to_acc<Acc>(load_readonly(high + ax.low)) +
             (ay.w_high * ax.w_high) * to_acc<Acc>(load_readonly(high + ax.high));
    }
  }
  return sum;
}

template <typename Acc, typename Index>
__device__ __forceinline__ void align_list_scatter(Acc* __restrict__ plane, Acc g_per_sample,
                                                   const Tap<Acc, Index>* rows, int row_count,
                                                   const Tap<Acc, Index>* cols, int col_count, int team, int team_lane) {
  for (int ci = team_lane; ci < col_count; ci += team) {
    const Tap<Acc, Index> col = cols[ci];
    Acc* column = plane + col.pos;
    const Acc gc = g_per_sample * col.weight;
#pragma unroll 4
    for (int ri = 0; ri < row_count; ++ri) {
      const Tap<Acc, Index> row = rows[ri];
      atomicAdd(column + row.pos, gc * row.weight);
    }
  }
}

template <typename Acc, typename Index>
__device__ __forceinline__ void align_sample_scatter(const PsRoiAlignGeometry<Acc>& g, Acc* __restrict__ plane,
                                                     Acc g_per_sample, Index height, Index width, int i, int j,
                                                     int team, int team_lane) {
  for (std::int64_t iy = 0; iy < g.grid_h; ++iy) {
    const BilinearAxis<Acc, Index> ay = bilinear_axis(ps_roi_align_sample_y(g, i, iy), height);
    if (!ay.valid) continue;
    Acc* low = plane + ay.low * width;
    Acc* high = plane + ay.high * width;
    for (std::int64_t ix = team_lane; ix < g.grid_w; ix += team) {
      const BilinearAxis<Acc, Index> ax = bilinear_axis(ps_roi_align_sample_x(g, j, ix), width);
      if (!ax.valid) continue;
      atomicAdd(low + ax.low, g_per_sample * (ay.w_low * ax.w_low));
      atomicAdd(low + ax.high, g_per_sample * (ay.w_low * ax.w_high));
      atomicAdd(high + ax.low, g_per_sample * (ay.w_high * ax.w_low));
      atomicAdd(high + ax.high, g_per_sample * (ay.w_high * ax.w_high));
    }
  }
}

// The team of one item: team size, this lane's team and place in it, the team's lanes.
struct Team {
  int size, index, lane, count;  // count: teams per warp
  unsigned mask;
};

__device__ __forceinline__ Team team_of(int size, int lane) {
  return Team{size, lane / size, lane % size, 32 / size, team_mask(size, lane)};
}

// This warp's lists in the block's dynamic shared memory (align_warp_bytes per warp; none without use_lists): list l
// at l * kPsRoiAlignListTaps taps, then the lists' counts. Bin row i's list is list i, bin column j's list ph + j.
template <typename Acc, typename Index>
struct WarpLists {
  Tap<Acc, Index>* taps;
  int* counts;
  int ph;
  __device__ Tap<Acc, Index>* list(int l) const { return taps + static_cast<std::ptrdiff_t>(l) * kPsRoiAlignListTaps; }
  __device__ const Tap<Acc, Index>* row(int i) const { return list(i); }
  __device__ const Tap<Acc, Index>* column(int j) const { return list(ph + j); }
  __device__ int row_count(int i) const { return counts[i]; }
  __device__ int column_count(int j) const { return counts[ph + j]; }
};

template <typename Acc, typename Index>
__device__ __forceinline__ WarpLists<Acc, Index> warp_lists(unsigned char* smem, bool use_lists,
                                                            const PsRoiAlignParams& p) {
  const int per_warp = use_lists ? static_cast<int>(p.pooled_height + p.pooled_width) : 0;
  unsigned char* mine = smem + (threadIdx.x / 32) * align_warp_bytes<Acc, Index>(per_warp);
  Tap<Acc, Index>* taps = reinterpret_cast<Tap<Acc, Index>*>(mine);
  int* counts = reinterpret_cast<int*>(taps + static_cast<std::ptrdiff_t>(per_warp) * kPsRoiAlignListTaps);
  return WarpLists<Acc, Index>{taps, counts, static_cast<int>(p.pooled_height)};
}

// How an item of ps_roi_align runs: separable (its lists built and fitting) or per sample, and its teams: as wide
// as the longest column list, or per sample as the grid.
struct AlignItem {
  bool separable;
  Team team;
};

template <typename Acc, typename Index>
__device__ __forceinline__ AlignItem align_item_setup(const PsRoiAlignParams& p, const PsRoiAlignGeometry<Acc>& g,
                                                      bool use_lists, int lane, Index height, Index width,
                                                      const WarpLists<Acc, Index>& lists) {
  ListsBuilt built{false, 0};
  if (use_lists) {
    built = build_align_lists(g, lane, static_cast<int>(p.pooled_height), static_cast<int>(p.pooled_width), height,
                              width, lists.taps, lists.counts);
  }
  const bool separable = use_lists && built.fit;
  return AlignItem{separable, team_of(team_size_for(separable ? built.max_cols : g.grid_w), lane)};
}

template <typename T, typename Index>
__global__ void __launch_bounds__(kThreads)
    ps_roi_align_forward_kernel(PsRoiAlignParams p, PsRoiShape s, ItemPlan plan, bool use_lists,
                                const T* __restrict__ input, const T* __restrict__ rois, T* __restrict__ output,
                                std::int32_t* __restrict__ channel_mapping,
                                unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  extern __shared__ __align__(16) unsigned char ps_roi_smem[];
  const int lane = static_cast<int>(threadIdx.x % 32);
  const WarpLists<Acc, Index> lists = warp_lists<Acc, Index>(ps_roi_smem, use_lists, p);
  const Index height = static_cast<Index>(s.height), width = static_cast<Index>(s.width);
  const int ph = static_cast<int>(p.pooled_height), pw = static_cast<int>(p.pooled_width);
  for_each_warp_item(s, plan, [&](const WarpItem& item) {
    const std::int64_t base = item.k * s.channels;
    for (int e = item.begin + lane; e < item.end; e += 32) channel_mapping[base + e] = e;
    const PsRoiAlignGeometry<Acc> g = ps_roi_align_geometry<T, Acc>(p, rois + item.k * 5, s.batch);
    if (g.batch < 0) {
      for (int e = item.begin + lane; e < item.end; e += 32) output[base + e] = from_acc<T>(Acc(0));
      if (item.first && lane == 0) report_first_invalid(first_invalid_roi, item.k);
      return;
    }
    const AlignItem setup = align_item_setup(p, g, use_lists, lane, height, width, lists);
    const bool separable = setup.separable;
    const Team team = setup.team;
    const T* image = input + g.batch * s.channels * s.height * s.width;
    for (int e = item.begin + team.index; e < item.end; e += team.count) {
      const Bin bin = bin_of(e, ph, pw);
      const T* plane = image + static_cast<std::int64_t>(e) * s.height * s.width;
      Acc sum = 0;
      if (g.count != Acc(0)) {
        sum = separable ? align_list_sum(plane, lists.row(bin.y), lists.row_count(bin.y), lists.column(bin.x),
                                         lists.column_count(bin.x), team.size, team.lane)
                        : align_sample_sum(g, plane, height, width, bin.y, bin.x, team.size, team.lane);
      }
      sum = team_sum(sum, team.size, team.mask);
      if (team.lane == 0) output[base + e] = from_acc<T>(g.count == Acc(0) ? ps_roi_quiet_nan<Acc>() : sum / g.count);
    }
    __syncwarp();  // the lists are rebuilt for the warp's next item
  });
}

template <typename T, typename Index>
__global__ void __launch_bounds__(kThreads)
    ps_roi_align_backward_kernel(PsRoiAlignParams p, PsRoiShape s, ItemPlan plan, bool use_lists,
                                 const T* __restrict__ grad_output, RoiGradStrides go, const T* __restrict__ rois,
                                 acc_t<T>* __restrict__ grad_input,
                                 unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  extern __shared__ __align__(16) unsigned char ps_roi_smem[];
  const int lane = static_cast<int>(threadIdx.x % 32);
  const WarpLists<Acc, Index> lists = warp_lists<Acc, Index>(ps_roi_smem, use_lists, p);
  const Index height = static_cast<Index>(s.height), width = static_cast<Index>(s.width);
  const int ph = static_cast<int>(p.pooled_height), pw = static_cast<int>(p.pooled_width);
  for_each_warp_item(s, plan, [&](const WarpItem& item) {
    const PsRoiAlignGeometry<Acc> g = ps_roi_align_geometry<T, Acc>(p, rois + item.k * 5, s.batch);
    if (g.batch < 0) {
      if (item.first && lane == 0) report_first_invalid(first_invalid_roi, item.k);
      return;
    }
    if (g.count == Acc(0)) return;  // no samples: nothing flows back
    const AlignItem setup = align_item_setup(p, g, use_lists, lane, height, width, lists);
    const bool separable = setup.separable;
    const Team team = setup.team;
    Acc* image = grad_input + g.batch * s.channels * s.height * s.width;
    for (int e = item.begin + team.index; e < item.end; e += team.count) {
      const Bin bin = bin_of(e, ph, pw);
      Acc* plane = image + static_cast<std::int64_t>(e) * s.height * s.width;
      const Acc g_per_sample = to_acc<Acc>(grad_output[go.offset(item.k, bin.out_channel, bin.y, bin.x)]) / g.count;
      if (separable) {
        align_list_scatter(plane, g_per_sample, lists.row(bin.y), lists.row_count(bin.y), lists.column(bin.x),
                           lists.column_count(bin.x), team.size, team.lane);
      } else {
        align_sample_scatter(g, plane, g_per_sample, height, width, bin.y, bin.x, team.size, team.lane);
      }
    }
    __syncwarp();
  });
}

// ps_roi_pool: the team size from the roi's bin width (at most roi_w / pw + 2 columns before clipping).
__device__ __forceinline__ Team pool_team(const PsRoiPoolGeometry& g, const PsRoiShape& s, std::int64_t pooled_width,
                                          int lane) {
  std::int64_t cols = g.valid ? g.roi_w / pooled_width + 2 : 1;
  if (cols > s.width) cols = s.width;
  return team_of(team_size_for(cols), lane);
}

// ps_roi_pool's forward stays one thread per output element (pw fastest), summing its bin row by row
// (ps_roi_pool_bin_average's order, the CPU's): on the H200's R-FCN proposals (2000 rois, 490 channels, 7x7) it ran
// 0.141 ms fp32 against 0.241 ms for the team form the backward uses (an average bin is 5 x 5 pixels: too few
// columns for a team to amortize its shuffles and per-element setup). The kernel waits on scattered loads, so it
// wants every warp slot of the SM: 256 threads x 8 blocks, at most 32 registers, which the default bins' kernel
// meets without spilling (fp64 with 64-bit indices spills a few bytes) once exact_bins is a template constant
// (exact_bins' 64-bit divisions would spill: that one runs at the registers it needs). Element and in-plane indices in Index (32-bit when they fit, so splitting an
// element into roi and bin takes no 64-bit division). Reading a bin row in aligned 16-byte packs instead spilled at
// 32 registers and ran slower in fp32 (ncu, the same proposals: 174 us against 168 us at 40 registers).
template <typename T, typename Index, bool kExactBins>
__global__ void __launch_bounds__(kPoolForwardThreads, kExactBins ? 1 : kPoolForwardMinBlocks)
    ps_roi_pool_forward_kernel(PsRoiPoolParams p, PsRoiShape s, const T* __restrict__ input,
                               const T* __restrict__ rois, T* __restrict__ output,
                               std::int32_t* __restrict__ channel_mapping,
                               unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  p.exact_bins = kExactBins;  // a constant: the default bins' kernel holds no 64-bit division
  const Index channels = static_cast<Index>(s.channels);
  const std::int64_t plane = s.height * s.width;
  const int ph = static_cast<int>(p.pooled_height), pw = static_cast<int>(p.pooled_width);
  grid_stride_for<Index>(static_cast<Index>(s.num_rois) * channels, [&](Index i) {
    const Index k = i / channels;
    const int c_in = static_cast<int>(i - k * channels);
    channel_mapping[i] = c_in;
    const PsRoiPoolGeometry g = PsRoiPoolMath::geometry(p, rois + static_cast<std::int64_t>(k) * 5, s.batch);
    if (g.batch < 0) {
      output[i] = from_acc<T>(Acc(0));
      return report_first_invalid(first_invalid_roi, k);
    }
    const Bin bin = bin_of(c_in, ph, pw);
    const PsRoiPoolBin b = ps_roi_pool_bin<Acc>(p, g, s.height, s.width, bin.y, bin.x, PsRoiPoolPass::kForward);
    if (b.empty()) {
      output[i] = from_acc<T>(Acc(0));
      return;
    }
    const T* rows = input + (g.batch * s.channels + c_in) * plane;
    const Index width = static_cast<Index>(s.width);
    Acc sum = 0;
    for (Index y = static_cast<Index>(b.rows.begin); y < static_cast<Index>(b.rows.end); ++y) {
      for (Index x = static_cast<Index>(b.cols.begin); x < static_cast<Index>(b.cols.end); ++x) {
        sum += to_acc<Acc>(rows[y * width + x]);
      }
    }
    output[i] = from_acc<T>(sum / static_cast<Acc>(b.area()));
  });
}

template <typename T, typename Index>
__global__ void __launch_bounds__(kThreads)
    ps_roi_pool_backward_kernel(PsRoiPoolParams p, PsRoiShape s, ItemPlan plan, bool, const T* __restrict__ grad_output,
                                RoiGradStrides go, const T* __restrict__ rois, acc_t<T>* __restrict__ grad_input,
                                unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const Index width = static_cast<Index>(s.width);
  const int ph = static_cast<int>(p.pooled_height), pw = static_cast<int>(p.pooled_width);
  for_each_warp_item(s, plan, [&](const WarpItem& item) {
    const PsRoiPoolGeometry g = ps_roi_pool_geometry<T, Acc>(p, rois + item.k * 5, s.batch);
    if (g.batch < 0) {
      if (item.first && lane == 0) report_first_invalid(first_invalid_roi, item.k);
      return;
    }
    if (!g.valid) return;  // a NaN coordinate: every bin is empty
    const Team team = pool_team(g, s, p.pooled_width, lane);
    Acc* image = grad_input + g.batch * s.channels * s.height * s.width;
    for (int e = item.begin + team.index; e < item.end; e += team.count) {
      const Bin bin = bin_of(e, ph, pw);
      const PsRoiPoolBin b = ps_roi_pool_bin<Acc>(p, g, s.height, s.width, bin.y, bin.x, PsRoiPoolPass::kBackward);
      if (b.empty()) continue;
      const Acc share = to_acc<Acc>(grad_output[go.offset(item.k, bin.out_channel, bin.y, bin.x)]) /
                        static_cast<Acc>(b.area());
      Acc* plane = image + static_cast<std::int64_t>(e) * s.height * s.width;
      const Index r0 = static_cast<Index>(b.rows.begin), r1 = static_cast<Index>(b.rows.end);
      const Index c1 = static_cast<Index>(b.cols.end);
      for (Index c = static_cast<Index>(b.cols.begin) + team.lane; c < c1; c += team.size) {
        Acc* column = plane + c;
#pragma unroll 4
        for (Index r = r0; r < r1; ++r) atomicAdd(column + r * width, share);
      }
    }
  });
}

// kernel<<<blocks, kThreads, smem, stream>>>(args...), each argument as the kernel's parameter type (kernel_arg).
template <typename... Params, typename... Args>
void launch_with_smem(void (*kernel)(Params...), unsigned blocks, std::size_t smem, cudaStream_t stream,
                      const Args&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "one argument per kernel parameter");
  kernel<<<blocks, kThreads, smem, stream>>>(kernel_arg<Params>(args)...);
  DETOPS_CHECK_LAUNCH();
}

// Launch: warps over (roi, chunk) items, grid_for's cap on blocks; Index by the plane size. The kernels take
// (params, shape, plan, use_lists, args...): use_lists when the op asks for lists_per_warp > 0 lists and a block's fit
// kMaxListBytes of dynamic shared memory (ps_roi_align; ps_roi_pool asks for none).
template <typename Params, typename KernelOf, typename... Args>
void launch_items(const char* what, DType dtype, const Params& params, const PsRoiShape& s, ItemPlan plan,
                  std::int64_t lists_per_warp, cudaStream_t stream, KernelOf&& kernel_of, const Args&... args) {
  const std::int64_t items = s.num_rois * ((s.channels + plan.chunk - 1) / plan.chunk);
  if (items == 0) return;
  const bool fits32 = s.height * s.width < (std::int64_t{1} << 31);
  dispatch_floating(dtype, what, [&](auto tag) {
    using T = type_of<decltype(tag)>;
    auto run = [&](auto index_tag) {
      using Index = type_of<decltype(index_tag)>;
      const std::size_t bytes = lists_per_warp > 0 ? kWarps * align_warp_bytes<acc_t<T>, Index>(lists_per_warp) : 0;
      const bool lists = lists_per_warp > 0 && bytes <= kMaxListBytes;
      launch_with_smem(kernel_of(tag, index_tag), grid_for(items * 32, kThreads), lists ? bytes : 0, stream, params, s,
                       plan, lists, args...);
    };
    fits32 ? run(TypeTag<std::int32_t>{}) : run(TypeTag<std::int64_t>{});
  });
}

}  // namespace

void launch_ps_roi_align_forward(const PsRoiAlignParams& params, const PsRoiForwardArgs& args, DType dtype,
                                 cudaStream_t stream) {
  launch_items("ps_roi_align_forward", dtype, params, args.shape, kAlignForwardPlan, align_lists(params), stream,
               [](auto t, auto i) { return &ps_roi_align_forward_kernel<type_of<decltype(t)>, type_of<decltype(i)>>; },
               args.input, args.rois, args.output, args.channel_mapping, args.first_invalid_roi);
}

void launch_ps_roi_align_backward(const PsRoiAlignParams& params, const PsRoiBackwardArgs& args, DType dtype,
                                  cudaStream_t stream) {
  launch_items("ps_roi_align_backward", dtype, params, args.shape, kAlignBackwardPlan, align_lists(params), stream,
               [](auto t, auto i) { return &ps_roi_align_backward_kernel<type_of<decltype(t)>, type_of<decltype(i)>>; },
               args.grad_output, roi_grad_strides(args), args.rois, args.grad_input_acc, args.first_invalid_roi);
}

void launch_ps_roi_pool_forward(const PsRoiPoolParams& params, const PsRoiForwardArgs& args, DType dtype,
                                cudaStream_t stream) {
  const PsRoiShape& s = args.shape;
  const bool fits = s.height * s.width < (std::int64_t{1} << 31);  // in-plane offsets (and elements: launch_index_width)
  launch_roi_indexed("ps_roi_pool_forward", dtype, s.num_rois * s.channels, kPoolForwardThreads, fits, stream,
                     [exact = params.exact_bins](auto t, auto i) {
                       using T = type_of<decltype(t)>;
                       using Index = type_of<decltype(i)>;
                       return exact ? &ps_roi_pool_forward_kernel<T, Index, true>
                                    : &ps_roi_pool_forward_kernel<T, Index, false>;
                     },
                     params, s, args.input, args.rois, args.output, args.channel_mapping, args.first_invalid_roi);
}

void launch_ps_roi_pool_backward(const PsRoiPoolParams& params, const PsRoiBackwardArgs& args, DType dtype,
                                 cudaStream_t stream) {
  launch_items("ps_roi_pool_backward", dtype, params, args.shape, kPoolBackwardPlan, 0, stream,
               [](auto t, auto i) { return &ps_roi_pool_backward_kernel<type_of<decltype(t)>, type_of<decltype(i)>>; },
               args.grad_output, roi_grad_strides(args), args.rois, args.grad_input_acc, args.first_invalid_roi);
}

namespace {

const bool kRegistered = for_each_floating_and_index_type([](auto t, auto i, const std::string& targs) {
  using T = typename decltype(t)::type;
  using Index = typename decltype(i)::type;
  register_instantiation("ps_roi_align", "ps_roi_align_forward_kernel", targs, &ps_roi_align_forward_kernel<T, Index>);
  register_instantiation("ps_roi_align", "ps_roi_align_backward_kernel", targs, &ps_roi_align_backward_kernel<T, Index>);
  register_instantiation("ps_roi_pool", "ps_roi_pool_forward_kernel", targs + ",false",
                         &ps_roi_pool_forward_kernel<T, Index, false>);
  register_instantiation("ps_roi_pool", "ps_roi_pool_forward_kernel", targs + ",true",
                         &ps_roi_pool_forward_kernel<T, Index, true>);
  register_instantiation("ps_roi_pool", "ps_roi_pool_backward_kernel", targs, &ps_roi_pool_backward_kernel<T, Index>);
});

}  // namespace
}  // namespace detops
