// RoIPool CUDA kernels. Forward: over a channels-last map (the input itself or its copy; common/roi_nhwc.h's
// roi_pool_forward_channels_last says when) roi_pool_nhwc.cuh's gather, 16 bytes of a pixel per lane and a
// subgroup of lanes per bin; else one thread per output element, pw fastest so a warp writes consecutive outputs.
// Backward: one thread per grad_output element, channel-major (see the kernel), adding into the zeroed accumulation
// workspace with global atomics. 64-bit flattened indices, grid-stride loops, read-only loads of input and rois,
// fp32 accumulation of half-type gradients.
#include "detops/core/cuda_check.h"
#include "common/dispatch.h"
#include "common/kernel_launch.cuh"
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

const bool kRegistered = for_each_floating_and_index_type([](auto t, auto i, const std::string& targs) {
  using T = typename decltype(t)::type;
  using Index = typename decltype(i)::type;
  register_instantiation("roi_pool", "roi_pool_forward_kernel", targs, &roi_pool_forward_kernel<T, Index>);
  register_roi_pool_nhwc<T, Index>(targs);
  register_instantiation("roi_pool", "roi_pool_backward_kernel", targs, &roi_pool_backward_kernel<T, Index>);
});

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

void launch_roi_pool_backward(const RoiPoolParams& params, const RoiPoolBackwardArgs& args, DType dtype,
                              cudaStream_t stream) {
  launch_roi_indexed(
      "roi_pool_backward", dtype, roi_elements(args.shape, params), kThreads, true, stream,
      [](auto t, auto i) { return &roi_pool_backward_kernel<type_of<decltype(t)>, type_of<decltype(i)>>; }, params,
      args.shape, args.grad_output, roi_grad_strides(args), args.rois, args.argmax, args.grad_input_acc,
      args.first_invalid_roi, args.first_invalid_argmax);
}

}  // namespace detops
