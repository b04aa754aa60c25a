// RoIAlign on the CPU: the same per-element math as the CUDA kernels, in the RoI CPU skeleton.
#include "common/roi_cpu.h"
#include "roi_align/roi_align_kernel.cuh"

namespace detops {

void run_roi_align_forward_cpu(const RoiAlignParams& params, const RoiAlignForwardArgs& args, DType dtype,
                               const ParallelFor& parallel_for) {
  const std::int64_t bins = roi_bins(params);
  roi_forward_cpu("roi_align_forward_cpu", args, args.shape.channels * bins, dtype, parallel_for,
                  [&](const auto& f, std::int64_t k) {
                    using T = roi_value_t<decltype(f)>;
                    using Acc = acc_t<T>;
                    const RoiAlignGeometry<Acc> g = roi_align_geometry<T, Acc>(params, f.roi(k), f.s.batch);
                    if (g.batch < 0) return f.zero(k);
                    T* out = f.out(k);
                    for (std::int64_t c = 0; c < f.s.channels; ++c) {
                      const T* plane = f.plane(g.batch, c);
                      for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
                        for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
                          out[c * bins + ph * params.pooled_width + pw] = from_acc<T>(
                              roi_align_bin_average<T, Acc>(g, plane, f.s.height, f.s.width, ph, pw));
                        }
                      }
                    }
                  });
}

void run_roi_align_backward_cpu(const RoiAlignParams& params, const RoiAlignBackwardArgs& args, DType dtype) {
  roi_backward_cpu("roi_align_backward_cpu", args, args.shape.channels * roi_bins(params), dtype,
                   [&](const auto& b, std::int64_t k) {
                     using T = roi_value_t<decltype(b)>;
                     using Acc = acc_t<T>;
                     const RoiAlignGeometry<Acc> g = roi_align_geometry<T, Acc>(params, b.roi(k), b.s.batch);
                     if (g.batch < 0) return;
                     for (std::int64_t c = 0; c < b.s.channels; ++c) {
                       Acc* plane = b.plane(g.batch, c);
                       for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
                         for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
                           roi_align_bin_scatter(g, b.grad(k, c, ph, pw), b.s.height, b.s.width, ph, pw,
                                                 [plane](std::int64_t offset, Acc v) { plane[offset] += v; });
                         }
                       }
                     }
                   });
}

}  // namespace detops
