import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # suites/: makes `peer` importable

try:
    import torch
except ImportError:  # the record tools' tests (test_compare.py, test_report.py) need no torch
    torch = None


def pytest_configure(config):
    config.addinivalue_line("markers", "no_detops_library: the test does not load libdetops_torch.so (needs no torch)")
    import progress_file  # suites/progress_file.py: the test command's progress lines (DETOPS_PROGRESS_FILE)

    progress_file.register(config, "python")


def _library_path():
    env = os.environ.get("DETOPS_TORCH_LIBRARY")
    if env:
        return pathlib.Path(env)
    root = pathlib.Path(__file__).resolve().parents[2]
    for preset in ("dev", "ci", "release"):
        candidate = root / "build" / preset / "ops" / "libdetops_torch.so"
        if candidate.exists():
            return candidate
    return None


@pytest.fixture(scope="session")
def _loaded_detops_library():
    if torch is None:
        pytest.skip("torch is not installed in this Python")
    path = _library_path()
    if path is None or not path.exists():
        pytest.fail("libdetops_torch.so not found: build first (scripts/test.sh) or set DETOPS_TORCH_LIBRARY")
    torch.ops.load_library(str(path))
    # The Python package registers the fake kernels of the data-dependent ops (nms, batched_nms).
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "ops" / "python"))
    import detops  # noqa: F401
    return path


@pytest.fixture(autouse=True)
def detops_library(request):
    """Loads libdetops_torch.so once, for every test not marked no_detops_library."""
    if request.node.get_closest_marker("no_detops_library"):
        return None
    return request.getfixturevalue("_loaded_detops_library")


def assert_sum_backward_close(ours, truth, x, xp, atol, rtol):
    """Gradients of ours.sum() w.r.t. x (the dtype and device under test) against those of truth.sum() w.r.t.
    xp (fp64). .sum().backward() hands both a stride-0 grad_output of ones; for the RoI ops every gradient
    element is then a sum of nonnegative weights (no cancellation), so the forward's tolerance applies."""
    ours.sum().backward()
    truth.sum().backward()
    torch.testing.assert_close(x.grad.double().cpu(), xp.grad.cpu(), atol=atol, rtol=rtol,
                               msg=lambda m: f"backward {x.dtype} {x.device} vs the fp64 truth: {m}")


def random_image_rois(g, n, k, h, w, scale):
    """k rois [batch, x1, y1, x2, y2] in fp64, in image coordinates (feature size h x w / scale), inside the
    image's lower-left 80 % with sizes from 1 px to half the image, batch indices in [0, n)."""
    img_h, img_w = h / scale, w / scale
    u = torch.rand(k, 4, generator=g, dtype=torch.float64)
    x1, y1 = u[:, 0] * img_w * 0.8, u[:, 1] * img_h * 0.8
    x2, y2 = x1 + 1 + u[:, 2] * img_w * 0.5, y1 + 1 + u[:, 3] * img_h * 0.5
    b = torch.randint(0, n, (k,), generator=g).to(torch.float64)
    return torch.stack([b, x1, y1, x2, y2], 1)


def devices():
    out = ["cpu"]
    if torch.cuda.is_available():
        out.append("cuda")
    return out
