// RoIAlign on the CPU: the same per-element math as the CUDA kernels, in host loops.
#include "common/dispatch.h"
#include "roi_align/roi_align_kernel.cuh"

namespace detops {

void run_roi_align_forward_cpu(const RoiAlignParams& params, const RoiAlignForwardArgs& args, DType dtype,
                               const ParallelFor& parallel_for) {
  const RoiAlignShape s = args.shape;
  const std::int64_t bins = params.pooled_height * params.pooled_width;
  if (s.num_rois * s.channels * bins == 0) return;
  dispatch_floating(dtype, "roi_align_forward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const T* input = static_cast<const T*>(args.input);
    const T* rois = static_cast<const T*>(args.rois);
    T* output = static_cast<T*>(args.output);
    parallel_for(0, s.num_rois, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t k = begin; k < end; ++k) {
        const RoiAlignGeometry<Acc> g = roi_align_geometry<T, Acc>(params, rois + k * 5, s.batch);
        T* out = output + k * s.channels * bins;
        if (g.batch < 0) {
          for (std::int64_t i = 0; i < s.channels * bins; ++i) out[i] = from_acc<T>(Acc(0));
          continue;
        }
        for (std::int64_t c = 0; c < s.channels; ++c) {
          const T* plane = input + (g.batch * s.channels + c) * s.height * s.width;
          for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
            for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
              out[(c * params.pooled_height + ph) * params.pooled_width + pw] =
                  from_acc<T>(roi_align_bin_average<T, Acc>(g, plane, s.height, s.width, ph, pw));
            }
          }
        }
      }
    });
  });
}

void run_roi_align_backward_cpu(const RoiAlignParams& params, const RoiAlignBackwardArgs& args, DType dtype) {
  const RoiAlignShape s = args.shape;
  if (s.num_rois * s.channels * params.pooled_height * params.pooled_width == 0) return;
  const auto& st = args.grad_output_strides;
  dispatch_floating(dtype, "roi_align_backward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const T* grad_output = static_cast<const T*>(args.grad_output);
    const T* rois = static_cast<const T*>(args.rois);
    Acc* grad_input = static_cast<Acc*>(args.grad_input_acc);
    for (std::int64_t k = 0; k < s.num_rois; ++k) {
      const RoiAlignGeometry<Acc> g = roi_align_geometry<T, Acc>(params, rois + k * 5, s.batch);
      if (g.batch < 0) {
        continue;
      }
      for (std::int64_t c = 0; c < s.channels; ++c) {
        Acc* plane = grad_input + (g.batch * s.channels + c) * s.height * s.width;
        for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
          for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
            const Acc grad = to_acc<Acc>(grad_output[k * st[0] + c * st[1] + ph * st[2] + pw * st[3]]);
            roi_align_bin_scatter(g, grad, s.height, s.width, ph, pw,
                                  [plane](std::int64_t offset, Acc v) { plane[offset] += v; });
          }
        }
      }
    }
  });
}

}  // namespace detops
