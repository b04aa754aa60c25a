import os
import pathlib

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed in this Python")


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


@pytest.fixture(scope="session", autouse=True)
def detops_library():
    path = _library_path()
    if path is None or not path.exists():
        pytest.fail("libdetops_torch.so not found: build first (scripts/test.sh) or set DETOPS_TORCH_LIBRARY")
    torch.ops.load_library(str(path))
    return path


def devices():
    out = ["cpu"]
    if torch.cuda.is_available():
        out.append("cuda")
    return out
