// Sigmoid focal loss on the CPU: the same per-element math as the CUDA kernels, in host loops. A reduction
// sums each fixed chunk of kFocalLossChunk elements in the accumulation type, then the chunk sums in order,
// so the result does not depend on how parallel_for splits the work.
#include "common/dispatch.h"
#include "sigmoid_focal_loss/sigmoid_focal_loss_kernel.cuh"

namespace detops {

void run_sigmoid_focal_loss_forward_cpu(const SigmoidFocalLossParams& params, const SigmoidFocalLossForwardArgs& args,
                                        DType dtype, const FocalParallelFor& parallel_for) {
  if (args.numel == 0) return;
  dispatch_floating(dtype, "sigmoid_focal_loss_forward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const FocalCoeffs<Acc> k = focal_coeffs<Acc>(params);
    const T* inputs = static_cast<const T*>(args.inputs);
    const T* weight = static_cast<const T*>(args.weight);
    const auto element = [&](std::int64_t i) {
      const FocalElement<Acc> el =
          load_focal_element<T, Acc>(params.form, i, args.num_classes, inputs, args.targets, weight);
      return el.valid ? el.w * focal_loss_value(el.x, el.t, k) : Acc(0);
    };
    T* out = static_cast<T*>(args.out);
    if (params.reduction == FocalLossReduction::kNone) {
      parallel_for(0, args.numel, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) out[i] = from_acc<T>(element(i));
      });
      return;
    }
    Acc* partials = static_cast<Acc*>(args.partials);
    const std::int64_t chunks = sigmoid_focal_loss_chunk_count(args.numel);
    parallel_for(0, chunks, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t c = begin; c < end; ++c) {
        const std::int64_t first = c * kFocalLossChunk;
        const std::int64_t last = first + kFocalLossChunk < args.numel ? first + kFocalLossChunk : args.numel;
        Acc sum = Acc(0);
        for (std::int64_t i = first; i < last; ++i) sum += element(i);
        partials[c] = sum;
      }
    });
    Acc total = Acc(0);
    for (std::int64_t c = 0; c < chunks; ++c) total += partials[c];
    out[0] = from_acc<T>(total * static_cast<Acc>(args.scale));
  });
}

void run_sigmoid_focal_loss_backward_cpu(const SigmoidFocalLossParams& params,
                                         const SigmoidFocalLossBackwardArgs& args, DType dtype,
                                         const FocalParallelFor& parallel_for) {
  if (args.numel == 0) return;
  dispatch_floating(dtype, "sigmoid_focal_loss_backward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const FocalCoeffs<Acc> k = focal_coeffs<Acc>(params);
    const T* inputs = static_cast<const T*>(args.inputs);
    const T* weight = static_cast<const T*>(args.weight);
    const T* grad = static_cast<const T*>(args.grad);
    T* grad_inputs = static_cast<T*>(args.grad_inputs);
    const Acc scale = static_cast<Acc>(args.grad_scale);
    parallel_for(0, args.numel, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const FocalElement<Acc> el =
            load_focal_element<T, Acc>(params.form, i, args.num_classes, inputs, args.targets, weight);
        const Acc g = to_acc<Acc>(grad[i * args.grad_stride]) * scale;
        grad_inputs[i] = from_acc<T>(el.valid ? g * el.w * focal_loss_grad(el.x, el.t, k) : Acc(0));
      }
    });
  });
}

}  // namespace detops
