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


# roi_pool: torchvision starts each non-empty bin's max at -FLT_MAX (argmax -1) and keeps strictly greater values
# only; the default does the same, exact_max=True takes the bin's true maximum. Before the option existed the
# default was the exact max (NaN for a bin of NaNs only, -inf for one of -inf only, with argmax and gradient).
def _pool_planes_around_flt_max(g, n, c, h, w):
    """NaN, -inf, -FLT_MAX, -1e300 and ordinary values in equal shares: bins without any value above -FLT_MAX
    (each kind alone and mixed), and mixed bins whose max is ordinary."""
    choices = torch.tensor([float("nan"), -float("inf"), -torch.finfo(torch.float32).max, -1e300, 0.0],
                           dtype=torch.float64)
    pick = torch.randint(0, 5, (n, c, h, w), generator=g)
    x = choices[pick]
    x[pick == 4] = torch.randn(int((pick == 4).sum()), generator=g, dtype=torch.float64)
    return x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", POOL_CASES, ids=[f"pool{c[0]}" for c in POOL_CASES])
def test_roi_pool_default_is_torchvision_around_flt_max(device, dtype, case):
    """detops.ops.roi_pool / RoIPool and torch.ops.detops.roi_pool (output, argmax, gradient through autograd)
    against torchvision's on border rois over such planes; exact_max=True differs exactly on the bins where
    torchvision's argmax is -1 and the bin is not empty."""
    from detops import ops
    seed, (n, c, h, w), k, scale, (ph, pw) = case
    g = torch.Generator().manual_seed(3000 + seed)
    x = _pool_planes_around_flt_max(g, n, c, h, w).to(device, dtype)
    rois = border_rois(g, n, k, h, w, scale).to(device, dtype)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, argmax = torch.ops.detops.roi_pool(xa, rois, scale, ph, pw)
    want, want_argmax = torch.ops.torchvision.roi_pool(xb, rois, scale, ph, pw)
    assert torch.equal(argmax, want_argmax)
    assert torch.equal(out, want)  # no NaN: torchvision's max is never NaN
    grad = torch.randint(1, 4, out.shape, generator=g).to(device, dtype)  # integer sums: exact in any order
    (ga,) = torch.autograd.grad(out, xa, grad)
    (gb,) = torch.autograd.grad(want, xb, grad)
    assert torch.equal(ga, gb)
    assert torch.equal(ops.roi_pool(x, rois, (ph, pw), scale), want)
    assert torch.equal(ops.RoIPool((ph, pw), scale)(x, rois), torchvision.ops.RoIPool((ph, pw), scale)(x, rois))
    exact, exact_argmax = torch.ops.detops.roi_pool(x, rois, scale, ph, pw, exact_max=True)
    no_value = (want_argmax == -1) & (want == -torch.finfo(torch.float32).max)  # non-empty, nothing above -FLT_MAX
    assert bool(no_value.any()), "the case lost its point: every bin has a value above -FLT_MAX"
    assert torch.equal(exact[~no_value], want[~no_value]) and torch.equal(exact_argmax[~no_value], argmax[~no_value])
    # There the exact max is the true one: NaN (argmax -1) for NaNs only, else at an element of the bin.
    assert bool(((exact_argmax[no_value] >= 0) ^ torch.isnan(exact[no_value])).all())
    assert bool(torch.isnan(exact[no_value]).any()) and bool((exact[no_value] == -float("inf")).any())
    torch.testing.assert_close(ops.roi_pool(x, rois, (ph, pw), scale, exact_max=True), exact, atol=0, rtol=0,
                               equal_nan=True)
    torch.testing.assert_close(ops.RoIPool((ph, pw), scale, exact_max=True)(x, rois), exact, atol=0, rtol=0,
                               equal_nan=True)


def _roi_pool_bad_backward_calls():
    grad, argmax = torch.ones(2, 3, 2, 2), torch.zeros(2, 3, 2, 2, dtype=torch.int32)
    rois = torch.tensor([[0, 1.0, 1, 5, 5], [1, 0, 0, 7, 7]])
    rest = (1.0, 2, 2, 2, 3, 8, 8)
    yield "argmax int64", (grad, rois, argmax.long()) + rest
    yield "argmax float", (grad, rois, argmax.float()) + rest
    yield "argmax int16", (grad, rois, argmax.short()) + rest
    yield "grad 3-D", (grad[0], rois, argmax) + rest
    yield "rois with 4 columns", (grad, rois[:, 1:], argmax) + rest
    yield "1-D rois", (grad, rois[0], argmax) + rest
    yield "rois of another dtype", (grad, rois.double(), argmax) + rest
    yield "integer grad and rois", (grad.long(), rois.long(), argmax) + rest
    yield "negative input height", (grad, rois, argmax, 1.0, 2, 2, 2, 3, -1, 8)


@pytest.mark.parametrize("what,args", list(_roi_pool_bad_backward_calls()),
                         ids=[w for w, _ in _roi_pool_bad_backward_calls()])
def test_roi_pool_backward_raises_torchvisions_exception_types(what, args):
    """_roi_pool_backward refused by torchvision (in a forked child: it may crash) and by DetOps: the same type."""
    from peer.test_dropin_package import _torchvision_exception
    theirs = _torchvision_exception("_roi_pool_backward", args)
    assert theirs is not None, f"{what}: torchvision no longer refuses this call; the case lost its point"
    with pytest.raises(Exception) as ours:
        torch.ops.detops._roi_pool_backward(*args)
    assert type(ours.value) is theirs, f"{what}: DetOps raised {type(ours.value).__name__} ({ours.value}), " \
                                       f"torchvision {theirs.__name__}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["roi_align", "roi_pool"])
@pytest.mark.parametrize("pooled", [(0, 3), (2, 0), (0, 0)], ids=lambda p: f"{p[0]}x{p[1]}")
def test_pooled_size_zero_is_an_empty_output_as_torchvision(device, op, pooled):
    """torchvision's roi_align and roi_pool return an empty [K, C, ph, pw] output for a pooled size of 0 and
    a zero gradient; DetOps does the same (its PS-RoI ops refuse 0, where torchvision's divide by it and crash)."""
    g = torch.Generator().manual_seed(77)
    x = (torch.rand(2, 3, 9, 11, generator=g, dtype=torch.float64) * 2 - 1).to(device)
    rois = border_rois(g, 2, 5, 9, 11, 1.0).to(device)
    extra = (2, False) if op == "roi_align" else ()
    outs = []
    for lib in (torch.ops.torchvision, torch.ops.detops):
        xi = x.clone().requires_grad_()
        out = getattr(lib, op)(xi, rois, 1.0, *pooled, *extra)
        out = out[0] if isinstance(out, tuple) else out
        out.sum().backward()
        outs.append((out, xi.grad))
    (tv_out, tv_grad), (our_out, our_grad) = outs
    assert our_out.shape == tv_out.shape == (5, 3, *pooled)
    assert our_out.dtype == tv_out.dtype
    assert our_grad.shape == x.shape and torch.count_nonzero(our_grad) == 0
    torch.testing.assert_close(our_grad, tv_grad if tv_grad is not None else torch.zeros_like(x))
