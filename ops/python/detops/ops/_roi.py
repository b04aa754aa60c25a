"""RoI pooling functions and modules (torchvision.ops' roi_align, roi_pool, ps_roi_align, ps_roi_pool; mmcv's
prroi_pool, deform_roi_pool and modulated_deform_roi_pool) over torch.ops.detops.*."""
from typing import List, Optional, Union

import torch
from torch import Tensor, nn
from torch.nn.modules.utils import _pair


def _rois(boxes: Union[Tensor, List[Tensor]]) -> Tensor:
    """boxes as a [K, 5] tensor (batch index, x1, y1, x2, y2) or a list of per-image [L, 4] tensors (the
    batch index is the list position), checked as torchvision checks them (AssertionError)."""
    if isinstance(boxes, (list, tuple)):
        for b in boxes:
            torch._assert(b.size(1) == 4, "The shape of the tensor in the boxes list is not correct as List[Tensor[L, 4]]")
        ids = [torch.full_like(b[:, :1], i) for i, b in enumerate(boxes)]
        return torch.cat([torch.cat(ids, dim=0), torch.cat(list(boxes), dim=0)], dim=1)
    if isinstance(boxes, torch.Tensor):
        torch._assert(boxes.size(1) == 5, "The boxes tensor shape is not correct as Tensor[K, 5]")
        return boxes
    torch._assert(False, "boxes is expected to be a Tensor[L, 5] or a List[Tensor[K, 4]]")


_BOXES_DOC = """boxes (Tensor[K, 5] or List[Tensor[L, 4]]): the regions, (x1, y1, x2, y2) in image coordinates.
            As one tensor, column 0 is the batch index of each region (a value in [0, N - 1]); as a list,
            tensor i holds the regions of image i."""


@torch.fx.wrap
def roi_align(input: Tensor, boxes: Union[Tensor, List[Tensor]], output_size, spatial_scale: float = 1.0,
              sampling_ratio: int = -1, aligned: bool = False) -> Tensor:
    """RoI Align (Mask R-CNN): average of bilinear samples over each of the output bins of every region.

    Args:
        input (Tensor[N, C, H, W]): the feature maps.
        {boxes}
        output_size (int or Tuple[int, int]): bins per region, (height, width).
        spatial_scale (float): factor from image to feature-map coordinates (e.g. 0.25 for a map at 1/4 of
            the image). Default: 1.0
        sampling_ratio (int): samples per bin side; <= 0 chooses ceil(region size / bins) per region
            (adaptive). Default: -1
        aligned (bool): True shifts the scaled coordinates by -0.5 pixel (Detectron2's alignment); False is
            the original behaviour. Default: False

    Returns:
        Tensor[K, C, output_size[0], output_size[1]]

    Under ``torch.use_deterministic_algorithms(True)`` on CUDA this runs torchvision's deterministic
    pure-PyTorch roi_align, as torchvision.ops.roi_align does (DetOps's CUDA backward uses atomics).
    """
    rois = _rois(boxes)
    h, w = _pair(output_size)
    if torch.are_deterministic_algorithms_enabled() and input.is_cuda and not torch.compiler.is_compiling():
        # torchvision answers deterministic mode on CUDA with its pure-PyTorch roi_align (no atomics in the
        # backward); DetOps's CUDA backward scatters with atomics and refuses that mode, so defer to it.
        try:
            from torchvision.ops.roi_align import _roi_align
        except ImportError:
            pass
        else:
            return _roi_align(input, rois, spatial_scale, h, w, sampling_ratio, aligned)
    return torch.ops.detops.roi_align(input, rois, spatial_scale, h, w, sampling_ratio, aligned)


@torch.fx.wrap
def roi_pool(input: Tensor, boxes: Union[Tensor, List[Tensor]], output_size, spatial_scale: float = 1.0, *,
             exact_max: bool = False) -> Tensor:
    """RoI max pooling (Fast R-CNN): the maximum over the pixels of each bin of every region.

    Args:
        input (Tensor[N, C, H, W]): the feature maps.
        {boxes}
        output_size (int or Tuple[int, int]): bins per region, (height, width).
        spatial_scale (float): factor from image to feature-map coordinates. Default: 1.0
        exact_max (bool, keyword only; DetOps's option): False gives torchvision's result: a bin's max starts
            at -FLT_MAX, so a bin with no value above it (only NaN, -inf, or float64 values <= -FLT_MAX)
            gives -FLT_MAX (-inf in float16 / bfloat16) and no gradient. True gives the bin's true maximum
            over its non-NaN values (-inf and values below -FLT_MAX included; NaN for a bin of NaNs only).
            Empty bins give 0 either way (docs/ops/roi_pool.md). Default: False

    Returns:
        Tensor[K, C, output_size[0], output_size[1]]
    """
    rois = _rois(boxes)
    h, w = _pair(output_size)
    return torch.ops.detops.roi_pool(input, rois, spatial_scale, h, w, exact_max=exact_max)[0]


@torch.fx.wrap
def ps_roi_align(input: Tensor, boxes: Tensor, output_size: int, spatial_scale: float = 1.0,
                 sampling_ratio: int = -1, *, zero_empty_bins: bool = False) -> Tensor:
    """Position-sensitive RoI Align (R-FCN): bin (i, j) of output channel c averages bilinear samples of
    input channel (c * output_size[0] + i) * output_size[1] + j.

    Args:
        input (Tensor[N, C, H, W]): C must be a multiple of output_size[0] * output_size[1].
        {boxes}
        output_size (int or Tuple[int, int]): bins per region, (height, width).
        spatial_scale (float): factor from image to feature-map coordinates. Default: 1.0
        sampling_ratio (int): samples per bin side; <= 0 adaptive. Default: -1
        zero_empty_bins (bool, keyword only; DetOps's option): False gives torchvision's result, NaN (0 / 0),
            for a bin without samples (an adaptive grid over a zero-size roi); True gives 0. Default: False

    Returns:
        Tensor[K, C / (output_size[0] * output_size[1]), output_size[0], output_size[1]]
    """
    rois = _rois(boxes)
    h, w = _pair(output_size)
    return torch.ops.detops.ps_roi_align(input, rois, spatial_scale, h, w, sampling_ratio, zero_empty_bins)[0]


@torch.fx.wrap
def ps_roi_pool(input: Tensor, boxes: Tensor, output_size: int, spatial_scale: float = 1.0, *,
                exact_bins: bool = False) -> Tensor:
    """Position-sensitive RoI average pooling (R-FCN): bin (i, j) of output channel c averages the pixels
    of input channel (c * output_size[0] + i) * output_size[1] + j inside the bin.

    Args:
        input (Tensor[N, C, H, W]): C must be a multiple of output_size[0] * output_size[1].
        {boxes}
        output_size (int or Tuple[int, int]): bins per region, (height, width).
        spatial_scale (float): factor from image to feature-map coordinates. Default: 1.0
        exact_bins (bool, keyword only; DetOps's option): False gives torchvision's result: bin edges computed
            in floating point, a forward that leaves out the map's last row and column and a backward that
            does not (so it is not the forward's gradient there). True: exact integer bin edges and the whole
            map in both directions (docs/ops/ps_roi.md). Default: False

    Returns:
        Tensor[K, C / (output_size[0] * output_size[1]), output_size[0], output_size[1]]
    """
    rois = _rois(boxes)
    h, w = _pair(output_size)
    return torch.ops.detops.ps_roi_pool(input, rois, spatial_scale, h, w, exact_bins)[0]


@torch.fx.wrap
def prroi_pool(input: Tensor, boxes: Union[Tensor, List[Tensor]], output_size, spatial_scale: float = 1.0) -> Tensor:
    """Precise RoI pooling (mmcv.ops.prroi_pool): the exact integral of the bilinearly interpolated map over
    each bin, divided by the bin's area; differentiable with respect to the input and the boxes.

    Args:
        input (Tensor[N, C, H, W]): the feature maps.
        {boxes}
        output_size (int or Tuple[int, int]): bins per region, (height, width).
        spatial_scale (float): factor from image to feature-map coordinates. Default: 1.0

    Returns:
        Tensor[K, C, output_size[0], output_size[1]]
    """
    rois = _rois(boxes)
    h, w = _pair(output_size)
    return torch.ops.detops.prroi_pool(input, rois, spatial_scale, h, w)


@torch.fx.wrap
def deform_roi_pool(input: Tensor, rois: Union[Tensor, List[Tensor]], offset: Optional[Tensor], output_size,
                    spatial_scale: float = 1.0, sampling_ratio: int = 0, gamma: float = 0.1) -> Tensor:
    """Deformable RoI pooling (mmcv.ops.deform_roi_pool): RoI Align with aligned=True whose bin (i, j) of region k
    is moved by gamma * roi_width * offset[k, 0, i, j] in x and gamma * roi_height * offset[k, 1, i, j] in y
    (docs/ops/deform_roi_pool.md). With offset None (or zeros) it is roi_align(..., aligned=True), bit for bit.

    Args:
        input (Tensor[N, C, H, W]): the feature maps.
        {boxes}
        offset (Tensor[K, 2, output_size[0], output_size[1]] or None): the bins' moves in units of gamma * the
            region's size, (x, y); the dtype and device of input (no mixed precision: TypeError).
        output_size (int or Tuple[int, int]): bins per region, (height, width).
        spatial_scale (float): factor from image to feature-map coordinates. Default: 1.0
        sampling_ratio (int): samples per bin side; <= 0 chooses ceil(region size / bins) per region. Default: 0
        gamma (float): scale of the offsets. Default: 0.1

    Returns:
        Tensor[K, C, output_size[0], output_size[1]]
    """
    return torch.ops.detops.deform_roi_pool(input, _rois(rois), offset, _pair(output_size), spatial_scale,
                                            sampling_ratio, gamma)


@torch.fx.wrap
def modulated_deform_roi_pool(input: Tensor, rois: Union[Tensor, List[Tensor]], offset: Optional[Tensor], mask: Tensor,
                              output_size, spatial_scale: float = 1.0, sampling_ratio: int = 0,
                              gamma: float = 0.1) -> Tensor:
    """deform_roi_pool(input, rois, offset, ...) * mask, mask Tensor[K, 1, output_size[0], output_size[1]] (one
    weight per bin, broadcast over the channels): what mmcv's ModulatedDeformRoIPoolPack computes, as one op with
    a gradient for the mask. See :func:`deform_roi_pool` for the other arguments."""
    return torch.ops.detops.modulated_deform_roi_pool(input, _rois(rois), offset, mask, _pair(output_size),
                                                      spatial_scale, sampling_ratio, gamma)


for _f in (roi_align, roi_pool, ps_roi_align, ps_roi_pool, prroi_pool, deform_roi_pool):
    _f.__doc__ = _f.__doc__.replace("{boxes}", _BOXES_DOC)


class RoIAlign(nn.Module):
    """See :func:`roi_align`."""

    def __init__(self, output_size, spatial_scale: float, sampling_ratio: int, aligned: bool = False):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.sampling_ratio = sampling_ratio
        self.aligned = aligned

    def forward(self, input: Tensor, rois: Union[Tensor, List[Tensor]]) -> Tensor:
        return roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
                f"sampling_ratio={self.sampling_ratio}, aligned={self.aligned})")


class RoIPool(nn.Module):
    """See :func:`roi_pool` (exact_max, keyword only, is DetOps's option; default False: torchvision's result)."""

    def __init__(self, output_size, spatial_scale: float, *, exact_max: bool = False):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.exact_max = exact_max

    def forward(self, input: Tensor, rois: Union[Tensor, List[Tensor]]) -> Tensor:
        return roi_pool(input, rois, self.output_size, self.spatial_scale, exact_max=self.exact_max)

    def __repr__(self) -> str:
        extra = ", exact_max=True" if self.exact_max else ""
        return f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale}{extra})"


class PSRoIAlign(nn.Module):
    """See :func:`ps_roi_align`."""

    def __init__(self, output_size: int, spatial_scale: float, sampling_ratio: int):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.sampling_ratio = sampling_ratio

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:
        return ps_roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
                f"sampling_ratio={self.sampling_ratio})")


class PSRoIPool(nn.Module):
    """See :func:`ps_roi_pool`."""

    def __init__(self, output_size: int, spatial_scale: float):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:
        return ps_roi_pool(input, rois, self.output_size, self.spatial_scale)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale})"


class PrRoIPool(nn.Module):
    """See :func:`prroi_pool` (mmcv.ops.PrRoIPool)."""

    def __init__(self, output_size, spatial_scale: float = 1.0):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale

    def forward(self, input: Tensor, rois: Union[Tensor, List[Tensor]]) -> Tensor:
        return prroi_pool(input, rois, self.output_size, self.spatial_scale)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale})"


class DeformRoIPool(nn.Module):
    """See :func:`deform_roi_pool` (mmcv.ops.DeformRoIPool)."""

    def __init__(self, output_size, spatial_scale: float = 1.0, sampling_ratio: int = 0, gamma: float = 0.1):
        super().__init__()
        self.output_size = _pair(output_size)
        self.spatial_scale = float(spatial_scale)
        self.sampling_ratio = int(sampling_ratio)
        self.gamma = float(gamma)

    def forward(self, input: Tensor, rois: Tensor, offset: Optional[Tensor] = None) -> Tensor:
        return deform_roi_pool(input, rois, offset, self.output_size, self.spatial_scale, self.sampling_ratio,
                               self.gamma)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
                f"sampling_ratio={self.sampling_ratio}, gamma={self.gamma})")


def _fc(in_features: int, hidden: int, out_features: int, layers: int) -> nn.Sequential:
    """mmcv's offset (3 layers) and mask (2 layers, then a sigmoid) heads; the last Linear starts at zero."""
    dims = [in_features] + [hidden] * (layers - 1) + [out_features]
    mods: List[nn.Module] = []
    for i in range(layers):
        mods.append(nn.Linear(dims[i], dims[i + 1]))
        if i < layers - 1:
            mods.append(nn.ReLU(inplace=True))
    nn.init.zeros_(mods[-1].weight)
    nn.init.zeros_(mods[-1].bias)
    return nn.Sequential(*mods)


class DeformRoIPoolPack(DeformRoIPool):
    """mmcv.ops.DeformRoIPoolPack: the offsets come from fully connected layers over the undeformed pooling
    (zero at initialisation, so the module starts as RoI Align)."""

    def __init__(self, output_size, output_channels: int, deform_fc_channels: int = 1024, spatial_scale: float = 1.0,
                 sampling_ratio: int = 0, gamma: float = 0.1):
        super().__init__(output_size, spatial_scale, sampling_ratio, gamma)
        self.output_channels = output_channels
        self.deform_fc_channels = deform_fc_channels
        bins = self.output_size[0] * self.output_size[1]
        self.offset_fc = _fc(bins * output_channels, deform_fc_channels, bins * 2, 3)

    def _pooled_and_offset(self, input: Tensor, rois: Tensor):
        assert input.size(1) == self.output_channels
        x = deform_roi_pool(input, rois, None, self.output_size, self.spatial_scale, self.sampling_ratio, self.gamma)
        k = x.size(0)
        return x, self.offset_fc(x.view(k, -1)).view(k, 2, self.output_size[0], self.output_size[1])

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:  # type: ignore[override]
        _, offset = self._pooled_and_offset(input, rois)
        return deform_roi_pool(input, rois, offset, self.output_size, self.spatial_scale, self.sampling_ratio,
                               self.gamma)


class ModulatedDeformRoIPoolPack(DeformRoIPoolPack):
    """mmcv.ops.ModulatedDeformRoIPoolPack: DeformRoIPoolPack times a per-bin mask from a second head (sigmoid,
    0.5 at initialisation), computed by :func:`modulated_deform_roi_pool` in one op."""

    def __init__(self, output_size, output_channels: int, deform_fc_channels: int = 1024, spatial_scale: float = 1.0,
                 sampling_ratio: int = 0, gamma: float = 0.1):
        super().__init__(output_size, output_channels, deform_fc_channels, spatial_scale, sampling_ratio, gamma)
        bins = self.output_size[0] * self.output_size[1]
        self.mask_fc = nn.Sequential(*_fc(bins * output_channels, deform_fc_channels, bins, 2), nn.Sigmoid())

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:  # type: ignore[override]
        x, offset = self._pooled_and_offset(input, rois)
        mask = self.mask_fc(x.view(x.size(0), -1)).view(x.size(0), 1, self.output_size[0], self.output_size[1])
        return modulated_deform_roi_pool(input, rois, offset, mask, self.output_size, self.spatial_scale,
                                         self.sampling_ratio, self.gamma)
