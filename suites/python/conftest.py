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


def devices():
    out = ["cpu"]
    if torch.cuda.is_available():
        out.append("cuda")
    return out
