"""CARAFE, content-aware reassembly of features, over torch.ops.detops.carafe: mmcv.ops.carafe's function and its
CARAFE module (docs/ops/carafe.md)."""
import torch
from torch import Tensor, nn


def carafe(features: Tensor, masks: Tensor, kernel_size: int, group_size: int, scale_factor: int) -> Tensor:
    """mmcv.ops.carafe: upsamples ``features`` by ``scale_factor``, each output a weighted sum of the k x k
    window around its source pixel, the weights given per output position by ``masks``:

        out[n, c, y, x] = sum_{i, j < k} masks[n, g k k + i k + j, y, x]
                                         * features[n, c, y // s + i - (k - 1) // 2, x // s + j - (k - 1) // 2]

    with g = c // (C // group_size) and taps outside the map absent (0). The masks are used as given (CARAFE's
    encoder softmax-normalises them; the op does not). Differentiable in features and masks, on the CPU and CUDA.

    Args:
        features (Tensor[N, C, H, W]): float64, float32, float16 or bfloat16; C divisible by group_size.
        masks (Tensor[N, kernel_size * kernel_size * group_size, H * scale_factor, W * scale_factor]):
            features' dtype and device (fp16 features with fp32 masks raise TypeError naming both).
        kernel_size (int): the reassembly window k, odd, >= 1.
        group_size (int): channel groups sharing one set of masks, >= 1.
        scale_factor (int): the upsampling factor s, >= 1.

    Returns:
        Tensor[N, C, H * scale_factor, W * scale_factor] in features' dtype.
    """
    return torch.ops.detops.carafe(features, masks, kernel_size, group_size, scale_factor)


class CARAFE(nn.Module):
    """mmcv.ops.CARAFE: ``forward(features, masks)`` is ``carafe`` with the module's kernel_size, group_size and
    scale_factor (ints, TypeError otherwise, as mmcv asserts)."""

    def __init__(self, kernel_size: int, group_size: int, scale_factor: int):
        super().__init__()
        for name, value in (("kernel_size", kernel_size), ("group_size", group_size), ("scale_factor", scale_factor)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"CARAFE: {name} must be an int; got {type(value).__name__}")
        self.kernel_size = kernel_size
        self.group_size = group_size
        self.scale_factor = scale_factor

    def forward(self, features: Tensor, masks: Tensor) -> Tensor:
        return carafe(features, masks, self.kernel_size, self.group_size, self.scale_factor)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, group_size={self.group_size}, scale_factor={self.scale_factor}"
