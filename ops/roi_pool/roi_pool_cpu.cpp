// RoIPool on the CPU: the same per-element math as the CUDA kernels, in host loops.
#include "common/dispatch.h"
#include "roi_pool/roi_pool_kernel.cuh"

namespace detops {

void run_roi_pool_forward_cpu(const RoiPoolParams& params, const RoiPoolForwardArgs& args, DType dtype,
                              const ParallelFor& parallel_for) {
  const RoiPoolShape s = args.shape;
  const std::int64_t bins = params.pooled_height * params.pooled_width;
  if (s.num_rois * s.channels * bins == 0) return;
  dispatch_floating(dtype, "roi_pool_forward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const T* input = static_cast<const T*>(args.input);
    const T* rois = static_cast<const T*>(args.rois);
    T* output = static_cast<T*>(args.output);
    std::int32_t* argmax = args.argmax;
    parallel_for(0, s.num_rois, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t k = begin; k < end; ++k) {
        const RoiPoolGeometry<Acc> g = roi_pool_geometry<T, Acc>(params, rois + k * 5, s.batch);
        T* out = output + k * s.channels * bins;
        std::int32_t* arg = argmax + k * s.channels * bins;
        if (g.batch < 0) {
          for (std::int64_t i = 0; i < s.channels * bins; ++i) {
            out[i] = from_acc<T>(Acc(0));
            arg[i] = -1;
          }
          continue;
        }
        for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
          for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
            const RoiPoolBin bin = roi_pool_bin(g, ph, pw, s.height, s.width);
            for (std::int64_t c = 0; c < s.channels; ++c) {
              const T* plane = input + (g.batch * s.channels + c) * s.height * s.width;
              const RoiPoolMax<Acc> m = roi_pool_bin_max<T, Acc>(bin, plane, s.width);
              const std::int64_t o = (c * params.pooled_height + ph) * params.pooled_width + pw;
              out[o] = from_acc<T>(m.value);
              arg[o] = static_cast<std::int32_t>(m.index);
            }
          }
        }
      }
    });
  });
}

void run_roi_pool_backward_cpu(const RoiPoolParams& params, const RoiPoolBackwardArgs& args, DType dtype,
                               const ParallelFor& parallel_for) {
  const RoiPoolShape s = args.shape;
  const std::int64_t bins = params.pooled_height * params.pooled_width;
  if (s.num_rois * s.channels * bins == 0) return;
  const auto& st = args.grad_output_strides;
  const std::int64_t plane_elements = s.height * s.width;
  dispatch_floating(dtype, "roi_pool_backward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const T* grad_output = static_cast<const T*>(args.grad_output);
    const T* rois = static_cast<const T*>(args.rois);
    Acc* grad_input = static_cast<Acc*>(args.grad_input_acc);
    // Channels write disjoint planes; within one, the sum runs in the fixed (roi, ph, pw) order.
    parallel_for(0, s.channels, [&](std::int64_t c_begin, std::int64_t c_end) {
      for (std::int64_t c = c_begin; c < c_end; ++c) {
        for (std::int64_t k = 0; k < s.num_rois; ++k) {
          const Acc b = to_acc<Acc>(rois[k * 5]);
          if (!(b >= Acc(0) && b < static_cast<Acc>(s.batch))) continue;
          Acc* plane = grad_input + (static_cast<std::int64_t>(b) * s.channels + c) * plane_elements;
          const std::int32_t* arg = args.argmax + (k * s.channels + c) * bins;
          for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
            for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
              const std::int32_t a = arg[ph * params.pooled_width + pw];
              if (roi_pool_argmax_kind(a, plane_elements) != RoiPoolArgmaxKind::kElement) continue;
              plane[a] += to_acc<Acc>(grad_output[k * st[0] + c * st[1] + ph * st[2] + pw * st[3]]);
            }
          }
        }
      }
    });
  });
}

}  // namespace detops
