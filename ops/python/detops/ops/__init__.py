"""``torchvision.ops`` with DetOps kernels: the same functions and modules, names, signatures and defaults.

Implemented here: roi_align, roi_pool, ps_roi_align, ps_roi_pool, nms, batched_nms, box_iou,
generalized_box_iou, distance_box_iou, complete_box_iou, generalized_box_iou_loss, distance_box_iou_loss,
complete_box_iou_loss, sigmoid_focal_loss, deform_conv2d, and the modules RoIAlign, RoIPool, PSRoIAlign, PSRoIPool,
DeformConv2d; beyond torchvision: prroi_pool / PrRoIPool, sigmoid_focal_loss_mmcv and softmax_focal_loss (mmcv's
forms), masked_conv2d / MaskedConv2d, carafe / CARAFE, deform_roi_pool / DeformRoIPool / DeformRoIPoolPack and
modulated_deform_roi_pool / ModulatedDeformRoIPoolPack (mmcv's). Any other name (box_convert, MultiScaleRoIAlign, ...) is
torchvision.ops' own, when torchvision is installed, so that ``from detops import ops`` can replace
``from torchvision import ops``.
"""
from ._boxes import (box_iou, complete_box_iou, complete_box_iou_loss, distance_box_iou, distance_box_iou_loss,
                     generalized_box_iou, generalized_box_iou_loss)
from ._carafe import CARAFE, carafe
from ._conv import DeformConv2d, MaskedConv2d, deform_conv2d, masked_conv2d
from ._losses import sigmoid_focal_loss, sigmoid_focal_loss_mmcv, softmax_focal_loss
from ._nms import batched_nms, nms
from ._roi import (DeformRoIPool, DeformRoIPoolPack, ModulatedDeformRoIPoolPack, PrRoIPool, PSRoIAlign, PSRoIPool,
                   RoIAlign, RoIPool, deform_roi_pool, modulated_deform_roi_pool, prroi_pool, ps_roi_align,
                   ps_roi_pool, roi_align, roi_pool)

__all__ = [
    "roi_align", "RoIAlign", "roi_pool", "RoIPool", "ps_roi_align", "PSRoIAlign", "ps_roi_pool", "PSRoIPool",
    "prroi_pool", "PrRoIPool", "nms", "batched_nms", "box_iou", "generalized_box_iou", "distance_box_iou",
    "complete_box_iou", "generalized_box_iou_loss", "distance_box_iou_loss", "complete_box_iou_loss",
    "sigmoid_focal_loss", "sigmoid_focal_loss_mmcv", "softmax_focal_loss", "masked_conv2d", "MaskedConv2d",
    "deform_conv2d", "DeformConv2d", "carafe", "CARAFE",
    "deform_roi_pool", "DeformRoIPool", "DeformRoIPoolPack", "modulated_deform_roi_pool", "ModulatedDeformRoIPoolPack",
]


def __getattr__(name):
    # torchvision.ops' other names (utilities and modules DetOps has no kernel for), looked up lazily.
    try:
        import torchvision.ops
    except ImportError:
        raise AttributeError(f"module 'detops.ops' has no attribute '{name}' (and torchvision, which would "
                             "provide it, is not installed)") from None
    try:
        return getattr(torchvision.ops, name)
    except AttributeError:
        raise AttributeError(f"module 'detops.ops' has no attribute '{name}' (nor has torchvision.ops)") from None
