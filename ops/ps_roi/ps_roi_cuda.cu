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
// of both ops: geometry(e) is the roi's geometry (batch < 0: invalid, zero), value(g, e) the element's.
template <typename Params, typename T, typename Geometry, typename Value>
__device__ __forceinline__ void ps_roi_forward(const Params& p, const PsRoiShape& s, T* output,
                                               std::int32_t* channel_mapping, unsigned long long* first_invalid_roi,
                                               Geometry&& geometry, Value&& value) {
  using Acc = acc_t<T>;
  grid_stride_for<std::int64_t>(s.num_rois * s.channels, [&](std::int64_t i) {
    const PsRoiElement e = ps_roi_element(i, s.channels, p.pooled_height, p.pooled_width);
    channel_mapping[i] = static_cast<std::int32_t>(e.input_channel);
    const auto g = geometry(e);
    if (g.batch < 0) {
      output[i] = from_acc<T>(Acc(0));
      return report_first_invalid(first_invalid_roi, e.roi);
    }
    output[i] = from_acc<T>(value(g, e));
  });
}

// The backward of both ops: scatter(g, e, grad) adds the element's gradient to grad_input.
template <typename Params, typename T, typename Geometry, typename Scatter>
__device__ __forceinline__ void ps_roi_backward(const Params& p, const PsRoiShape& s, const T* grad_output,
                                                RoiGradStrides go, unsigned long long* first_invalid_roi,
                                                Geometry&& geometry, Scatter&& scatter) {
  using Acc = acc_t<T>;
  grid_stride_for<std::int64_t>(s.num_rois * s.channels, [&](std::int64_t i) {
    const PsRoiElement e = ps_roi_element(i, s.channels, p.pooled_height, p.pooled_width);
    const auto g = geometry(e);
    if (g.batch < 0) return report_first_invalid(first_invalid_roi, e.roi);
    scatter(g, e, to_acc<Acc>(grad_output[go.offset(e.roi, e.out_channel, e.bin_y, e.bin_x)]));
  });
}

template <typename T>
__global__ void ps_roi_align_forward_kernel(PsRoiAlignParams p, PsRoiShape s, const T* __restrict__ input,
                                            const T* __restrict__ rois, T* __restrict__ output,
                                            std::int32_t* __restrict__ channel_mapping,
                                            unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  ps_roi_forward(
      p, s, output, channel_mapping, first_invalid_roi,
      [&](const PsRoiElement& e) { return ps_roi_align_geometry<T, Acc>(p, rois + e.roi * 5, s.batch); },
      [&](const PsRoiAlignGeometry<Acc>& g, const PsRoiElement& e) {
        const T* plane = input + (g.batch * s.channels + e.input_channel) * s.height * s.width;
        return ps_roi_align_bin_average<T, Acc>(g, plane, s.height, s.width, e.bin_y, e.bin_x);
      });
}

template <typename T>
__global__ void ps_roi_align_backward_kernel(PsRoiAlignParams p, PsRoiShape s, const T* __restrict__ grad_output,
                                             RoiGradStrides go, const T* __restrict__ rois,
                                             acc_t<T>* __restrict__ grad_input,
                                             unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  ps_roi_backward(
      p, s, grad_output, go, first_invalid_roi,
      [&](const PsRoiElement& e) { return ps_roi_align_geometry<T, Acc>(p, rois + e.roi * 5, s.batch); },
      [&](const PsRoiAlignGeometry<Acc>& g, const PsRoiElement& e, Acc grad) {
        Acc* plane = grad_input + (g.batch * s.channels + e.input_channel) * s.height * s.width;
        ps_roi_align_bin_scatter(g, grad, s.height, s.width, e.bin_y, e.bin_x,
                                 [plane](std::int64_t offset, Acc v) { atomicAdd(plane + offset, v); });
      });
}

template <typename T>
__global__ void ps_roi_pool_forward_kernel(PsRoiPoolParams p, PsRoiShape s, const T* __restrict__ input,
                                           const T* __restrict__ rois, T* __restrict__ output,
                                           std::int32_t* __restrict__ channel_mapping,
                                           unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  ps_roi_forward(
      p, s, output, channel_mapping, first_invalid_roi,
      [&](const PsRoiElement& e) { return ps_roi_pool_geometry<T, Acc>(p, rois + e.roi * 5, s.batch); },
      [&](const PsRoiPoolGeometry& g, const PsRoiElement& e) {
        const T* plane = input + (g.batch * s.channels + e.input_channel) * s.height * s.width;
        const PsRoiPoolBin bin = ps_roi_pool_bin<Acc>(p, g, s.height, s.width, e.bin_y, e.bin_x, PsRoiPoolPass::kForward);
        return ps_roi_pool_bin_average<T, Acc>(bin, plane, s.width);
      });
}

template <typename T>
__global__ void ps_roi_pool_backward_kernel(PsRoiPoolParams p, PsRoiShape s, const T* __restrict__ grad_output,
                                            RoiGradStrides go, const T* __restrict__ rois,
                                            acc_t<T>* __restrict__ grad_input,
                                            unsigned long long* __restrict__ first_invalid_roi) {
  using Acc = acc_t<T>;
  ps_roi_backward(
      p, s, grad_output, go, first_invalid_roi,
      [&](const PsRoiElement& e) { return ps_roi_pool_geometry<T, Acc>(p, rois + e.roi * 5, s.batch); },
      [&](const PsRoiPoolGeometry& g, const PsRoiElement& e, Acc grad) {
        Acc* plane = grad_input + (g.batch * s.channels + e.input_channel) * s.height * s.width;
        const PsRoiPoolBin bin = ps_roi_pool_bin<Acc>(p, g, s.height, s.width, e.bin_y, e.bin_x, PsRoiPoolPass::kBackward);
        ps_roi_pool_bin_scatter(bin, grad, s.width, [plane](std::int64_t offset, Acc v) { atomicAdd(plane + offset, v); });
      });
}

const bool kRegistered = for_each_floating_type([](auto tag, const char* type) {
  using T = typename decltype(tag)::type;
  register_instantiation("ps_roi_align", "ps_roi_align_forward_kernel", type, &ps_roi_align_forward_kernel<T>);
  register_instantiation("ps_roi_align", "ps_roi_align_backward_kernel", type, &ps_roi_align_backward_kernel<T>);
  register_instantiation("ps_roi_pool", "ps_roi_pool_forward_kernel", type, &ps_roi_pool_forward_kernel<T>);
  register_instantiation("ps_roi_pool", "ps_roi_pool_backward_kernel", type, &ps_roi_pool_backward_kernel<T>);
});

std::int64_t elements(const PsRoiShape& s) { return s.num_rois * s.channels; }

}  // namespace

// The forwards and the backwards of both ops take the same arguments.
void launch_ps_roi_align_forward(const PsRoiAlignParams& params, const PsRoiForwardArgs& args, DType dtype,
                                 cudaStream_t stream) {
  launch_roi_grid_stride("ps_roi_align_forward", dtype, elements(args.shape), kThreads, stream,
                         [](auto t) { return &ps_roi_align_forward_kernel<type_of<decltype(t)>>; }, params, args.shape,
                         args.input, args.rois, args.output, args.channel_mapping, args.first_invalid_roi);
}

void launch_ps_roi_align_backward(const PsRoiAlignParams& params, const PsRoiBackwardArgs& args, DType dtype,
                                  cudaStream_t stream) {
  launch_roi_grid_stride("ps_roi_align_backward", dtype, elements(args.shape), kThreads, stream,
                         [](auto t) { return &ps_roi_align_backward_kernel<type_of<decltype(t)>>; }, params,
                         args.shape, args.grad_output, roi_grad_strides(args), args.rois, args.grad_input_acc,
                         args.first_invalid_roi);
}

void launch_ps_roi_pool_forward(const PsRoiPoolParams& params, const PsRoiForwardArgs& args, DType dtype,
                                cudaStream_t stream) {
  launch_roi_grid_stride("ps_roi_pool_forward", dtype, elements(args.shape), kThreads, stream,
                         [](auto t) { return &ps_roi_pool_forward_kernel<type_of<decltype(t)>>; }, params, args.shape,
                         args.input, args.rois, args.output, args.channel_mapping, args.first_invalid_roi);
}

void launch_ps_roi_pool_backward(const PsRoiPoolParams& params, const PsRoiBackwardArgs& args, DType dtype,
                                 cudaStream_t stream) {
  launch_roi_grid_stride("ps_roi_pool_backward", dtype, elements(args.shape), kThreads, stream,
                         [](auto t) { return &ps_roi_pool_backward_kernel<type_of<decltype(t)>>; }, params,
                         args.shape, args.grad_output, roi_grad_strides(args), args.rois, args.grad_input_acc,
                         args.first_invalid_roi);
}

}  // namespace detops
