// CARAFE on the CPU: the per-element math of carafe_kernel.cuh in work items (forward and features' gradient: a
// channel chunk at one pixel; masks' gradient: one mask element), split by the framework's parallel_for; the
// CUDA kernels tile the same sums in the same fixed order (carafe_cuda.cu). Each result is one fixed-order sum by
// one thread: independent of the split.
#include "carafe/carafe_kernel.cuh"
#include "common/dispatch.h"
#include "common/parallel_for.h"

namespace detops {

void run_carafe_forward_cpu(const CarafeParams& params, const CarafeForwardArgs& args, DType dtype,
                            const ParallelFor& parallel_for) {
  dispatch_floating(dtype, "carafe_forward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const CarafeGeometry g = carafe_geometry(params, args.s);
    parallel_for_each(parallel_for, g.forward_items(), [&](std::int64_t e) {
      carafe_forward_item<T, acc_t<T>>(g, static_cast<const T*>(args.features), static_cast<const T*>(args.masks),
                                       static_cast<T*>(args.out), e);
    });
  });
}

void run_carafe_backward_features_cpu(const CarafeParams& params, const CarafeBackwardFeaturesArgs& args, DType dtype,
                                      const ParallelFor& parallel_for) {
  dispatch_floating(dtype, "carafe_backward_features_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const CarafeGeometry g = carafe_geometry(params, args.s);
    parallel_for_each(parallel_for, g.features_grad_items(), [&](std::int64_t e) {
      carafe_features_grad_item<T, acc_t<T>>(g, static_cast<const T*>(args.grad), static_cast<const T*>(args.masks),
                                             static_cast<T*>(args.grad_features), e);
    });
  });
}

void run_carafe_backward_masks_cpu(const CarafeParams& params, const CarafeBackwardMasksArgs& args, DType dtype,
                                   const ParallelFor& parallel_for) {
  dispatch_floating(dtype, "carafe_backward_masks_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const CarafeGeometry g = carafe_geometry(params, args.s);
    parallel_for_each(parallel_for, g.mask_elements(), [&](std::int64_t e) {
      const std::int64_t x = e % g.wo, y = (e / g.wo) % g.ho, nm = e / g.out_plane();
      static_cast<T*>(args.grad_masks)[e] = from_acc<T>(carafe_masks_grad_at<T, acc_t<T>>(
          g, static_cast<const T*>(args.grad), static_cast<const T*>(args.features), nm / g.mask_channels,
          nm % g.mask_channels, y, x));
    });
  });
}

}  // namespace detops
