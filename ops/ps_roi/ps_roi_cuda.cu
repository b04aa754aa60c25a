// ps_roi_align / ps_roi_pool CUDA kernels: one thread per output (forward) or grad_output (backward)
// element, 64-bit flattened indices, grid-stride loops, fp32 accumulation for half types.
#include "common/cuda_check.h"
#include "common/dispatch.h"
#include "common/kernel_registry.h"
#include "common/launch.h"
#include "ps_roi/ps_roi_kernel.cuh"

namespace detops {
namespace {

constexpr int kThreads = 256;

// Flat element i of the [K, C_out, ph, pw] output is (roi i / C_in, input channel i % C_in).
template <typename T>
__global__ void ps_roi_align_forward_kernel(PsRoiAlignParams p, PsRoiShape s, const T* __restrict__ input,
                                            const T* __restrict__ rois, T* __restrict__ output,
                                            std::int32_t* __restrict__ channel_mapping,
                                            unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  const std::int64_t total = s.num_rois * s.channels;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const PsRoiElement e = ps_roi_element(i, s.channels, p.pooled_height, p.pooled_width);
    channel_mapping[i] = static_cast<std::int32_t>(e.input_channel);
    const PsRoiAlignGeometry<Acc> g = ps_roi_align_geometry<T, Acc>(p, rois + e.roi * 5, s.batch);
    if (g.batch < 0) {
      output[i] = from_acc<T>(Acc(0));
      if (first_invalid_roi != nullptr) atomicMin(first_invalid_roi, static_cast<unsigned long long>(e.roi));
      continue;
    }
    const T* plane = input + (g.batch * s.channels + e.input_channel) * s.height * s.width;
    output[i] = from_acc<T>(ps_roi_align_bin_average<T, Acc>(g, plane, s.height, s.width, e.bin_y, e.bin_x));
  }
}

template <typename T>
__global__ void ps_roi_align_backward_kernel(PsRoiAlignParams p, PsRoiShape s, const T* __restrict__ grad_output,
                                             std::int64_t go_s0, std::int64_t go_s1, std::int64_t go_s2,
                                             std::int64_t go_s3, const T* __restrict__ rois,
                                             acc_t<T>* __restrict__ grad_input,
                                             unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  const std::int64_t total = s.num_rois * s.channels;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const PsRoiElement e = ps_roi_element(i, s.channels, p.pooled_height, p.pooled_width);
    const PsRoiAlignGeometry<Acc> g = ps_roi_align_geometry<T, Acc>(p, rois + e.roi * 5, s.batch);
    if (g.batch < 0) {
      if (first_invalid_roi != nullptr) atomicMin(first_invalid_roi, static_cast<unsigned long long>(e.roi));
      continue;
    }
    const Acc grad =
        to_acc<Acc>(grad_output[e.roi * go_s0 + e.out_channel * go_s1 + e.bin_y * go_s2 + e.bin_x * go_s3]);
    Acc* plane = grad_input + (g.batch * s.channels + e.input_channel) * s.height * s.width;
    ps_roi_align_bin_scatter(g, grad, s.height, s.width, e.bin_y, e.bin_x,
                             [plane](std::int64_t offset, Acc v) { atomicAdd(plane + offset, v); });
  }
}

template <typename T>
__global__ void ps_roi_pool_forward_kernel(PsRoiPoolParams p, PsRoiShape s, const T* __restrict__ input,
                                           const T* __restrict__ rois, T* __restrict__ output,
                                           std::int32_t* __restrict__ channel_mapping,
                                           unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  const std::int64_t total = s.num_rois * s.channels;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const PsRoiElement e = ps_roi_element(i, s.channels, p.pooled_height, p.pooled_width);
    channel_mapping[i] = static_cast<std::int32_t>(e.input_channel);
    const PsRoiPoolGeometry g = ps_roi_pool_geometry<T, Acc>(p, rois + e.roi * 5, s.batch);
    if (g.batch < 0) {
      output[i] = from_acc<T>(Acc(0));
      if (first_invalid_roi != nullptr) atomicMin(first_invalid_roi, static_cast<unsigned long long>(e.roi));
      continue;
    }
    const T* plane = input + (g.batch * s.channels + e.input_channel) * s.height * s.width;
    const PsRoiPoolBin bin = ps_roi_pool_bin(p, g, s.height, s.width, e.bin_y, e.bin_x);
    output[i] = from_acc<T>(ps_roi_pool_bin_average<T, Acc>(bin, plane, s.width));
  }
}

template <typename T>
__global__ void ps_roi_pool_backward_kernel(PsRoiPoolParams p, PsRoiShape s, const T* __restrict__ grad_output,
                                            std::int64_t go_s0, std::int64_t go_s1, std::int64_t go_s2,
                                            std::int64_t go_s3, const T* __restrict__ rois,
                                            acc_t<T>* __restrict__ grad_input,
                                            unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  const std::int64_t total = s.num_rois * s.channels;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const PsRoiElement e = ps_roi_element(i, s.channels, p.pooled_height, p.pooled_width);
    const PsRoiPoolGeometry g = ps_roi_pool_geometry<T, Acc>(p, rois + e.roi * 5, s.batch);
    if (g.batch < 0) {
      if (first_invalid_roi != nullptr) atomicMin(first_invalid_roi, static_cast<unsigned long long>(e.roi));
      continue;
    }
    const Acc grad =
        to_acc<Acc>(grad_output[e.roi * go_s0 + e.out_channel * go_s1 + e.bin_y * go_s2 + e.bin_x * go_s3]);
    Acc* plane = grad_input + (g.batch * s.channels + e.input_channel) * s.height * s.width;
    const PsRoiPoolBin bin = ps_roi_pool_bin(p, g, s.height, s.width, e.bin_y, e.bin_x);
    ps_roi_pool_bin_scatter(bin, grad, s.width, [plane](std::int64_t offset, Acc v) { atomicAdd(plane + offset, v); });
  }
}

template <typename T>
void register_ps_roi_kernels(const char* type_name) {
  static const std::string align_fwd = std::string("ps_roi_align_forward_kernel<") + type_name + ">";
  static const std::string align_bwd = std::string("ps_roi_align_backward_kernel<") + type_name + ">";
  static const std::string pool_fwd = std::string("ps_roi_pool_forward_kernel<") + type_name + ">";
  static const std::string pool_bwd = std::string("ps_roi_pool_backward_kernel<") + type_name + ">";
  register_kernel("ps_roi_align", align_fwd.c_str(), reinterpret_cast<const void*>(&ps_roi_align_forward_kernel<T>));
  register_kernel("ps_roi_align", align_bwd.c_str(), reinterpret_cast<const void*>(&ps_roi_align_backward_kernel<T>));
  register_kernel("ps_roi_pool", pool_fwd.c_str(), reinterpret_cast<const void*>(&ps_roi_pool_forward_kernel<T>));
  register_kernel("ps_roi_pool", pool_bwd.c_str(), reinterpret_cast<const void*>(&ps_roi_pool_backward_kernel<T>));
}

const bool kRegistered = [] {
  register_ps_roi_kernels<double>("double");
  register_ps_roi_kernels<float>("float");
  register_ps_roi_kernels<__half>("half");
  register_ps_roi_kernels<__nv_bfloat16>("bfloat16");
  return true;
}();

std::int64_t elements(const PsRoiShape& s) { return s.num_rois * s.channels; }

}  // namespace

void launch_ps_roi_align_forward(const PsRoiAlignParams& params, const PsRoiForwardArgs& args, DType dtype,
                                 cudaStream_t stream) {
  const std::int64_t total = elements(args.shape);
  if (total == 0) return;
  dispatch_floating(dtype, "ps_roi_align_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ps_roi_align_forward_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(
        params, args.shape, static_cast<const T*>(args.input), static_cast<const T*>(args.rois),
        static_cast<T*>(args.output), args.channel_mapping, args.first_invalid_roi);
  });
  DETOPS_CHECK_LAUNCH();
}

void launch_ps_roi_align_backward(const PsRoiAlignParams& params, const PsRoiBackwardArgs& args, DType dtype,
                                  cudaStream_t stream) {
  const std::int64_t total = elements(args.shape);
  if (total == 0) return;
  const auto& st = args.grad_output_strides;
  dispatch_floating(dtype, "ps_roi_align_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ps_roi_align_backward_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(
        params, args.shape, static_cast<const T*>(args.grad_output), st[0], st[1], st[2], st[3],
        static_cast<const T*>(args.rois), static_cast<acc_t<T>*>(args.grad_input_acc), args.first_invalid_roi);
  });
  DETOPS_CHECK_LAUNCH();
}

void launch_ps_roi_pool_forward(const PsRoiPoolParams& params, const PsRoiForwardArgs& args, DType dtype,
                                cudaStream_t stream) {
  const std::int64_t total = elements(args.shape);
  if (total == 0) return;
  dispatch_floating(dtype, "ps_roi_pool_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ps_roi_pool_forward_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(
        params, args.shape, static_cast<const T*>(args.input), static_cast<const T*>(args.rois),
        static_cast<T*>(args.output), args.channel_mapping, args.first_invalid_roi);
  });
  DETOPS_CHECK_LAUNCH();
}

void launch_ps_roi_pool_backward(const PsRoiPoolParams& params, const PsRoiBackwardArgs& args, DType dtype,
                                 cudaStream_t stream) {
  const std::int64_t total = elements(args.shape);
  if (total == 0) return;
  const auto& st = args.grad_output_strides;
  dispatch_floating(dtype, "ps_roi_pool_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ps_roi_pool_backward_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(
        params, args.shape, static_cast<const T*>(args.grad_output), st[0], st[1], st[2], st[3],
        static_cast<const T*>(args.rois), static_cast<acc_t<T>*>(args.grad_input_acc), args.first_invalid_roi);
  });
  DETOPS_CHECK_LAUNCH();
}

}  // namespace detops
