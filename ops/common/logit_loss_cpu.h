#pragma once
// The CPU loops of the logit losses (common/logit_loss.h) around an op's per-item math, written once: the dtype
// dispatch, the forward's 'none' output or its deterministic chunked reduction (chunked_sum: each fixed chunk of
// items summed in order in the accumulation type, then the chunk sums in order, so the result does not depend on
// how parallel_for splits the work), and the backward's upstream gradient.
#include <cstdint>

#include "common/logit_loss.h"
#include "common/numeric.h"
#include "common/parallel_for.h"

namespace detops {

// Item<T>: an op's per-item math on the CPU, T the logits' dtype, built once per call as Item<T>(params):
//   acc_t<T> loss(const LogitLossForwardArgs&, i)            item i's loss
//   void grad(const LogitLossBackwardArgs&, i, upstream)       writes item i's part of grad_input, upstream (acc_t<T>)
//                                                              being its upstream gradient (args.grad.at(i))
// and Item<T>::kChunk, the items per chunk of a reduction.

// 'none' writes the n losses in T; 'mean' / 'sum' write T(the chunked sum * args.scale) to out[0].
template <template <typename> class Item, typename Params>
void run_logit_loss_forward_cpu(const char* name, const Params& params, const LogitLossForwardArgs& args, DType dtype,
                                const ParallelFor& parallel_for) {
  dispatch_logit_loss<Item>(name, params, args.n, dtype, [&](auto tag, const auto& item) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const auto loss = [&](std::int64_t i) { return item.loss(args, i); };
    T* out = static_cast<T*>(args.out);
    if (params.reduction == decltype(params.reduction)::kNone) {
      parallel_for_each(parallel_for, args.n, [&](std::int64_t i) { out[i] = from_acc<T>(loss(i)); });
    } else {
      const Acc total = chunked_sum(parallel_for, args.n, Item<T>::kChunk, static_cast<Acc*>(args.partials), loss);
      out[0] = from_acc<T>(total * static_cast<Acc>(args.scale));
    }
  });
}

// Items are split over parallel_for; each writes only its own part of grad_input.
template <template <typename> class Item, typename Params>
void run_logit_loss_backward_cpu(const char* name, const Params& params, const LogitLossBackwardArgs& args, DType dtype,
                                 const ParallelFor& parallel_for) {
  dispatch_logit_loss<Item>(name, params, args.n, dtype, [&](auto tag, const auto& item) {
    using T = typename decltype(tag)::type;
    parallel_for_each(parallel_for, args.n, [&](std::int64_t i) { item.grad(args, i, args.grad.at<T, acc_t<T>>(i)); });
  });
}

}  // namespace detops
