// RoIPool CUDA kernels: one thread per output (forward) or grad_output (backward) element, pw fastest
// so a warp writes consecutive outputs; 64-bit flattened indices, grid-stride loops, read-only loads of
// input and rois, fp32 accumulation of half-type gradients.
#include "common/cuda_check.h"
#include "common/dispatch.h"
#include "common/kernel_registry.h"
#include "common/launch.h"
#include "roi_pool/roi_pool_kernel.cuh"

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

bool fits_32bit(std::int64_t total, unsigned blocks) {
  return total + static_cast<std::int64_t>(blocks) * kThreads < (std::int64_t{1} << 31);
}

template <typename T, typename Index>
__global__ void roi_pool_forward_kernel(RoiPoolParams p, RoiPoolShape s, const T* __restrict__ input,
                                        const T* __restrict__ rois, T* __restrict__ output,
                                        std::int32_t* __restrict__ argmax,
                                        unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  const std::int64_t pw_n = p.pooled_width, ph_n = p.pooled_height;
  const std::int64_t total = s.num_rois * s.channels * ph_n * pw_n;
  const Index stride = static_cast<Index>(blockDim.x) * static_cast<Index>(gridDim.x);
  for (Index i = static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + static_cast<Index>(threadIdx.x);
       i < static_cast<Index>(total); i += stride) {
    const auto [k, c, ph, pw] = element(i, static_cast<Index>(s.channels), static_cast<Index>(ph_n),
                                        static_cast<Index>(pw_n));
    const RoiPoolGeometry<Acc> g = roi_pool_geometry<T, Acc>(p, rois + k * 5, s.batch);
    if (g.batch < 0) {
      output[i] = from_acc<T>(Acc(0));
      argmax[i] = -1;
      if (first_invalid_roi != nullptr) atomicMin(first_invalid_roi, static_cast<unsigned long long>(k));
      continue;
    }
    const T* plane = input + (g.batch * s.channels + c) * s.height * s.width;
    const RoiPoolMax<Acc> m = roi_pool_bin_max<T, Acc>(roi_pool_bin(g, ph, pw, s.height, s.width), plane, s.width);
    output[i] = from_acc<T>(m.value);
    argmax[i] = static_cast<std::int32_t>(m.index);
  }
}

template <typename T, typename Index>
__global__ void roi_pool_backward_kernel(RoiPoolParams p, RoiPoolShape s, const T* __restrict__ grad_output,
                                         std::int64_t go_s0, std::int64_t go_s1, std::int64_t go_s2,
                                         std::int64_t go_s3, const T* __restrict__ rois,
                                         const std::int32_t* __restrict__ argmax, acc_t<T>* __restrict__ grad_input,
                                         unsigned long long* __restrict__ first_invalid_roi,
                                         unsigned long long* __restrict__ first_invalid_argmax) {
  using Acc = acc_t<T>;
  const std::int64_t pw_n = p.pooled_width, ph_n = p.pooled_height;
  const std::int64_t total = s.num_rois * s.channels * ph_n * pw_n;
  const std::int64_t plane_elements = s.height * s.width;
  const Index stride = static_cast<Index>(blockDim.x) * static_cast<Index>(gridDim.x);
  for (Index i = static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + static_cast<Index>(threadIdx.x);
       i < static_cast<Index>(total); i += stride) {
    const auto [k, c, ph, pw] = element(i, static_cast<Index>(s.channels), static_cast<Index>(ph_n),
                                        static_cast<Index>(pw_n));
    const Acc b = to_acc<Acc>(load_readonly(rois + k * 5));
    if (!(b >= Acc(0) && b < static_cast<Acc>(s.batch))) {
      if (first_invalid_roi != nullptr) atomicMin(first_invalid_roi, static_cast<unsigned long long>(k));
      continue;
    }
    const std::int32_t a = load_readonly(argmax + i);
    const RoiPoolArgmaxKind kind = roi_pool_argmax_kind(a, plane_elements);
    if (kind == RoiPoolArgmaxKind::kInvalid) {
      if (first_invalid_argmax != nullptr) atomicMin(first_invalid_argmax, static_cast<unsigned long long>(i));
      continue;
    }
    if (kind == RoiPoolArgmaxKind::kNone) continue;
    const Acc grad = to_acc<Acc>(load_readonly(grad_output + (k * go_s0 + c * go_s1 + ph * go_s2 + pw * go_s3)));
    const std::int64_t batch = static_cast<std::int64_t>(b);
    atomicAdd(grad_input + (batch * s.channels + c) * plane_elements + a, grad);
  }
}

template <typename T, typename Index>
void register_roi_pool_kernels(const std::string& type_name, const char* index_name) {
  const std::string suffix = "<" + type_name + ", " + index_name + ">";
  register_kernel("roi_pool", ("roi_pool_forward_kernel" + suffix).c_str(),
                  reinterpret_cast<const void*>(&roi_pool_forward_kernel<T, Index>));
  register_kernel("roi_pool", ("roi_pool_backward_kernel" + suffix).c_str(),
                  reinterpret_cast<const void*>(&roi_pool_backward_kernel<T, Index>));
}

template <typename T>
void register_roi_pool_kernels(const char* type_name) {
  register_roi_pool_kernels<T, std::int32_t>(type_name, "int32");
  register_roi_pool_kernels<T, std::int64_t>(type_name, "int64");
}

const bool kRegistered = [] {
  register_roi_pool_kernels<double>("double");
  register_roi_pool_kernels<float>("float");
  register_roi_pool_kernels<__half>("half");
  register_roi_pool_kernels<__nv_bfloat16>("bfloat16");
  return true;
}();

}  // namespace

void launch_roi_pool_forward(const RoiPoolParams& params, const RoiPoolForwardArgs& args, DType dtype,
                             cudaStream_t stream) {
  const RoiPoolShape& s = args.shape;
  const std::int64_t total = s.num_rois * s.channels * params.pooled_height * params.pooled_width;
  if (total == 0) return;
  dispatch_floating(dtype, "roi_pool_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const unsigned blocks = grid_for(total, kThreads);
    auto kernel = fits_32bit(total, blocks) ? roi_pool_forward_kernel<T, std::int32_t>
                                            : roi_pool_forward_kernel<T, std::int64_t>;
    kernel<<<blocks, kThreads, 0, stream>>>(
        params, s, static_cast<const T*>(args.input), static_cast<const T*>(args.rois), static_cast<T*>(args.output),
        args.argmax, args.first_invalid_roi);
  });
  DETOPS_CHECK_LAUNCH();
}

void launch_roi_pool_backward(const RoiPoolParams& params, const RoiPoolBackwardArgs& args, DType dtype,
                              cudaStream_t stream) {
  const RoiPoolShape& s = args.shape;
  const std::int64_t total = s.num_rois * s.channels * params.pooled_height * params.pooled_width;
  if (total == 0) return;
  const auto& st = args.grad_output_strides;
  dispatch_floating(dtype, "roi_pool_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const unsigned blocks = grid_for(total, kThreads);
    auto kernel = fits_32bit(total, blocks) ? roi_pool_backward_kernel<T, std::int32_t>
                                            : roi_pool_backward_kernel<T, std::int64_t>;
    kernel<<<blocks, kThreads, 0, stream>>>(
        params, s, static_cast<const T*>(args.grad_output), st[0], st[1], st[2], st[3],
        static_cast<const T*>(args.rois), args.argmax, static_cast<acc_t<T>*>(args.grad_input_acc),
        args.first_invalid_roi, args.first_invalid_argmax);
  });
  DETOPS_CHECK_LAUNCH();
}

}  // namespace detops
