#pragma once
// The bindings of mmcv's class-target losses (sigmoid_focal_loss_mmcv, softmax_focal_loss): logits [N, C], int64
// class indices [N], an optional per-class weight [C] in the logits' dtype. The shape / dtype / device checks,
// the CPU check of the target values, and the CUDA launch whose kernels record the first row with an invalid
// target (read back here and raised). ATen-facing: included by bindings only.
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "common/torch_op_kit.h"
#include "common/torch_utils.h"

namespace detops {

// Which target values an op accepts: [0, C) plus C itself when `background` (sigmoid: C is the background
// class), and any negative value when `negative_ignored` (softmax: mmcv's kernels skip rows with a negative
// label). `min_classes`: the least C the op accepts.
struct ClassTargets {
  const char* op;
  bool background = false;
  bool negative_ignored = false;
  std::int64_t min_classes = 0;

  void check_index(std::int64_t row, std::int64_t value, std::int64_t classes) const {
    const bool ok = (value >= 0 || negative_ignored) && (background ? value <= classes : value < classes);
    TORCH_CHECK_INDEX(ok, op, ": target[", row, "] = ", value, " is not a class index: expected a value in [0, ", classes,
                      background ? "]" : ")", background ? " (" : "", background ? std::to_string(classes) : "",
                      background ? " = background)" : "", negative_ignored ? " (or a negative value for an ignored row)" : "");
  }

  // Shapes, dtypes and devices (the Meta kernels' checks too); for CPU targets, their values (CUDA targets are
  // checked by the kernels, see run).
  void check_inputs(const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight) const {
    floating_dtype_of(input, op, "input");
    TORCH_CHECK_VALUE(input.dim() == 2, op, ": input must be a 2-D tensor [N, C] of logits; got shape ",
                      shape_string(input.sizes()));
    TORCH_CHECK_VALUE(input.size(1) >= min_classes, op, ": input must have at least ",
                      min_classes == 1 ? std::string("one class") : std::to_string(min_classes) + " classes", " (C >= ",
                      min_classes, "); got shape ", shape_string(input.sizes()));
    TORCH_CHECK_TYPE(target.scalar_type() == at::kLong, op, ": target must be an int64 tensor of class indices; got ",
                     target.scalar_type());
    TORCH_CHECK_VALUE(target.dim() == 1 && target.size(0) == input.size(0), op, ": target must have shape [",
                      input.size(0), "] (one class index per row of input); got shape ", shape_string(target.sizes()));
    check_same_device(op, "input", input, "target", target);
    if (weight.defined()) {
      TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == input.size(1), op, ": weight must have shape [",
                        input.size(1), "] (one weight per class); got shape ", shape_string(weight.sizes()));
      check_same_device(op, "input", input, "weight", weight);
      check_same_dtype(op, "input", input, "weight", weight);
    }
    if (target.is_cpu()) {
      const at::Tensor tc = target.contiguous();
      const std::int64_t* t = tc.data_ptr<std::int64_t>();
      for (std::int64_t n = 0; n < tc.numel(); ++n) check_index(n, t[n], input.size(1));
    }
  }

  // The launcher (CUDA) or the CPU implementation over args, on x's device (`arg` names x in messages). The
  // kernels record the first row whose target is invalid in args.first_invalid_row; it is read back and raised.
  template <typename P, typename A>
  void run(const char* arg, const at::Tensor& x, const at::Tensor& tc, std::int64_t classes, const P& p, A& args,
           Launcher<P, A>* launch, CpuEntry<P, A>* cpu) const {
    const DType dtype = floating_dtype_of(x, op, arg);
    run_on_device(
        op, arg, x,
        [&](cudaStream_t stream) {
          FirstInvalidRow invalid(tc, stream);
          args.first_invalid_row = invalid.get();
          launch(p, args, dtype, stream);
          const std::int64_t row = invalid.read();
          if (row >= 0) check_index(row, tc[row].item<std::int64_t>(), classes);
        },
        [&] { cpu(p, args, dtype, aten_parallel_for()); });
  }
};

}  // namespace detops
