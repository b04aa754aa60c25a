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


@pytest.fixture(autouse=True)
def detops_release_cuda_cache():
    """After each test, the blocks PyTorch's caching allocator holds are given back to the GPU. The peer suite runs
    beside the correctness shards on one GPU (scripts/run.sh): on the H200, four pytest processes held 14-21 GB each
    in their caches and a shard's 6.4 GB allocation failed for want of memory (carafe.unfold_form_fpn fp16)."""
    yield
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def pytest_sessionfinish(session, exitstatus):
    """Without torchvision every test is skipped (test_peer.py says why); exit 77 so CTest shows the
    peer_torchvision entry as skipped (SKIP_RETURN_CODE 77), not failed and not passed. A --collect-only session
    runs nothing and is left alone: importing torchvision here was 5.7 of the 8 s a collection took, and the split
    tests (test_peer_bench.py) collect nine times."""
    if session.config.option.collectonly:
        return
    try:
        import torchvision  # noqa: F401
    except ImportError:
        if exitstatus in (0, 5):
            print("\ntorchvision not installed: peer suite skipped")
            session.exitstatus = 77


def pytest_configure(config):
    """DETOPS_PYTEST_TIMES_OUT=FILE: each test's time written there at the end, for the next run's split
    (pytest_split.py). DETOPS_PROGRESS_FILE=FILE: the test command's progress lines (suites/progress_file.py)."""
    import os

    out = os.environ.get("DETOPS_PYTEST_TIMES_OUT")
    if out:
        from peer.pytest_split import TimesRecorder

        config.pluginmanager.register(TimesRecorder(out), "detops_pytest_times")
    import progress_file  # suites/progress_file.py: the test command's progress lines (DETOPS_PROGRESS_FILE)

    progress_file.register(config, "peer")


_SPLIT_KEY = pytest.StashKey[str]()  # what this process's split was, for its closing summary


def pytest_collection_modifyitems(config, items):
    """DETOPS_PYTEST_SHARD=I/N (scripts/run.sh: several pytest processes, one per GPU or DETOPS_PEER_PROCESSES on
    one): this process keeps its part of the tests and deselects the rest, so the N processes together run each test
    once. The parts are of near-equal expected time by an earlier run's test times (DETOPS_PYTEST_TIMES), else by a
    hash of the test id (pytest_split.py). Not every N-th test: the parametrizations alternate CPU and CUDA, and
    dealing every 2nd test gave one process all the (slow) CPU cases (141 s against 86 s on two H200s)."""
    import os

    spec = os.environ.get("DETOPS_PYTEST_SHARD")
    if not spec:
        return
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
    from shard_suite import parse_shard
    from peer.pytest_split import recorded_times, split

    try:
        index, n = parse_shard(spec)
    except ValueError as e:
        raise pytest.UsageError(f"DETOPS_PYTEST_SHARD={e}") from None
    times, bad = recorded_times(os.environ.get("DETOPS_PYTEST_TIMES"))
    for b in bad:
        print(f"\npytest_split: DETOPS_PYTEST_TIMES: left out {b}", file=sys.stderr)
    kept, how = split([item.nodeid for item in items], index, n, times)
    kept = set(kept)
    keep = [item for item in items if item.nodeid in kept]
    drop = [item for item in items if item.nodeid not in kept]
    config.stash[_SPLIT_KEY] = f"part {index}/{n} of {len(items)} tests, split by {how}: {len(keep)} kept"
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    line = config.stash.get(_SPLIT_KEY, None)
    if line:
        terminalreporter.write_line(f"DETOPS_PYTEST_SHARD: {line}")
