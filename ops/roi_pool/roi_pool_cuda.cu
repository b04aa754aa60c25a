// RoIPool CUDA kernels. Forward: over a channels-last map (the input itself or its copy; common/roi_nhwc.h's
// roi_pool_forward_channels_last says when) roi_pool_nhwc.cuh's gather, 16 bytes of a pixel per lane and a
// subgroup of lanes per bin; else one thread per output element, pw fastest so a warp writes consecutive outputs.
// Backward: where a plane takes at most kMaxPlaneTiles shared-memory tiles (common/plane_tiles.h), the plane-tile
// kernel sums each tile in shared memory and writes grad_input once in the input dtype; else one thread per
// grad_output element, channel-major, adding into the zeroed accumulation workspace with global atomics. 64-bit
// flattened indices, read-only loads of input and rois, fp32 accumulation of half-type gradients.
#include <stdexcept>

#include "detops/core/cuda_check.h"
#include "common/dispatch.h"
#include "common/kernel_launch.cuh"
#include "common/plane_tiles.h"
#include "common/roi_cuda.cuh"
#include "roi_pool/roi_pool_kernel.cuh"
#include "roi_pool/roi_pool_nhwc.cuh"

namespace detops {
namespace {

constexpr int kThreads = 256;

// The (roi, channel, bin row, bin column) of flat output index i, pw fastest. Index is int32_t when every
// index the grid-stride loop forms fits (the decomposition then costs a quarter of the 64-bit one), else
// int64_t; memory offsets are 64-bit either way.
struct Element {
  std::int64_t k, c, ph, pw;
};

template <typename Index>
__device__ __forceinline__ Element element(Index i, Index channels, Index ph_n, Index pw_n) {
  const Index pw = i % pw_n;
  const Index rest = i / pw_n;
  const Index ph = rest % ph_n;
  const Index kc = rest / ph_n;
  return {kc / channels, kc % channels, ph, pw};
}

template <typename T, typename Index>
__global__ void roi_pool_forward_kernel(RoiPoolParams p, RoiPoolShape s, const T* __restrict__ input,
                                        const T* __restrict__ rois, T* __restrict__ output,
                                        std::int32_t* __restrict__ argmax,
                                        unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  const std::int64_t pw_n = p.pooled_width, ph_n = p.pooled_height;
  const std::int64_t total = s.num_rois * s.channels * ph_n * pw_n;
  grid_stride_for<Index>(static_cast<Index>(total), [&](Index i) {
    const auto [k, c, ph, pw] = element(i, static_cast<Index>(s.channels), static_cast<Index>(ph_n),
                                        static_cast<Index>(pw_n));
    const RoiPoolGeometry<Acc> g = roi_pool_geometry<T, Acc>(p, rois + k * 5, s.batch);
    if (g.batch < 0) {
      output[i] = from_acc<T>(Acc(0));
      argmax[i] = -1;
      return report_first_invalid(first_invalid_roi, k);
    }
    const T* plane = input + (g.batch * s.channels + c) * s.height * s.width;
    const RoiPoolMax<Acc> m = roi_pool_bin_max<T, Acc>(roi_pool_bin(g, ph, pw, s.height, s.width), plane, s.width,
                                                        p.exact_max);
    output[i] = from_acc<T>(m.value);
    argmax[i] = static_cast<std::int32_t>(m.index);
  });
}

// The backward visits the grad_output elements channel-major, (c, k, ph, pw) with pw fastest: the threads resident at
// once then scatter into the planes of a few channels (of every image), which stay in L2, so each atomic is an L2
// hit. The output's own order (k, c, ph, pw) spread the concurrent atomics over every channel plane of the
// gradient (the whole [N, C, H, W] workspace, 138 MB in fp32 at [2, 256, 200, 336]), and each missed L2: one
// read-modify-write of DRAM per element, which bound the kernel (the H200's peer table: level with
// torchvision's, which scatters in the same order). grad_output and argmax are then read in runs of ph * pw
// consecutive elements.
template <typename T, typename Index>
__global__ void roi_pool_backward_kernel(RoiPoolParams p, RoiPoolShape s, const T* __restrict__ grad_output,
                                         RoiGradStrides go, const T* __restrict__ rois,
                                         const std::int32_t* __restrict__ argmax, acc_t<T>* __restrict__ grad_input,
                                         unsigned long long* __restrict__ first_invalid_roi,
                                         unsigned long long* __restrict__ first_invalid_argmax) {
  using Acc = acc_t<T>;
  const std::int64_t pw_n = p.pooled_width, ph_n = p.pooled_height;
  const std::int64_t total = s.num_rois * s.channels * ph_n * pw_n;
  const std::int64_t plane_elements = s.height * s.width;
  grid_stride_for<Index>(static_cast<Index>(total), [&](Index i) {
    // element() with the roles of k and c swapped: i = ((c * K + k) * ph_n + ph) * pw_n + pw.
    const auto [c, k, ph, pw] = element(i, static_cast<Index>(s.num_rois), static_cast<Index>(ph_n),
                                        static_cast<Index>(pw_n));
    const Acc b = to_acc<Acc>(load_readonly(rois + k * 5));
    if (!(b >= Acc(0) && b < static_cast<Acc>(s.batch))) return report_first_invalid(first_invalid_roi, k);
    const std::int64_t flat = ((k * s.channels + c) * ph_n + ph) * pw_n + pw;  // argmax's (and the output's) index
    const std::int32_t a = load_readonly(argmax + flat);
    const RoiPoolArgmaxKind kind = roi_pool_argmax_kind(a, plane_elements);
    if (kind == RoiPoolArgmaxKind::kInvalid) return report_first_invalid(first_invalid_argmax, flat);
    if (kind == RoiPoolArgmaxKind::kNone) return;
    const Acc grad = to_acc<Acc>(load_readonly(grad_output + go.offset(k, c, ph, pw)));
    const std::int64_t batch = static_cast<std::int64_t>(b);
    atomicAdd(grad_input + (batch * s.channels + c) * plane_elements + a, grad);
  });
}

// The plane-tile backward (common/plane_tiles.h): block (n, c, tile) owns flat pixels [begin, begin + len) of
// channel c's plane of image n. Its warps take the rois 32 at a time, ballot those of image n, and for each such roi
// k the lanes take its ph * pw argmax entries of channel c (contiguous); an entry inside the tile adds its grad to
// the tile's shared-memory sum. The tile is then written once in T. Reports: invalid rois by block 0 (which sees
// every roi), invalid argmax values by each (n, c)'s tile 0 (which sees every entry of image n's rois, channel c).
constexpr int kTileThreads = 512;

template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    roi_pool_backward_tiles_kernel(RoiPoolParams p, RoiPoolShape s, PlaneTiles tiles, const T* __restrict__ grad_output,
                                   RoiGradStrides go, const T* __restrict__ rois,
                                   const std::int32_t* __restrict__ argmax, T* __restrict__ grad_input,
                                   unsigned long long* __restrict__ first_invalid_roi,
                                   unsigned long long* __restrict__ first_invalid_argmax) {
  using Acc = acc_t<T>;
  extern __shared__ __align__(16) unsigned char roi_pool_tile_smem[];
  Acc* sum = reinterpret_cast<Acc*>(roi_pool_tile_smem);
  const std::int64_t block = blockIdx.x;
  const std::int64_t tile = block % tiles.count, plane_index = block / tiles.count;  // plane_index = n * C + c
  const std::int64_t c = plane_index % s.channels, n = plane_index / s.channels;
  const int begin = static_cast<int>(tile * tiles.elements);
  const int len = static_cast<int>(tiles.plane - begin < tiles.elements ? tiles.plane - begin : tiles.elements);
  for (int i = threadIdx.x; i < len; i += blockDim.x) sum[i] = Acc(0);
  __syncthreads();
  const int pw_n = static_cast<int>(p.pooled_width);
  const int bins = static_cast<int>(p.pooled_height) * pw_n;
  const int lane = threadIdx.x % 32;
  const int warps = blockDim.x / 32;
  const Acc batch = static_cast<Acc>(s.batch);
  for (std::int64_t base = static_cast<std::int64_t>(threadIdx.x / 32) * 32; base < s.num_rois;
       base += static_cast<std::int64_t>(warps) * 32) {
    const std::int64_t k = base + lane;
    bool mine = false;
    if (k < s.num_rois) {
      const Acc b = to_acc<Acc>(load_readonly(rois + k * 5));
      const bool valid = b >= Acc(0) && b < batch;
      if (!valid && block == 0) report_first_invalid(first_invalid_roi, k);
      mine = valid && static_cast<std::int64_t>(b) == n;
    }
    for (unsigned todo = __ballot_sync(0xffffffffu, mine); todo != 0; todo &= todo - 1) {
      const std::int64_t kk = base + (__ffs(todo) - 1);
      const std::int64_t row = (kk * s.channels + c) * bins;  // flat argmax index of (kk, c, 0, 0)
      for (int e = lane; e < bins; e += 32) {
        const std::int32_t a = load_readonly(argmax + row + e);
        const RoiPoolArgmaxKind kind = roi_pool_argmax_kind(a, tiles.plane);
        if (kind == RoiPoolArgmaxKind::kInvalid) {
          if (tile == 0) report_first_invalid(first_invalid_argmax, row + e);
          continue;
        }
        if (kind == RoiPoolArgmaxKind::kNone || a < begin || a - begin >= len) continue;
        const int ph = e / pw_n;
        atomicAdd(sum + (a - begin), to_acc<Acc>(load_readonly(grad_output + go.offset(kk, c, ph, e - ph * pw_n))));
      }
    }
  }
  __syncthreads();
  T* out = grad_input + plane_index * tiles.plane + begin;
  for (int i = threadIdx.x; i < len; i += blockDim.x) out[i] = from_acc<T>(sum[i]);
}

const bool kRegistered = for_each_floating_and_index_type([](auto t, auto i, const std::string& targs) {
  using T = typename decltype(t)::type;
  using Index = typename decltype(i)::type;
  register_instantiation("roi_pool", "roi_pool_forward_kernel", targs, &roi_pool_forward_kernel<T, Index>);
  register_roi_pool_nhwc<T, Index>(targs);
  register_instantiation("roi_pool", "roi_pool_backward_kernel", targs, &roi_pool_backward_kernel<T, Index>);
});

const bool kTilesRegistered = for_each_floating_type([](auto t, const char* name) {
  using T = typename decltype(t)::type;
  register_instantiation("roi_pool", "roi_pool_backward_tiles_kernel", name, &roi_pool_backward_tiles_kernel<T>);
});

PlaneTiles backward_tiles(const RoiPoolShape& s, DType dtype) {
  return plane_tiles(s.height, s.width, s.batch * s.channels, dtype == DType::kFloat64 ? sizeof(double) : sizeof(float));
}

}  // namespace

void launch_roi_pool_forward(const RoiPoolParams& params, const RoiPoolForwardArgs& args, DType dtype,
                             cudaStream_t stream) {
  if (args.input_channels_last || args.channels_last_workspace != nullptr) {
    dispatch_floating(dtype, "roi_pool_forward", [&](auto tag) {
      launch_roi_pool_nhwc_forward<type_of<decltype(tag)>>(params, args, stream);
    });
    return;
  }
  launch_roi_indexed(
      "roi_pool_forward", dtype, roi_elements(args.shape, params), kThreads, true, stream,
      [](auto t, auto i) { return &roi_pool_forward_kernel<type_of<decltype(t)>, type_of<decltype(i)>>; }, params,
      args.shape, args.input, args.rois, args.output, args.argmax, args.first_invalid_roi);
}

bool roi_pool_backward_writes_grad_input(const RoiPoolShape& shape, DType dtype) {
  return backward_tiles(shape, dtype).count > 0;
}

void launch_roi_pool_backward(const RoiPoolParams& params, const RoiPoolBackwardArgs& args, DType dtype,
                              cudaStream_t stream) {
  if (args.grad_input != nullptr) {
    const RoiPoolShape& s = args.shape;
    const PlaneTiles tiles = backward_tiles(s, dtype);
    if (tiles.count == 0) {
      throw std::invalid_argument("launch_roi_pool_backward: grad_input given for a plane the tile kernel does not take");
    }
    dispatch_floating(dtype, "roi_pool_backward", [&](auto tag) {
      using T = type_of<decltype(tag)>;
      auto* kernel = &roi_pool_backward_tiles_kernel<T>;
      if (tiles.smem > 48 * 1024) {
        DETOPS_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(tiles.smem)));
      }
      const std::int64_t blocks = s.batch * s.channels * tiles.count;
      kernel<<<static_cast<unsigned>(blocks), kTileThreads, tiles.smem, stream>>>(
          params, s, tiles, static_cast<const T*>(args.grad_output), roi_grad_strides(args),
          static_cast<const T*>(args.rois), args.argmax, static_cast<T*>(args.grad_input), args.first_invalid_roi,
          args.first_invalid_argmax);
      DETOPS_CHECK_LAUNCH();
    });
    return;
  }
  launch_roi_indexed(
      "roi_pool_backward", dtype, roi_elements(args.shape, params), kThreads, true, stream,
      [](auto t, auto i) { return &roi_pool_backward_kernel<type_of<decltype(t)>, type_of<decltype(i)>>; }, params,
      args.shape, args.grad_output, roi_grad_strides(args), args.rois, args.argmax, args.grad_input_acc,
      args.first_invalid_roi, args.first_invalid_argmax);
}

}  // namespace detops
