// Deformable RoI pooling CUDA kernels: RoIAlign's (roi_align_cuda.cu) with each bin moved by its offsets.
// Forward (fp32 accumulation for half types), two kernels (deform_roi_pool.h says which runs): one thread per
// output element over a channels-first map, or over a channels-last map a block per (roi, 32 L channels) with a
// warp per bin and L channels per lane, staging the output tile in shared memory. The channels-last map is the
// input itself or the launcher's tiled transpose of it into the caller's workspace. Backward: one thread per
// grad_output element, channel fastest, accumulating grad_input channels last (then transposed, as
// RoIAlign's backward does); the offset and mask gradients of a bin are sums over its channels, which sit
// on consecutive lanes, so each warp sums its lanes per bin (a segmented shuffle reduction) and one lane
// per bin adds the sum atomically; it reads the map channels last as the forward does. The flattened element
// index is decomposed in 32-bit arithmetic when it provably fits, else in 64-bit; memory offsets into the feature
// map are 64-bit, but for the in-image pixel offsets of the channels-last forward (32-bit when an image fits).
#include "common/channels_last.cuh"
#include "common/dispatch.h"
#include "common/kernel_launch.cuh"
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

// Channels last (deform_roi_pool.h): lane l of a warp holds channels c0 + l + 32 j, j < L (L =
// deform_roi_pool_lane_channels: 256 bytes of a pixel per warp), so each tap is L coalesced reads whose bilinear
// weights and offsets are computed once. Block item (tile, k) covers roi k's channels [32 L tile, 32 L (tile + 1));
// items run tile-major, so the blocks in flight read one 256-byte slice of every pixel (34 MB at FPN P2 of two
// 800x1344 images), which L2 keeps between the rois that overlap. Warp w computes bins w, w + warps, ... into
// tile[bin][c] (row pitch 32 L + 1: a warp's writes and the reads below hit distinct banks); then the block writes
// output[k, 32 L tile .., all bins], one contiguous run. Pixel offsets are Index (32-bit when an image of the map
// has fewer than 2^31 elements); image offsets are 64-bit.
template <int L, typename T, typename Index>
__global__ void __launch_bounds__(kThreads)
    deform_roi_pool_forward_nhwc_kernel(DeformRoiPoolParams p, RoiShape s, const T* __restrict__ input_nhwc,
                                        const T* __restrict__ rois, const T* __restrict__ offset,
                                        const T* __restrict__ mask, T* __restrict__ output,
                                        unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  constexpr int kTileChannels = 32 * L, kPitch = kTileChannels + 1;
  extern __shared__ __align__(16) unsigned char deform_roi_tile[];
  T* tile = reinterpret_cast<T*>(deform_roi_tile);
  const std::int64_t bins = p.pooled_height * p.pooled_width;
  const std::int64_t tiles = (s.channels + kTileChannels - 1) / kTileChannels;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int warp = static_cast<int>(threadIdx.x / 32), warps = static_cast<int>(blockDim.x / 32);
  const Index height = static_cast<Index>(s.height), width = static_cast<Index>(s.width);
  const Index channels = static_cast<Index>(s.channels);
  const Acc gamma = static_cast<Acc>(p.gamma);
  // The loop bounds depend only on blockIdx / gridDim, so every thread of a block reaches each barrier.
  for (std::int64_t item = blockIdx.x; item < s.num_rois * tiles; item += gridDim.x) {
    const std::int64_t t = item / s.num_rois, k = item - t * s.num_rois, c0 = t * kTileChannels;
    const int tile_channels = static_cast<int>(s.channels - c0 < kTileChannels ? s.channels - c0 : kTileChannels);
    const DeformRoiGeometry<Acc> d = deform_roi_geometry<T, Acc>(p, rois + k * 5, s.batch);
    if (d.g.batch < 0 && threadIdx.x == 0 && c0 == 0) report_first_invalid(first_invalid_roi, k);
    const T* image = d.g.batch < 0 ? nullptr : input_nhwc + d.g.batch * s.height * s.width * s.channels + c0 + lane;
    int ph = warp / static_cast<int>(p.pooled_width), pw = warp % static_cast<int>(p.pooled_width);
    for (int bin = warp; bin < bins; bin += warps) {
      Acc sum[L];
#pragma unroll
      for (int j = 0; j < L; ++j) sum[j] = Acc(0);
      RoiAlignGeometry<Acc> g = d.g;
      if (image != nullptr) {
        g = deform_roi_bin_geometry(d, gamma, offset ? offset + k * 2 * bins : nullptr, bins, bin);
        roi_align_for_each_sample(g, height, width, static_cast<Index>(ph), static_cast<Index>(pw),
                                  [&](const BilinearTaps<Acc, Index>& tap) {
          const Index ll = (tap.y_low * width + tap.x_low) * channels, lh = (tap.y_low * width + tap.x_high) * channels;
          const Index hl = (tap.y_high * width + tap.x_low) * channels, hh = (tap.y_high * width + tap.x_high) * channels;
#pragma unroll
          for (int j = 0; j < L; ++j) {
            if (lane + 32 * j < tile_channels) {
              const T* q = image + 32 * j;
              sum[j] += tap.w_ll * to_acc<Acc>(q[ll]) + tap.w_lh * to_acc<Acc>(q[lh]) +
                        tap.w_hl * to_acc<Acc>(q[hl]) + tap.w_hh * to_acc<Acc>(q[hh]);
            }
          }
        });
      }
      const Acc m = image != nullptr && mask ? to_acc<Acc>(mask[k * bins + bin]) : Acc(1);
#pragma unroll
      for (int j = 0; j < L; ++j) {
        const Acc v = sum[j] / g.count;
        tile[bin * kPitch + lane + 32 * j] = from_acc<T>(mask ? v * m : v);
      }
      pw += warps;  // the next bin, bin + warps
      while (pw >= p.pooled_width) {
        pw -= static_cast<int>(p.pooled_width);
        ++ph;
      }
    }
    __syncthreads();
    T* out = output + (k * s.channels + c0) * bins;
    const int run = tile_channels * static_cast<int>(bins);
    for (int e = threadIdx.x; e < run; e += blockDim.x) {
      const int c = e / static_cast<int>(bins);
      out[e] = tile[(e - c * static_cast<int>(bins)) * kPitch + c];
    }
    __syncthreads();
  }
}

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
  constexpr int L = deform_roi_pool_lane_channels(sizeof(T));
  register_instantiation("deform_roi_pool", "deform_roi_pool_forward_nhwc_kernel",
                         std::to_string(L) + ", " + targs, &deform_roi_pool_forward_nhwc_kernel<L, T, Index>);
  register_instantiation("deform_roi_pool", "deform_roi_pool_backward_kernel", targs,
                         &deform_roi_pool_backward_kernel<T, Index>);
});

// The map channels last: input itself when it is, else its copy in workspace (transposed here).
template <typename T>
const T* channels_last_input(const void* input, bool input_channels_last, void* workspace, const RoiShape& s,
                             cudaStream_t stream) {
  if (input_channels_last) return static_cast<const T*>(input);
  if (workspace == nullptr) {
    throw std::invalid_argument("deform_roi_pool: a channels-first input needs channels_last_workspace on CUDA");
  }
  channels_first_to_last<T, T>(static_cast<const T*>(input), static_cast<T*>(workspace), s.batch, s.channels,
                               s.height * s.width, stream);
  return static_cast<const T*>(workspace);
}

}  // namespace

void launch_deform_roi_pool_forward(const DeformRoiPoolParams& params, const DeformRoiPoolForwardArgs& args,
                                    DType dtype, cudaStream_t stream) {
  const RoiShape& s = args.shape;
  if (args.input_channels_last || args.channels_last_workspace != nullptr) {
    const std::int64_t bins = params.pooled_height * params.pooled_width;
    if (s.num_rois == 0 || s.channels == 0 || bins == 0) return;
    dispatch_floating(dtype, "deform_roi_pool_forward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      constexpr int L = deform_roi_pool_lane_channels(sizeof(T));
      if (!deform_roi_pool_forward_channels_last(params, s, sizeof(T), true)) {
        throw std::invalid_argument("launch_deform_roi_pool_forward: the channels-last tile exceeds shared memory");
      }
      const T* input =
          channels_last_input<T>(args.input, args.input_channels_last, args.channels_last_workspace, s, stream);
      const std::int64_t items = s.num_rois * ((s.channels + 32 * L - 1) / (32 * L));
      const std::size_t smem = deform_roi_pool_tile_bytes(params, sizeof(T));
      const unsigned blocks = grid_for(items * kThreads, kThreads);
      auto run = [&](auto kernel) {
        if (smem > 48 * 1024) {
          DETOPS_CUDA_CHECK(
              cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        }
        kernel<<<blocks, kThreads, smem, stream>>>(params, s, input,
                                                   static_cast<const T*>(args.rois), static_cast<const T*>(args.offset),
                                                   static_cast<const T*>(args.mask), static_cast<T*>(args.output),
                                                   args.first_invalid_roi);
        DETOPS_CHECK_LAUNCH();
      };
      if (s.height * s.width * s.channels < (std::int64_t{1} << 31)) {
        run(&deform_roi_pool_forward_nhwc_kernel<L, T, std::int32_t>);
      } else {
        run(&deform_roi_pool_forward_nhwc_kernel<L, T, std::int64_t>);
      }
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
      const T* input = values ? channels_last_input<T>(args.input, args.input_channels_last,
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
