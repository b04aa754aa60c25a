"""The masked 2-D convolution (mmcv.ops.masked_conv2d / MaskedConv2d) over torch.ops.detops.masked_conv2d."""
from typing import Optional

import torch
from torch import Tensor, nn
from torch.nn.modules.utils import _pair


def masked_conv2d(features: Tensor, mask: Tensor, weight: Tensor, bias: Optional[Tensor] = None, padding=0,
                  stride=1) -> Tensor:
    """mmcv.ops.masked_conv2d without its limits: conv2d(features, weight, bias, stride, padding) evaluated only at
    the output positions where mask > 0 (mmcv's rule; 0, negative and NaN values select nothing), exactly 0 at
    every other position. Any batch, stride and padding; bias may be None; differentiable in features, weight
    and bias (the gradient flows from the selected positions only; none for the mask).

    Args:
        features (Tensor[N, C_in, H, W]): float64, float32, float16 or bfloat16.
        mask (Tensor[N, H_out, W_out] or Tensor[1, H_out, W_out]): one value per output position (a [1, ...]
            mask applies to every image); bool, integer or floating. With stride 1 and "same" padding
            (kernel 2 * padding + 1) H_out, W_out = H, W: mmcv's [1, H, W] mask.
        weight (Tensor[C_out, C_in, kh, kw]), bias (Tensor[C_out] or None): features' dtype and device.
        padding (int or (int, int)): zero padding (h, w). Default: 0
        stride (int or (int, int)): (h, w). Default: 1

    Returns:
        Tensor[N, C_out, H_out, W_out] in features' dtype, H_out = (H + 2 padding - kh) // stride + 1.
    """
    return torch.ops.detops.masked_conv2d(features, mask, weight, bias, _pair(padding), _pair(stride))


class MaskedConv2d(nn.Conv2d):
    """mmcv.ops.MaskedConv2d: an nn.Conv2d whose forward(input, mask) is masked_conv2d with the module's weight,
    bias, padding and stride (mmcv passes only the padding, so its stride is silently 1); mask None is the plain
    convolution. The masked path takes dilation 1, groups 1 and zero padding only (ValueError otherwise)."""

    def forward(self, input: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        if mask is None:
            return super().forward(input)
        if self.dilation != (1, 1) or self.groups != 1 or self.padding_mode != "zeros" or isinstance(self.padding, str):
            raise ValueError("MaskedConv2d with a mask supports dilation 1, groups 1 and integer zero padding only; "
                             f"got dilation={self.dilation}, groups={self.groups}, padding={self.padding!r}, "
                             f"padding_mode={self.padding_mode!r}")
        return masked_conv2d(input, mask, self.weight, self.bias, self.padding, self.stride)
