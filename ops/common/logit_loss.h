#pragma once
// The args structs of the losses over logits (sigmoid_focal_loss in both forms, softmax_focal_loss): n losses
// before any reduction, computed from logits in a floating dtype T, targets and an optional per-class weight.
// Each op's header says what its items, targets and shapes are. Framework-free.
#include <cstdint>

#include "common/dispatch.h"
#include "common/numeric.h"
#include "common/upstream_grad.h"

namespace detops {

struct LogitLossForwardArgs {
  std::int64_t n = 0;        // the losses before any reduction: the items of the op (elements or rows)
  std::int64_t classes = 0;  // C, for [N, C] logits with class-index targets
  const void* input = nullptr;
  const void* target = nullptr;
  const void* weight = nullptr;  // T [C] or null
  // reduction 'none': the n losses, contiguous, T. 'mean' / 'sum': one element, the sum of the losses times scale.
  void* out = nullptr;
  // 'mean' / 'sum' only: the acc_t<T> workspace of the op's chunk count (one partial sum per chunk of items).
  void* partials = nullptr;
  double scale = 1.0;
  // CUDA, class-index targets, optional: the kernels record here (atomicMin) the first row whose target is not a
  // class the op accepts; such rows contribute 0. The CPU path expects its targets checked beforehand.
  unsigned long long* first_invalid_row = nullptr;
};

// grad: T, one value per loss (UpstreamGrad). grad_input: the logits' shape, contiguous, T.
struct LogitLossBackwardArgs {
  std::int64_t n = 0;
  std::int64_t classes = 0;
  UpstreamGrad grad;
  const void* input = nullptr;
  const void* target = nullptr;
  const void* weight = nullptr;
  void* grad_input = nullptr;
  unsigned long long* first_invalid_row = nullptr;
};

// fn(TypeTag<T>{}, Item<T>(params)) for the logits' dtype T, Item<T> being what the launch or loop needs per
// dtype (the op's coefficients in acc_t<T>, its CPU math); nothing when there are no items.
template <template <typename> class Item, typename Params, typename Fn>
void dispatch_logit_loss(const char* name, const Params& params, std::int64_t n, DType dtype, Fn&& fn) {
  if (n == 0) return;
  dispatch_floating(dtype, name, [&](auto tag) { fn(tag, Item<typename decltype(tag)::type>(params)); });
}

}  // namespace detops
