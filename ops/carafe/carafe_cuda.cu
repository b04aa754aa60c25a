// CARAFE CUDA kernels over the per-element math of carafe_kernel.cuh, each a grid-stride loop (no grid
// dimension depends on the problem beyond grid_for's cap, so no size exceeds a launch limit), 64-bit indices.
// - forward: a thread per (image, group, chunk of kCarafeChannelChunk channels, output pixel), pixel fastest:
//   the pixel's k k mask values read once per chunk, features through the cache, the output written
//   coalesced (neighbouring threads, neighbouring x).
// - features' gradient: the same items over the feature pixels, a gather (no atomics).
// - masks' gradient: a block per tile of kMaskTile output pixels of one row (image, group, y); its threads run
//   over the tile's k k x kMaskTile mask elements, tap-major, so a warp writes kMaskTile neighbouring mask
//   elements and the block's warps read the same grad row through L1.
#include <algorithm>
#include <cstdint>

#include "carafe/carafe_kernel.cuh"
#include "common/kernel_launch.cuh"

namespace detops {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaskTile = 32;

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
  register_instantiation("carafe", "carafe_forward_kernel", type, &carafe_forward_kernel<T>);
  register_instantiation("carafe", "carafe_features_grad_kernel", type, &carafe_features_grad_kernel<T>);
  register_instantiation("carafe", "carafe_masks_grad_kernel", type, &carafe_masks_grad_kernel<T>);
});

}  // namespace

void launch_carafe_forward(const CarafeParams& params, const CarafeForwardArgs& args, DType dtype, cudaStream_t stream) {
  dispatch_floating(dtype, "launch_carafe_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const CarafeGeometry g = carafe_geometry(params, args.s);
    launch_grid_stride(&carafe_forward_kernel<T>, g.forward_items(), kThreads, stream, g, args.features, args.masks,
                       args.out);
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
