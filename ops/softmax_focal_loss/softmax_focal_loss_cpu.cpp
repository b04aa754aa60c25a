// Softmax focal loss on the CPU: the per-row math of the CUDA kernels (softmax_focal_loss_kernel.cuh) with a
// group of one thread per row (SerialRow: the online softmax over the row's classes in order), split over rows
// (common/logit_loss_cpu.h). A reduction sums each fixed chunk of kSoftmaxFocalChunkRows rows in the accumulation
// type, then the chunk sums in order, so the result does not depend on how parallel_for splits the work. Targets
// are checked beforehand.
#include "common/logit_loss_cpu.h"
#include "softmax_focal_loss/softmax_focal_loss_kernel.cuh"

namespace detops {
namespace {

// Row n's weighted loss and its gradient (0 and zeros for an ignored row) with the call's coefficients.
template <typename T>
struct Rows {
  static constexpr std::int64_t kChunk = kSoftmaxFocalChunkRows;
  SoftmaxFocalCoeffs<acc_t<T>> k;

  explicit Rows(const SoftmaxFocalLossParams& params) : k(params) {}

  acc_t<T> loss(const LogitLossForwardArgs& args, std::int64_t n) const {
    int kind = 0;
    return softmax_focal_row_loss(SerialRow{}, k, n, args.classes, static_cast<const T*>(args.input),
                                  static_cast<const std::int64_t*>(args.target), static_cast<const T*>(args.weight),
                                  kind);
  }
  void grad(const LogitLossBackwardArgs& args, std::int64_t n, acc_t<T> upstream) const {
    int kind = 0;
    softmax_focal_row_grad(SerialRow{}, k, n, args.classes, upstream, static_cast<const T*>(args.input),
                           static_cast<const std::int64_t*>(args.target), static_cast<const T*>(args.weight),
                           static_cast<T*>(args.grad_input), kind);
  }
};

}  // namespace

void run_softmax_focal_loss_forward_cpu(const SoftmaxFocalLossParams& params, const SoftmaxFocalLossForwardArgs& args,
                                        DType dtype, const ParallelFor& parallel_for) {
  run_logit_loss_forward_cpu<Rows>("softmax_focal_loss_forward_cpu", params, args, dtype, parallel_for);
}

void run_softmax_focal_loss_backward_cpu(const SoftmaxFocalLossParams& params, const SoftmaxFocalLossBackwardArgs& args,
                                         DType dtype, const ParallelFor& parallel_for) {
  run_logit_loss_backward_cpu<Rows>("softmax_focal_loss_backward_cpu", params, args, dtype, parallel_for);
}

}  // namespace detops
