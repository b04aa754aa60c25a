import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # suites/: makes `peer` importable


@pytest.fixture(scope="session", autouse=True)
def detops_library():
    torch = pytest.importorskip("torch", reason="torch is not installed in this Python")
    from peer import pairs

    try:
        return pairs.load_library()
    except FileNotFoundError as e:
        pytest.fail(str(e))
