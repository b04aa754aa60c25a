// Sigmoid focal loss on the CPU: the same per-element math as the CUDA kernels, in host loops. A reduction
// sums each fixed chunk of kFocalLossChunk elements in the accumulation type, then the chunk sums in order,
// so the result does not depend on how parallel_for splits the work.
#include "common/dispatch.h"
#include "common/parallel_for.h"
#include "sigmoid_focal_loss/sigmoid_focal_loss_kernel.cuh"

namespace detops {

void run_sigmoid_focal_loss_forward_cpu(const SigmoidFocalLossParams& params, const SigmoidFocalLossForwardArgs& args,
                                        DType dtype, const ParallelFor& parallel_for) {
  if (args.numel == 0) return;
  dispatch_floating(dtype, "sigmoid_focal_loss_forward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const FocalCoeffs<Acc> k = focal_coeffs<Acc>(params);
    const auto element = [&](std::int64_t i) {
      const FocalElement<Acc> el = load_focal_element<T, Acc>(params.form, i, args.num_classes,
                                                              static_cast<const T*>(args.inputs), args.targets,
                                                              static_cast<const T*>(args.weight));
      return el.valid ? el.w * focal_loss_value(el.x, el.t, k) : Acc(0);
    };
    T* out = static_cast<T*>(args.out);
    if (params.reduction == FocalLossReduction::kNone) {
      parallel_for_each(parallel_for, args.numel, [&](std::int64_t i) { out[i] = from_acc<T>(element(i)); });
    } else {
      const Acc total = chunked_sum(parallel_for, args.numel, kFocalLossChunk, static_cast<Acc*>(args.partials), element);
      out[0] = from_acc<T>(total * static_cast<Acc>(args.scale));
    }
  });
}

void run_sigmoid_focal_loss_backward_cpu(const SigmoidFocalLossParams& params,
                                         const SigmoidFocalLossBackwardArgs& args, DType dtype,
                                         const ParallelFor& parallel_for) {
  if (args.numel == 0) return;
  dispatch_floating(dtype, "sigmoid_focal_loss_backward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const FocalCoeffs<Acc> k = focal_coeffs<Acc>(params);
    parallel_for_each(parallel_for, args.numel, [&](std::int64_t i) {
      const FocalElement<Acc> el = load_focal_element<T, Acc>(params.form, i, args.num_classes,
                                                              static_cast<const T*>(args.inputs), args.targets,
                                                              static_cast<const T*>(args.weight));
      const Acc g = to_acc<Acc>(static_cast<const T*>(args.grad)[i * args.grad_stride]) * static_cast<Acc>(args.grad_scale);
      static_cast<T*>(args.grad_inputs)[i] = from_acc<T>(el.valid ? g * el.w * focal_loss_grad(el.x, el.t, k) : Acc(0));
    });
  });
}

}  // namespace detops
