// Sigmoid focal loss on the CPU: the same per-element math as the CUDA kernels, in host loops
// (common/logit_loss_cpu.h). A reduction sums each fixed chunk of kFocalLossChunk elements in the accumulation
// type, then the chunk sums in order, so the result does not depend on how parallel_for splits the work.
#include "common/logit_loss_cpu.h"
#include "sigmoid_focal_loss/sigmoid_focal_loss_kernel.cuh"

namespace detops {
namespace {

// Element i of either form (load_focal_element) with the call's coefficients. The mmcv form's targets are checked
// beforehand: an element of an invalid row (never met) would count 0.
template <typename T>
struct Elements {
  using Acc = acc_t<T>;
  static constexpr std::int64_t kChunk = kFocalLossChunk;
  FocalLossForm form;
  FocalCoeffs<Acc> k;

  explicit Elements(const SigmoidFocalLossParams& params) : form(params.form), k(params) {}

  template <typename Args>
  FocalElement<Acc> load(const Args& args, std::int64_t i) const {
    return load_focal_element<T, Acc>(form, i, args.classes, static_cast<const T*>(args.input), args.target,
                                      static_cast<const T*>(args.weight));
  }
  Acc loss(const LogitLossForwardArgs& args, std::int64_t i) const {
    const FocalElement<Acc> el = load(args, i);
    return el.valid ? el.w * focal_loss_value(el.x, el.t, k) : Acc(0);
  }
  void grad(const LogitLossBackwardArgs& args, std::int64_t i, Acc upstream) const {
    const FocalElement<Acc> el = load(args, i);
    static_cast<T*>(args.grad_input)[i] =
        from_acc<T>(el.valid ? upstream * el.w * focal_loss_grad(el.x, el.t, k) : Acc(0));
  }
};

}  // namespace

void run_sigmoid_focal_loss_forward_cpu(const SigmoidFocalLossParams& params, const SigmoidFocalLossForwardArgs& args,
                                        DType dtype, const ParallelFor& parallel_for) {
  run_logit_loss_forward_cpu<Elements>("sigmoid_focal_loss_forward_cpu", params, args, dtype, parallel_for);
}

void run_sigmoid_focal_loss_backward_cpu(const SigmoidFocalLossParams& params, const SigmoidFocalLossBackwardArgs& args,
                                         DType dtype, const ParallelFor& parallel_for) {
  run_logit_loss_backward_cpu<Elements>("sigmoid_focal_loss_backward_cpu", params, args, dtype, parallel_for);
}

}  // namespace detops
