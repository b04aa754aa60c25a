// Precise RoI Pooling CUDA kernels. Forward and input backward: one thread per output (grad_output)
// element, pw fastest, 64-bit flattened indices, grid-stride loops; the input backward scatters with
// atomicAdd into an fp32/fp64 buffer. Rois backward: one block per roi (grid-stride over rois), its
// threads stride over the roi's (c, ph, pw) elements and reduce in shared memory in a fixed tree, so
// each grad_rois row is written once, deterministically, without atomics.
#include "common/cuda_check.h"
#include "common/dispatch.h"
#include "common/kernel_registry.h"
#include "common/launch.h"
#include "prroi_pool/prroi_pool_kernel.cuh"

namespace detops {
namespace {

constexpr int kThreads = 256;
constexpr int kRoisThreads = 256;  // a power of two: the block reduction halves it

template <typename T>
__global__ void prroi_pool_forward_kernel(PrRoiPoolParams p, PrRoiPoolShape s, const T* __restrict__ input,
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
    const PrRoiGeometry g = prroi_geometry(p, rois + k * 5, s.batch);
    if (g.batch < 0) {
      output[i] = from_acc<T>(Acc(0));
      if (first_invalid_roi != nullptr) atomicMin(first_invalid_roi, static_cast<unsigned long long>(k));
      continue;
    }
    Acc value = 0;
    if (g.pools) {
      const T* plane = input + (g.batch * s.channels + c) * s.height * s.width;
      value = prroi_bin_average<T, Acc>(prroi_bin_axis_y<Acc>(g, ph, s.height), prroi_bin_axis_x<Acc>(g, pw, s.width),
                                        plane, s.width);
    }
    output[i] = from_acc<T>(value);
  }
}

template <typename T>
__global__ void prroi_pool_backward_kernel(PrRoiPoolParams p, PrRoiPoolShape s, const T* __restrict__ grad_output,
                                           std::int64_t go_s0, std::int64_t go_s1, std::int64_t go_s2,
                                           std::int64_t go_s3, const T* __restrict__ rois,
                                           acc_t<T>* __restrict__ grad_input,
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
    const PrRoiGeometry g = prroi_geometry(p, rois + k * 5, s.batch);
    if (g.batch < 0) {
      if (first_invalid_roi != nullptr) atomicMin(first_invalid_roi, static_cast<unsigned long long>(k));
      continue;
    }
    if (!g.pools) continue;
    const Acc grad = to_acc<Acc>(load_readonly(grad_output + (k * go_s0 + c * go_s1 + ph * go_s2 + pw * go_s3)));
    if (grad == Acc(0)) continue;  // adds exactly nothing (the weights are finite); NaN still scatters
    const PrRoiAxis<Acc> ay = prroi_bin_axis_y<Acc>(g, ph, s.height);
    const PrRoiAxis<Acc> ax = prroi_bin_axis_x<Acc>(g, pw, s.width);
    Acc* plane = grad_input + (g.batch * s.channels + c) * s.height * s.width;
    for (std::int64_t h = ay.pixel_begin; h < ay.pixel_end; ++h) {
      const Acc gy = grad * prroi_pixel_weight(ay, h);
      for (std::int64_t w = ax.pixel_begin; w < ax.pixel_end; ++w) {
        atomicAdd(plane + h * s.width + w, gy * prroi_pixel_weight(ax, w));
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kRoisThreads)
    prroi_pool_rois_backward_kernel(PrRoiPoolParams p, PrRoiPoolShape s, const T* __restrict__ grad_output,
                                    std::int64_t go_s0, std::int64_t go_s1, std::int64_t go_s2, std::int64_t go_s3,
                                    const T* __restrict__ input, const T* __restrict__ rois, T* __restrict__ grad_rois,
                                    unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  __shared__ Acc partial[4][kRoisThreads];
  const std::int64_t pw_n = p.pooled_width, ph_n = p.pooled_height;
  const std::int64_t per_roi = s.channels * ph_n * pw_n;
  const int t = static_cast<int>(threadIdx.x);
  for (std::int64_t k = blockIdx.x; k < s.num_rois; k += gridDim.x) {
    const PrRoiGeometry g = prroi_geometry(p, rois + k * 5, s.batch);
    Acc sum[4] = {0, 0, 0, 0};
    if (g.batch < 0) {
      if (t == 0 && first_invalid_roi != nullptr) atomicMin(first_invalid_roi, static_cast<unsigned long long>(k));
    } else if (g.pools) {
      for (std::int64_t e = t; e < per_roi; e += kRoisThreads) {
        const std::int64_t pw = e % pw_n;
        const std::int64_t ph = (e / pw_n) % ph_n;
        const std::int64_t c = e / (pw_n * ph_n);
        const Acc grad = to_acc<Acc>(load_readonly(grad_output + (k * go_s0 + c * go_s1 + ph * go_s2 + pw * go_s3)));
        const T* plane = input + (g.batch * s.channels + c) * s.height * s.width;
        const PrRoiBinDerivatives<Acc> d = prroi_bin_derivatives<T, Acc>(
            prroi_bin_axis_y<Acc>(g, ph, s.height), prroi_bin_axis_x<Acc>(g, pw, s.width), plane, s.width);
        const PrRoiCoordinateGrad<Acc> cg = prroi_coordinate_grad(d, p, ph, pw);
        sum[0] += grad * cg.x1;
        sum[1] += grad * cg.y1;
        sum[2] += grad * cg.x2;
        sum[3] += grad * cg.y2;
      }
    }
    for (int j = 0; j < 4; ++j) partial[j][t] = sum[j];
    __syncthreads();
    for (int half = kRoisThreads / 2; half > 0; half /= 2) {
      if (t < half) {
        for (int j = 0; j < 4; ++j) partial[j][t] += partial[j][t + half];
      }
      __syncthreads();
    }
    if (t == 0) {
      T* out = grad_rois + k * 5;
      out[0] = from_acc<T>(Acc(0));
      for (int j = 0; j < 4; ++j) out[j + 1] = from_acc<T>(partial[j][0]);
    }
    __syncthreads();  // partial is reused by the next roi
  }
}

template <typename T>
void register_prroi_pool_kernels(const char* type_name) {
  static const std::string fwd = std::string("prroi_pool_forward_kernel<") + type_name + ">";
  static const std::string bwd = std::string("prroi_pool_backward_kernel<") + type_name + ">";
  static const std::string rois_bwd = std::string("prroi_pool_rois_backward_kernel<") + type_name + ">";
  register_kernel("prroi_pool", fwd.c_str(), reinterpret_cast<const void*>(&prroi_pool_forward_kernel<T>));
  register_kernel("prroi_pool", bwd.c_str(), reinterpret_cast<const void*>(&prroi_pool_backward_kernel<T>));
  register_kernel("prroi_pool", rois_bwd.c_str(), reinterpret_cast<const void*>(&prroi_pool_rois_backward_kernel<T>));
}

const bool kRegistered = [] {
  register_prroi_pool_kernels<double>("double");
  register_prroi_pool_kernels<float>("float");
  register_prroi_pool_kernels<__half>("half");
  register_prroi_pool_kernels<__nv_bfloat16>("bfloat16");
  return true;
}();

}  // namespace

void launch_prroi_pool_forward(const PrRoiPoolParams& params, const PrRoiPoolForwardArgs& args, DType dtype,
                               cudaStream_t stream) {
  const PrRoiPoolShape& s = args.shape;
  const std::int64_t total = s.num_rois * s.channels * params.pooled_height * params.pooled_width;
  if (total == 0) return;
  dispatch_floating(dtype, "prroi_pool_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    prroi_pool_forward_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(
        params, s, static_cast<const T*>(args.input), static_cast<const T*>(args.rois), static_cast<T*>(args.output),
        args.first_invalid_roi);
  });
  DETOPS_CHECK_LAUNCH();
}

void launch_prroi_pool_backward(const PrRoiPoolParams& params, const PrRoiPoolBackwardArgs& args, DType dtype,
                                cudaStream_t stream) {
  const PrRoiPoolShape& s = args.shape;
  const std::int64_t total = s.num_rois * s.channels * params.pooled_height * params.pooled_width;
  if (total == 0) return;
  const auto& st = args.grad_output_strides;
  dispatch_floating(dtype, "prroi_pool_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    prroi_pool_backward_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(
        params, s, static_cast<const T*>(args.grad_output), st[0], st[1], st[2], st[3],
        static_cast<const T*>(args.rois), static_cast<acc_t<T>*>(args.grad_input_acc), args.first_invalid_roi);
  });
  DETOPS_CHECK_LAUNCH();
}

void launch_prroi_pool_rois_backward(const PrRoiPoolParams& params, const PrRoiPoolRoisBackwardArgs& args,
                                     DType dtype, cudaStream_t stream) {
  const PrRoiPoolShape& s = args.shape;
  if (s.num_rois == 0) return;  // with channels == 0 the rows are still written (zeros)
  const auto& st = args.grad_output_strides;
  // One block per roi, at most SMs * 32 blocks (each strides over rois).
  const unsigned blocks = grid_for(s.num_rois, 1);
  dispatch_floating(dtype, "prroi_pool_rois_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    prroi_pool_rois_backward_kernel<T><<<blocks, kRoisThreads, 0, stream>>>(
        params, s, static_cast<const T*>(args.grad_output), st[0], st[1], st[2], st[3],
        static_cast<const T*>(args.input), static_cast<const T*>(args.rois), static_cast<T*>(args.grad_rois),
        args.first_invalid_roi);
  });
  DETOPS_CHECK_LAUNCH();
}

}  // namespace detops
