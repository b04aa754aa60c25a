// RoIAlign CUDA kernels: one thread per output (forward) or grad_output (backward) element, 64-bit
// flattened indices, grid-stride loops, fp32 accumulation for half types.
#include "common/cuda_check.h"
#include "common/dispatch.h"
#include "common/kernel_registry.h"
#include "common/launch.h"
#include "roi_align/roi_align_kernel.cuh"

namespace detops {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void roi_align_forward_kernel(RoiAlignParams p, RoiAlignShape s, const T* __restrict__ input,
                                         const T* __restrict__ rois, T* __restrict__ output,
                                         unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  const std::int64_t pw_n = p.pooled_width, ph_n = p.pooled_height;
  const std::int64_t total = s.num_rois * s.channels * ph_n * pw_n;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const std::int64_t pw = i % pw_n;
    const std::int64_t ph = (i / pw_n) % ph_n;
    const std::int64_t c = (i / (pw_n * ph_n)) % s.channels;
    const std::int64_t k = i / (pw_n * ph_n * s.channels);
    const RoiAlignGeometry<Acc> g = roi_align_geometry<T, Acc>(p, rois + k * 5, s.batch);
    if (g.batch < 0) {
      output[i] = from_acc<T>(Acc(0));
      if (first_invalid_roi != nullptr) atomicMin(first_invalid_roi, static_cast<unsigned long long>(k));
      continue;
    }
    const T* plane = input + (g.batch * s.channels + c) * s.height * s.width;
    output[i] = from_acc<T>(roi_align_bin_average<T, Acc>(g, plane, s.height, s.width, ph, pw));
  }
}

template <typename T>
__global__ void roi_align_backward_kernel(RoiAlignParams p, RoiAlignShape s, const T* __restrict__ grad_output,
                                          std::int64_t go_s0, std::int64_t go_s1, std::int64_t go_s2,
                                          std::int64_t go_s3, const T* __restrict__ rois,
                                          acc_t<T>* __restrict__ grad_input, unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  const std::int64_t pw_n = p.pooled_width, ph_n = p.pooled_height;
  const std::int64_t total = s.num_rois * s.channels * ph_n * pw_n;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const std::int64_t pw = i % pw_n;
    const std::int64_t ph = (i / pw_n) % ph_n;
    const std::int64_t c = (i / (pw_n * ph_n)) % s.channels;
    const std::int64_t k = i / (pw_n * ph_n * s.channels);
    const RoiAlignGeometry<Acc> g = roi_align_geometry<T, Acc>(p, rois + k * 5, s.batch);
    if (g.batch < 0) {
      if (first_invalid_roi != nullptr) atomicMin(first_invalid_roi, static_cast<unsigned long long>(k));
      continue;
    }
    const Acc grad = to_acc<Acc>(grad_output[k * go_s0 + c * go_s1 + ph * go_s2 + pw * go_s3]);
    Acc* plane = grad_input + (g.batch * s.channels + c) * s.height * s.width;
    roi_align_bin_scatter(g, grad, s.height, s.width, ph, pw,
                          [plane](std::int64_t offset, Acc v) { atomicAdd(plane + offset, v); });
  }
}

template <typename T>
void register_roi_align_kernels(const char* type_name) {
  static const std::string fwd = std::string("roi_align_forward_kernel<") + type_name + ">";
  static const std::string bwd = std::string("roi_align_backward_kernel<") + type_name + ">";
  register_kernel("roi_align", fwd.c_str(), reinterpret_cast<const void*>(&roi_align_forward_kernel<T>));
  register_kernel("roi_align", bwd.c_str(), reinterpret_cast<const void*>(&roi_align_backward_kernel<T>));
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
  dispatch_floating(dtype, "roi_align_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    roi_align_forward_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(
        params, s, static_cast<const T*>(args.input), static_cast<const T*>(args.rois), static_cast<T*>(args.output),
        args.first_invalid_roi);
  });
  DETOPS_CHECK_LAUNCH();
}

void launch_roi_align_backward(const RoiAlignParams& params, const RoiAlignBackwardArgs& args, DType dtype,
                               cudaStream_t stream) {
  const RoiAlignShape& s = args.shape;
  const std::int64_t total = s.num_rois * s.channels * params.pooled_height * params.pooled_width;
  if (total == 0) return;
  const auto& st = args.grad_output_strides;
  dispatch_floating(dtype, "roi_align_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    roi_align_backward_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(
        params, s, static_cast<const T*>(args.grad_output), st[0], st[1], st[2], st[3],
        static_cast<const T*>(args.rois), static_cast<acc_t<T>*>(args.grad_input_acc), args.first_invalid_roi);
  });
  DETOPS_CHECK_LAUNCH();
}

}  // namespace detops
