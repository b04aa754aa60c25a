"""Non-maximum suppression (torchvision.ops.nms, batched_nms) over torch.ops.detops.*."""
import torch
from torch import Tensor


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Greedy non-maximum suppression: visits the boxes by decreasing score and discards every box whose
    IoU with an already kept box is greater than iou_threshold.

    Args:
        boxes (Tensor[N, 4]): (x1, y1, x2, y2), with 0 <= x1 < x2 and 0 <= y1 < y2.
        scores (Tensor[N]): one score per box.
        iou_threshold (float): boxes overlapping a kept box with IoU > iou_threshold are discarded.

    Returns:
        Tensor: int64 indices of the kept boxes, by decreasing score.
    """
    return torch.ops.detops.nms(boxes, scores, iou_threshold)


def batched_nms(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    """Non-maximum suppression within each category: boxes of different idxs never suppress each other.

    Args:
        boxes (Tensor[N, 4]): (x1, y1, x2, y2), with 0 <= x1 < x2 and 0 <= y1 < y2.
        scores (Tensor[N]): one score per box.
        idxs (Tensor[N]): the category of each box.
        iou_threshold (float): boxes overlapping a kept box of their category with IoU > iou_threshold are
            discarded.

    Returns:
        Tensor: int64 indices of the kept boxes, by decreasing score.
    """
    return torch.ops.detops.batched_nms(boxes, scores, idxs, iou_threshold)
