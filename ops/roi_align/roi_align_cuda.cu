// RoIAlign CUDA kernels: one thread per output (forward) or grad_output (backward) element, grid-stride
// loops, fp32 accumulation for half types. The backward accumulates channels last, then transposes
// (common/channels_last.cuh). The flattened element index is decomposed in 32-bit
// arithmetic when it provably fits (64-bit division costs ~4x more), else in 64-bit; memory offsets
// into the feature map are always 64-bit.
#include "common/channels_last.cuh"
#include "common/cuda_check.h"
#include "common/dispatch.h"
#include "common/kernel_registry.h"
#include "common/launch.h"
#include "roi_align/roi_align_kernel.cuh"

#include <stdexcept>

namespace detops {
namespace {

constexpr int kThreads = 256;

// 32-bit index math is safe when every index the loop can form (total + grid stride) and every
// in-plane offset (< height * width) fits; plane base offsets are always 64-bit.
bool fits_32bit(std::int64_t total, unsigned blocks, const RoiAlignShape& s) {
  constexpr std::int64_t kLimit = std::int64_t{1} << 31;
  return total + static_cast<std::int64_t>(blocks) * kThreads < kLimit && s.height * s.width < kLimit;
}

template <typename T, typename Index>
__global__ void roi_align_forward_kernel(RoiAlignParams p, RoiAlignShape s, const T* __restrict__ input,
                                         const T* __restrict__ rois, T* __restrict__ output,
                                         unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  const Index pw_n = static_cast<Index>(p.pooled_width), ph_n = static_cast<Index>(p.pooled_height);
  const Index channels = static_cast<Index>(s.channels);
  const Index total = static_cast<Index>(s.num_rois) * channels * ph_n * pw_n;
  const Index stride = static_cast<Index>(blockDim.x) * static_cast<Index>(gridDim.x);
  for (Index i = static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + static_cast<Index>(threadIdx.x);
       i < total; i += stride) {
    const auto [k, c, ph, pw] = roi_align_element(i, channels, ph_n, pw_n);
    const RoiAlignGeometry<Acc> g = roi_align_geometry<T, Acc>(p, rois + k * 5, s.batch);
    if (g.batch < 0) {
      output[i] = from_acc<T>(Acc(0));
      if (first_invalid_roi != nullptr) atomicMin(first_invalid_roi, static_cast<unsigned long long>(k));
      continue;
    }
    const T* plane = input + (g.batch * s.channels + c) * s.height * s.width;
    output[i] = from_acc<T>(roi_align_bin_average<T, Acc, Index>(g, plane, static_cast<Index>(s.height),
                                                                 static_cast<Index>(s.width), ph, pw));
  }
}

// The backward scatters channels last: element i is (roi k, bin row ph, bin column pw, channel c) with the
// channel fastest, and accumulates into grad_input_acc laid out [batch, height, width, channels]. A warp's
// atomics for one bilinear tap then land on 32 consecutive channels of one pixel (one 128-byte line)
// instead of 32 scattered addresses of one plane, which is what bounds the channels-first scatter.
template <typename T, typename Index>
__global__ void roi_align_backward_kernel(RoiAlignParams p, RoiAlignShape s, const T* __restrict__ grad_output,
                                          std::int64_t go_s0, std::int64_t go_s1, std::int64_t go_s2,
                                          std::int64_t go_s3, const T* __restrict__ rois,
                                          acc_t<T>* __restrict__ grad_input_nhwc,
                                          unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  const Index pw_n = static_cast<Index>(p.pooled_width), ph_n = static_cast<Index>(p.pooled_height);
  const Index channels = static_cast<Index>(s.channels);
  const Index total = static_cast<Index>(s.num_rois) * channels * ph_n * pw_n;
  const Index stride = static_cast<Index>(blockDim.x) * static_cast<Index>(gridDim.x);
  for (Index i = static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + static_cast<Index>(threadIdx.x);
       i < total; i += stride) {
    const Index c = i % channels;
    const Index bin = i / channels;
    const Index pw = bin % pw_n;
    const Index kph = bin / pw_n;
    const Index ph = kph % ph_n;
    const Index k = kph / ph_n;
    const RoiAlignGeometry<Acc> g = roi_align_geometry<T, Acc>(p, rois + k * 5, s.batch);
    if (g.batch < 0) {
      if (first_invalid_roi != nullptr && c == 0) atomicMin(first_invalid_roi, static_cast<unsigned long long>(k));
      continue;
    }
    const Acc grad = to_acc<Acc>(grad_output[static_cast<std::int64_t>(k) * go_s0 + static_cast<std::int64_t>(c) * go_s1 +
                                             static_cast<std::int64_t>(ph) * go_s2 + static_cast<std::int64_t>(pw) * go_s3]);
    Acc* image = grad_input_nhwc + g.batch * s.height * s.width * s.channels + c;
    const std::int64_t pixel_stride = s.channels;
    roi_align_bin_scatter(g, grad, static_cast<Index>(s.height), static_cast<Index>(s.width), ph, pw,
                          [image, pixel_stride](Index pixel, Acc v) {
                            atomicAdd(image + static_cast<std::int64_t>(pixel) * pixel_stride, v);
                          });
  }
}

template <typename T, typename Index>
void register_roi_align_kernels(const std::string& type_name, const char* index_name) {
  const std::string suffix = "<" + type_name + ", " + index_name + ">";
  register_kernel("roi_align", ("roi_align_forward_kernel" + suffix).c_str(),
                  reinterpret_cast<const void*>(&roi_align_forward_kernel<T, Index>));
  register_kernel("roi_align", ("roi_align_backward_kernel" + suffix).c_str(),
                  reinterpret_cast<const void*>(&roi_align_backward_kernel<T, Index>));
}

template <typename T>
void register_roi_align_kernels(const char* type_name) {
  register_roi_align_kernels<T, std::int32_t>(type_name, "int32");
  register_roi_align_kernels<T, std::int64_t>(type_name, "int64");
}

const bool kRegistered = [] {
  register_roi_align_kernels<double>("double");
  register_roi_align_kernels<float>("float");
  register_roi_align_kernels<__half>("half");
  register_roi_align_kernels<__nv_bfloat16>("bfloat16");
  return true;
}();

}  // namespace

void launch_roi_align_forward(const RoiAlignParams& params, const RoiAlignForwardArgs& args, DType dtype,
                              cudaStream_t stream) {
  const RoiAlignShape& s = args.shape;
  const std::int64_t total = s.num_rois * s.channels * params.pooled_height * params.pooled_width;
  if (total == 0) return;
  const unsigned blocks = grid_for(total, kThreads);
  dispatch_floating(dtype, "roi_align_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto kernel = fits_32bit(total, blocks, s) ? roi_align_forward_kernel<T, std::int32_t>
                                                 : roi_align_forward_kernel<T, std::int64_t>;
    kernel<<<blocks, kThreads, 0, stream>>>(params, s, static_cast<const T*>(args.input),
                                            static_cast<const T*>(args.rois), static_cast<T*>(args.output),
                                            args.first_invalid_roi);
  });
  DETOPS_CHECK_LAUNCH();
}

void launch_roi_align_backward(const RoiAlignParams& params, const RoiAlignBackwardArgs& args, DType dtype,
                               cudaStream_t stream) {
  const RoiAlignShape& s = args.shape;
  const std::int64_t total = s.num_rois * s.channels * params.pooled_height * params.pooled_width;
  if (s.batch * s.channels * s.height * s.width == 0) return;
  if (args.grad_input == nullptr) throw std::invalid_argument("launch_roi_align_backward: grad_input must be set on CUDA");
  const auto& st = args.grad_output_strides;
  dispatch_floating(dtype, "roi_align_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    if (total > 0) {
      const unsigned blocks = grid_for(total, kThreads);
      auto kernel = fits_32bit(total, blocks, s) ? roi_align_backward_kernel<T, std::int32_t>
                                                   : roi_align_backward_kernel<T, std::int64_t>;
      kernel<<<blocks, kThreads, 0, stream>>>(params, s, static_cast<const T*>(args.grad_output), st[0], st[1], st[2],
                                              st[3], static_cast<const T*>(args.rois),
                                              static_cast<Acc*>(args.grad_input_acc), args.first_invalid_roi);
      DETOPS_CHECK_LAUNCH();
    }
    channels_last_to_first<Acc, T>(static_cast<const Acc*>(args.grad_input_acc), static_cast<T*>(args.grad_input),
                                   s.batch, s.height * s.width, s.channels, stream);
  });
}

}  // namespace detops
