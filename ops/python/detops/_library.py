"""Finding and loading libdetops_torch.so."""
import os
import pathlib

import torch

_LIBRARY_NAME = "libdetops_torch.so"
_loaded = None


def _candidates():
    env = os.environ.get("DETOPS_TORCH_LIBRARY")
    if env:
        yield pathlib.Path(env)
        return
    here = pathlib.Path(__file__).resolve().parent
    yield here / _LIBRARY_NAME
    root = here.parents[2]  # <repo>/ops/python/detops -> <repo>
    for preset in ("dev", "ci", "release"):
        yield root / "build" / preset / "ops" / _LIBRARY_NAME


def library_path():
    """The libdetops_torch.so this package loads (or loaded): $DETOPS_TORCH_LIBRARY if set, else a copy
    beside the package, else the first of build/dev, build/ci, build/release in the source tree."""
    if _loaded is not None:
        return _loaded
    tried = []
    for path in _candidates():
        if path.is_file():
            return path
        tried.append(str(path))
    raise OSError(f"detops: {_LIBRARY_NAME} not found; looked at: {', '.join(tried)}. Build it "
                  "(scripts/test.sh or scripts/run.sh) or set DETOPS_TORCH_LIBRARY to its path.")


def load_library():
    """Loads the library once (torch.ops.load_library) and returns its path. Loading a second, different
    copy into the same process is refused: both would register torch.ops.detops.*."""
    global _loaded
    if _loaded is None:
        path = library_path()
        if not any(n.startswith("detops::") for n in torch._C._dispatch_get_all_op_names()):
            torch.ops.load_library(str(path))
        # else: already loaded by other means (e.g. torch.ops.load_library in a test harness)
        _loaded = path
    return _loaded
