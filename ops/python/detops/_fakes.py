"""Fake (meta) kernels registered from Python: for ops whose output size depends on the data, which a C++
Meta kernel cannot express. torch.compile, torch.export and torch.library.opcheck trace through these."""
import torch


def _check_nms_inputs(op, boxes, scores):
    torch._check(boxes.dim() == 2, lambda: f"{op}: boxes must be a 2-D tensor [N, 4]; got {boxes.dim()}-D")
    torch._check(boxes.size(1) == 4, lambda: f"{op}: boxes must have 4 columns; got {boxes.size(1)}")
    torch._check(scores.dim() == 1, lambda: f"{op}: scores must be a 1-D tensor [N]; got {scores.dim()}-D")
    torch._check(boxes.size(0) == scores.size(0),
                 lambda: f"{op}: boxes and scores must have the same length; got {boxes.size(0)} and {scores.size(0)}")
    torch._check(boxes.dtype == scores.dtype,
                 lambda: f"{op}: boxes and scores must have the same dtype; got {boxes.dtype} and {scores.dtype}")


def _kept(boxes):
    # The number of kept boxes is known only after the kernel ran: an unbacked size in [0, N].
    n = torch.library.get_ctx().new_dynamic_size()
    torch._check(n <= boxes.size(0))
    return boxes.new_empty((n,), dtype=torch.long)


@torch.library.register_fake("detops::nms")
def _nms_fake(boxes, scores, iou_threshold):
    _check_nms_inputs("nms", boxes, scores)
    return _kept(boxes)


@torch.library.register_fake("detops::batched_nms")
def _batched_nms_fake(boxes, scores, idxs, iou_threshold):
    _check_nms_inputs("batched_nms", boxes, scores)
    torch._check(idxs.dim() == 1 and idxs.size(0) == boxes.size(0),
                 lambda: f"batched_nms: idxs must be a 1-D tensor [N] with N = {boxes.size(0)}")
    return _kept(boxes)
