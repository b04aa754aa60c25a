"""The sigmoid focal loss (torchvision.ops.sigmoid_focal_loss; mmcv.ops.sigmoid_focal_loss) and the softmax
focal loss (mmcv.ops.softmax_focal_loss) over torch.ops.detops.*."""
from typing import Optional

import torch
from torch import Tensor


def sigmoid_focal_loss(inputs: Tensor, targets: Tensor, alpha: float = 0.25, gamma: float = 2,
                       reduction: str = "none") -> Tensor:
    """Focal loss (RetinaNet) of logits against binary (or soft) targets:
    alpha_t * (1 - p_t)^gamma * BCE-with-logits, fused in one kernel (forward and backward).

    Args:
        inputs (Tensor): logits of any shape.
        targets (Tensor): the same shape: 1 for the positive class, 0 for negatives (values in [0, 1]).
        alpha (float): weight of the positives in [0, 1]; negatives get 1 - alpha; -1 disables it.
            Default: 0.25
        gamma (float): exponent of the modulating factor (1 - p_t). Default: 2
        reduction (str): "none", "mean" or "sum". Default: "none"

    Returns:
        Tensor: the losses (inputs' shape) for "none", else a 0-d tensor; in inputs' dtype.
    """
    return torch.ops.detops.sigmoid_focal_loss(inputs, targets, alpha, gamma, reduction)


def sigmoid_focal_loss_mmcv(input: Tensor, target: Tensor, gamma: float = 2.0, alpha: float = 0.25,
                            weight: Optional[Tensor] = None, reduction: str = "mean") -> Tensor:
    """mmcv.ops.sigmoid_focal_loss: logits [N, C] against int64 class indices [N] in [0, C] (C is the
    background: every logit of the row is a negative), with an optional per-class weight [C]; "mean"
    divides by N.
    """
    return torch.ops.detops.sigmoid_focal_loss_mmcv(input, target, gamma, alpha, weight, reduction)


def softmax_focal_loss(input: Tensor, target: Tensor, gamma: float = 2.0, alpha: float = 0.25,
                       weight: Optional[Tensor] = None, reduction: str = "mean") -> Tensor:
    """mmcv.ops.softmax_focal_loss: -alpha * (1 - p_t)^gamma * log(p_t) per row, p = softmax(input[n]), fused in
    one kernel (forward and backward), computed from log-softmax in fp32 (fp64 for fp64).

    Args:
        input (Tensor[N, C]): logits.
        target (Tensor[N], int64): the class of each row, in [0, C); a negative value marks an ignored row
            (loss and gradient 0, still counted in "mean"'s N).
        gamma (float): exponent of the modulating factor (1 - p_t). Default: 2.0
        alpha (float): weight of every row's loss. Default: 0.25
        weight (Tensor[C], optional): per-class weights; row n is multiplied by weight[target[n]]. Default: None
        reduction (str): "none", "mean" (the sum divided by N) or "sum". Default: "mean"

    Returns:
        Tensor: the row losses [N] for "none", else a 0-d tensor; in input's dtype.
    """
    return torch.ops.detops.softmax_focal_loss(input, target, gamma, alpha, weight, reduction)
