// CARAFE CUDA kernels over the per-element math of carafe_kernel.cuh, each element the same fixed-order sum as
// the CPU's (taps row-major, then (dy, dx); channels in order); 64-bit indices, grid-stride loops, no atomics.
// - forward (tiled): a block of 256 threads covers a tile of `rows` x 32 source pixels (rows 4, 2 or 1: the
//   tallest whose shared memory fits 100 KB) of one group of one image, kThreads / (rows 32) threads per pixel.
//   Per pass (4 of a source pixel's s s outputs; one pass at s <= 2) the block stages the tile's mask values of
//   every tap once, then, per chunk of channels, the chunk's feature window (tile widened by r, zeros off the
//   map), both in acc_t<T>. Each thread accumulates its pixel's 4 outputs for up to 8 channels (4 in fp64) from
//   shared memory: per tap 4 mask and 8 feature loads feed 32 FMAs, and every mask value is read from global
//   memory once per pass. A group's chunks are split over several blocks only where the map has too few tiles
//   to fill the device. Where nothing fits (kernel_size or scale_factor in the hundreds), the untiled per-item
//   kernel (the CPU's work items) runs instead.
// - features' gradient: a thread per (image, group, chunk of channels, feature pixel), a gather (no atomics).
// - masks' gradient: a block per tile of kMaskTile output pixels of one row (image, group, y); its threads run
//   over the tile's k k x kMaskTile mask elements, tap-major, so a warp writes neighbouring mask elements.
// Tiled shared-memory versions of the two backward kernels (a staged grad window; feature windows streamed per
// channel) took 2.2 ms at P3 -> P2 fp32 on an H100, against 1.0 ms for these on an H200 (similar GPUs), and
// were removed; the backward's speed is open work (docs/ops/carafe.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "carafe/carafe_kernel.cuh"
#include "common/kernel_launch.cuh"

namespace detops {
namespace {

constexpr int kThreads = 256;
constexpr int kTileCols = 32;                    // source pixels per tile row: a warp's pixels are one row
constexpr int kOutputsPerPass = 4;               // of a source pixel's s s outputs, per pass (forward)
constexpr std::int64_t kMaskTile = 32;           // output pixels per block of the masks' gradient kernel
constexpr std::int64_t kSmemBudget = 100 * 1024;  // shared memory per forward block (opt-in past 48 KB)

// Channels one thread accumulates per staged chunk (registers: kOutputsPerPass accumulators each).
template <typename T> struct ChannelsPerThread { static constexpr int value = 8; };
template <> struct ChannelsPerThread<double> { static constexpr int value = 4; };

// The forward's tiled launch. A tile is `rows` x kTileCols source pixels of one group of one image, `lanes`
// = kThreads / (rows kTileCols) threads per pixel, each accumulating `per_thread` channels of a chunk of
// chunk = lanes per_thread channels (channel lane + lanes q, q < per_thread). Shared memory: the masks of a
// pass (taps x outputs x tile pixels, staged once per pass) and one chunk's feature window (win_rows x
// win_cols pixels per channel). A block item is (image, group, split, tile): `splits` blocks share a group's
// chunks, so small maps still fill the device.
struct CarafeTiles {
  CarafeGeometry g;
  int rows = 0;           // 0: nothing fits the budget (the untiled kernel runs)
  int lanes = 0, per_thread = 0, chunk = 0;
  int outputs = 0;        // outputs per pass, min(kOutputsPerPass, s s); the masks keep kOutputsPerPass slots
  int win_rows = 0, win_cols = 0;
  std::int64_t chunks = 0, splits = 0, chunks_per_split = 0;
  std::int64_t tile_cols = 0, tiles = 0;
  std::size_t mask_elems = 0, smem = 0;
  __host__ __device__ int pixels() const { return rows * kTileCols; }
  __host__ __device__ int plane() const { return win_rows * win_cols; }
  __host__ __device__ std::int64_t items() const { return g.n * g.groups * splits * tiles; }
};

// The most shared memory one block of this device may opt in to.
std::int64_t current_device_smem_optin() {
  int device = 0, bytes = 0;
  DETOPS_CUDA_CHECK(cudaGetDevice(&device));
  DETOPS_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return bytes;
}

// The forward's tiling of g, per_thread channels per thread, acc_size-byte values: the tallest tile (4, 2, then
// 1 row) whose shared memory fits `budget` bytes, else a 1-row tile within `max_budget` (the device's opt-in
// limit); one split (choose_splits sets them for the device).
CarafeTiles carafe_tiles(const CarafeGeometry& g, int per_thread, std::size_t acc_size, std::int64_t budget,
                         std::int64_t max_budget) {
  CarafeTiles t;
  t.g = g;
  if (g.k > 1024 || g.scale > 1024) return t;  // no window of that size fits: fallback
  const std::int64_t acc = static_cast<std::int64_t>(acc_size);
  auto bytes_of = [&](int rows) {
    const std::int64_t pixels = rows * kTileCols, lanes = kThreads / pixels;
    const std::int64_t window = (rows + 2 * g.r) * (kTileCols + 2 * g.r);
    return (g.taps * kOutputsPerPass * pixels + lanes * per_thread * window) * acc;
  };
  for (int rows = 4; rows >= 1 && t.rows == 0; rows /= 2) {
    if (bytes_of(rows) <= budget) t.rows = rows;
  }
  if (t.rows == 0 && bytes_of(1) <= max_budget) t.rows = 1;
  if (t.rows == 0) return t;
  const std::int64_t pixels = t.rows * kTileCols;
  t.lanes = static_cast<int>(kThreads / pixels);
  t.per_thread = per_thread;
  t.chunk = t.lanes * per_thread;
  t.outputs = static_cast<int>(std::min<std::int64_t>(kOutputsPerPass, g.scale * g.scale));
  t.win_rows = static_cast<int>(t.rows + 2 * g.r);
  t.win_cols = static_cast<int>(kTileCols + 2 * g.r);
  t.mask_elems = static_cast<std::size_t>(g.taps * kOutputsPerPass * pixels);
  t.smem = static_cast<std::size_t>(bytes_of(t.rows));
  t.tile_cols = (g.w + kTileCols - 1) / kTileCols;
  t.tiles = ((g.h + t.rows - 1) / t.rows) * t.tile_cols;
  t.chunks = (g.group_channels + t.chunk - 1) / t.chunk;
  if (t.chunks == 0) return t;  // no channels: no items
  t.splits = 1;
  t.chunks_per_split = t.chunks;
  return t;
}

// Splits a group's chunks over blocks for `concurrent` resident blocks: the split whose items, in whole waves
// of `concurrent`, finish first, a block costing its chunks plus one for staging the masks (a map with few
// tiles gets more splits; one whose tiles just overflow a wave gets enough to even out the last wave).
void choose_splits(CarafeTiles& t, std::int64_t concurrent) {
  const std::int64_t blocks = t.g.n * t.g.groups * t.tiles;
  if (t.chunks == 0 || blocks == 0) return;
  concurrent = std::max<std::int64_t>(1, concurrent);
  std::int64_t best = -1;
  for (std::int64_t tried = 1; tried <= t.chunks; ++tried) {
    const std::int64_t per = (t.chunks + tried - 1) / tried, splits = (t.chunks + per - 1) / per;
    const std::int64_t waves = (blocks * splits + concurrent - 1) / concurrent, cost = waves * (per + 1);
    if (best < 0 || cost < best) {
      best = cost;
      t.splits = splits;
      t.chunks_per_split = per;
    }
  }
}

template <typename Acc>
__device__ __forceinline__ Acc* shared_window() {
  extern __shared__ __align__(16) unsigned char carafe_smem[];
  return reinterpret_cast<Acc*>(carafe_smem);
}

// Elements a thread loads before it stores any (the staging loops keep kStageBatch global loads in flight
// instead of waiting for each).
constexpr int kStageBatch = 16;

// Stages the chunk's feature window whose pixel (0, 0) is feature (fy0, fx0): win[c][row][col] for the chunk's
// t.chunk channels, zero off the map and for channels past `count` (the compute loop reads every channel
// slot unconditionally). feat: the first channel's plane.
template <int Batch, typename T, typename Acc, typename Tiles>
__device__ __forceinline__ void stage_features(Acc* win, const Tiles& t, const T* __restrict__ feat, int count,
                                               std::int64_t fy0, std::int64_t fx0) {
  // Element e = c plane + row win_cols + col; a thread's elements step by kThreads, decomposed once
  // (step_c, step_row, step_col) and added with carries, so no division per element.
  const int plane = t.plane(), total = t.chunk * plane, wc = t.win_cols, wr = t.win_rows;
  const int step_c = kThreads / plane, step_row = (kThreads % plane) / wc, step_col = kThreads % wc;
  const int e0 = static_cast<int>(threadIdx.x);
  int c = e0 / plane, row = (e0 - c * plane) / wc, col = e0 - c * plane - row * wc;
  for (int base = e0; base < total; base += kThreads * Batch) {
    Acc v[Batch];
#pragma unroll
    for (int u = 0; u < Batch; ++u) {
      const std::int64_t fy = fy0 + row, fx = fx0 + col;
      const bool in = base + u * kThreads < total && c < count && fy >= 0 && fy < t.g.h && fx >= 0 && fx < t.g.w;
      v[u] = in ? to_acc<Acc>(load_readonly(feat + (static_cast<std::int64_t>(c) * t.g.h + fy) * t.g.w + fx)) : Acc(0);
      col += step_col;
      row += step_row;
      c += step_c;
      if (col >= wc) { col -= wc; ++row; }
      if (row >= wr) { row -= wr; ++c; }
    }
#pragma unroll
    for (int u = 0; u < Batch; ++u) {
      if (base + u * kThreads < total) win[base + u * kThreads] = v[u];
    }
  }
}

// Stages `planes` planes of output-sized values (the masks' taps in the forward, grad's channels in the masks'
// gradient) at outputs d0 .. d0 + qn - 1 (of the s s, row-major) of the tile's source pixels:
// dst[(plane Q + q) pixels + pixel], Q = kOutputsPerPass; 0 for planes past `valid`, for q >= qn and for pixels
// off the map (read, never used). src: the first plane.
template <int Batch, typename T, typename Acc, typename Tiles>
__device__ __forceinline__ void stage_outputs(Acc* smask, const Tiles& t, const T* __restrict__ mask_g, int planes,
                                              int valid, std::int64_t y0, std::int64_t x0, int d0, int qn) {
  const CarafeGeometry& g = t.g;
  constexpr int Q = kOutputsPerPass;
  const int pixels = t.pixels(), total = planes * Q * pixels, s = static_cast<int>(g.scale);
  const std::int64_t out_plane = g.out_plane();
  // pixels divides kThreads: a thread's elements are all of its pixel p, at tap-output index tq = first + k lanes.
  const int p = static_cast<int>(threadIdx.x) % pixels, first = static_cast<int>(threadIdx.x) / pixels;
  const std::int64_t sy = y0 + p / kTileCols, sx = x0 + p % kTileCols;
  const bool on_map = sy < g.h && sx < g.w;
  const std::int64_t pixel_off = (sy * s) * g.wo + sx * s;
  std::int64_t q_off[Q];  // output d0 + q's offset from the pixel's first output
#pragma unroll
  for (int q = 0; q < Q; ++q) {
    const int d = d0 + q, dy = d / s;
    q_off[q] = static_cast<std::int64_t>(dy) * g.wo + (d - dy * s);
  }
  const int lanes = kThreads / pixels;
  for (int base = threadIdx.x; base < total; base += kThreads * Batch) {
    Acc v[Batch];
#pragma unroll
    for (int u = 0; u < Batch; ++u) {
      const int tq = first + (base - static_cast<int>(threadIdx.x)) / pixels + u * lanes;
      const int tap = tq / Q, q = tq % Q;
      const std::int64_t off = q == 0 ? q_off[0] : q == 1 ? q_off[1] : q == 2 ? q_off[2] : q_off[3];
      v[u] = base + u * kThreads < total && tap < valid && q < qn && on_map
                 ? to_acc<Acc>(load_readonly(mask_g + tap * out_plane + pixel_off + off))
                 : Acc(0);
    }
#pragma unroll
    for (int u = 0; u < Batch; ++u) {
      if (base + u * kThreads < total) smask[base + u * kThreads] = v[u];
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 2)
    carafe_forward_tiled_kernel(CarafeTiles t, const T* __restrict__ features, const T* __restrict__ masks,
                                T* __restrict__ out) {
  using Acc = acc_t<T>;
  constexpr int CT = ChannelsPerThread<T>::value, Q = kOutputsPerPass;
  Acc* smask = shared_window<Acc>();
  Acc* win = smask + t.mask_elems;
  const CarafeGeometry& g = t.g;
  const int pixels = t.pixels(), plane = t.plane();
  const int p = static_cast<int>(threadIdx.x) % pixels, lane = static_cast<int>(threadIdx.x) / pixels;
  const int ty = p / kTileCols, tx = p % kTileCols;
  const std::int64_t out_plane = g.out_plane(), s2 = g.scale * g.scale;
  for (std::int64_t b = blockIdx.x; b < t.items(); b += gridDim.x) {
    const std::int64_t tile = b % t.tiles, rest = b / t.tiles, split = rest % t.splits, ng = rest / t.splits;
    const std::int64_t n = ng / g.groups, group = ng % g.groups;
    const std::int64_t y0 = (tile / t.tile_cols) * t.rows, x0 = (tile % t.tile_cols) * kTileCols;
    const std::int64_t sy = y0 + ty, sx = x0 + tx;
    const bool active = sy < g.h && sx < g.w;
    // The taps whose feature lies on the map: i in [i0, i1), j in [j0, j1) (the others are absent).
    const int i0 = static_cast<int>(std::max<std::int64_t>(0, g.r - sy));
    const int i1 = static_cast<int>(std::min(g.k, g.h + g.r - sy));
    const int j0 = static_cast<int>(std::max<std::int64_t>(0, g.r - sx));
    const int j1 = static_cast<int>(std::min(g.k, g.w + g.r - sx));
    const T* mask_g = masks + (n * g.mask_channels + group * g.taps) * out_plane;
    const std::int64_t chunk_begin = split * t.chunks_per_split;
    const std::int64_t chunk_end = std::min(t.chunks, chunk_begin + t.chunks_per_split);
    for (std::int64_t d0 = 0; d0 < s2; d0 += Q) {
      const int qn = static_cast<int>(std::min<std::int64_t>(Q, s2 - d0));
      std::int64_t pix[Q];
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        const std::int64_t d = d0 + q, dy = d / g.scale, dx = d - dy * g.scale;
        pix[q] = (sy * g.scale + dy) * g.wo + sx * g.scale + dx;
      }
      __syncthreads();  // the previous item's or pass's reads of the masks are done
      stage_outputs<kStageBatch>(smask, t, mask_g, static_cast<int>(g.taps), static_cast<int>(g.taps), y0, x0, static_cast<int>(d0),
                    qn);
      for (std::int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
        const std::int64_t first = chunk * t.chunk;
        const int count = static_cast<int>(std::min<std::int64_t>(t.chunk, g.group_channels - first));
        const std::int64_t c0 = group * g.group_channels + first;
        __syncthreads();  // the previous chunk's reads of the window are done
        stage_features<kStageBatch>(win, t, features + (n * g.c + c0) * g.in_plane(), count, y0 - g.r, x0 - g.r);
        __syncthreads();
        if (!active) continue;
        // This thread's channels: lane + lanes c, c < CT (those at c >= mine hold zeros and are not written).
        const int mine = count > lane ? (count - lane + t.lanes - 1) / t.lanes : 0;
        Acc acc[Q][CT];
#pragma unroll
        for (int q = 0; q < Q; ++q) {
#pragma unroll
          for (int c = 0; c < CT; ++c) acc[q][c] = Acc(0);
        }
        const Acc* win_p = win + lane * plane + ty * t.win_cols + tx;
        const int lane_stride = t.lanes * plane, k = static_cast<int>(g.k);
        for (int i = i0; i < i1; ++i) {
          const Acc* mrow = smask + i * k * Q * pixels + p;
          const Acc* frow = win_p + i * t.win_cols;
          for (int j = j0; j < j1; ++j) {
            Acc m[Q], f[CT];
#pragma unroll
            for (int q = 0; q < Q; ++q) m[q] = mrow[(j * Q + q) * pixels];
#pragma unroll
            for (int c = 0; c < CT; ++c) f[c] = frow[j + c * lane_stride];
#pragma unroll
            for (int c = 0; c < CT; ++c) {
#pragma unroll
              for (int q = 0; q < Q; ++q) acc[q][c] += m[q] * f[c];
            }
          }
        }
        T* out_c = out + (n * g.c + c0 + lane) * out_plane;
#pragma unroll
        for (int c = 0; c < CT; ++c) {
          if (c >= mine) continue;
#pragma unroll
          for (int q = 0; q < Q; ++q) {
            if (q < qn) out_c[static_cast<std::int64_t>(c) * t.lanes * out_plane + pix[q]] = from_acc<T>(acc[q][c]);
          }
        }
      }
    }
  }
}

// The masks' gradient, tiled. A tile is `rows` x kTileCols source pixels of one group of one image, `lanes`
// threads per pixel; an item is (image, group, pass of kOutputsPerPass of the s s outputs, tap group, tile).
// Per chunk of `chunk` channels the block stages grad at the pass's outputs and the chunk's feature window;
// each thread accumulates, for its pixel's 4 outputs, TapsPerThread taps (lane + lanes u of the tap group),
// over the group's channels in order: per channel 4 grad and TapsPerThread feature loads feed 4 TapsPerThread
// FMAs. Taps whose feature lies off the map get 0.
template <typename T> struct TapsPerThread { static constexpr int value = 13; };

template <> struct TapsPerThread<double> { static constexpr int value = 7; };

struct CarafeMaskTiles {
  CarafeGeometry g;
  int rows = 0;  // 0: nothing fits (the untiled kernel runs)
  int lanes = 0, chunk = 0, win_rows = 0, win_cols = 0;
  std::int64_t tap_groups = 0, passes = 0, tile_cols = 0, tiles = 0;
  std::size_t grad_elems = 0, smem = 0;
  __host__ __device__ int pixels() const { return rows * kTileCols; }
  __host__ __device__ int plane() const { return win_rows * win_cols; }
  __host__ __device__ std::int64_t items() const { return g.n * g.groups * passes * tap_groups * tiles; }
};

// `rows` x 32-pixel tiles (rows: kThreads / (32 lanes), lanes taps_per_thread covering a k 5 window's 25 taps
// with few idle slots), if they fit `budget`; else rows = 0.
CarafeMaskTiles carafe_mask_tiles(const CarafeGeometry& g, int rows, int taps_per_thread, int chunk,
                                  std::size_t acc_size, std::int64_t budget) {
  CarafeMaskTiles t;
  t.g = g;
  if (g.k > 1024 || g.scale > 1024) return t;
  const std::int64_t pixels = rows * kTileCols, lanes = kThreads / pixels;
  const std::int64_t window = (rows + 2 * g.r) * (kTileCols + 2 * g.r);
  const std::int64_t bytes = chunk * (kOutputsPerPass * pixels + window) * static_cast<std::int64_t>(acc_size);
  if (bytes > budget) return t;
  t.rows = rows;
  t.lanes = static_cast<int>(lanes);
  t.chunk = chunk;
  t.win_rows = static_cast<int>(rows + 2 * g.r);
  t.win_cols = static_cast<int>(kTileCols + 2 * g.r);
  t.tap_groups = (g.taps + lanes * taps_per_thread - 1) / (lanes * taps_per_thread);
  t.passes = (g.scale * g.scale + kOutputsPerPass - 1) / kOutputsPerPass;
  t.tile_cols = (g.w + kTileCols - 1) / kTileCols;
  t.tiles = ((g.h + rows - 1) / rows) * t.tile_cols;
  t.grad_elems = static_cast<std::size_t>(chunk * kOutputsPerPass * pixels);
  t.smem = static_cast<std::size_t>(bytes);
  return t;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 2)
    carafe_masks_grad_tiled_kernel(CarafeMaskTiles t, const T* __restrict__ grad, const T* __restrict__ features,
                                   T* __restrict__ grad_masks) {
  using Acc = acc_t<T>;
  constexpr int TU = TapsPerThread<T>::value, Q = kOutputsPerPass;
  Acc* sgrad = shared_window<Acc>();
  Acc* win = sgrad + t.grad_elems;
  const CarafeGeometry& g = t.g;
  const int pixels = t.pixels(), plane = t.plane(), k = static_cast<int>(g.k), taps = static_cast<int>(g.taps);
  const int p = static_cast<int>(threadIdx.x) % pixels, lane = static_cast<int>(threadIdx.x) / pixels;
  const int ty = p / kTileCols, tx = p % kTileCols;
  const std::int64_t out_plane = g.out_plane(), s2 = g.scale * g.scale;
  for (std::int64_t b = blockIdx.x; b < t.items(); b += gridDim.x) {
    std::int64_t rest = b;
    const std::int64_t tile = rest % t.tiles;
    rest /= t.tiles;
    const int tap_group = static_cast<int>(rest % t.tap_groups);
    rest /= t.tap_groups;
    const std::int64_t d0 = (rest % t.passes) * Q, ng = rest / t.passes;
    const std::int64_t n = ng / g.groups, group = ng % g.groups;
    const std::int64_t y0 = (tile / t.tile_cols) * t.rows, x0 = (tile % t.tile_cols) * kTileCols;
    const std::int64_t sy = y0 + ty, sx = x0 + tx;
    const bool active = sy < g.h && sx < g.w;
    const int qn = static_cast<int>(std::min<std::int64_t>(Q, s2 - d0));
    // This thread's taps: tap_group lanes TU + lane + lanes u; their offsets in the feature window (0 for
    // taps past the last: computed, never written).
    const int tap0 = tap_group * t.lanes * TU + lane;
    int woff[TU];
#pragma unroll
    for (int u = 0; u < TU; ++u) {
      const int tap = tap0 + t.lanes * u, i = tap / k, j = tap - i * k;
      woff[u] = tap < taps ? i * t.win_cols + j : 0;
    }
    Acc acc[Q][TU];
#pragma unroll
    for (int q = 0; q < Q; ++q) {
#pragma unroll
      for (int u = 0; u < TU; ++u) acc[q][u] = Acc(0);
    }
    const T* grad_g = grad + (n * g.c + group * g.group_channels) * out_plane;
    const T* feat_g = features + (n * g.c + group * g.group_channels) * g.in_plane();
    for (std::int64_t first = 0; first < g.group_channels; first += t.chunk) {
      const int count = static_cast<int>(std::min<std::int64_t>(t.chunk, g.group_channels - first));
      __syncthreads();  // the previous chunk's reads are done
      // Few loads in flight: the accumulators stay live across the staging.
      stage_outputs<4>(sgrad, t, grad_g + first * out_plane, t.chunk, count, y0, x0, static_cast<int>(d0), qn);
      stage_features<4>(win, t, feat_g + first * g.in_plane(), count, y0 - g.r, x0 - g.r);
      __syncthreads();
      if (!active) continue;
      const Acc* gp = sgrad + p;
      const Acc* fp = win + ty * t.win_cols + tx;
      for (int c = 0; c < count; ++c) {
        Acc gq[Q];
#pragma unroll
        for (int q = 0; q < Q; ++q) gq[q] = gp[(c * Q + q) * pixels];
        const Acc* fc = fp + c * plane;
#pragma unroll
        for (int u = 0; u < TU; ++u) {
          const Acc f = fc[woff[u]];
#pragma unroll
          for (int q = 0; q < Q; ++q) acc[q][u] += gq[q] * f;
        }
      }
    }
    if (!active) continue;
    T* gm = grad_masks + (n * g.mask_channels + group * g.taps) * out_plane;
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      if (q >= qn) continue;
      const std::int64_t d = d0 + q, dy = d / g.scale, dx = d - dy * g.scale;
      const std::int64_t pix = (sy * g.scale + dy) * g.wo + sx * g.scale + dx;
#pragma unroll
      for (int u = 0; u < TU; ++u) {
        const int tap = tap0 + t.lanes * u, i = tap / k, j = tap - i * k;
        const std::int64_t fy = sy + i - g.r, fx = sx + j - g.r;
        const bool on_map = fy >= 0 && fy < g.h && fx >= 0 && fx < g.w;
        if (tap < taps) gm[tap * out_plane + pix] = from_acc<T>(on_map ? acc[q][u] : Acc(0));
      }
    }
  }
}

// The untiled kernels, for windows past the shared-memory budget: the CPU's work items, a grid-stride loop.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    carafe_forward_kernel(CarafeGeometry g, const T* __restrict__ features, const T* __restrict__ masks,
                          T* __restrict__ out) {
  const std::int64_t total = g.forward_items(), stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    carafe_forward_item<T, acc_t<T>>(g, features, masks, out, e);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    carafe_features_grad_kernel(CarafeGeometry g, const T* __restrict__ grad, const T* __restrict__ masks,
                                T* __restrict__ grad_features) {
  const std::int64_t total = g.features_grad_items(), stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    carafe_features_grad_item<T, acc_t<T>>(g, grad, masks, grad_features, e);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    carafe_masks_grad_kernel(CarafeGeometry g, const T* __restrict__ grad, const T* __restrict__ features,
                             T* __restrict__ grad_masks) {
  const std::int64_t x_tiles = (g.wo + kMaskTile - 1) / kMaskTile, tiles = g.n * g.groups * g.ho * x_tiles;
  const std::int64_t items = g.taps * kMaskTile;
  for (std::int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const std::int64_t xt = tile % x_tiles, row = tile / x_tiles, y = row % g.ho, ng = row / g.ho;
    const std::int64_t n = ng / g.groups, m0 = (ng % g.groups) * g.taps;
    for (std::int64_t p = threadIdx.x; p < items; p += blockDim.x) {
      const std::int64_t x = xt * kMaskTile + p % kMaskTile, m = m0 + p / kMaskTile;
      if (x >= g.wo) continue;
      grad_masks[carafe_mask_index(g, n, m, y, x)] =
          from_acc<T>(carafe_masks_grad_at<T, acc_t<T>>(g, grad, features, n, m, y, x));
    }
  }
}

const bool kRegistered = for_each_floating_type([](auto tag, const char* type) {
  using T = typename decltype(tag)::type;
  register_instantiation("carafe", "carafe_forward_tiled_kernel", type, &carafe_forward_tiled_kernel<T>);
  register_instantiation("carafe", "carafe_forward_kernel", type, &carafe_forward_kernel<T>);
  register_instantiation("carafe", "carafe_features_grad_kernel", type, &carafe_features_grad_kernel<T>);
  register_instantiation("carafe", "carafe_masks_grad_kernel", type, &carafe_masks_grad_kernel<T>);
  register_instantiation("carafe", "carafe_masks_grad_tiled_kernel", type, &carafe_masks_grad_tiled_kernel<T>);
});

// kernel<<<blocks for t's items, kThreads, t.smem>>>(t with its splits, args...), opting in past 48 KB.
template <typename... Params, typename... Args>
void launch_tiled(void (*kernel)(CarafeTiles, Params...), const CarafeTiles& t, cudaStream_t stream,
                  Args... args) {
  if (t.smem > 48 * 1024) {
    DETOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(t.smem)));
  }
  CarafeTiles split = t;
  int per_sm = 0;
  DETOPS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, t.smem));
  choose_splits(split, static_cast<std::int64_t>(per_sm) * current_device_sm_count());
  const std::int64_t items = split.items();
  if (items == 0) return;
  kernel<<<grid_for(items * kThreads, kThreads), kThreads, split.smem, stream>>>(split, kernel_arg<Params>(args)...);
  DETOPS_CHECK_LAUNCH();
}

}  // namespace

void launch_carafe_forward(const CarafeParams& params, const CarafeForwardArgs& args, DType dtype, cudaStream_t stream) {
  dispatch_floating(dtype, "launch_carafe_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const CarafeGeometry g = carafe_geometry(params, args.s);
    const CarafeTiles t = carafe_tiles(g, ChannelsPerThread<T>::value, sizeof(acc_t<T>), kSmemBudget,
                                       current_device_smem_optin());
    if (t.rows == 0) {
      launch_grid_stride(&carafe_forward_kernel<T>, g.forward_items(), kThreads, stream, g, args.features,
                         args.masks, args.out);
      return;
    }
    launch_tiled(&carafe_forward_tiled_kernel<T>, t, stream, args.features, args.masks, args.out);
  });
}

void launch_carafe_backward_features(const CarafeParams& params, const CarafeBackwardFeaturesArgs& args, DType dtype,
                                     cudaStream_t stream) {
  dispatch_floating(dtype, "launch_carafe_backward_features", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const CarafeGeometry g = carafe_geometry(params, args.s);
    launch_grid_stride(&carafe_features_grad_kernel<T>, g.features_grad_items(), kThreads, stream, g, args.grad,
                       args.masks, args.grad_features);
  });
}

void launch_carafe_backward_masks(const CarafeParams& params, const CarafeBackwardMasksArgs& args, DType dtype,
                                  cudaStream_t stream) {
  dispatch_floating(dtype, "launch_carafe_backward_masks", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const CarafeGeometry g = carafe_geometry(params, args.s);
    if (g.mask_elements() == 0) return;
    // The tiled kernel where it was measured faster (H100, FPN k 5 s 2, 256 channels): fp64 with at least an
    // item per SM (P3 -> P2 1.55 -> 0.48 ms, P4 -> P3 0.43 -> 0.17 ms). In fp32 / fp16 / bf16 its 52
    // accumulators spill at two blocks per SM and it was no faster (P3: 0.60 -> 0.42 ms fp32, 0.58 -> 0.61
    // fp16), and on maps with fewer tiles than SMs it is slower (P5 fp32 0.056 -> 0.151 ms).
    constexpr bool kWide = sizeof(acc_t<T>) == 8;
    const CarafeMaskTiles t = carafe_mask_tiles(g, kWide ? 2 : 4, TapsPerThread<T>::value, kWide ? 8 : 16,
                                                sizeof(acc_t<T>), kSmemBudget);
    if (kWide && t.rows != 0 && t.items() >= current_device_sm_count()) {
      auto* kernel = &carafe_masks_grad_tiled_kernel<T>;
      if (t.smem > 48 * 1024) {
        DETOPS_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(t.smem)));
      }
      kernel<<<grid_for(t.items() * kThreads, kThreads), kThreads, t.smem, stream>>>(
          t, kernel_arg<const T*>(args.grad), kernel_arg<const T*>(args.features), kernel_arg<T*>(args.grad_masks));
      DETOPS_CHECK_LAUNCH();
      return;
    }
    // A block per tile (grid_for caps the count; the kernel strides over the rest), as many threads as the
    // tile has mask elements up to kThreads (a warp for k = 1).
    const std::int64_t tiles = g.n * g.groups * g.ho * ((g.wo + kMaskTile - 1) / kMaskTile);
    const int threads = static_cast<int>(std::min<std::int64_t>(kThreads, g.taps * kMaskTile));
    launch_kernel(&carafe_masks_grad_kernel<T>, grid_for(tiles * threads, threads), threads, stream, g, args.grad,
                  args.features, args.grad_masks);
  });
}

}  // namespace detops
