// Precise RoI Pooling CUDA kernels. Forward and input backward: one thread per output (grad_output)
// element, pw fastest, 64-bit flattened indices, grid-stride loops; the input backward scatters with
// atomicAdd into an fp32/fp64 buffer. Rois backward: one block per roi (grid-stride over rois), its
// threads stride over the roi's (c, ph, pw) elements and reduce in shared memory in a fixed tree, so
// each grad_rois row is written once, deterministically, without atomics.
#include "detops/core/cuda_check.h"
#include "common/dispatch.h"
#include "common/kernel_launch.cuh"
#include "common/roi_cuda.cuh"
#include "prroi_pool/prroi_pool_kernel.cuh"

namespace detops {
namespace {

constexpr int kThreads = 256;
constexpr int kRoisThreads = 256;  // a power of two: the block reduction halves it

// The (roi, channel, bin row, bin column) of flat element i of [K, C, ph, pw], pw fastest, in 64 bits.
struct Element {
  std::int64_t k, c, ph, pw;
};

__device__ __forceinline__ Element element(std::int64_t i, std::int64_t channels, std::int64_t ph_n, std::int64_t pw_n) {
  const std::int64_t pw = i % pw_n;
  const std::int64_t ph = (i / pw_n) % ph_n;
  const std::int64_t c = (i / (pw_n * ph_n)) % channels;
  return {i / (pw_n * ph_n * channels), c, ph, pw};
}

// body(i, e, g) for each flat element i of [K, C, ph, pw] this thread owns, e its (roi, channel, bin) and
// g its roi's geometry; an element of an invalid roi gets invalid(i), then reports the roi.
template <typename T, typename Invalid, typename Body>
__device__ __forceinline__ void for_each_element(const PrRoiPoolParams& p, const PrRoiPoolShape& s, const T* rois,
                                                 unsigned long long* first_invalid_roi, Invalid&& invalid,
                                                 Body&& body) {
  const std::int64_t pw_n = p.pooled_width, ph_n = p.pooled_height;
  grid_stride_for<std::int64_t>(s.num_rois * s.channels * ph_n * pw_n, [&](std::int64_t i) {
    const Element e = element(i, s.channels, ph_n, pw_n);
    const PrRoiGeometry g = prroi_geometry(p, rois + e.k * 5, s.batch);
    if (g.batch < 0) {
      invalid(i);
      return report_first_invalid(first_invalid_roi, e.k);
    }
    body(i, e, g);
  });
}

template <typename T>
__global__ void prroi_pool_forward_kernel(PrRoiPoolParams p, PrRoiPoolShape s, const T* __restrict__ input,
                                          const T* __restrict__ rois, T* __restrict__ output,
                                          unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  for_each_element(
      p, s, rois, first_invalid_roi, [&](std::int64_t i) { output[i] = from_acc<T>(Acc(0)); },
      [&](std::int64_t i, const Element& e, const PrRoiGeometry& g) {
        Acc value = 0;
        if (g.pools) {
          const T* plane = input + (g.batch * s.channels + e.c) * s.height * s.width;
          value = prroi_bin_average<T, Acc>(prroi_bin_axis_y<Acc>(g, e.ph, s.height),
                                            prroi_bin_axis_x<Acc>(g, e.pw, s.width), plane, s.width);
        }
        output[i] = from_acc<T>(value);
      });
}

template <typename T>
__global__ void prroi_pool_backward_kernel(PrRoiPoolParams p, PrRoiPoolShape s, const T* __restrict__ grad_output,
                                           RoiGradStrides go, const T* __restrict__ rois,
                                           acc_t<T>* __restrict__ grad_input,
                                           unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  for_each_element(p, s, rois, first_invalid_roi, [](std::int64_t) {},
                   [&](std::int64_t, const Element& e, const PrRoiGeometry& g) {
    if (!g.pools) return;
    const Acc grad =
        to_acc<Acc>(load_readonly(grad_output + go.offset(e.k, e.c, e.ph, e.pw)));
    if (grad == Acc(0)) return;  // adds exactly nothing (the weights are finite); NaN still scatters
    const PrRoiAxis<Acc> ay = prroi_bin_axis_y<Acc>(g, e.ph, s.height);
    const PrRoiAxis<Acc> ax = prroi_bin_axis_x<Acc>(g, e.pw, s.width);
    Acc* plane = grad_input + (g.batch * s.channels + e.c) * s.height * s.width;
    for (std::int64_t h = ay.pixel_begin; h < ay.pixel_end; ++h) {
      const Acc gy = grad * prroi_pixel_weight(ay, h);
      for (std::int64_t w = ax.pixel_begin; w < ax.pixel_end; ++w) {
        atomicAdd(plane + h * s.width + w, gy * prroi_pixel_weight(ax, w));
      }
    }
  });
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
      if (t == 0) report_first_invalid(first_invalid_roi, k);
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

const bool kRegistered = for_each_floating_type([](auto tag, const char* type) {
  using T = typename decltype(tag)::type;
  register_instantiation("prroi_pool", "prroi_pool_forward_kernel", type, &prroi_pool_forward_kernel<T>);
  register_instantiation("prroi_pool", "prroi_pool_backward_kernel", type, &prroi_pool_backward_kernel<T>);
  register_instantiation("prroi_pool", "prroi_pool_rois_backward_kernel", type, &prroi_pool_rois_backward_kernel<T>);
});

}  // namespace

void launch_prroi_pool_forward(const PrRoiPoolParams& params, const PrRoiPoolForwardArgs& args, DType dtype,
                               cudaStream_t stream) {
  launch_roi_grid_stride("prroi_pool_forward", dtype, roi_elements(args.shape, params), kThreads, stream,
                         [](auto t) { return &prroi_pool_forward_kernel<type_of<decltype(t)>>; }, params, args.shape,
                         args.input, args.rois, args.output, args.first_invalid_roi);
}

void launch_prroi_pool_backward(const PrRoiPoolParams& params, const PrRoiPoolBackwardArgs& args, DType dtype,
                                cudaStream_t stream) {
  launch_roi_grid_stride("prroi_pool_backward", dtype, roi_elements(args.shape, params), kThreads, stream,
                         [](auto t) { return &prroi_pool_backward_kernel<type_of<decltype(t)>>; }, params, args.shape,
                         args.grad_output, roi_grad_strides(args), args.rois, args.grad_input_acc,
                         args.first_invalid_roi);
}

void launch_prroi_pool_rois_backward(const PrRoiPoolParams& params, const PrRoiPoolRoisBackwardArgs& args,
                                     DType dtype, cudaStream_t stream) {
  const PrRoiPoolShape& s = args.shape;
  if (s.num_rois == 0) return;
  const auto& st = args.grad_output_strides;  // with channels == 0 the rows are still written (zeros)
  // One block per roi, at most SMs * 32 blocks (each strides over rois).
  const unsigned blocks = grid_for(s.num_rois, 1);
  dispatch_floating(dtype, "prroi_pool_rois_backward", [&](auto tag) {
    launch_kernel(&prroi_pool_rois_backward_kernel<typename decltype(tag)::type>, blocks, kRoisThreads, stream, params,
                  s, args.grad_output, st[0], st[1], st[2], st[3], args.input, args.rois, args.grad_rois,
                  args.first_invalid_roi);
  });
}

}  // namespace detops
