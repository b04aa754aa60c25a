"""Pairwise box IoUs and the IoU losses (torchvision.ops) over torch.ops.detops.*.

Every function takes the keyword ``defined_degenerate`` (default False): False gives torchvision's values for
degenerate boxes (x2 <= x1 or y2 <= y1: its divisions by zero, NaN and +-inf, and their gradients); True gives
DetOps' rule instead (a quotient whose denominator is <= 0 is 0, a box without width and height has no aspect
ratio; docs/ops/box_iou.md).
"""
import torch
from torch import Tensor


def _to_xyxy(boxes: Tensor, fmt: str) -> Tensor:
    if fmt == "xyxy":
        return boxes
    a, b = boxes[..., :2], boxes[..., 2:]
    if fmt == "xywh":
        return torch.cat([a, a + b], dim=-1)
    return torch.cat([a - b / 2, a + b / 2], dim=-1)  # cxcywh


def box_iou(boxes1: Tensor, boxes2: Tensor, fmt: str = "xyxy", *, defined_degenerate: bool = False) -> Tensor:
    """Intersection over union of every pair of boxes.

    Args:
        boxes1 (Tensor[..., N, 4]): first set of boxes.
        boxes2 (Tensor[..., M, 4]): second set of boxes.
        fmt (str): "xyxy" (corners), "xywh" (corner, width, height) or "cxcywh" (centre, width, height).
            Default: "xyxy". The other formats are converted to corners first.
        defined_degenerate (bool): DetOps' values for degenerate boxes instead of torchvision's. Default: False

    Returns:
        Tensor[..., N, M]: IoU of boxes1[..., n] with boxes2[..., m].
    """
    if fmt not in ("xyxy", "xywh", "cxcywh"):
        raise ValueError(f"Unsupported Box IoU Calculation for given format {fmt}.")
    return torch.ops.detops.box_iou(_to_xyxy(boxes1, fmt), _to_xyxy(boxes2, fmt), defined_degenerate=defined_degenerate)


def _pairwise_doc(summary: str, eps: bool) -> str:
    eps_line = "        eps (float): added to the squared diagonal (and CIoU's denominator). Default: 1e-7\n" if eps else ""
    return f"""{summary}

    Args:
        boxes1 (Tensor[..., N, 4]): first set of boxes.
        boxes2 (Tensor[..., M, 4]): second set of boxes.
{eps_line}        defined_degenerate (bool): DetOps' values for degenerate boxes instead of torchvision's. Default: False

    Returns:
        Tensor[..., N, M]
    """


def generalized_box_iou(boxes1: Tensor, boxes2: Tensor, *, defined_degenerate: bool = False) -> Tensor:
    return torch.ops.detops.generalized_box_iou(boxes1, boxes2, defined_degenerate=defined_degenerate)


def distance_box_iou(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7, *, defined_degenerate: bool = False) -> Tensor:
    return torch.ops.detops.distance_box_iou(boxes1, boxes2, eps, defined_degenerate=defined_degenerate)


def complete_box_iou(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7, *, defined_degenerate: bool = False) -> Tensor:
    return torch.ops.detops.complete_box_iou(boxes1, boxes2, eps, defined_degenerate=defined_degenerate)


generalized_box_iou.__doc__ = _pairwise_doc(
    "Generalized IoU of every pair of (x1, y1, x2, y2) boxes: IoU - (C - U) / C, C the area of the\n"
    "    smallest box enclosing both, U their union.", eps=False)
distance_box_iou.__doc__ = _pairwise_doc(
    "Distance IoU of every pair of (x1, y1, x2, y2) boxes: IoU - d^2 / (c^2 + eps), d the distance of the\n"
    "    centres, c the diagonal of the enclosing box.", eps=True)
complete_box_iou.__doc__ = _pairwise_doc(
    "Complete IoU of every pair of (x1, y1, x2, y2) boxes: distance IoU minus the aspect-ratio term\n"
    "    alpha * v.", eps=True)


_LOSS_DOC = """
    Args:
        boxes1 (Tensor[..., 4]): predicted boxes (x1, y1, x2, y2).
        boxes2 (Tensor[..., 4]): target boxes, the same shape.
        reduction (str): "none" (one loss per pair), "mean" or "sum". Default: "none"
        eps (float): added to the denominators that can be 0. Default: 1e-7
        defined_degenerate (bool): DetOps' values for degenerate boxes instead of torchvision's. Default: False

    Returns:
        Tensor: the losses, boxes1.shape[:-1] for "none", else a 0-d tensor.
    """


def generalized_box_iou_loss(boxes1: Tensor, boxes2: Tensor, reduction: str = "none", eps: float = 1e-7, *,
                             defined_degenerate: bool = False) -> Tensor:
    return torch.ops.detops.generalized_box_iou_loss(boxes1, boxes2, reduction, eps, defined_degenerate=defined_degenerate)


def distance_box_iou_loss(boxes1: Tensor, boxes2: Tensor, reduction: str = "none", eps: float = 1e-7, *,
                          defined_degenerate: bool = False) -> Tensor:
    return torch.ops.detops.distance_box_iou_loss(boxes1, boxes2, reduction, eps, defined_degenerate=defined_degenerate)


def complete_box_iou_loss(boxes1: Tensor, boxes2: Tensor, reduction: str = "none", eps: float = 1e-7, *,
                          defined_degenerate: bool = False) -> Tensor:
    return torch.ops.detops.complete_box_iou_loss(boxes1, boxes2, reduction, eps, defined_degenerate=defined_degenerate)


generalized_box_iou_loss.__doc__ = "Generalized IoU loss, 1 - GIoU, of each pair of boxes.\n" + _LOSS_DOC
distance_box_iou_loss.__doc__ = "Distance IoU loss, 1 - DIoU, of each pair of boxes.\n" + _LOSS_DOC
complete_box_iou_loss.__doc__ = "Complete IoU loss, 1 - CIoU, of each pair of boxes.\n" + _LOSS_DOC
