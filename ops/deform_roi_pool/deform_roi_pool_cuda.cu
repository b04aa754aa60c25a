// Deformable RoI pooling CUDA kernels: RoIAlign's (roi_align_cuda.cu) with each bin moved by its offsets.
// Forward (fp32 accumulation for half types), two kernels (common/roi_nhwc.h says which runs): one thread per
// output element over a channels-first map, or over a channels-last map RoIAlign's gather
// (common/roi_bins_nhwc.cuh) with the DeformRoiBins policy below. Backward: one thread per
// grad_output element, channel fastest, accumulating grad_input channels last (then transposed, as
// RoIAlign's backward does); the offset and mask gradients of a bin are sums over its channels, which sit
// on consecutive lanes, so each warp sums its lanes per bin (a segmented shuffle reduction) and one lane
// per bin adds the sum atomically; it reads the map channels last as the forward does. The flattened element
// index is decomposed in 32-bit arithmetic when it provably fits, else in 64-bit; memory offsets into the feature
// map are 64-bit.
#include "common/channels_last.cuh"
#include "common/dispatch.h"
#include "common/kernel_launch.cuh"
#include "common/roi_bins_nhwc.cuh"
#include "common/roi_cuda.cuh"
#include "deform_roi_pool/deform_roi_pool_kernel.cuh"
#include "detops/core/cuda_check.h"

#include <stdexcept>
#include <string>

namespace detops {
namespace {

constexpr int kThreads = 256;  // a multiple of the warp size: the backward's loop keeps whole warps together
constexpr unsigned kFullWarp = 0xffffffffu;

// 32-bit in-plane offsets are safe when the plane has fewer than 2^31 elements (launch_index_width checks
// the flat indices); plane base offsets are always 64-bit.
bool plane_fits_32bit(const RoiShape& s) { return s.height * s.width < (std::int64_t{1} << 31); }

template <typename T, typename Index>
__global__ void deform_roi_pool_forward_kernel(DeformRoiPoolParams p, RoiShape s, const T* __restrict__ input,
                                               const T* __restrict__ rois, const T* __restrict__ offset,
                                               const T* __restrict__ mask, T* __restrict__ output,
                                               unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  const Index pw_n = static_cast<Index>(p.pooled_width), ph_n = static_cast<Index>(p.pooled_height);
  const Index channels = static_cast<Index>(s.channels);
  const std::int64_t bins = p.pooled_height * p.pooled_width;
  grid_stride_for<Index>(static_cast<Index>(s.num_rois) * channels * ph_n * pw_n, [&](Index i) {
    const auto [k, c, ph, pw] = roi_align_element(i, channels, ph_n, pw_n);
    const DeformRoiGeometry<Acc> d = deform_roi_geometry<T, Acc>(p, rois + static_cast<std::int64_t>(k) * 5, s.batch);
    if (d.g.batch < 0) {
      output[i] = from_acc<T>(Acc(0));
      return report_first_invalid(first_invalid_roi, k);
    }
    const std::int64_t bin = static_cast<std::int64_t>(ph) * p.pooled_width + pw;
    const std::int64_t kk = k;
    const RoiAlignGeometry<Acc> g = deform_roi_bin_geometry(d, static_cast<Acc>(p.gamma),
                                                            offset ? offset + kk * 2 * bins : nullptr, bins, bin);
    const T* plane = input + (d.g.batch * s.channels + c) * s.height * s.width;
    const Acc v = roi_align_bin_average<T, Acc, Index>(g, plane, static_cast<Index>(s.height),
                                                       static_cast<Index>(s.width), ph, pw);
    output[i] = from_acc<T>(mask ? v * to_acc<Acc>(mask[kk * bins + bin]) : v);
  });
}

// deform_roi_pool's bins for the channels-last gather (common/roi_bins_nhwc.cuh): RoIAlign's (aligned) moved by
// the bin's offsets, times the bin's mask when there is one. With no offset (or zeros) every bin keeps the
// roi's geometry, so the result is roi_align's bit for bit (the same kernel, the same sums).
template <typename T>
struct DeformRoiBins {
  using Acc = acc_t<T>;
  using State = DeformRoiGeometry<Acc>;
  static constexpr bool kBinsShareGeometry = false;  // the offsets move each bin
  DeformRoiPoolParams p;
  const T* rois;
  const T* offset;
  const T* mask;
  std::int64_t batch_size, pooled_height, pooled_width;
  __device__ State roi(std::int64_t k) const { return deform_roi_geometry<T, Acc>(p, rois + k * 5, batch_size); }
  __device__ std::int64_t batch(const State& d) const { return d.g.batch; }
  __device__ RoiAlignGeometry<Acc> bin(const State& d, std::int64_t k, std::int64_t bin) const {
    const std::int64_t bins = pooled_height * pooled_width;
    return deform_roi_bin_geometry(d, static_cast<Acc>(p.gamma), offset ? offset + k * 2 * bins : nullptr, bins, bin);
  }
  __device__ bool scales() const { return mask != nullptr; }
  __device__ Acc scale(std::int64_t k, std::int64_t bin) const {
    return to_acc<Acc>(mask[k * pooled_height * pooled_width + bin]);
  }
};

// Lane sums of the lanes with the same key, for keys that form contiguous runs along the warp (a bin's
// channels): after the loop a lane holds the sum over itself and the following lanes of its run, so the
// run's first lane (the returned `head`) holds the run's sum. Every lane of the warp must call it.
template <typename Acc, typename Key>
__device__ __forceinline__ bool warp_run_sum(Key key, DeformRoiBinGrads<Acc>& r) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  for (int delta = 1; delta < 32; delta <<= 1) {
    const Key other = __shfl_down_sync(kFullWarp, key, delta);
    const Acc x = __shfl_down_sync(kFullWarp, r.offset_x, delta);
    const Acc y = __shfl_down_sync(kFullWarp, r.offset_y, delta);
    const Acc m = __shfl_down_sync(kFullWarp, r.mask, delta);
    if (lane + delta < 32 && other == key) {
      r.offset_x += x;
      r.offset_y += y;
      r.mask += m;
    }
  }
  const Key previous = __shfl_up_sync(kFullWarp, key, 1);
  return lane == 0 || previous != key;
}

// Element i is (roi k, bin row ph, bin column pw, channel c) with the channel fastest. grad_input_nhwc and
// input_nhwc are [batch, height, width, channels]; input_nhwc is read only when grad_offset or grad_mask is
// set. The loop runs whole warps (every lane the same number of rounds, idle lanes with key -1) because
// warp_run_sum needs every lane.
template <typename T, typename Index>
__global__ void deform_roi_pool_backward_kernel(DeformRoiPoolParams p, RoiShape s, const T* __restrict__ grad_output,
                                                RoiGradStrides go, const T* __restrict__ rois,
                                                const T* __restrict__ input_nhwc, const T* __restrict__ offset,
                                                const T* __restrict__ mask, acc_t<T>* __restrict__ grad_input_nhwc,
                                                acc_t<T>* __restrict__ grad_offset, acc_t<T>* __restrict__ grad_mask,
                                                unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  const Index pw_n = static_cast<Index>(p.pooled_width), ph_n = static_cast<Index>(p.pooled_height);
  const Index channels = static_cast<Index>(s.channels);
  const Index total = static_cast<Index>(s.num_rois) * channels * ph_n * pw_n;
  const std::int64_t bins = p.pooled_height * p.pooled_width;
  const bool values = grad_offset != nullptr || grad_mask != nullptr;
  const Acc gamma = static_cast<Acc>(p.gamma);
  const Index lane = static_cast<Index>(threadIdx.x & 31u);
  const Index stride = grid_stride_step<Index>();
  for (Index base = grid_stride_first<Index>() - lane; base < total; base += stride) {
    const Index i = base + lane;
    DeformRoiBinGrads<Acc> r;
    Index key = -1;  // the element's bin, k * bins + ph * pooled_width + pw
    if (i < total) {
      const Index c = i % channels;
      const Index bin_k = i / channels;
      const Index pw = bin_k % pw_n;
      const Index kph = bin_k / pw_n;
      const Index ph = kph % ph_n;
      const Index k = kph / ph_n;
      const DeformRoiGeometry<Acc> d = deform_roi_geometry<T, Acc>(p, rois + static_cast<std::int64_t>(k) * 5, s.batch);
      if (d.g.batch < 0) {
        if (c == 0) report_first_invalid(first_invalid_roi, k);
      } else {
        key = bin_k;
        const std::int64_t bin = static_cast<std::int64_t>(ph) * p.pooled_width + pw, kk = k;
        const RoiAlignGeometry<Acc> g =
            deform_roi_bin_geometry(d, gamma, offset ? offset + kk * 2 * bins : nullptr, bins, bin);
        const Acc m = mask ? to_acc<Acc>(mask[kk * bins + bin]) : Acc(1);
        const std::int64_t image = d.g.batch * s.height * s.width * s.channels + c, pixel_stride = s.channels;
        const T* in = input_nhwc + image;
        Acc* grad_image = grad_input_nhwc + image;
        r = deform_roi_bin_backward(
            g, d, gamma, to_acc<Acc>(grad_output[go.offset(k, c, ph, pw)]), m, values,
            static_cast<Index>(s.height), static_cast<Index>(s.width), ph, pw,
            [in, pixel_stride](Index pixel) { return to_acc<Acc>(in[static_cast<std::int64_t>(pixel) * pixel_stride]); },
            [grad_image, pixel_stride](Index pixel, Acc v) {
              atomicAdd(grad_image + static_cast<std::int64_t>(pixel) * pixel_stride, v);
            });
      }
    }
    if (!values) continue;  // uniform over the grid
    if (warp_run_sum(key, r) && key >= 0) {
      const std::int64_t kk = key / (ph_n * pw_n), bin = key % (ph_n * pw_n);
      if (grad_offset) {
        atomicAdd(grad_offset + kk * 2 * bins + bin, r.offset_x);
        atomicAdd(grad_offset + kk * 2 * bins + bins + bin, r.offset_y);
      }
      if (grad_mask) atomicAdd(grad_mask + kk * bins + bin, r.mask);
    }
  }
}

const bool kRegistered = for_each_floating_and_index_type([](auto t, auto i, const std::string& targs) {
  using T = typename decltype(t)::type;
  using Index = typename decltype(i)::type;
  register_instantiation("deform_roi_pool", "deform_roi_pool_forward_kernel", targs,
                         &deform_roi_pool_forward_kernel<T, Index>);
  register_roi_bins_nhwc<T, Index, DeformRoiBins<T>>("deform_roi_pool", targs);
  register_instantiation("deform_roi_pool", "deform_roi_pool_backward_kernel", targs,
                         &deform_roi_pool_backward_kernel<T, Index>);
});

}  // namespace

void launch_deform_roi_pool_forward(const DeformRoiPoolParams& params, const DeformRoiPoolForwardArgs& args,
                                    DType dtype, cudaStream_t stream) {
  const RoiShape& s = args.shape;
  if (args.input_channels_last || args.channels_last_workspace != nullptr) {
    dispatch_floating(dtype, "deform_roi_pool_forward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const DeformRoiBins<T> bins{params, static_cast<const T*>(args.rois), static_cast<const T*>(args.offset),
                                  static_cast<const T*>(args.mask), s.batch, params.pooled_height, params.pooled_width};
      launch_roi_bins_nhwc<T>("deform_roi_pool", bins, args, stream);
    });
    return;
  }
  launch_roi_indexed(
      "deform_roi_pool_forward", dtype, roi_elements(args.shape, params), kThreads, plane_fits_32bit(args.shape),
      stream, [](auto t, auto i) { return &deform_roi_pool_forward_kernel<type_of<decltype(t)>, type_of<decltype(i)>>; },
      params, args.shape, args.input, args.rois, args.offset, args.mask, args.output, args.first_invalid_roi);
}

void launch_deform_roi_pool_backward(const DeformRoiPoolParams& params, const DeformRoiPoolBackwardArgs& args,
                                     DType dtype, cudaStream_t stream) {
  const RoiShape& s = args.shape;
  const std::int64_t total = roi_elements(s, params);
  if (s.batch * s.channels * s.height * s.width == 0) return;
  if (args.grad_input == nullptr) {
    throw std::invalid_argument("launch_deform_roi_pool_backward: grad_input must be set on CUDA");
  }
  dispatch_floating(dtype, "deform_roi_pool_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    if (total > 0) {
      const bool values = args.grad_offset_acc != nullptr || args.grad_mask_acc != nullptr;
      const T* input = values ? roi_channels_last_input<T>("deform_roi_pool", args.input, args.input_channels_last,
                                                           args.channels_last_workspace, s, stream)
                              : nullptr;
      launch_index_width([](auto i) { return &deform_roi_pool_backward_kernel<T, typename decltype(i)::type>; },
                         total, kThreads, plane_fits_32bit(s), stream, params, s, args.grad_output,
                         roi_grad_strides(args), args.rois, input, args.offset, args.mask, args.grad_input_acc,
                         args.grad_offset_acc, args.grad_mask_acc, args.first_invalid_roi);
    }
    channels_last_to_first<Acc, T>(static_cast<const Acc*>(args.grad_input_acc), static_cast<T*>(args.grad_input),
                                   s.batch, s.height * s.width, s.channels, stream);
  });
}

}  // namespace detops
