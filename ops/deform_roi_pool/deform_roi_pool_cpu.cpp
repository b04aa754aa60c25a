// Deformable RoI pooling on the CPU: the same per-element math as the CUDA kernels, in the RoI CPU skeleton.
#include "common/roi_cpu.h"
#include "deform_roi_pool/deform_roi_pool_kernel.cuh"

namespace detops {

void run_deform_roi_pool_forward_cpu(const DeformRoiPoolParams& params, const DeformRoiPoolForwardArgs& args,
                                     DType dtype, const ParallelFor& parallel_for) {
  const std::int64_t bins = roi_bins(params);
  roi_forward_cpu("deform_roi_pool_forward_cpu", args, args.shape.channels * bins, dtype, parallel_for,
                  [&](const auto& f, std::int64_t k) {
                    using T = roi_value_t<decltype(f)>;
                    using Acc = acc_t<T>;
                    const DeformRoiGeometry<Acc> d = deform_roi_geometry<T, Acc>(params, f.roi(k), f.s.batch);
                    if (d.g.batch < 0) return f.zero(k);
                    const T* offset = args.offset ? static_cast<const T*>(args.offset) + k * 2 * bins : nullptr;
                    const T* mask = args.mask ? static_cast<const T*>(args.mask) + k * bins : nullptr;
                    T* out = f.out(k);
                    for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
                      for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
                        const std::int64_t bin = ph * params.pooled_width + pw;
                        const RoiAlignGeometry<Acc> g =
                            deform_roi_bin_geometry(d, static_cast<Acc>(params.gamma), offset, bins, bin);
                        for (std::int64_t c = 0; c < f.s.channels; ++c) {
                          const Acc v = roi_align_bin_average<T, Acc>(g, f.plane(d.g.batch, c), f.s.height,
                                                                      f.s.width, ph, pw);
                          out[c * bins + bin] = from_acc<T>(mask ? v * to_acc<Acc>(mask[bin]) : v);
                        }
                      }
                    }
                  });
}

void run_deform_roi_pool_backward_cpu(const DeformRoiPoolParams& params, const DeformRoiPoolBackwardArgs& args,
                                      DType dtype) {
  const std::int64_t bins = roi_bins(params);
  const bool values = args.grad_offset_acc != nullptr || args.grad_mask_acc != nullptr;
  roi_backward_cpu("deform_roi_pool_backward_cpu", args, args.shape.channels * bins, dtype,
                   [&](const auto& b, std::int64_t k) {
                     using T = roi_value_t<decltype(b)>;
                     using Acc = acc_t<T>;
                     const DeformRoiGeometry<Acc> d = deform_roi_geometry<T, Acc>(params, b.roi(k), b.s.batch);
                     if (d.g.batch < 0) return;
                     const Acc gamma = static_cast<Acc>(params.gamma);
                     const T* offset = args.offset ? static_cast<const T*>(args.offset) + k * 2 * bins : nullptr;
                     const T* mask = args.mask ? static_cast<const T*>(args.mask) + k * bins : nullptr;
                     Acc* grad_offset = args.grad_offset_acc ? static_cast<Acc*>(args.grad_offset_acc) + k * 2 * bins : nullptr;
                     Acc* grad_mask = args.grad_mask_acc ? static_cast<Acc*>(args.grad_mask_acc) + k * bins : nullptr;
                     for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
                       for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
                         const std::int64_t bin = ph * params.pooled_width + pw;
                         const RoiAlignGeometry<Acc> g = deform_roi_bin_geometry(d, gamma, offset, bins, bin);
                         const Acc m = mask ? to_acc<Acc>(mask[bin]) : Acc(1);
                         for (std::int64_t c = 0; c < b.s.channels; ++c) {
                           Acc* plane = b.plane(d.g.batch, c);
                           const T* in = values ? static_cast<const T*>(args.input) + b.plane_offset(d.g.batch, c) : nullptr;
                           const DeformRoiBinGrads<Acc> r = deform_roi_bin_backward(
                               g, d, gamma, b.grad(k, c, ph, pw), m, values, b.s.height, b.s.width, ph, pw,
                               [in](std::int64_t pixel) { return to_acc<Acc>(in[pixel]); },
                               [plane](std::int64_t pixel, Acc v) { plane[pixel] += v; });
                           if (grad_offset) {
                             grad_offset[bin] += r.offset_x;
                             grad_offset[bins + bin] += r.offset_y;
                           }
                           if (grad_mask) grad_mask[bin] += r.mask;
                         }
                       }
                     }
                   });
}

}  // namespace detops
