// ps_roi_align / ps_roi_pool on the CPU: the same per-element math as the CUDA kernels, in the RoI CPU
// skeleton. A roi has `channels` (= C_in) elements: flat element i = k * channels + c_in.
#include "common/roi_cpu.h"
#include "ps_roi/ps_roi_kernel.cuh"

namespace detops {
namespace {

// The forward of both ops (Math: PsRoiAlignMath or PsRoiPoolMath, ps_roi_kernel.cuh): Math::geometry gives
// the roi's geometry (batch < 0: invalid, zeros), then Math::value each element's value. The channel
// mapping is written for every element.
template <typename Math, typename Params>
void ps_roi_forward_cpu(const char* what, const Params& params, const PsRoiForwardArgs& args, DType dtype,
                        const ParallelFor& parallel_for) {
  roi_forward_cpu(what, args, args.shape.channels, dtype, parallel_for, [&](const auto& f, std::int64_t k) {
    using T = roi_value_t<decltype(f)>;
    const std::int64_t channels = f.s.channels;
    for (std::int64_t c = 0; c < channels; ++c) args.channel_mapping[k * channels + c] = static_cast<std::int32_t>(c);
    const auto g = Math::geometry(params, f.roi(k), f.s.batch);
    if (g.batch < 0) return f.zero(k);
    T* out = f.out(k);
    for (std::int64_t c = 0; c < channels; ++c) {
      const PsRoiElement e = ps_roi_element(k * channels + c, channels, params.pooled_height, params.pooled_width);
      out[c] = from_acc<T>(Math::value(params, g, e, f.plane(g.batch, e.input_channel), f.s));
    }
  });
}

// The backward of both ops, serial: Math::scatter adds each element's gradient.
template <typename Math, typename Params>
void ps_roi_backward_cpu(const char* what, const Params& params, const PsRoiBackwardArgs& args, DType dtype) {
  roi_backward_cpu(what, args, args.shape.channels, dtype, [&](const auto& b, std::int64_t k) {
    using Acc = acc_t<roi_value_t<decltype(b)>>;
    const std::int64_t channels = b.s.channels;
    const auto g = Math::geometry(params, b.roi(k), b.s.batch);
    if (g.batch < 0) return;
    for (std::int64_t c = 0; c < channels; ++c) {
      const PsRoiElement e = ps_roi_element(k * channels + c, channels, params.pooled_height, params.pooled_width);
      Acc* plane = b.plane(g.batch, c);
      Math::scatter(params, g, e, b.grad(k, e.out_channel, e.bin_y, e.bin_x), b.s,
                    [plane](std::int64_t offset, Acc v) { plane[offset] += v; });
    }
  });
}

}  // namespace

void run_ps_roi_align_forward_cpu(const PsRoiAlignParams& params, const PsRoiForwardArgs& args, DType dtype,
                                  const ParallelFor& parallel_for) {
  ps_roi_forward_cpu<PsRoiAlignMath>("ps_roi_align_forward_cpu", params, args, dtype, parallel_for);
}

void run_ps_roi_pool_forward_cpu(const PsRoiPoolParams& params, const PsRoiForwardArgs& args, DType dtype,
                                 const ParallelFor& parallel_for) {
  ps_roi_forward_cpu<PsRoiPoolMath>("ps_roi_pool_forward_cpu", params, args, dtype, parallel_for);
}

void run_ps_roi_align_backward_cpu(const PsRoiAlignParams& params, const PsRoiBackwardArgs& args, DType dtype) {
  ps_roi_backward_cpu<PsRoiAlignMath>("ps_roi_align_backward_cpu", params, args, dtype);
}

void run_ps_roi_pool_backward_cpu(const PsRoiPoolParams& params, const PsRoiBackwardArgs& args, DType dtype) {
  ps_roi_backward_cpu<PsRoiPoolMath>("ps_roi_pool_backward_cpu", params, args, dtype);
}

}  // namespace detops
