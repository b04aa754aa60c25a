"""What the split tests collect (test_peer_bench.py: DETOPS_PYTEST_SHARD and DETOPS_PYTEST_TIMES, conftest.py): ids
shaped like the suite's (op, dtype, device), in a module that imports nothing heavy, so each `pytest --collect-only`
of it costs Python's and pytest's start-up rather than torch's and torchvision's. Collecting test_dropin_package.py
took 8 s a time; the two split tests' nine collections were 113 s of the H200 peer suite's 319 s. Not named test_*.py:
the suite itself never collects it (an explicit path is collected regardless of the name)."""
import pytest


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", ["fp64", "fp32", "fp16", "bf16"])
@pytest.mark.parametrize("op", ["roi_align", "roi_pool", "nms"])
def test_probe(op, dtype, device):
    assert op and dtype and device
