// torch.ops.detops.nms and torch.ops.detops.batched_nms: schemas and CPU/CUDA implementations. Same
// argument names, order and results as torchvision.ops.nms / batched_nms, so they can replace them
// unchanged. batched_nms is one pass in which IoU across classes is 0 (no coordinate-offset trick).
// Declared with the op kit (docs/op-kit.md): CPU and CUDA only (no Meta, no autograd).
#include "nms/nms_torch.h"

#include <ATen/ops/_unique2.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <cmath>

#include "common/torch_op_kit.h"
#include "common/torch_utils.h"
#include "nms/nms.h"

namespace detops {
namespace {

bool is_floating_dtype(at::ScalarType t) {
  return t == at::kDouble || t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

// torchvision's checks, with its exception types (docs/ops/nms.md, Errors): shapes and lengths raise
// RuntimeError, boxes of a non-floating dtype NotImplementedError (torchvision has no kernel for them),
// scores of a non-floating dtype RuntimeError (torchvision: scores must have the boxes' dtype; DetOps takes
// any floating scores).
void check_inputs(const char* op, const at::Tensor& boxes, const at::Tensor& scores) {
  TORCH_CHECK(boxes.dim() == 2 && boxes.size(1) == 4, op,
              ": boxes must be a 2-D tensor [N, 4] of (x1, y1, x2, y2); got shape ", shape_string(boxes.sizes()));
  TORCH_CHECK(scores.dim() == 1 && scores.size(0) == boxes.size(0), op,
              ": scores must be a 1-D tensor [N] with one score per box (N = ", boxes.size(0), "); got shape ",
              shape_string(scores.sizes()));
  floating_dtype_or_not_implemented(boxes, op, "boxes");
  TORCH_CHECK(is_floating_dtype(scores.scalar_type()), op,
              ": scores must be float64, float32, float16 or bfloat16; got ", scores.scalar_type());
  check_same_device(op, "boxes", boxes, "scores", scores);
  TORCH_CHECK(boxes.is_cpu() || boxes.is_cuda(), op, ": boxes must be a CPU or CUDA tensor; got ", boxes.device());
  TORCH_CHECK(boxes.size(0) <= kNmsMaxBoxes, op, ": at most ", kNmsMaxBoxes, " boxes are supported; got ",
              boxes.size(0));
}

// Each box's class as int64: integer and bool idxs as they are; floating idxs (torchvision accepts them)
// by value, two boxes being of one class when their idxs are equal.
at::Tensor class_ids(const at::Tensor& idxs) {
  if (!at::isFloatingType(idxs.scalar_type())) return idxs.to(at::kLong).contiguous();
  c10::OptionalDeviceGuard guard(idxs.device());
  return std::get<1>(at::_unique2(idxs, /*sorted=*/true, /*return_inverse=*/true, /*return_counts=*/false))
      .to(at::kLong)
      .contiguous();
}

at::Tensor run(const char* op, const at::Tensor& boxes, const at::Tensor& scores, const at::Tensor& classes,
               const NmsParams& params) {
  const std::int64_t n = boxes.size(0);
  const DType dtype = floating_dtype_of(boxes, op, "boxes");
  const at::Tensor boxes_c = boxes.contiguous();
  // Scores only rank the boxes: float64 scores are ranked as float64, all others as float32 (exact for
  // float16 and bfloat16).
  const bool scores_fp64 = scores.scalar_type() == at::kDouble;
  const at::Tensor scores_c = scores_fp64 ? scores.contiguous() : scores.to(at::kFloat).contiguous();
  at::Tensor keep = at::empty({n}, boxes.options().dtype(at::kLong));
  NmsArgs args;
  args.num_boxes = n;
  args.boxes = boxes_c.data_ptr();
  args.scores = scores_c.data_ptr();
  args.scores_fp64 = scores_fp64;
  args.classes = classes.defined() ? classes.data_ptr<std::int64_t>() : nullptr;
  args.keep = keep.data_ptr<std::int64_t>();
  std::int64_t num_kept = 0;
  if (boxes.is_cuda()) {
    c10::cuda::CUDAGuard guard(boxes.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(boxes.device().index()).stream();
    at::Tensor count = at::empty({1}, boxes.options().dtype(at::kLong));
    args.num_kept = count.data_ptr<std::int64_t>();
    const std::size_t bytes = nms_cuda_workspace_bytes(params, n, dtype, scores_fp64, classes.defined());
    at::Tensor workspace = at::empty({static_cast<std::int64_t>(bytes)}, boxes.options().dtype(at::kByte));
    launch_nms(params, args, dtype, workspace.data_ptr(), bytes, stream);
    // The keep list's length decides the output's shape: the one value read back.
    DETOPS_CUDA_CHECK(cudaMemcpyAsync(&num_kept, args.num_kept, sizeof(num_kept), cudaMemcpyDeviceToHost, stream));
    DETOPS_CUDA_CHECK(cudaStreamSynchronize(stream));
  } else {
    args.num_kept = &num_kept;
    run_nms_cpu(params, args, dtype);
  }
  return keep.narrow(0, 0, num_kept);
}

}  // namespace

at::Tensor nms_forward(const at::Tensor& boxes, const at::Tensor& scores, const NmsParams& params) {
  check_inputs("nms", boxes, scores);
  return run("nms", boxes, scores, at::Tensor(), params);
}

at::Tensor batched_nms_forward(const at::Tensor& boxes, const at::Tensor& scores, const at::Tensor& idxs,
                               const NmsParams& params) {
  constexpr const char* op = "batched_nms";
  // torchvision returns an empty keep list for boxes without elements before looking at anything else.
  if (boxes.numel() == 0) return at::empty({0}, boxes.options().dtype(at::kLong));
  check_inputs(op, boxes, scores);
  TORCH_CHECK(idxs.dim() == 1 && idxs.size(0) == boxes.size(0), op,
              ": idxs must be a 1-D tensor [N] with one class per box (N = ", boxes.size(0), "); got shape ",
              shape_string(idxs.sizes()));
  TORCH_CHECK(!idxs.is_complex(), op, ": idxs must be a real tensor (the class of each box); got ", idxs.scalar_type());
  check_same_device(op, "boxes", boxes, "idxs", idxs);
  return run(op, boxes, scores, class_ids(idxs), params);
}

namespace {

using opkit::Field;
using opkit::Tensor;

// Forward only, no Meta kernel: the output's length depends on the data.
struct NmsDef : opkit::OpDef<NmsParams> {
  static constexpr const char* kSchema = "nms(Tensor boxes, Tensor scores, float iou_threshold) -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Field<&NmsParams::iou_threshold>>;
  static constexpr auto kCompute = &nms_forward;
  static constexpr bool kHasMeta = false;
};

struct BatchedNmsDef : opkit::OpDef<NmsParams> {
  static constexpr const char* kSchema =
      "batched_nms(Tensor boxes, Tensor scores, Tensor idxs, float iou_threshold) -> Tensor";
  using Args = opkit::Args<Tensor, Tensor, Tensor, Field<&NmsParams::iou_threshold>>;
  static constexpr auto kCompute = &batched_nms_forward;
  static constexpr bool kHasMeta = false;
};

}  // namespace
}  // namespace detops

TORCH_LIBRARY_FRAGMENT(detops, m) { detops::opkit::define<detops::NmsDef, detops::BatchedNmsDef>(m); }
