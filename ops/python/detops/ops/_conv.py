"""Convolutions over torch.ops.detops: the masked 2-D convolution (mmcv.ops.masked_conv2d / MaskedConv2d) and the
deformable convolution (torchvision.ops.deform_conv2d / DeformConv2d)."""
import math
from typing import Optional, Tuple

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


def deform_conv2d(input: Tensor, offset: Tensor, weight: Tensor, bias: Optional[Tensor] = None,
                  stride: Tuple[int, int] = (1, 1), padding: Tuple[int, int] = (0, 0),
                  dilation: Tuple[int, int] = (1, 1), mask: Optional[Tensor] = None) -> Tensor:
    """torchvision.ops.deform_conv2d: deformable convolution, DCNv2 (modulated) when ``mask`` is given, else DCNv1.
    Each tap k = i * kw + j of output position (y, x) samples input channel c, by zero-padded bilinear
    interpolation, at (y * stride_h - pad_h + i * dilation_h + dy, x * stride_w - pad_w + j * dilation_w + dx),
    (dy, dx) = offset rows 2 (G kh kw + k) and 2 (G kh kw + k) + 1 of c's offset group G, times the mask row
    G kh kw + k (DCNv2). Differentiable in input, offset, weight, mask and bias (docs/ops/deform_conv2d.md).

    Args:
        input (Tensor[batch_size, in_channels, in_height, in_width]): float64, float32, float16 or bfloat16.
        offset (Tensor[batch_size, 2 * offset_groups * kernel_height * kernel_width, out_height, out_width]):
            the (dy, dx) of each tap; offset_groups = offset.shape[1] // (2 * kernel_height * kernel_width).
        weight (Tensor[out_channels, in_channels // groups, kernel_height, kernel_width]): groups =
            in_channels // weight.shape[1].
        bias (Tensor[out_channels]): optional. Default: None
        stride (int or Tuple[int, int]): distance between convolution centers. Default: 1
        padding (int or Tuple[int, int]): zero padding on each side. Default: 0
        dilation (int or Tuple[int, int]): spacing between kernel elements. Default: 1
        mask (Tensor[batch_size, offset_groups * kernel_height * kernel_width, out_height, out_width]): the
            modulation of each tap (DCNv2), any values. Default: None (DCNv1)

    offset, weight and mask must have input's dtype and device (a mixed-dtype call raises RuntimeError naming
    both); a bias of another floating dtype is cast to input's, as torchvision accepts it.

    Returns:
        Tensor[batch_size, out_channels, out_height, out_width]
    """
    # torchvision's own wrapper, statement for statement (the same derived groups and errors), with two additions:
    # a bias of another floating dtype is cast to input's (torchvision's op accepts it; ours refuses mixed dtypes)
    # and weight.shape[1] > C_in (groups 0) is named here rather than as the op's "groups must be >= 1".
    out_channels = weight.shape[0]
    use_mask = mask is not None
    if mask is None:
        mask = torch.zeros((input.shape[0], 1), device=input.device, dtype=input.dtype)
    if bias is None:
        bias = torch.zeros(out_channels, device=input.device, dtype=input.dtype)
    elif bias.dtype != input.dtype and bias.is_floating_point() and input.is_floating_point():
        bias = bias.to(input.dtype)  # torchvision adds bias into the output in place: any floating dtype works
    stride_h, stride_w = _pair(stride)
    pad_h, pad_w = _pair(padding)
    dil_h, dil_w = _pair(dilation)
    weights_h, weights_w = weight.shape[-2:]
    _, n_in_channels, _, _ = input.shape
    n_offset_grps = offset.shape[1] // (2 * weights_h * weights_w)
    n_weight_grps = n_in_channels // weight.shape[1]
    if n_offset_grps == 0:
        raise RuntimeError(
            "the shape of the offset tensor at dimension 1 is not valid. It should "
            "be a multiple of 2 * weight.size[2] * weight.size[3].\n"
            f"Got offset.shape[1]={offset.shape[1]}, while 2 * weight.size[2] * weight.size[3]={2 * weights_h * weights_w}"
        )
    if n_weight_grps == 0:  # torchvision's op raises RuntimeError here too, naming weight_c.size(1)
        raise RuntimeError(f"deform_conv2d: weight.shape[1] (C_in / groups) = {weight.shape[1]} exceeds input's "
                           f"{n_in_channels} channels; weight must be [C_out, C_in / groups, kh, kw]")
    return torch.ops.detops.deform_conv2d(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h,
                                          dil_w, n_weight_grps, n_offset_grps, use_mask)


class DeformConv2d(nn.Module):
    """torchvision.ops.DeformConv2d: the parameters (weight initialized as torchvision's, kaiming-uniform with
    a = sqrt(5), bias uniform in +-1 / sqrt(fan_in)) and forward(input, offset, mask=None) of deform_conv2d."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 dilation: int = 1, groups: int = 1, bias: bool = True):
        super().__init__()
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _pair(kernel_size)
        self.stride = _pair(stride)
        self.padding = _pair(padding)
        self.dilation = _pair(dilation)
        self.groups = groups
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups, self.kernel_size[0],
                                               self.kernel_size[1]))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_channels))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor, offset: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        """input [B, in_channels, H, W], offset [B, 2 * offset_groups * kh * kw, H_out, W_out], mask (DCNv2)
        [B, offset_groups * kh * kw, H_out, W_out] or None: deform_conv2d with the module's parameters."""
        return deform_conv2d(input, offset, self.weight, self.bias, stride=self.stride, padding=self.padding,
                             dilation=self.dilation, mask=mask)

    def __repr__(self) -> str:
        s = f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, " \
            f"stride={self.stride}"
        s += f", padding={self.padding}" if self.padding != (0, 0) else ""
        s += f", dilation={self.dilation}" if self.dilation != (1, 1) else ""
        s += f", groups={self.groups}" if self.groups != 1 else ""
        s += ", bias=False" if self.bias is None else ""
        s += ")"
        return s
