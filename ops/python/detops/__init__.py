"""DetOps: CUDA and CPU detection ops for PyTorch, drop-in replacements for ``torchvision.ops``.

Importing the package loads ``libdetops_torch.so`` (which registers ``torch.ops.detops.*``) and the fake
kernels that ``torch.compile`` and ``torch.export`` need for ops whose output size depends on the data
(``nms``, ``batched_nms``). ``detops.ops`` mirrors ``torchvision.ops``::

    from detops import ops            # instead of: from torchvision import ops
    ops.roi_align(features, boxes, output_size=7, spatial_scale=0.25, sampling_ratio=2, aligned=True)

Names DetOps does not implement (``box_convert``, ``MultiScaleRoIAlign``, ...) resolve to torchvision's
own when torchvision is installed, so the switch is one line. The library is found through
``DETOPS_TORCH_LIBRARY``, a copy beside this package, or a build of the source tree
(``build/{dev,ci,release}/ops``); see ``detops.library_path()``.
"""
from ._library import library_path, load_library

load_library()

from . import _fakes  # noqa: E402,F401  (registers the fake kernels; needs the library loaded)
from . import ops  # noqa: E402

__all__ = ["library_path", "load_library", "ops"]
