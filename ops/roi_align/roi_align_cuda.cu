// RoIAlign CUDA kernels, fp32 accumulation for half types. Forward: over a channels-last map (the input itself
// or its copy, common/roi_nhwc.h says when) the family's gather (common/roi_bins_nhwc.cuh: a block per roi and
// channel tile, a warp per bin, each touched pixel read once); else one thread per output element. Backward:
// one thread per grad_output element, accumulating channels last, then transposed (common/channels_last.cuh).
// Grid-stride loops. The flattened element index is decomposed in 32-bit
// arithmetic when it provably fits (64-bit division costs ~4x more), else in 64-bit; memory offsets
// into the feature map are always 64-bit.
#include "common/channels_last.cuh"
#include "detops/core/cuda_check.h"
#include "common/dispatch.h"
#include "common/kernel_launch.cuh"
#include "common/roi_bins_nhwc.cuh"
#include "common/roi_cuda.cuh"
#include "roi_align/roi_align_kernel.cuh"

#include <stdexcept>

namespace detops {
namespace {

constexpr int kThreads = 256;

// 32-bit index math is safe when every index the loop can form (total + grid stride, launch_index_width)
// and every in-plane offset (< height * width) fits; plane base offsets are always 64-bit.
bool plane_fits_32bit(const RoiAlignShape& s) { return s.height * s.width < (std::int64_t{1} << 31); }

template <typename T, typename Index>
__global__ void roi_align_forward_kernel(RoiAlignParams p, RoiAlignShape s, const T* __restrict__ input,
                                         const T* __restrict__ rois, T* __restrict__ output,
                                         unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  const Index pw_n = static_cast<Index>(p.pooled_width), ph_n = static_cast<Index>(p.pooled_height);
  const Index channels = static_cast<Index>(s.channels);
  grid_stride_for<Index>(static_cast<Index>(s.num_rois) * channels * ph_n * pw_n, [&](Index i) {
    const auto [k, c, ph, pw] = roi_align_element(i, channels, ph_n, pw_n);
    const RoiAlignGeometry<Acc> g = roi_align_geometry<T, Acc>(p, rois + k * 5, s.batch);
    if (g.batch < 0) {
      output[i] = from_acc<T>(Acc(0));
      return report_first_invalid(first_invalid_roi, k);
    }
    const T* plane = input + (g.batch * s.channels + c) * s.height * s.width;
    output[i] = from_acc<T>(roi_align_bin_average<T, Acc, Index>(g, plane, static_cast<Index>(s.height),
                                                                 static_cast<Index>(s.width), ph, pw));
  });
}

// The backward scatters channels last: element i is (roi k, bin row ph, bin column pw, channel c) with the
// channel fastest, and accumulates into grad_input_acc laid out [batch, height, width, channels]. A warp's
// atomics for one bilinear tap then land on 32 consecutive channels of one pixel (one 128-byte line)
// instead of 32 scattered addresses of one plane, which is what bounds the channels-first scatter.
template <typename T, typename Index>
__global__ void roi_align_backward_kernel(RoiAlignParams p, RoiAlignShape s, const T* __restrict__ grad_output,
                                          RoiGradStrides go, const T* __restrict__ rois,
                                          acc_t<T>* __restrict__ grad_input_nhwc,
                                          unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  const Index pw_n = static_cast<Index>(p.pooled_width), ph_n = static_cast<Index>(p.pooled_height);
  const Index channels = static_cast<Index>(s.channels);
  grid_stride_for<Index>(static_cast<Index>(s.num_rois) * channels * ph_n * pw_n, [&](Index i) {
    const Index c = i % channels;
    const Index bin = i / channels;
    const Index pw = bin % pw_n;
    const Index kph = bin / pw_n;
    const Index ph = kph % ph_n;
    const Index k = kph / ph_n;
    const RoiAlignGeometry<Acc> g = roi_align_geometry<T, Acc>(p, rois + k * 5, s.batch);
    if (g.batch < 0) {
      if (c == 0) report_first_invalid(first_invalid_roi, k);
      return;
    }
    const Acc grad = to_acc<Acc>(grad_output[go.offset(k, c, ph, pw)]);
    Acc* image = grad_input_nhwc + g.batch * s.height * s.width * s.channels + c;
    const std::int64_t pixel_stride = s.channels;
    roi_align_bin_scatter(g, grad, static_cast<Index>(s.height), static_cast<Index>(s.width), ph, pw,
                          [image, pixel_stride](Index pixel, Acc v) {
                            atomicAdd(image + static_cast<std::int64_t>(pixel) * pixel_stride, v);
                          });
  });
}

// RoIAlign's bins for the channels-last gather (common/roi_bins_nhwc.cuh): every bin of a roi shares its geometry.
template <typename T>
struct RoiAlignBins {
  using Acc = acc_t<T>;
  using State = RoiAlignGeometry<Acc>;
  static constexpr bool kBinsShareGeometry = true;
  RoiAlignParams p;
  const T* rois;
  std::int64_t batch_size, pooled_height, pooled_width;
  __device__ State roi(std::int64_t k) const { return roi_align_geometry<T, Acc>(p, rois + k * 5, batch_size); }
  __device__ std::int64_t batch(const State& g) const { return g.batch; }
  __device__ State bin(const State& g, std::int64_t, std::int64_t) const { return g; }
  __device__ bool scales() const { return false; }
  __device__ Acc scale(std::int64_t, std::int64_t) const { return Acc(1); }
};

const bool kRegistered = for_each_floating_and_index_type([](auto t, auto i, const std::string& targs) {
  using T = typename decltype(t)::type;
  using Index = typename decltype(i)::type;
  register_instantiation("roi_align", "roi_align_forward_kernel", targs, &roi_align_forward_kernel<T, Index>);
  register_roi_bins_nhwc<T, Index, RoiAlignBins<T>>("roi_align", targs);
  register_instantiation("roi_align", "roi_align_backward_kernel", targs, &roi_align_backward_kernel<T, Index>);
});

}  // namespace

void launch_roi_align_forward(const RoiAlignParams& params, const RoiAlignForwardArgs& args, DType dtype,
                              cudaStream_t stream) {
  if (args.input_channels_last || args.channels_last_workspace != nullptr) {
    dispatch_floating(dtype, "roi_align_forward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const RoiAlignBins<T> bins{params, static_cast<const T*>(args.rois), args.shape.batch, params.pooled_height,
                                 params.pooled_width};
      launch_roi_bins_nhwc<T>("roi_align", bins, args, stream);
    });
    return;
  }
  launch_roi_indexed(
      "roi_align_forward", dtype, roi_elements(args.shape, params), kThreads, plane_fits_32bit(args.shape), stream,
      [](auto t, auto i) { return &roi_align_forward_kernel<type_of<decltype(t)>, type_of<decltype(i)>>; }, params,
      args.shape, args.input, args.rois, args.output, args.first_invalid_roi);
}

void launch_roi_align_backward(const RoiAlignParams& params, const RoiAlignBackwardArgs& args, DType dtype,
                               cudaStream_t stream) {
  const RoiAlignShape& s = args.shape;
  const std::int64_t total = roi_elements(s, params);
  if (s.batch * s.channels * s.height * s.width == 0) return;
  if (args.grad_input == nullptr) throw std::invalid_argument("launch_roi_align_backward: grad_input must be set on CUDA");
  dispatch_floating(dtype, "roi_align_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    if (total > 0) {
      launch_index_width([](auto i) { return &roi_align_backward_kernel<T, typename decltype(i)::type>; }, total,
                         kThreads, plane_fits_32bit(s), stream, params, s, args.grad_output, roi_grad_strides(args),
                         args.rois, args.grad_input_acc, args.first_invalid_roi);
    }
    channels_last_to_first<Acc, T>(static_cast<const Acc*>(args.grad_input_acc), static_cast<T*>(args.grad_input),
                                   s.batch, s.height * s.width, s.channels, stream);
  });
}

}  // namespace detops
