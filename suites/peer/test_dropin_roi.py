"""Drop-in defaults of the RoI ops (issue 11): with torchvision's positional arguments, torch.ops.detops.* gives
torchvision's answer, on random rois that touch and cross the map's border, in the same dtype (torchvision's CPU
kernels are the specification). DetOps's corrected semantics are options, checked here to differ where they should.

Every test here fails on the behaviour before the options existed (DetOps's corrected semantics as the default):
ps_roi_pool then read the map's last row and column in its forward and used exact integer bins, and
ps_roi_align returned 0 for empty bins.
"""
import pytest
import torch

torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed: no peer to compare against")

DTYPES = [torch.float64, torch.float32]  # torchvision's CPU RoI kernels have no fp16 / bf16 here
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# (atol, rtol): same algorithm, same dtype; only the summation order may differ (CUDA backward atomics).
TOL = {torch.float64: (1e-12, 1e-12), torch.float32: (1e-5, 1e-5)}


def border_rois(g, n, k, h, w, scale, reach=1.5):
    """k rois [batch, x1, y1, x2, y2] in image coordinates (feature map h x w / scale): corners drawn over
    [-0.25, reach] of the map, so many rois touch or cross the last row and column, some cross the first."""
    img_h, img_w = h / scale, w / scale
    u = torch.rand(k, 4, generator=g, dtype=torch.float64)
    x1 = (u[:, 0] * (reach + 0.25) - 0.25) * img_w
    y1 = (u[:, 1] * (reach + 0.25) - 0.25) * img_h
    x2 = x1 + u[:, 2] * img_w
    y2 = y1 + u[:, 3] * img_h
    b = torch.randint(0, n, (k,), generator=g).to(torch.float64)
    return torch.stack([b, x1, y1, x2, y2], 1)


# seed, (n, c_out, h, w), k, scale, (ph, pw)
POOL_CASES = [
    (1, (2, 2, 13, 17), 40, 1.0, (3, 3)),
    (2, (2, 1, 20, 24), 40, 0.25, (7, 7)),
    (3, (1, 2, 9, 31), 30, 0.5, (2, 5)),
    (4, (2, 1, 64, 80), 30, 1.0, (7, 7)),  # roi sizes up to 80: 29, 57, 58 (bins that fp32 / fp64 move) likely
    (5, (1, 1, 40, 40), 30, 1.0, (13, 11)),
    (6, (1, 1, 1, 7), 10, 1.0, (1, 2)),  # a one-row map: torchvision's forward pools nothing
]


def _case_inputs(case, dtype, device):
    seed, (n, c_out, h, w), k, scale, (ph, pw) = case
    g = torch.Generator().manual_seed(1000 + seed)
    x = torch.rand(n, c_out * ph * pw, h, w, generator=g, dtype=torch.float64) * 2 - 1
    rois = border_rois(g, n, k, h, w, scale)
    return x.to(device, dtype), rois.to(device, dtype)


def _touches_last_row_or_column(rois, scale, h, w):
    r = torch.round(rois[:, 1:].double() * scale)
    return ((r[:, 3] >= h - 1) & (r[:, 1] < h)) | ((r[:, 2] >= w - 1) & (r[:, 0] < w))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", POOL_CASES, ids=[f"pool{c[0]}" for c in POOL_CASES])
def test_ps_roi_pool_default_is_torchvision(device, dtype, case):
    """Forward, channel_mapping and the gradient through autograd (and the backward op called with torchvision's
    positional arguments) equal torchvision's, in the same dtype, on every roi: no roi is left out."""
    _, (n, c_out, h, w), k, scale, (ph, pw) = case
    x, rois = _case_inputs(case, dtype, device)
    assert int(_touches_last_row_or_column(rois, scale, h, w).sum()) >= k // 4, "too few rois reach the border"
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, mapping = torch.ops.detops.ps_roi_pool(xa, rois, scale, ph, pw)
    want, want_mapping = torch.ops.torchvision.ps_roi_pool(xb, rois, scale, ph, pw)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out, want, atol=atol, rtol=rtol)
    assert torch.equal(mapping, want_mapping)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64).to(device, dtype)
    (ga,) = torch.autograd.grad(out, xa, grad)
    (gb,) = torch.autograd.grad(want, xb, grad)
    torch.testing.assert_close(ga, gb, atol=atol, rtol=rtol)
    args = (grad, rois, want_mapping, scale, ph, pw, n, c_out * ph * pw, h, w)
    torch.testing.assert_close(torch.ops.detops._ps_roi_pool_backward(*args),
                               torch.ops.torchvision._ps_roi_pool_backward(*args), atol=atol, rtol=rtol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ps_roi_pool_default_is_torchvision_on_large_coordinates(device, dtype):
    """rois of up to ~4e6 feature pixels (within torchvision's int range): the bins follow the dtype's arithmetic
    (fp32 moves boundaries by whole pixels at these sizes) exactly as torchvision's."""
    g = torch.Generator().manual_seed(77)
    x = (torch.rand(2, 2 * 9, 11, 13, generator=g, dtype=torch.float64) * 2 - 1).to(device, dtype)
    u = torch.rand(16, 4, generator=g, dtype=torch.float64)
    rois = torch.stack([torch.randint(0, 2, (16,), generator=g).double(), -u[:, 0] * 2e6, -u[:, 1] * 2e6,
                        10 + u[:, 2] * 2e6, 8 + u[:, 3] * 2e6], 1).to(device, dtype)
    out, _ = torch.ops.detops.ps_roi_pool(x, rois, 1.0, 3, 3)
    want, _ = torch.ops.torchvision.ps_roi_pool(x, rois, 1.0, 3, 3)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out, want, atol=atol, rtol=rtol)


@pytest.mark.parametrize("device", DEVICES)
def test_ps_roi_pool_exact_bins_differs_where_documented(device):
    """The option is not the default: on the border rois exact_bins=True reads the last row and column (and moves
    floating bin boundaries back to the exact ones), so it differs from torchvision; its backward is the gradient
    of its own forward (gradcheck)."""
    case = POOL_CASES[0]
    _, (n, c_out, h, w), k, scale, (ph, pw) = case
    x, rois = _case_inputs(case, torch.float64, device)
    exact, _ = torch.ops.detops.ps_roi_pool(x, rois, scale, ph, pw, exact_bins=True)
    want, _ = torch.ops.torchvision.ps_roi_pool(x, rois, scale, ph, pw)
    differs = (exact - want).abs().flatten(1).amax(1) > 1e-9
    touches = _touches_last_row_or_column(rois, scale, h, w)
    assert bool(differs.any())
    assert not bool((differs & ~touches).any()), "exact_bins differs from torchvision away from the border"
    xg = x[:1, :, :6, :7].clone().requires_grad_()
    small = rois[rois[:, 0] == 0][:4]
    assert torch.autograd.gradcheck(lambda t: torch.ops.detops.ps_roi_pool(t, small, scale, ph, pw, True)[0], (xg,))


# seed, (n, c_out, h, w), k, scale, (ph, pw), sampling_ratio
ALIGN_CASES = [
    (11, (2, 2, 13, 17), 40, 1.0, (3, 3), 0),
    (12, (2, 1, 20, 24), 40, 0.25, (7, 7), 0),
    (13, (1, 2, 9, 31), 30, 0.5, (2, 5), 2),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", ALIGN_CASES, ids=[f"align{c[0]}" for c in ALIGN_CASES])
def test_ps_roi_align_default_is_torchvision_with_empty_bins(device, dtype, case):
    """Border rois plus zero-size and slightly inverted ones: with an adaptive grid torchvision returns NaN for
    their bins (0 / 0), and so does the default; zero_empty_bins=True returns 0 there and is otherwise the same."""
    seed, (n, c_out, h, w), k, scale, (ph, pw), sr = case
    g = torch.Generator().manual_seed(2000 + seed)
    x = (torch.rand(n, c_out * ph * pw, h, w, generator=g, dtype=torch.float64) * 2 - 1).to(device, dtype)
    rois = border_rois(g, n, k, h, w, scale)
    rois[::4, 3] = rois[::4, 1]  # zero width
    rois[1::4, 4] = rois[1::4, 2] - 0.3 / scale  # slightly inverted height
    rois = rois.to(device, dtype)
    out, mapping = torch.ops.detops.ps_roi_align(x, rois, scale, ph, pw, sr)
    want, want_mapping = torch.ops.torchvision.ps_roi_align(x, rois, scale, ph, pw, sr)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out, want, atol=atol, rtol=rtol, equal_nan=True)
    assert torch.equal(mapping, want_mapping)
    zero, _ = torch.ops.detops.ps_roi_align(x, rois, scale, ph, pw, sr, zero_empty_bins=True)
    if sr == 0:
        assert bool(torch.isnan(want).any())
    torch.testing.assert_close(zero, torch.nan_to_num(want, nan=0.0), atol=atol, rtol=rtol)
    assert not bool(torch.isnan(zero).any())
