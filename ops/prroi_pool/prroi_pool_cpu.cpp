// Precise RoI Pooling on the CPU: the same per-element math as the CUDA kernels, in the RoI CPU skeleton.
#include "common/roi_cpu.h"
#include "prroi_pool/prroi_pool_kernel.cuh"

namespace detops {

void run_prroi_pool_forward_cpu(const PrRoiPoolParams& params, const PrRoiPoolForwardArgs& args, DType dtype,
                                const ParallelFor& parallel_for) {
  const std::int64_t bins = roi_bins(params);
  roi_forward_cpu("prroi_pool_forward_cpu", args, args.shape.channels * bins, dtype, parallel_for,
                  [&](const auto& f, std::int64_t k) {
                    using T = roi_value_t<decltype(f)>;
                    using Acc = acc_t<T>;
                    const PrRoiGeometry g = prroi_geometry(params, f.roi(k), f.s.batch);
                    if (g.batch < 0 || !g.pools) return f.zero(k);
                    T* out = f.out(k);
                    for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
                      const PrRoiAxis<Acc> ay = prroi_bin_axis_y<Acc>(g, ph, f.s.height);
                      for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
                        const PrRoiAxis<Acc> ax = prroi_bin_axis_x<Acc>(g, pw, f.s.width);
                        for (std::int64_t c = 0; c < f.s.channels; ++c) {
                          out[c * bins + ph * params.pooled_width + pw] =
                              from_acc<T>(prroi_bin_average<T, Acc>(ay, ax, f.plane(g.batch, c), f.s.width));
                        }
                      }
                    }
                  });
}

void run_prroi_pool_backward_cpu(const PrRoiPoolParams& params, const PrRoiPoolBackwardArgs& args, DType dtype,
                                 const ParallelFor& parallel_for) {
  roi_backward_cpu_by_channel(
      "prroi_pool_backward_cpu", args, args.shape.channels * roi_bins(params), dtype, parallel_for,
      [&](const auto& b, std::int64_t c, std::int64_t k) {
        using Acc = acc_t<roi_value_t<decltype(b)>>;
        const PrRoiGeometry g = prroi_geometry(params, b.roi(k), b.s.batch);
        if (g.batch < 0 || !g.pools) return;
        Acc* plane = b.plane(g.batch, c);
        for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
          const PrRoiAxis<Acc> ay = prroi_bin_axis_y<Acc>(g, ph, b.s.height);
          for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
            const Acc grad = b.grad(k, c, ph, pw);
            if (grad == Acc(0)) continue;  // adds exactly nothing (the weights are finite)
            const PrRoiAxis<Acc> ax = prroi_bin_axis_x<Acc>(g, pw, b.s.width);
            for (std::int64_t h = ay.pixel_begin; h < ay.pixel_end; ++h) {
              const Acc gy = grad * prroi_pixel_weight(ay, h);
              Acc* row = plane + h * b.s.width;
              for (std::int64_t w = ax.pixel_begin; w < ax.pixel_end; ++w) row[w] += gy * prroi_pixel_weight(ax, w);
            }
          }
        }
      });
}

// The rois backward writes [num_rois, 5] (per_roi = 5, even with no channels) from the forward's input.
void run_prroi_pool_rois_backward_cpu(const PrRoiPoolParams& params, const PrRoiPoolRoisBackwardArgs& args,
                                      DType dtype, const ParallelFor& parallel_for) {
  const RoiForwardArgs as_forward{args.shape, args.input, args.rois, args.grad_rois};
  roi_forward_cpu("prroi_pool_rois_backward_cpu", as_forward, 5, dtype, parallel_for,
                  [&](const auto& f, std::int64_t k) {
                    using T = roi_value_t<decltype(f)>;
                    using Acc = acc_t<T>;
                    const RoiCpuBackward<T> b = roi_cpu_backward_view<T>(args);
                    const PrRoiGeometry g = prroi_geometry(params, f.roi(k), f.s.batch);
                    // The row is one sum, in the fixed (ph, pw, c) order.
                    Acc sum[4] = {0, 0, 0, 0};
                    if (g.batch >= 0 && g.pools) {
                      for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
                        const PrRoiAxis<Acc> ay = prroi_bin_axis_y<Acc>(g, ph, f.s.height);
                        for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
                          const PrRoiAxis<Acc> ax = prroi_bin_axis_x<Acc>(g, pw, f.s.width);
                          for (std::int64_t c = 0; c < f.s.channels; ++c) {
                            const PrRoiCoordinateGrad<Acc> cg = prroi_coordinate_grad(
                                prroi_bin_derivatives<T, Acc>(ay, ax, f.plane(g.batch, c), f.s.width), params, ph, pw);
                            const Acc grad = b.grad(k, c, ph, pw);
                            sum[0] += grad * cg.x1;
                            sum[1] += grad * cg.y1;
                            sum[2] += grad * cg.x2;
                            sum[3] += grad * cg.y2;
                          }
                        }
                      }
                    }
                    T* out = f.out(k);
                    out[0] = from_acc<T>(Acc(0));
                    for (int j = 0; j < 4; ++j) out[j + 1] = from_acc<T>(sum[j]);
                  });
}

}  // namespace detops
