import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # suites/: makes `peer` importable
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "ops" / "python"))  # the detops package


@pytest.fixture(scope="session", autouse=True)
def detops_library():
    torch = pytest.importorskip("torch", reason="torch is not installed in this Python")
    from peer import pairs

    try:
        path = pairs.load_library()
    except FileNotFoundError as e:
        pytest.fail(str(e))
    # The Python package (ops/python/detops) on top: detops.ops and the fake kernels of nms / batched_nms.
    import detops  # noqa: F401
    return path


def pytest_sessionfinish(session, exitstatus):
    """Without torchvision every test is skipped (test_peer.py says why); exit 77 so CTest shows the
    peer_torchvision entry as skipped (SKIP_RETURN_CODE 77), not failed and not passed."""
    try:
        import torchvision  # noqa: F401
    except ImportError:
        if exitstatus in (0, 5):
            print("\ntorchvision not installed: peer suite skipped")
            session.exitstatus = 77


def pytest_collection_modifyitems(config, items):
    """DETOPS_PYTEST_SHARD=I/N (scripts/run.sh on a machine with several GPUs, one process per GPU): this process
    keeps the tests whose id hashes (CRC-32) to I modulo N and deselects the rest, so the N processes together run
    each test once. A hash rather than every N-th test: the parametrizations alternate CPU and CUDA, and dealing
    every 2nd test gave one process all the (slow) CPU cases (141 s against 86 s on two H200s)."""
    import os
    import zlib

    spec = os.environ.get("DETOPS_PYTEST_SHARD")
    if not spec:
        return
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
    from shard_suite import parse_shard

    try:
        index, n = parse_shard(spec)
    except ValueError as e:
        raise pytest.UsageError(f"DETOPS_PYTEST_SHARD={e}") from None
    mine = [zlib.crc32(item.nodeid.encode()) % n == index for item in items]
    keep = [item for item, m in zip(items, mine) if m]
    drop = [item for item, m in zip(items, mine) if not m]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep
