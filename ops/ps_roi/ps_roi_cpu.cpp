// ps_roi_align / ps_roi_pool on the CPU: the same per-element math as the CUDA kernels, in host loops.
#include "common/dispatch.h"
#include "ps_roi/ps_roi_kernel.cuh"

namespace detops {
namespace {

// Runs element(i) -> Acc for every flat element of the rois in [begin, end) and stores it; an invalid
// roi gives zeros. The channel mapping is written for every element.
template <typename T, typename Acc, typename ValidFn, typename ElementFn>
void forward_rois(const PsRoiForwardArgs& args, std::int64_t begin, std::int64_t end, ValidFn&& roi_valid,
                  ElementFn&& element) {
  const PsRoiShape& s = args.shape;
  T* output = static_cast<T*>(args.output);
  for (std::int64_t k = begin; k < end; ++k) {
    const bool valid = roi_valid(k);
    for (std::int64_t c = 0; c < s.channels; ++c) {
      const std::int64_t i = k * s.channels + c;
      args.channel_mapping[i] = static_cast<std::int32_t>(c);
      output[i] = from_acc<T>(valid ? element(i) : Acc(0));
    }
  }
}

}  // namespace

void run_ps_roi_align_forward_cpu(const PsRoiAlignParams& params, const PsRoiForwardArgs& args, DType dtype,
                                  const PsRoiParallelFor& parallel_for) {
  const PsRoiShape s = args.shape;
  if (s.num_rois * s.channels == 0) return;
  dispatch_floating(dtype, "ps_roi_align_forward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const T* input = static_cast<const T*>(args.input);
    const T* rois = static_cast<const T*>(args.rois);
    parallel_for(0, s.num_rois, [&](std::int64_t begin, std::int64_t end) {
      PsRoiAlignGeometry<Acc> g;
      forward_rois<T, Acc>(
          args, begin, end,
          [&](std::int64_t k) {
            g = ps_roi_align_geometry<T, Acc>(params, rois + k * 5, s.batch);
            return g.batch >= 0;
          },
          [&](std::int64_t i) {
            const PsRoiElement e = ps_roi_element(i, s.channels, params.pooled_height, params.pooled_width);
            const T* plane = input + (g.batch * s.channels + e.input_channel) * s.height * s.width;
            return ps_roi_align_bin_average<T, Acc>(g, plane, s.height, s.width, e.bin_y, e.bin_x);
          });
    });
  });
}

void run_ps_roi_pool_forward_cpu(const PsRoiPoolParams& params, const PsRoiForwardArgs& args, DType dtype,
                                 const PsRoiParallelFor& parallel_for) {
  const PsRoiShape s = args.shape;
  if (s.num_rois * s.channels == 0) return;
  dispatch_floating(dtype, "ps_roi_pool_forward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const T* input = static_cast<const T*>(args.input);
    const T* rois = static_cast<const T*>(args.rois);
    parallel_for(0, s.num_rois, [&](std::int64_t begin, std::int64_t end) {
      PsRoiPoolGeometry g;
      forward_rois<T, Acc>(
          args, begin, end,
          [&](std::int64_t k) {
            g = ps_roi_pool_geometry<T, Acc>(params, rois + k * 5, s.batch);
            return g.batch >= 0;
          },
          [&](std::int64_t i) {
            const PsRoiElement e = ps_roi_element(i, s.channels, params.pooled_height, params.pooled_width);
            const T* plane = input + (g.batch * s.channels + e.input_channel) * s.height * s.width;
            const PsRoiPoolBin bin = ps_roi_pool_bin(params, g, s.height, s.width, e.bin_y, e.bin_x);
            return ps_roi_pool_bin_average<T, Acc>(bin, plane, s.width);
          });
    });
  });
}

void run_ps_roi_align_backward_cpu(const PsRoiAlignParams& params, const PsRoiBackwardArgs& args, DType dtype) {
  const PsRoiShape s = args.shape;
  if (s.num_rois * s.channels == 0) return;
  const auto& st = args.grad_output_strides;
  dispatch_floating(dtype, "ps_roi_align_backward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const T* grad_output = static_cast<const T*>(args.grad_output);
    const T* rois = static_cast<const T*>(args.rois);
    Acc* grad_input = static_cast<Acc*>(args.grad_input_acc);
    for (std::int64_t k = 0; k < s.num_rois; ++k) {
      const PsRoiAlignGeometry<Acc> g = ps_roi_align_geometry<T, Acc>(params, rois + k * 5, s.batch);
      if (g.batch < 0) continue;
      for (std::int64_t c = 0; c < s.channels; ++c) {
        const PsRoiElement e = ps_roi_element(k * s.channels + c, s.channels, params.pooled_height, params.pooled_width);
        const Acc grad = to_acc<Acc>(grad_output[k * st[0] + e.out_channel * st[1] + e.bin_y * st[2] + e.bin_x * st[3]]);
        Acc* plane = grad_input + (g.batch * s.channels + c) * s.height * s.width;
        ps_roi_align_bin_scatter(g, grad, s.height, s.width, e.bin_y, e.bin_x,
                                 [plane](std::int64_t offset, Acc v) { plane[offset] += v; });
      }
    }
  });
}

void run_ps_roi_pool_backward_cpu(const PsRoiPoolParams& params, const PsRoiBackwardArgs& args, DType dtype) {
  const PsRoiShape s = args.shape;
  if (s.num_rois * s.channels == 0) return;
  const auto& st = args.grad_output_strides;
  dispatch_floating(dtype, "ps_roi_pool_backward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const T* grad_output = static_cast<const T*>(args.grad_output);
    const T* rois = static_cast<const T*>(args.rois);
    Acc* grad_input = static_cast<Acc*>(args.grad_input_acc);
    for (std::int64_t k = 0; k < s.num_rois; ++k) {
      const PsRoiPoolGeometry g = ps_roi_pool_geometry<T, Acc>(params, rois + k * 5, s.batch);
      if (g.batch < 0) continue;
      for (std::int64_t c = 0; c < s.channels; ++c) {
        const PsRoiElement e = ps_roi_element(k * s.channels + c, s.channels, params.pooled_height, params.pooled_width);
        const Acc grad = to_acc<Acc>(grad_output[k * st[0] + e.out_channel * st[1] + e.bin_y * st[2] + e.bin_x * st[3]]);
        Acc* plane = grad_input + (g.batch * s.channels + c) * s.height * s.width;
        const PsRoiPoolBin bin = ps_roi_pool_bin(params, g, s.height, s.width, e.bin_y, e.bin_x);
        ps_roi_pool_bin_scatter(bin, grad, s.width, [plane](std::int64_t offset, Acc v) { plane[offset] += v; });
      }
    }
  });
}

}  // namespace detops
