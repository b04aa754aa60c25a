// Precise RoI Pooling on the CPU: the same per-element math as the CUDA kernels, in host loops.
#include "common/dispatch.h"
#include "prroi_pool/prroi_pool_kernel.cuh"

namespace detops {

void run_prroi_pool_forward_cpu(const PrRoiPoolParams& params, const PrRoiPoolForwardArgs& args, DType dtype,
                                const ParallelFor& parallel_for) {
  const PrRoiPoolShape s = args.shape;
  const std::int64_t bins = params.pooled_height * params.pooled_width;
  if (s.num_rois * s.channels * bins == 0) return;
  dispatch_floating(dtype, "prroi_pool_forward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const T* input = static_cast<const T*>(args.input);
    const T* rois = static_cast<const T*>(args.rois);
    T* output = static_cast<T*>(args.output);
    parallel_for(0, s.num_rois, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t k = begin; k < end; ++k) {
        const PrRoiGeometry g = prroi_geometry(params, rois + k * 5, s.batch);
        T* out = output + k * s.channels * bins;
        if (g.batch < 0 || !g.pools) {
          for (std::int64_t i = 0; i < s.channels * bins; ++i) out[i] = from_acc<T>(Acc(0));
          continue;
        }
        for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
          const PrRoiAxis<Acc> ay = prroi_bin_axis_y<Acc>(g, ph, s.height);
          for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
            const PrRoiAxis<Acc> ax = prroi_bin_axis_x<Acc>(g, pw, s.width);
            for (std::int64_t c = 0; c < s.channels; ++c) {
              const T* plane = input + (g.batch * s.channels + c) * s.height * s.width;
              out[(c * params.pooled_height + ph) * params.pooled_width + pw] =
                  from_acc<T>(prroi_bin_average<T, Acc>(ay, ax, plane, s.width));
            }
          }
        }
      }
    });
  });
}

void run_prroi_pool_backward_cpu(const PrRoiPoolParams& params, const PrRoiPoolBackwardArgs& args, DType dtype,
                                 const ParallelFor& parallel_for) {
  const PrRoiPoolShape s = args.shape;
  const std::int64_t bins = params.pooled_height * params.pooled_width;
  if (s.num_rois * s.channels * bins == 0) return;
  const auto& st = args.grad_output_strides;
  dispatch_floating(dtype, "prroi_pool_backward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const T* grad_output = static_cast<const T*>(args.grad_output);
    const T* rois = static_cast<const T*>(args.rois);
    Acc* grad_input = static_cast<Acc*>(args.grad_input_acc);
    // Channels write disjoint planes; within one, the sum runs in the fixed (roi, ph, pw) order.
    parallel_for(0, s.channels, [&](std::int64_t c_begin, std::int64_t c_end) {
      for (std::int64_t c = c_begin; c < c_end; ++c) {
        for (std::int64_t k = 0; k < s.num_rois; ++k) {
          const PrRoiGeometry g = prroi_geometry(params, rois + k * 5, s.batch);
          if (g.batch < 0 || !g.pools) continue;
          Acc* plane = grad_input + (g.batch * s.channels + c) * s.height * s.width;
          for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
            const PrRoiAxis<Acc> ay = prroi_bin_axis_y<Acc>(g, ph, s.height);
            for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
              const Acc grad = to_acc<Acc>(grad_output[k * st[0] + c * st[1] + ph * st[2] + pw * st[3]]);
              if (grad == Acc(0)) continue;  // adds exactly nothing (the weights are finite)
              const PrRoiAxis<Acc> ax = prroi_bin_axis_x<Acc>(g, pw, s.width);
              for (std::int64_t h = ay.pixel_begin; h < ay.pixel_end; ++h) {
                const Acc gy = grad * prroi_pixel_weight(ay, h);
                Acc* row = plane + h * s.width;
                for (std::int64_t w = ax.pixel_begin; w < ax.pixel_end; ++w) row[w] += gy * prroi_pixel_weight(ax, w);
              }
            }
          }
        }
      }
    });
  });
}

void run_prroi_pool_rois_backward_cpu(const PrRoiPoolParams& params, const PrRoiPoolRoisBackwardArgs& args,
                                      DType dtype, const ParallelFor& parallel_for) {
  const PrRoiPoolShape s = args.shape;
  if (s.num_rois == 0) return;
  const auto& st = args.grad_output_strides;
  dispatch_floating(dtype, "prroi_pool_rois_backward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const T* grad_output = static_cast<const T*>(args.grad_output);
    const T* input = static_cast<const T*>(args.input);
    const T* rois = static_cast<const T*>(args.rois);
    T* grad_rois = static_cast<T*>(args.grad_rois);
    // Each roi's row is one sum, in the fixed (ph, pw, c) order.
    parallel_for(0, s.num_rois, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t k = begin; k < end; ++k) {
        const PrRoiGeometry g = prroi_geometry(params, rois + k * 5, s.batch);
        Acc sum[4] = {0, 0, 0, 0};
        if (g.batch >= 0 && g.pools) {
          for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
            const PrRoiAxis<Acc> ay = prroi_bin_axis_y<Acc>(g, ph, s.height);
            for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
              const PrRoiAxis<Acc> ax = prroi_bin_axis_x<Acc>(g, pw, s.width);
              for (std::int64_t c = 0; c < s.channels; ++c) {
                const Acc grad = to_acc<Acc>(grad_output[k * st[0] + c * st[1] + ph * st[2] + pw * st[3]]);
                const T* plane = input + (g.batch * s.channels + c) * s.height * s.width;
                const PrRoiCoordinateGrad<Acc> cg =
                    prroi_coordinate_grad(prroi_bin_derivatives<T, Acc>(ay, ax, plane, s.width), params, ph, pw);
                sum[0] += grad * cg.x1;
                sum[1] += grad * cg.y1;
                sum[2] += grad * cg.x2;
                sum[3] += grad * cg.y2;
              }
            }
          }
        }
        T* out = grad_rois + k * 5;
        out[0] = from_acc<T>(Acc(0));
        for (int j = 0; j < 4; ++j) out[j + 1] = from_acc<T>(sum[j]);
      }
    });
  });
}

}  // namespace detops
