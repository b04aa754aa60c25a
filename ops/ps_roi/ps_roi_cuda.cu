// ps_roi_align / ps_roi_pool CUDA kernels: one thread per output (forward) or grad_output (backward)
// element, 64-bit flattened indices, grid-stride loops, fp32 accumulation for half types.
#include "detops/core/cuda_check.h"
#include "common/dispatch.h"
#include "common/kernel_launch.cuh"
#include "common/roi_cuda.cuh"
#include "ps_roi/ps_roi_kernel.cuh"

namespace detops {
namespace {

constexpr int kThreads = 256;

// Flat element i of the [K, C_out, ph, pw] output is (roi i / C_in, input channel i % C_in). The forward
// of both ops (Math: PsRoiAlignMath or PsRoiPoolMath, ps_roi_kernel.cuh): Math::geometry gives the roi's
// geometry (batch < 0: invalid, zero), Math::value the element's.
template <typename Math, typename Params, typename T>
__device__ __forceinline__ void ps_roi_forward(const Params& p, const PsRoiShape& s, const T* __restrict__ input,
                                               const T* __restrict__ rois, T* __restrict__ output,
                                               std::int32_t* __restrict__ channel_mapping,
                                               unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  grid_stride_for<std::int64_t>(s.num_rois * s.channels, [&](std::int64_t i) {
    const PsRoiElement e = ps_roi_element(i, s.channels, p.pooled_height, p.pooled_width);
    channel_mapping[i] = static_cast<std::int32_t>(e.input_channel);
    const auto g = Math::geometry(p, rois + e.roi * 5, s.batch);
    if (g.batch < 0) {
      output[i] = from_acc<T>(Acc(0));
      return report_first_invalid(first_invalid_roi, e.roi);
    }
    const T* plane = input + (g.batch * s.channels + e.input_channel) * s.height * s.width;
    output[i] = from_acc<T>(Math::value(p, g, e, plane, s));
  });
}

// The backward of both ops: Math::scatter adds the element's gradient to grad_input with atomicAdd.
template <typename Math, typename Params, typename T>
__device__ __forceinline__ void ps_roi_backward(const Params& p, const PsRoiShape& s, const T* __restrict__ grad_output,
                                                RoiGradStrides go, const T* __restrict__ rois,
                                                acc_t<T>* __restrict__ grad_input,
                                                unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  grid_stride_for<std::int64_t>(s.num_rois * s.channels, [&](std::int64_t i) {
    const PsRoiElement e = ps_roi_element(i, s.channels, p.pooled_height, p.pooled_width);
    const auto g = Math::geometry(p, rois + e.roi * 5, s.batch);
    if (g.batch < 0) return report_first_invalid(first_invalid_roi, e.roi);
    const Acc grad = to_acc<Acc>(grad_output[go.offset(e.roi, e.out_channel, e.bin_y, e.bin_x)]);
    Acc* plane = grad_input + (g.batch * s.channels + e.input_channel) * s.height * s.width;
    Math::scatter(p, g, e, grad, s, [plane](std::int64_t offset, Acc v) { atomicAdd(plane + offset, v); });
  });
}

std::int64_t elements(const PsRoiShape& s) { return s.num_rois * s.channels; }

}  // namespace

// One op's two kernels, <op>_forward_kernel<T> and <op>_backward_kernel<T> (in this file's anonymous
// namespace), and its two launchers: the forwards and the backwards of both ops take the same arguments.
#define DETOPS_PS_ROI_OP(op, Params, Math)                                                                             \
  namespace {                                                                                                          \
  template <typename T>                                                                                                \
  __global__ void op##_forward_kernel(Params p, PsRoiShape s, const T* __restrict__ input, const T* __restrict__ rois, \
                                      T* __restrict__ output, std::int32_t* __restrict__ channel_mapping,              \
                                      unsigned long long* __restrict__ first_invalid_roi) {                            \
    ps_roi_forward<Math>(p, s, input, rois, output, channel_mapping, first_invalid_roi);                               \
  }                                                                                                                    \
  template <typename T>                                                                                                \
  __global__ void op##_backward_kernel(Params p, PsRoiShape s, const T* __restrict__ grad_output, RoiGradStrides go,   \
                                       const T* __restrict__ rois, acc_t<T>* __restrict__ grad_input,                  \
                                       unsigned long long* __restrict__ first_invalid_roi) {                           \
    ps_roi_backward<Math>(p, s, grad_output, go, rois, grad_input, first_invalid_roi);                                 \
  }                                                                                                                    \
  }                                                                                                                    \
  void launch_##op##_forward(const Params& params, const PsRoiForwardArgs& args, DType dtype, cudaStream_t stream) {   \
    launch_roi_grid_stride(#op "_forward", dtype, elements(args.shape), kThreads, stream,                              \
                           [](auto t) { return &op##_forward_kernel<type_of<decltype(t)>>; }, params, args.shape,      \
                           args.input, args.rois, args.output, args.channel_mapping, args.first_invalid_roi);          \
  }                                                                                                                    \
  void launch_##op##_backward(const Params& params, const PsRoiBackwardArgs& args, DType dtype, cudaStream_t stream) { \
    launch_roi_grid_stride(#op "_backward", dtype, elements(args.shape), kThreads, stream,                             \
                           [](auto t) { return &op##_backward_kernel<type_of<decltype(t)>>; }, params, args.shape,     \
                           args.grad_output, roi_grad_strides(args), args.rois, args.grad_input_acc,                   \
                           args.first_invalid_roi);                                                                    \
  }

DETOPS_PS_ROI_OP(ps_roi_align, PsRoiAlignParams, PsRoiAlignMath)
DETOPS_PS_ROI_OP(ps_roi_pool, PsRoiPoolParams, PsRoiPoolMath)

#undef DETOPS_PS_ROI_OP

namespace {

const bool kRegistered = for_each_floating_type([](auto tag, const char* type) {
  using T = typename decltype(tag)::type;
  register_instantiation("ps_roi_align", "ps_roi_align_forward_kernel", type, &ps_roi_align_forward_kernel<T>);
  register_instantiation("ps_roi_align", "ps_roi_align_backward_kernel", type, &ps_roi_align_backward_kernel<T>);
  register_instantiation("ps_roi_pool", "ps_roi_pool_forward_kernel", type, &ps_roi_pool_forward_kernel<T>);
  register_instantiation("ps_roi_pool", "ps_roi_pool_backward_kernel", type, &ps_roi_pool_backward_kernel<T>);
});

}  // namespace
}  // namespace detops
