// Softmax focal loss on the CPU: the per-row math of the CUDA kernels (softmax_focal_loss_kernel.cuh) with a
// group of one thread per row (SerialRow: the online softmax over the row's classes in order), split over rows.
// A reduction sums each fixed chunk of kSoftmaxFocalChunkRows rows in the accumulation type, then the chunk sums
// in order, so the result does not depend on how parallel_for splits the work. Targets are checked beforehand.
#include "common/dispatch.h"
#include "common/parallel_for.h"
#include "softmax_focal_loss/softmax_focal_loss_kernel.cuh"

namespace detops {

void run_softmax_focal_loss_forward_cpu(const SoftmaxFocalLossParams& params, const SoftmaxFocalLossForwardArgs& args,
                                        DType dtype, const ParallelFor& parallel_for) {
  if (args.rows == 0) return;
  dispatch_floating(dtype, "softmax_focal_loss_forward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const SoftmaxFocalCoeffs<Acc> k = softmax_focal_coeffs<Acc>(params);
    const auto row_loss = [&](std::int64_t n) {
      int kind = 0;
      return softmax_focal_row_loss(SerialRow{}, k, n, args.classes, static_cast<const T*>(args.input),
                                    static_cast<const std::int64_t*>(args.target), static_cast<const T*>(args.weight),
                                    kind);
    };
    T* out = static_cast<T*>(args.out);
    if (params.reduction == SoftmaxFocalLossReduction::kNone) {
      parallel_for_each(parallel_for, args.rows, [&](std::int64_t n) { out[n] = from_acc<T>(row_loss(n)); });
    } else {
      const Acc total = chunked_sum(parallel_for, args.rows, kSoftmaxFocalChunkRows, static_cast<Acc*>(args.partials),
                                    row_loss);
      out[0] = from_acc<T>(total * static_cast<Acc>(args.scale));
    }
  });
}

void run_softmax_focal_loss_backward_cpu(const SoftmaxFocalLossParams& params, const SoftmaxFocalLossBackwardArgs& args,
                                         DType dtype, const ParallelFor& parallel_for) {
  if (args.rows == 0) return;
  dispatch_floating(dtype, "softmax_focal_loss_backward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const SoftmaxFocalCoeffs<Acc> k = softmax_focal_coeffs<Acc>(params);
    parallel_for_each(parallel_for, args.rows, [&](std::int64_t n) {
      const Acc upstream = to_acc<Acc>(static_cast<const T*>(args.grad)[n * args.grad_stride]) *
                           static_cast<Acc>(args.grad_scale);
      int kind = 0;
      softmax_focal_row_grad(SerialRow{}, k, n, args.classes, upstream, static_cast<const T*>(args.input),
                             static_cast<const std::int64_t*>(args.target), static_cast<const T*>(args.weight),
                             static_cast<T*>(args.grad_input), kind);
    });
  });
}

}  // namespace detops
