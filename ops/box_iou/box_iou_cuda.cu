// Box IoU family CUDA kernels, templated on the variant.
// Pairwise: a batch of independent problems (grid z, grid-stride); 2-D tiles of 32 x 128 outputs per 32 x 8-thread block; the tile's boxes are prepared once
// (coordinates, area, CIoU angle) into shared memory, each thread computes 4 x 4 outputs, and a warp
// writes 32 consecutive elements of an output row at a time. Tiles are walked with grid-stride loops in
// both dimensions and every index is 64-bit, so any N x M is covered.
// Losses: one thread per pair, grid-stride. fp32 math for the half types; outputs in the accumulation type.
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

template <BoxIouVariant V, typename T>
__global__ void __launch_bounds__(kBlockX * kBlockY)
    box_iou_pairwise_kernel(BoxIouParams p, std::int64_t batch, std::int64_t n, std::int64_t m,
                            const T* __restrict__ boxes1_all, const T* __restrict__ boxes2_all,
                            acc_t<T>* __restrict__ out_all) {
  using Acc = acc_t<T>;
  __shared__ BoxGeometry<Acc> rows[kTileRows];
  __shared__ BoxGeometry<Acc> cols[kTileCols];
  const Acc eps = static_cast<Acc>(p.eps);
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
          if (i < n) rows[tid] = box_geometry<V, T, Acc>(boxes1 + i * 4);
        } else if (tid < kTileRows + kTileCols) {
          const int c = tid - kTileRows;
          const std::int64_t j = col0 + c;
          if (j < m) cols[c] = box_geometry<V, T, Acc>(boxes2 + j * 4);
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
            if (j < m) out_row[j] = box_iou_pairwise_value<V, Acc>(rows[lr], cols[lc], eps);
          }
        }
      }
    }
  }
}

template <BoxIouVariant V, typename T>
__global__ void box_iou_loss_forward_kernel(BoxIouLossParams p, std::int64_t n, const T* __restrict__ boxes1,
                                            const T* __restrict__ boxes2, const T* __restrict__ alpha_boxes1,
                                            const T* __restrict__ alpha_boxes2, acc_t<T>* __restrict__ loss) {
  using Acc = acc_t<T>;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const BoxCoords<Acc> a = load_box<T, Acc>(boxes1 + i * 4);
    const BoxCoords<Acc> b = load_box<T, Acc>(boxes2 + i * 4);
    const BoxCoords<Acc> a0 = alpha_boxes1 != nullptr ? load_box<T, Acc>(alpha_boxes1 + i * 4) : a;
    const BoxCoords<Acc> b0 = alpha_boxes2 != nullptr ? load_box<T, Acc>(alpha_boxes2 + i * 4) : b;
    loss[i] = box_iou_loss_value<V, Acc>(p, a, b, a0, b0);
  }
}

template <BoxIouVariant V, typename T>
__global__ void box_iou_loss_backward_kernel(BoxIouLossParams p, std::int64_t n, const acc_t<T>* __restrict__ grad,
                                             std::int64_t grad_stride, acc_t<T> grad_scale,
                                             const T* __restrict__ boxes1, const T* __restrict__ boxes2,
                                             T* __restrict__ grad_boxes1, T* __restrict__ grad_boxes2) {
  using Acc = acc_t<T>;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const Acc g = grad[i * grad_stride] * grad_scale;
    const BoxPairGrad<Acc> d =
        box_iou_loss_grad<V, Acc>(p, load_box<T, Acc>(boxes1 + i * 4), load_box<T, Acc>(boxes2 + i * 4), g);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      grad_boxes1[i * 4 + k] = from_acc<T>(d.a[k]);
      grad_boxes2[i * 4 + k] = from_acc<T>(d.b[k]);
    }
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
  register_instantiation(box_iou_pairwise_op_name(V), "box_iou_pairwise_kernel", args, &box_iou_pairwise_kernel<V, T>);
  register_instantiation(box_iou_loss_op_name(V), "box_iou_loss_forward_kernel", args,
                         &box_iou_loss_forward_kernel<V, T>);
  register_instantiation(box_iou_loss_op_name(V), "box_iou_loss_backward_kernel", args,
                         &box_iou_loss_backward_kernel<V, T>);
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
    launch_kernel(&box_iou_pairwise_kernel<decltype(vtag)::value, typename decltype(tag)::type>, grid, block, stream,
                  params, args.batch, args.n, args.m, args.boxes1, args.boxes2, args.out);
  });
}

void launch_box_iou_loss_forward(const BoxIouLossParams& params, const BoxIouLossForwardArgs& args, DType dtype,
                                 cudaStream_t stream) {
  if (args.n == 0) return;
  const unsigned blocks = grid_for(args.n, kLossThreads);
  dispatch_variant_and_floating(params.variant, dtype, "box_iou_loss_forward", [&](auto vtag, auto tag) {
    launch_kernel(&box_iou_loss_forward_kernel<decltype(vtag)::value, typename decltype(tag)::type>, blocks,
                  kLossThreads, stream, params, args.n, args.boxes1, args.boxes2, args.alpha_boxes1, args.alpha_boxes2,
                  args.loss);
  });
}

void launch_box_iou_loss_backward(const BoxIouLossParams& params, const BoxIouLossBackwardArgs& args, DType dtype,
                                  cudaStream_t stream) {
  if (args.n == 0) return;
  const unsigned blocks = grid_for(args.n, kLossThreads);
  dispatch_variant_and_floating(params.variant, dtype, "box_iou_loss_backward", [&](auto vtag, auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(&box_iou_loss_backward_kernel<decltype(vtag)::value, T>, blocks, kLossThreads, stream, params,
                  args.n, args.grad, args.grad_stride, static_cast<acc_t<T>>(args.grad_scale), args.boxes1,
                  args.boxes2, args.grad_boxes1, args.grad_boxes2);
  });
}

}  // namespace detops
