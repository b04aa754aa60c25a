// RoIPool on the CPU: the same per-element math as the CUDA kernels, in the RoI CPU skeleton.
#include "common/roi_cpu.h"
#include "roi_pool/roi_pool_kernel.cuh"

namespace detops {

void run_roi_pool_forward_cpu(const RoiPoolParams& params, const RoiPoolForwardArgs& args, DType dtype,
                              const ParallelFor& parallel_for) {
  const std::int64_t bins = roi_bins(params);
  roi_forward_cpu("roi_pool_forward_cpu", args, args.shape.channels * bins, dtype, parallel_for,
                  [&](const auto& f, std::int64_t k) {
                    using T = roi_value_t<decltype(f)>;
                    using Acc = acc_t<T>;
                    const RoiPoolGeometry<Acc> g = roi_pool_geometry<T, Acc>(params, f.roi(k), f.s.batch);
                    T* out = f.out(k);
                    std::int32_t* arg = args.argmax + k * f.per_roi;
                    if (g.batch < 0) {
                      f.zero(k);
                      for (std::int64_t i = 0; i < f.per_roi; ++i) arg[i] = -1;
                      return;
                    }
                    for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
                      for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
                        const RoiPoolBin bin = roi_pool_bin(g, ph, pw, f.s.height, f.s.width);
                        for (std::int64_t c = 0; c < f.s.channels; ++c) {
                          const RoiPoolMax<Acc> m =
                              roi_pool_bin_max<T, Acc>(bin, f.plane(g.batch, c), f.s.width, params.exact_max);
                          const std::int64_t o = c * bins + ph * params.pooled_width + pw;
                          out[o] = from_acc<T>(m.value);
                          arg[o] = static_cast<std::int32_t>(m.index);
                        }
                      }
                    }
                  });
}

void run_roi_pool_backward_cpu(const RoiPoolParams& params, const RoiPoolBackwardArgs& args, DType dtype,
                               const ParallelFor& parallel_for) {
  const std::int64_t bins = roi_bins(params);
  const std::int64_t plane_elements = args.shape.height * args.shape.width;
  roi_backward_cpu_by_channel(
      "roi_pool_backward_cpu", args, args.shape.channels * bins, dtype, parallel_for,
      [&](const auto& b, std::int64_t c, std::int64_t k) {
        using Acc = acc_t<roi_value_t<decltype(b)>>;
        const Acc batch = to_acc<Acc>(b.roi(k)[0]);
        if (!(batch >= Acc(0) && batch < static_cast<Acc>(b.s.batch))) return;
        Acc* plane = b.plane(static_cast<std::int64_t>(batch), c);
        const std::int32_t* arg = args.argmax + (k * b.s.channels + c) * bins;
        for (std::int64_t ph = 0; ph < params.pooled_height; ++ph) {
          for (std::int64_t pw = 0; pw < params.pooled_width; ++pw) {
            const std::int32_t a = arg[ph * params.pooled_width + pw];
            if (roi_pool_argmax_kind(a, plane_elements) != RoiPoolArgmaxKind::kElement) continue;
            plane[a] += b.grad(k, c, ph, pw);
          }
        }
      });
}

}  // namespace detops
