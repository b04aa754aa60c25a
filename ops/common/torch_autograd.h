#pragma once
// Autograd plumbing shared by the torch bindings (ATen-facing; included only by the *_torch.cpp files).
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>

#include <string>

namespace detops {

// The registered op `name` ("detops::<op>") as a typed handle; Sig is the op's C++ function type,
// e.g. decltype(roi_align_kernel). Throws when no such op is registered.
template <typename Sig>
c10::TypedOperatorHandle<Sig> find_typed_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").template typed<Sig>();
}

// Autograd for a backward op (`_<op>_backward`), which is differentiable once: run() calls the op
// below the autograd key, and the op's own backward (a double backward) raises
// "<op_name>: double backward is not supported".
//   static const auto op = find_typed_op<decltype(kernel)>("detops::_roi_align_backward");
//   return DifferentiableOnce<decltype(kernel)>::run(op, "roi_align", grad, rois, ...);
template <typename Sig>
class DifferentiableOnce;

template <typename... Args>
class DifferentiableOnce<at::Tensor(Args...)>
    : public torch::autograd::Function<DifferentiableOnce<at::Tensor(Args...)>> {
 public:
  using Handle = c10::TypedOperatorHandle<at::Tensor(Args...)>;

  static at::Tensor run(const Handle& op, const char* op_name, Args... args) {
    return DifferentiableOnce::apply(&op, op_name, args...)[0];
  }

  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Handle* op,
                                                const char* op_name, Args... args) {
    ctx->saved_data["op_name"] = std::string(op_name);
    at::AutoDispatchBelowADInplaceOrView guard;
    return {op->call(args...)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 const torch::autograd::variable_list&) {
    TORCH_CHECK(false, ctx->saved_data["op_name"].toStringRef(), ": double backward is not supported");
  }
};

}  // namespace detops
