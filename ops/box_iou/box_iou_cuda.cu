// Box IoU family CUDA kernels, templated on the variant.
// Pairwise: a batch of independent problems (grid z, grid-stride); 2-D tiles of 32 x 128 outputs per 32 x 8-thread block; the tile's boxes are prepared once
// (coordinates, area, CIoU angle) into shared memory, each thread computes 4 x 4 outputs, and a warp
// writes 32 consecutive elements of an output row at a time. Tiles are walked with grid-stride loops in
// both dimensions and every index is 64-bit, so any N x M is covered.
// Pairwise backward: two reductions (boxes1's rows, boxes2's columns) of recomputed per-pair gradients.
// Losses: one thread per pair, grid-stride. fp32 math for the half types; outputs in the accumulation type.
#include <cstdint>
#include <initializer_list>
#include <string>

#include "box_iou/box_iou_kernel.cuh"
#include "detops/core/cuda_check.h"
#include "common/dispatch.h"
#include "common/kernel_launch.cuh"

namespace detops {
namespace {

constexpr int kTileRows = 32;
constexpr int kTileCols = 128;
constexpr int kBlockX = 32;  // a warp spans 32 consecutive output columns
constexpr int kBlockY = 8;
constexpr int kRowsPerThread = kTileRows / kBlockY;
constexpr int kColsPerThread = kTileCols / kBlockX;
constexpr unsigned kMaxGridDim = 65535;  // gridDim.y's limit; also used for x (the loops cover the rest)
constexpr int kLossThreads = 256;

static_assert(kBlockX * kBlockY >= kTileRows + kTileCols, "one thread per staged box");

// Compiled per degenerate-box mode D (BoxIouParams::defined_degenerate), as the loss kernels below.
template <BoxIouVariant V, typename T, bool D>
__global__ void __launch_bounds__(kBlockX * kBlockY)
    box_iou_pairwise_kernel(BoxIouParams p, std::int64_t batch, std::int64_t n, std::int64_t m,
                            const T* __restrict__ boxes1_all, const T* __restrict__ boxes2_all,
                            acc_t<T>* __restrict__ out_all) {
  using Acc = acc_t<T>;
  __shared__ BoxGeometry<Acc> rows[kTileRows];
  __shared__ BoxGeometry<Acc> cols[kTileCols];
  const Acc eps = static_cast<Acc>(p.eps);
  constexpr bool defined = D;
  const int tid = static_cast<int>(threadIdx.y) * kBlockX + static_cast<int>(threadIdx.x);
  const std::int64_t row_tiles = (n + kTileRows - 1) / kTileRows;
  const std::int64_t col_tiles = (m + kTileCols - 1) / kTileCols;
  // The loop bounds depend only on blockIdx / gridDim, so every thread of a block reaches each barrier.
  for (std::int64_t bz = blockIdx.z; bz < batch; bz += gridDim.z) {
    const T* boxes1 = boxes1_all + bz * n * 4;
    const T* boxes2 = boxes2_all + bz * m * 4;
    acc_t<T>* out = out_all + bz * n * m;
    for (std::int64_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
      for (std::int64_t ct = blockIdx.x; ct < col_tiles; ct += gridDim.x) {
        const std::int64_t row0 = rt * kTileRows, col0 = ct * kTileCols;
        __syncthreads();  // the previous tile's boxes are no longer being read
        if (tid < kTileRows) {
          const std::int64_t i = row0 + tid;
          if (i < n) rows[tid] = box_geometry<V, T, Acc>(boxes1 + i * 4, defined);
        } else if (tid < kTileRows + kTileCols) {
          const int c = tid - kTileRows;
          const std::int64_t j = col0 + c;
          if (j < m) cols[c] = box_geometry<V, T, Acc>(boxes2 + j * 4, defined);
        }
        __syncthreads();
  #pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
          const int lr = static_cast<int>(threadIdx.y) + r * kBlockY;
          const std::int64_t i = row0 + lr;
          if (i >= n) break;
          Acc* out_row = out + i * m;
  #pragma unroll
          for (int k = 0; k < kColsPerThread; ++k) {
            const int lc = static_cast<int>(threadIdx.x) + k * kBlockX;
            const std::int64_t j = col0 + lc;
            if (j < m) out_row[j] = box_iou_pairwise_value<V, Acc>(rows[lr], cols[lc], eps, defined);
          }
        }
      }
    }
  }
}

// The pairwise backward, as two deterministic reductions of recomputed per-pair gradients (no atomics),
// both over 32 x 8-thread blocks, grid-stride over (batch, tile) and 64-bit indices.
// grad_boxes1: a warp per boxes1 row (8 rows a block), its lanes over the columns 32 at a time (coalesced
// grad reads; the 32 columns' geometry staged in shared memory), the lanes' sums then a shuffle tree.
template <BoxIouVariant V, typename T>
__global__ void __launch_bounds__(kBlockX * kBlockY)
    box_iou_pairwise_grad_rows_kernel(BoxIouParams p, BoxIouPairwiseBackwardArgs a) {
  using Acc = acc_t<T>;
  __shared__ BoxGeometry<Acc> cols[kBlockX];
  const Acc eps = static_cast<Acc>(p.eps);
  const bool defined = p.defined_degenerate;
  const Acc* grad = static_cast<const Acc*>(a.grad);
  const int lane = static_cast<int>(threadIdx.x), warp = static_cast<int>(threadIdx.y);
  const std::int64_t row_tiles = (a.n + kBlockY - 1) / kBlockY;
  for (std::int64_t tile = blockIdx.x; tile < a.batch * row_tiles; tile += gridDim.x) {
    const std::int64_t b = tile / row_tiles, i = (tile % row_tiles) * kBlockY + warp;
    const bool active = i < a.n;
    BoxGeometry<Acc> row{};
    if (active) row = box_geometry<V, T, Acc>(static_cast<const T*>(a.boxes1) + (b * a.n + i) * 4, defined);
    Acc acc[4] = {Acc(0), Acc(0), Acc(0), Acc(0)};
    for (std::int64_t j0 = 0; j0 < a.m; j0 += kBlockX) {
      const std::int64_t j = j0 + lane;
      __syncthreads();  // the previous columns are no longer being read
      if (warp == 0 && j < a.m) {
        cols[lane] = box_geometry<V, T, Acc>(static_cast<const T*>(a.boxes2) + (b * a.m + j) * 4, defined);
      }
      __syncthreads();
      if (active && j < a.m) {
        const Acc g = grad[b * a.grad_strides[0] + i * a.grad_strides[1] + j * a.grad_strides[2]];
        const BoxPairGrad<Acc> d = box_iou_pairwise_grad<V, Acc>(row, cols[lane], eps, g, defined);
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[c] += d.a[c];
      }
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      for (int o = kBlockX / 2; o > 0; o /= 2) acc[c] += __shfl_down_sync(0xffffffffu, acc[c], o);
      if (active && lane == 0) static_cast<T*>(a.grad_boxes1)[(b * a.n + i) * 4 + c] = from_acc<T>(acc[c]);
    }
  }
}

// grad_boxes2: a thread per boxes2 column (32 a block, consecutive: coalesced grad reads), the rows split
// among the 8 threads of the column (8 rows' geometry staged at a time), their sums added in order.
template <BoxIouVariant V, typename T>
__global__ void __launch_bounds__(kBlockX * kBlockY)
    box_iou_pairwise_grad_cols_kernel(BoxIouParams p, BoxIouPairwiseBackwardArgs a) {
  using Acc = acc_t<T>;
  __shared__ BoxGeometry<Acc> rows[kBlockY];
  __shared__ Acc partial[kBlockY][kBlockX][4];
  const Acc eps = static_cast<Acc>(p.eps);
  const bool defined = p.defined_degenerate;
  const Acc* grad = static_cast<const Acc*>(a.grad);
  const int lane = static_cast<int>(threadIdx.x), part = static_cast<int>(threadIdx.y);
  const std::int64_t col_tiles = (a.m + kBlockX - 1) / kBlockX;
  for (std::int64_t tile = blockIdx.x; tile < a.batch * col_tiles; tile += gridDim.x) {
    const std::int64_t b = tile / col_tiles, j = (tile % col_tiles) * kBlockX + lane;
    const bool active = j < a.m;
    BoxGeometry<Acc> col{};
    if (active) col = box_geometry<V, T, Acc>(static_cast<const T*>(a.boxes2) + (b * a.m + j) * 4, defined);
    Acc acc[4] = {Acc(0), Acc(0), Acc(0), Acc(0)};
    for (std::int64_t i0 = 0; i0 < a.n; i0 += kBlockY) {
      const std::int64_t i = i0 + part;
      __syncthreads();  // the previous rows (and the previous tile's partial sums) are no longer being read
      if (part == 0 && lane < kBlockY && i0 + lane < a.n) {
        rows[lane] = box_geometry<V, T, Acc>(static_cast<const T*>(a.boxes1) + (b * a.n + i0 + lane) * 4, defined);
      }
      __syncthreads();
      if (active && i < a.n) {
        const Acc g = grad[b * a.grad_strides[0] + i * a.grad_strides[1] + j * a.grad_strides[2]];
        const BoxPairGrad<Acc> d = box_iou_pairwise_grad<V, Acc>(rows[part], col, eps, g, defined);
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[c] += d.b[c];
      }
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) partial[part][lane][c] = acc[c];
    __syncthreads();
    if (part == 0 && active) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        Acc sum = Acc(0);
        for (int q = 0; q < kBlockY; ++q) sum += partial[q][lane][c];
        static_cast<T*>(a.grad_boxes2)[(b * a.m + j) * 4 + c] = from_acc<T>(sum);
      }
    }
  }
}

// One box row (4 coordinates) of an [n, 4] tensor as one memory access when `aligned` (every base pointer
// aligned to the row's size: 8 bytes for fp16 / bf16, 16 for fp32, 32 for fp64), else as four. `aligned` is
// the same for every thread (the branch does not diverge).
template <typename T>
struct alignas(4 * sizeof(T)) BoxRow {
  T v[4];
};

template <typename T, typename Acc>
__device__ __forceinline__ BoxCoords<Acc> load_box_row(const T* __restrict__ base, std::int64_t i, bool aligned) {
  if (!aligned) return load_box<T, Acc>(base + i * 4);
  const BoxRow<T> r = reinterpret_cast<const BoxRow<T>*>(base)[i];
  return {to_acc<Acc>(r.v[0]), to_acc<Acc>(r.v[1]), to_acc<Acc>(r.v[2]), to_acc<Acc>(r.v[3])};
}

template <typename T, typename Acc>
__device__ __forceinline__ void store_box_row(T* __restrict__ base, std::int64_t i, const Acc (&g)[4], bool aligned) {
  BoxRow<T> r;
#pragma unroll
  for (int k = 0; k < 4; ++k) r.v[k] = from_acc<T>(g[k]);
  if (aligned) {
    reinterpret_cast<BoxRow<T>*>(base)[i] = r;
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) base[i * 4 + k] = r.v[k];
  }
}

bool rows_aligned(std::size_t row_bytes, std::initializer_list<const void*> bases) {
  for (const void* b : bases) {
    if (b != nullptr && reinterpret_cast<std::uintptr_t>(b) % row_bytes != 0) return false;
  }
  return true;
}

// The loss kernels are compiled per degenerate-box mode D (BoxIouLossParams::defined_degenerate): the mode's
// branches and quotient guards fold away, which the single-wave kernels of typical sizes feel (docs/ops/box_iou.md).
template <BoxIouVariant V, typename T, bool D>
__global__ void box_iou_loss_forward_kernel(BoxIouLossParams p, std::int64_t n, const T* __restrict__ boxes1,
                                            const T* __restrict__ boxes2, const T* __restrict__ alpha_boxes1,
                                            const T* __restrict__ alpha_boxes2, acc_t<T>* __restrict__ loss,
                                            bool aligned) {
  using Acc = acc_t<T>;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (alpha_boxes1 == nullptr && alpha_boxes2 == nullptr) {  // the usual call: each pair's terms once
    for (std::int64_t i = first; i < n; i += stride) {
      loss[i] = box_iou_loss_value<V, Acc>(p, load_box_row<T, Acc>(boxes1, i, aligned),
                                           load_box_row<T, Acc>(boxes2, i, aligned), D);
    }
    return;
  }
  for (std::int64_t i = first; i < n; i += stride) {
    const BoxCoords<Acc> a = load_box_row<T, Acc>(boxes1, i, aligned);
    const BoxCoords<Acc> b = load_box_row<T, Acc>(boxes2, i, aligned);
    const BoxCoords<Acc> a0 = alpha_boxes1 != nullptr ? load_box_row<T, Acc>(alpha_boxes1, i, aligned) : a;
    const BoxCoords<Acc> b0 = alpha_boxes2 != nullptr ? load_box_row<T, Acc>(alpha_boxes2, i, aligned) : b;
    loss[i] = box_iou_loss_value<V, Acc>(p, a, b, a0, b0, D);
  }
}

template <BoxIouVariant V, typename T, bool D>
__global__ void box_iou_loss_backward_kernel(BoxIouLossParams p, std::int64_t n, const acc_t<T>* __restrict__ grad,
                                             std::int64_t grad_stride, acc_t<T> grad_scale,
                                             const T* __restrict__ boxes1, const T* __restrict__ boxes2,
                                             T* __restrict__ grad_boxes1, T* __restrict__ grad_boxes2, bool aligned) {
  using Acc = acc_t<T>;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const Acc g = grad[i * grad_stride] * grad_scale;
    const BoxPairGrad<Acc> d = box_iou_loss_grad<V, Acc>(p, load_box_row<T, Acc>(boxes1, i, aligned),
                                                         load_box_row<T, Acc>(boxes2, i, aligned), g, D);
    store_box_row<T, Acc>(grad_boxes1, i, d.a, aligned);
    store_box_row<T, Acc>(grad_boxes2, i, d.b, aligned);
  }
}

const char* variant_name(BoxIouVariant v) {
  switch (v) {
    case BoxIouVariant::kIoU: return "IoU";
    case BoxIouVariant::kGIoU: return "GIoU";
    case BoxIouVariant::kDIoU: return "DIoU";
    case BoxIouVariant::kCIoU: return "CIoU";
  }
  return "?";
}

template <BoxIouVariant V, typename T>
void register_variant_kernels(const char* type_name) {
  const std::string args = std::string(variant_name(V)) + ", " + type_name;
  register_instantiation(box_iou_pairwise_op_name(V), "box_iou_pairwise_grad_rows_kernel", args,
                         &box_iou_pairwise_grad_rows_kernel<V, T>);
  register_instantiation(box_iou_pairwise_op_name(V), "box_iou_pairwise_grad_cols_kernel", args,
                         &box_iou_pairwise_grad_cols_kernel<V, T>);
  for (const bool defined : {false, true}) {
    const std::string mode_args = args + (defined ? ", true" : ", false");
    register_instantiation(box_iou_pairwise_op_name(V), "box_iou_pairwise_kernel", mode_args,
                           defined ? &box_iou_pairwise_kernel<V, T, true> : &box_iou_pairwise_kernel<V, T, false>);
    register_instantiation(box_iou_loss_op_name(V), "box_iou_loss_forward_kernel", mode_args,
                           defined ? &box_iou_loss_forward_kernel<V, T, true> : &box_iou_loss_forward_kernel<V, T, false>);
    register_instantiation(box_iou_loss_op_name(V), "box_iou_loss_backward_kernel", mode_args,
                           defined ? &box_iou_loss_backward_kernel<V, T, true>
                                   : &box_iou_loss_backward_kernel<V, T, false>);
  }
}

const bool kRegistered = for_each_floating_type([](auto tag, const char* type) {
  using T = typename decltype(tag)::type;
  register_variant_kernels<BoxIouVariant::kIoU, T>(type);
  register_variant_kernels<BoxIouVariant::kGIoU, T>(type);
  register_variant_kernels<BoxIouVariant::kDIoU, T>(type);
  register_variant_kernels<BoxIouVariant::kCIoU, T>(type);
});

// fn(variant tag, type tag) for params.variant and dtype.
template <typename Fn>
void dispatch_variant_and_floating(BoxIouVariant variant, DType dtype, const char* what, Fn&& fn) {
  dispatch_box_iou_variant(variant, what, [&](auto vtag) {
    dispatch_floating(dtype, what, [&](auto tag) { fn(vtag, tag); });
  });
}

unsigned capped_blocks(std::int64_t tiles) {
  return static_cast<unsigned>(tiles < static_cast<std::int64_t>(kMaxGridDim) ? tiles : kMaxGridDim);
}

}  // namespace

void launch_box_iou_pairwise(const BoxIouParams& params, const BoxIouPairwiseArgs& args, DType dtype,
                             cudaStream_t stream) {
  if (args.n == 0 || args.m == 0 || args.batch == 0) return;
  const dim3 block(kBlockX, kBlockY);
  const dim3 grid(capped_blocks((args.m + kTileCols - 1) / kTileCols), capped_blocks((args.n + kTileRows - 1) / kTileRows),
                  capped_blocks(args.batch));
  dispatch_variant_and_floating(params.variant, dtype, "box_iou_pairwise", [&](auto vtag, auto tag) {
    constexpr BoxIouVariant V = decltype(vtag)::value;
    using T = typename decltype(tag)::type;
    launch_kernel(params.defined_degenerate ? &box_iou_pairwise_kernel<V, T, true> : &box_iou_pairwise_kernel<V, T, false>,
                  grid, block, stream, params, args.batch, args.n, args.m, args.boxes1, args.boxes2, args.out);
  });
}

void launch_box_iou_pairwise_backward(const BoxIouParams& params, const BoxIouPairwiseBackwardArgs& args, DType dtype,
                                      cudaStream_t stream) {
  if (args.n == 0 || args.m == 0 || args.batch == 0) return;
  const dim3 block(kBlockX, kBlockY);
  const auto blocks = [&](std::int64_t per_batch, int per_block) {
    return grid_for(args.batch * ((per_batch + per_block - 1) / per_block), 1, 8);
  };
  dispatch_variant_and_floating(params.variant, dtype, "box_iou_pairwise_backward", [&](auto vtag, auto tag) {
    constexpr BoxIouVariant V = decltype(vtag)::value;
    using T = typename decltype(tag)::type;
    launch_kernel(&box_iou_pairwise_grad_rows_kernel<V, T>, blocks(args.n, kBlockY), block, stream, params, args);
    launch_kernel(&box_iou_pairwise_grad_cols_kernel<V, T>, blocks(args.m, kBlockX), block, stream, params, args);
  });
}

void launch_box_iou_loss_forward(const BoxIouLossParams& params, const BoxIouLossForwardArgs& args, DType dtype,
                                 cudaStream_t stream) {
  if (args.n == 0) return;
  const unsigned blocks = grid_for(args.n, kLossThreads);
  dispatch_variant_and_floating(params.variant, dtype, "box_iou_loss_forward", [&](auto vtag, auto tag) {
    using T = typename decltype(tag)::type;
    const bool aligned = rows_aligned(4 * sizeof(T), {args.boxes1, args.boxes2, args.alpha_boxes1, args.alpha_boxes2});
    constexpr BoxIouVariant V = decltype(vtag)::value;
    launch_kernel(params.defined_degenerate ? &box_iou_loss_forward_kernel<V, T, true>
                                            : &box_iou_loss_forward_kernel<V, T, false>,
                  blocks, kLossThreads, stream, params, args.n, args.boxes1, args.boxes2, args.alpha_boxes1,
                  args.alpha_boxes2, args.loss, aligned);
  });
}

void launch_box_iou_loss_backward(const BoxIouLossParams& params, const BoxIouLossBackwardArgs& args, DType dtype,
                                  cudaStream_t stream) {
  if (args.n == 0) return;
  const unsigned blocks = grid_for(args.n, kLossThreads);
  dispatch_variant_and_floating(params.variant, dtype, "box_iou_loss_backward", [&](auto vtag, auto tag) {
    using T = typename decltype(tag)::type;
    const bool aligned = rows_aligned(4 * sizeof(T), {args.boxes1, args.boxes2, args.grad_boxes1, args.grad_boxes2});
    constexpr BoxIouVariant V = decltype(vtag)::value;
    launch_kernel(params.defined_degenerate ? &box_iou_loss_backward_kernel<V, T, true>
                                            : &box_iou_loss_backward_kernel<V, T, false>,
                  blocks, kLossThreads, stream, params, args.n, args.grad.data, args.grad.stride,
                  static_cast<acc_t<T>>(args.grad.scale), args.boxes1, args.boxes2, args.grad_boxes1, args.grad_boxes2,
                  aligned);
  });
}

}  // namespace detops
