// ps_roi_align / ps_roi_pool on the CPU: the same per-element math as the CUDA kernels, in the RoI CPU
// skeleton. A roi has `channels` (= C_in) elements: flat element i = k * channels + c_in.
#include "common/roi_cpu.h"
#include "ps_roi/ps_roi_kernel.cuh"

namespace detops {
namespace {

// The forward of both ops: Math::geometry gives the roi's geometry (batch < 0: invalid, zeros), then
// Math::value each element's value. The channel mapping is written for every element.
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
    const std::int64_t channels = b.s.channels;
    const auto g = Math::geometry(params, b.roi(k), b.s.batch);
    if (g.batch < 0) return;
    for (std::int64_t c = 0; c < channels; ++c) {
      const PsRoiElement e = ps_roi_element(k * channels + c, channels, params.pooled_height, params.pooled_width);
      Math::scatter(params, g, e, b.grad(k, e.out_channel, e.bin_y, e.bin_x), b.plane(g.batch, c), b.s);
    }
  });
}

// The per-element math of each op, for the shared loops above.
struct AlignMath {
  template <typename T>
  static PsRoiAlignGeometry<acc_t<T>> geometry(const PsRoiAlignParams& p, const T* roi, std::int64_t batch) {
    return ps_roi_align_geometry<T, acc_t<T>>(p, roi, batch);
  }
  template <typename T>
  static acc_t<T> value(const PsRoiAlignParams&, const PsRoiAlignGeometry<acc_t<T>>& g, const PsRoiElement& e,
                        const T* plane, const RoiShape& s) {
    return ps_roi_align_bin_average<T, acc_t<T>>(g, plane, s.height, s.width, e.bin_y, e.bin_x);
  }
  template <typename Acc>
  static void scatter(const PsRoiAlignParams&, const PsRoiAlignGeometry<Acc>& g, const PsRoiElement& e, Acc grad,
                      Acc* plane, const RoiShape& s) {
    ps_roi_align_bin_scatter(g, grad, s.height, s.width, e.bin_y, e.bin_x,
                             [plane](std::int64_t offset, Acc v) { plane[offset] += v; });
  }
};

struct PoolMath {
  template <typename T>
  static PsRoiPoolGeometry geometry(const PsRoiPoolParams& p, const T* roi, std::int64_t batch) {
    return ps_roi_pool_geometry<T, acc_t<T>>(p, roi, batch);
  }
  template <typename T>
  static acc_t<T> value(const PsRoiPoolParams& p, const PsRoiPoolGeometry& g, const PsRoiElement& e, const T* plane,
                        const RoiShape& s) {
    const PsRoiPoolBin bin = ps_roi_pool_bin<acc_t<T>>(p, g, s.height, s.width, e.bin_y, e.bin_x, PsRoiPoolPass::kForward);
    return ps_roi_pool_bin_average<T, acc_t<T>>(bin, plane, s.width);
  }
  template <typename Acc>
  static void scatter(const PsRoiPoolParams& p, const PsRoiPoolGeometry& g, const PsRoiElement& e, Acc grad,
                      Acc* plane, const RoiShape& s) {
    const PsRoiPoolBin bin = ps_roi_pool_bin<Acc>(p, g, s.height, s.width, e.bin_y, e.bin_x, PsRoiPoolPass::kBackward);
    ps_roi_pool_bin_scatter(bin, grad, s.width, [plane](std::int64_t offset, Acc v) { plane[offset] += v; });
  }
};

}  // namespace

void run_ps_roi_align_forward_cpu(const PsRoiAlignParams& params, const PsRoiForwardArgs& args, DType dtype,
                                  const ParallelFor& parallel_for) {
  ps_roi_forward_cpu<AlignMath>("ps_roi_align_forward_cpu", params, args, dtype, parallel_for);
}

void run_ps_roi_pool_forward_cpu(const PsRoiPoolParams& params, const PsRoiForwardArgs& args, DType dtype,
                                 const ParallelFor& parallel_for) {
  ps_roi_forward_cpu<PoolMath>("ps_roi_pool_forward_cpu", params, args, dtype, parallel_for);
}

void run_ps_roi_align_backward_cpu(const PsRoiAlignParams& params, const PsRoiBackwardArgs& args, DType dtype) {
  ps_roi_backward_cpu<AlignMath>("ps_roi_align_backward_cpu", params, args, dtype);
}

void run_ps_roi_pool_backward_cpu(const PsRoiPoolParams& params, const PsRoiBackwardArgs& args, DType dtype) {
  ps_roi_backward_cpu<PoolMath>("ps_roi_pool_backward_cpu", params, args, dtype);
}

}  // namespace detops
