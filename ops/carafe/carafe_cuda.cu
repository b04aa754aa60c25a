// CARAFE CUDA kernels over the per-element math of carafe_kernel.cuh, each element the same fixed-order sum as
// the CPU's (taps row-major, then (dy, dx); channels in order); 64-bit indices, grid-stride loops, no atomics.
// - forward (tiled): a block of 256 threads covers a tile of kTileRows x kTileCols pixels of the feature map
//   (thread (ty, tx) = tile pixel (ty, tx)) of one group of one image; a block item is (image, group, chunk of up
//   to Chunk<T> channels, tile). The block stages the chunk's feature window (tile rows - r .. + r, columns
//   likewise; zeros off the map) in shared memory, in acc_t<T>; each thread then produces the s x s outputs of its
//   source pixel, kOutputsPerThread at a time: per tap it loads those outputs' mask values once (for the whole
//   chunk) and each channel's feature once (for all of them), and writes each output once. Where one channel's
//   window does not fit kSmemBudget (a kernel_size or scale_factor in the hundreds), the untiled per-item kernel
//   (the CPU's work items) runs instead.
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
constexpr int kTileRows = 8, kTileCols = 32;  // kTileRows * kTileCols == kThreads
constexpr int kOutputsPerThread = 4;          // outputs of one source pixel per pass (forward)
constexpr std::int64_t kMaskTile = 32;        // output pixels per block of the masks' gradient kernel
constexpr std::int64_t kSmemBudget = 48 * 1024;  // shared memory per forward block (no opt-in)
static_assert(kTileRows * kTileCols == kThreads, "a thread per tile pixel");

// Channels a thread accumulates at once (registers: kOutputsPerThread of them each in the forward).
template <typename T> struct ChunkOf { static constexpr int value = 16; };
template <> struct ChunkOf<double> { static constexpr int value = 8; };

// The forward's tiled launch: the geometry, the block's shared window (win_rows x win_cols pixels per channel),
// the channels staged at once, and the block items' factors.
struct CarafeTiles {
  CarafeGeometry g;
  int win_rows = 0, win_cols = 0;
  int chunk = 0;                    // channels per staged window; 0: the window does not fit (fallback)
  std::int64_t chunks = 0;          // ceil(group_channels / chunk)
  std::int64_t tile_cols = 0, tiles = 0;
  std::size_t smem = 0;
  __device__ int plane() const { return win_rows * win_cols; }
};

// The forward's tiling of g, at most max_chunk channels per window, in `budget` bytes of acc_size-byte values.
CarafeTiles carafe_tiles(const CarafeGeometry& g, std::int64_t max_chunk, std::size_t acc_size, std::int64_t budget) {
  CarafeTiles t;
  t.g = g;
  t.tile_cols = (g.w + kTileCols - 1) / kTileCols;
  t.tiles = ((g.h + kTileRows - 1) / kTileRows) * t.tile_cols;
  if (g.k > 4096 || g.scale > 4096) return t;  // no window of that size fits: fallback
  const std::int64_t rows = kTileRows + 2 * g.r, cols = kTileCols + 2 * g.r;
  const std::int64_t channel_bytes = rows * cols * static_cast<std::int64_t>(acc_size);
  const std::int64_t fit = std::min<std::int64_t>(budget / channel_bytes, max_chunk);
  if (fit < 1) return t;
  t.win_rows = static_cast<int>(rows);
  t.win_cols = static_cast<int>(cols);
  t.chunk = static_cast<int>(std::max<std::int64_t>(1, std::min(fit, g.group_channels)));
  t.chunks = (g.group_channels + t.chunk - 1) / t.chunk;
  t.smem = static_cast<std::size_t>(t.chunk * channel_bytes);
  return t;
}

template <typename Acc>
__device__ __forceinline__ Acc* shared_window() {
  extern __shared__ __align__(16) unsigned char carafe_smem[];
  return reinterpret_cast<Acc*>(carafe_smem);
}

// Stages `count` channels of the feature window whose pixel (0, 0) is feature (fy0, fx0): win[c][row][col], zero
// off the map. feat: the first channel's plane.
template <typename T, typename Acc>
__device__ __forceinline__ void stage_features(Acc* win, const CarafeTiles& t, const T* __restrict__ feat, int count,
                                               std::int64_t fy0, std::int64_t fx0) {
  const int plane = t.plane(), total = count * plane;
  for (int e = threadIdx.x; e < total; e += kThreads) {
    const int c = e / plane, rem = e - c * plane, row = rem / t.win_cols, col = rem - row * t.win_cols;
    const std::int64_t fy = fy0 + row, fx = fx0 + col;
    const bool in = fy >= 0 && fy < t.g.h && fx >= 0 && fx < t.g.w;
    win[e] = in ? to_acc<Acc>(load_readonly(feat + (c * t.g.h + fy) * t.g.w + fx)) : Acc(0);
  }
}

// The kOutputsPerThread outputs d0 + q (of the s s, row-major) of source pixel (sy, sx): their offsets in an
// output plane, and which exist (d0 + q < s s).
struct OutputGroup {
  std::int64_t pix[kOutputsPerThread];
  bool valid[kOutputsPerThread];
};

__device__ __forceinline__ OutputGroup output_group(const CarafeGeometry& g, std::int64_t sy, std::int64_t sx,
                                                    std::int64_t d0) {
  OutputGroup o;
#pragma unroll
  for (int q = 0; q < kOutputsPerThread; ++q) {
    const std::int64_t d = d0 + q, dy = d / g.scale, dx = d - dy * g.scale;
    o.valid[q] = d < g.scale * g.scale;
    o.pix[q] = o.valid[q] ? (sy * g.scale + dy) * g.wo + sx * g.scale + dx : 0;
  }
  return o;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    carafe_forward_tiled_kernel(CarafeTiles t, const T* __restrict__ features, const T* __restrict__ masks,
                                T* __restrict__ out) {
  using Acc = acc_t<T>;
  constexpr int CC = ChunkOf<T>::value, Q = kOutputsPerThread;
  Acc* win = shared_window<Acc>();
  const CarafeGeometry& g = t.g;
  const int ty = threadIdx.x / kTileCols, tx = threadIdx.x % kTileCols, plane = t.plane();
  const std::int64_t items = g.n * g.groups * t.chunks * t.tiles, out_plane = g.out_plane();
  for (std::int64_t b = blockIdx.x; b < items; b += gridDim.x) {
    const std::int64_t tile = b % t.tiles, rest = b / t.tiles, chunk = rest % t.chunks, ng = rest / t.chunks;
    const std::int64_t n = ng / g.groups, group = ng % g.groups, first = chunk * t.chunk;
    const int count = static_cast<int>(std::min<std::int64_t>(t.chunk, g.group_channels - first));
    const std::int64_t y0 = (tile / t.tile_cols) * kTileRows, x0 = (tile % t.tile_cols) * kTileCols;
    const std::int64_t c0 = group * g.group_channels + first;
    __syncthreads();  // the previous item's reads of the window are done
    stage_features(win, t, features + (n * g.c + c0) * g.in_plane(), count, y0 - g.r, x0 - g.r);
    __syncthreads();
    const std::int64_t sy = y0 + ty, sx = x0 + tx;
    if (sy >= g.h || sx >= g.w) continue;
    // The taps whose feature lies on the map: i in [i0, i1), j in [j0, j1) (the others are absent).
    const std::int64_t i0 = std::max<std::int64_t>(0, g.r - sy), i1 = std::min(g.k, g.h + g.r - sy);
    const std::int64_t j0 = std::max<std::int64_t>(0, g.r - sx), j1 = std::min(g.k, g.w + g.r - sx);
    const T* mask_g = masks + (n * g.mask_channels + group * g.taps) * out_plane;
    T* out_c = out + (n * g.c + c0) * out_plane;
    const Acc* win_p = win + ty * t.win_cols + tx;
    for (std::int64_t d0 = 0; d0 < g.scale * g.scale; d0 += Q) {
      const OutputGroup o = output_group(g, sy, sx, d0);
      Acc acc[Q][CC];
#pragma unroll
      for (int q = 0; q < Q; ++q) {
#pragma unroll
        for (int c = 0; c < CC; ++c) acc[q][c] = Acc(0);
      }
      for (std::int64_t i = i0; i < i1; ++i) {
        for (std::int64_t j = j0; j < j1; ++j) {
          const T* mt = mask_g + (i * g.k + j) * out_plane;
          Acc m[Q];
#pragma unroll
          for (int q = 0; q < Q; ++q) m[q] = o.valid[q] ? to_acc<Acc>(load_readonly(mt + o.pix[q])) : Acc(0);
          const Acc* f = win_p + static_cast<int>(i) * t.win_cols + static_cast<int>(j);
#pragma unroll
          for (int c = 0; c < CC; ++c) {
            if (c < count) {
              const Acc fv = f[c * plane];
#pragma unroll
              for (int q = 0; q < Q; ++q) acc[q][c] += m[q] * fv;
            }
          }
        }
      }
#pragma unroll
      for (int c = 0; c < CC; ++c) {
        if (c >= count) continue;
#pragma unroll
        for (int q = 0; q < Q; ++q) {
          if (o.valid[q]) out_c[c * out_plane + o.pix[q]] = from_acc<T>(acc[q][c]);
        }
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
});

// kernel<<<blocks for `items` block items, kThreads, t.smem>>>(t, args...), opting in past 48 KB.
template <typename... Params, typename... Args>
void launch_tiled(void (*kernel)(CarafeTiles, Params...), const CarafeTiles& t, std::int64_t items,
                  cudaStream_t stream, Args... args) {
  if (items == 0) return;
  if (t.smem > 48 * 1024) {
    DETOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(t.smem)));
  }
  kernel<<<grid_for(items * kThreads, kThreads), kThreads, t.smem, stream>>>(t, kernel_arg<Params>(args)...);
  DETOPS_CHECK_LAUNCH();
}

}  // namespace

void launch_carafe_forward(const CarafeParams& params, const CarafeForwardArgs& args, DType dtype, cudaStream_t stream) {
  dispatch_floating(dtype, "launch_carafe_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const CarafeGeometry g = carafe_geometry(params, args.s);
    const CarafeTiles t = carafe_tiles(g, ChunkOf<T>::value, sizeof(acc_t<T>), kSmemBudget);
    if (t.chunk == 0) {
      launch_grid_stride(&carafe_forward_kernel<T>, g.forward_items(), kThreads, stream, g, args.features,
                         args.masks, args.out);
      return;
    }
    launch_tiled(&carafe_forward_tiled_kernel<T>, t, g.n * g.groups * t.chunks * t.tiles, stream, args.features,
                 args.masks, args.out);
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
    // A block per tile (grid_for caps the count; the kernel strides over the rest), as many threads as the
    // tile has mask elements up to kThreads (a warp for k = 1).
    const std::int64_t tiles = g.n * g.groups * g.ho * ((g.wo + kMaskTile - 1) / kMaskTile);
    const int threads = static_cast<int>(std::min<std::int64_t>(kThreads, g.taps * kMaskTile));
    launch_kernel(&carafe_masks_grad_kernel<T>, grid_for(tiles * threads, threads), threads, stream, g, args.grad,
                  args.features, args.grad_masks);
  });
}

}  // namespace detops
