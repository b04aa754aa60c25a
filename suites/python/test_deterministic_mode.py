"""Deterministic mode (torch.use_deterministic_algorithms): the RoI backwards that scatter with atomics
on CUDA refuse, naming the op, as torchvision's do; their CPU paths and every forward run."""
import pytest
import torch

# (op, call returning the differentiable output, the backward op the error must name)
ATOMIC_BACKWARDS = [
    ("roi_align", lambda x, r: torch.ops.detops.roi_align(x, r, 0.5, 3, 3, 2, True), "_roi_align_backward"),
    ("roi_pool", lambda x, r: torch.ops.detops.roi_pool(x, r, 0.5, 3, 3)[0], "_roi_pool_backward"),
    ("ps_roi_align", lambda x, r: torch.ops.detops.ps_roi_align(x, r, 0.5, 3, 3, 2)[0], "_ps_roi_align_backward"),
    ("ps_roi_pool", lambda x, r: torch.ops.detops.ps_roi_pool(x, r, 0.5, 3, 3)[0], "_ps_roi_pool_backward"),
    ("prroi_pool", lambda x, r: torch.ops.detops.prroi_pool(x, r, 0.5, 3, 3), "_prroi_pool_backward"),
]


def _inputs(device):
    g = torch.Generator().manual_seed(7)
    x = torch.rand(2, 18, 10, 12, generator=g, dtype=torch.float32)  # 18 = 2 * 3 * 3 channels for the PS ops
    rois = torch.tensor([[0, 1.0, 2.0, 15.0, 17.0], [1, 0.0, 0.0, 20.0, 18.0], [0, 4.0, 3.0, 9.0, 12.0]])
    return x.to(device).requires_grad_(), rois.to(device)


@pytest.fixture
def deterministic():
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("op,call,backward_name", ATOMIC_BACKWARDS, ids=[a[0] for a in ATOMIC_BACKWARDS])
def test_cpu_runs_in_deterministic_mode(op, call, backward_name, deterministic):
    x, rois = _inputs("cpu")
    call(x, rois).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: only the CUDA backwards use atomics")
@pytest.mark.parametrize("op,call,backward_name", ATOMIC_BACKWARDS, ids=[a[0] for a in ATOMIC_BACKWARDS])
def test_cuda_backward_refuses_deterministic_mode(op, call, backward_name, deterministic):
    x, rois = _inputs("cuda")
    out = call(x, rois)  # the forward is deterministic: it runs
    with pytest.raises(RuntimeError, match=backward_name):
        out.sum().backward()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("op,call,backward_name", ATOMIC_BACKWARDS, ids=[a[0] for a in ATOMIC_BACKWARDS])
def test_cuda_backward_warns_with_warn_only(op, call, backward_name):
    x, rois = _inputs("cuda")
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with pytest.warns(UserWarning, match=backward_name):
            call(x, rois).sum().backward()
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.isfinite(x.grad).all()
