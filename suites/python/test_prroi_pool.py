"""torch.ops.detops.prroi_pool against an independent numeric integration, and its CPU and CUDA paths
against each other.

torchvision has no Precise RoI Pooling and mmcv's (CUDA, fp32 only) is not installed here, so the peer
is `numeric_prroi_pool` below: it evaluates the bilinear surface with torch's grid_sample (fp64,
align_corners=True, zero padding: pixels outside the map count as 0) at 2-point Gauss-Legendre nodes
of every piece of the bin between integer coordinates. The surface is bilinear on each such piece, so
the rule is exact up to rounding. Nothing of it is shared with the op's formulation.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from conftest import devices

ALL_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
# The harness's per-dtype table (harness/src/tolerance.cpp) for outputs of magnitude ~1.
TOL = {torch.float64: (1e-10, 1e-10), torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 2e-3),
       torch.bfloat16: (8e-3, 1.6e-2)}
GAUSS = ((0.5 - 0.5 / math.sqrt(3.0), 0.5), (0.5 + 0.5 / math.sqrt(3.0), 0.5))  # nodes and weights on [0, 1]



def prroi_pool(*args):
    # Resolved at call time: conftest loads the library in a session fixture, after this import.
    return torch.ops.detops.prroi_pool(*args)


def _nodes(lo, hi, extent):
    """Gauss-Legendre nodes and weights for the integral over [lo, hi] of a function that is polynomial
    between integers and 0 outside (-1, extent)."""
    a, b = max(lo, -1.0), min(hi, float(extent))
    if not b > a:
        return [], []
    cuts = [a] + [float(c) for c in range(math.floor(a) + 1, math.ceil(b))] + [b]
    points, weights = [], []
    for p, q in zip(cuts[:-1], cuts[1:]):
        for t, w in GAUSS:
            points.append(p + t * (q - p))
            weights.append(w * (q - p))
    return points, weights


def _surface(plane, xs, ys):
    """plane [C, H, W] fp64, H and W >= 2; the bilinear surface on the grid xs x ys -> [C, len(ys), len(xs)]."""
    _, h, w = plane.shape
    assert h > 1 and w > 1, "the numeric reference needs maps of at least 2 x 2"
    # align_corners=True maps -1 and 1 to the centers of the first and last pixels.
    nx = torch.tensor(xs, dtype=torch.float64) * 2 / (w - 1) - 1
    ny = torch.tensor(ys, dtype=torch.float64) * 2 / (h - 1) - 1
    grid = torch.stack(torch.meshgrid(nx, ny, indexing="xy"), -1).unsqueeze(0)  # [1, len(ys), len(xs), 2]
    return F.grid_sample(plane.unsqueeze(0), grid, mode="bilinear", padding_mode="zeros", align_corners=True)[0]


def numeric_prroi_pool(x, rois, scale, ph, pw):
    """x [N, C, H, W], rois [K, 5]: any dtype, computed in fp64 on the CPU."""
    x = x.detach().double().cpu()
    rois = rois.detach().double().cpu()
    n, c, h, w = x.shape
    out = torch.zeros(rois.shape[0], c, ph, pw, dtype=torch.float64)
    for k in range(rois.shape[0]):
        b, x1, y1, x2, y2 = rois[k].tolist()
        x1, y1, x2, y2 = x1 * scale, y1 * scale, x2 * scale, y2 * scale
        rw, rh = x2 - x1, y2 - y1
        if not all(math.isfinite(v) for v in (x1, y1, rw, rh)) or rw <= 0 or rh <= 0:
            continue
        bw, bh = rw / pw, rh / ph
        for i in range(ph):
            ys, wys = _nodes(y1 + i * bh, y1 + i * bh + bh, h)
            for j in range(pw):
                xs, wxs = _nodes(x1 + j * bw, x1 + j * bw + bw, w)
                if not xs or not ys:
                    continue
                v = _surface(x[int(b)], xs, ys)
                weights = torch.tensor(wys, dtype=torch.float64)[:, None] * torch.tensor(wxs, dtype=torch.float64)
                out[k, :, i, j] = (v * weights).sum((1, 2)) / (bw * bh)
    return out


def make_case(seed, n, c, h, w, k, scale, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, c, h, w, generator=g, dtype=torch.float64) * 2 - 1
    img_h, img_w = h / scale, w / scale
    u = torch.rand(k, 4, generator=g, dtype=torch.float64)
    x1 = u[:, 0] * img_w * (1 + 2 * spread) - spread * img_w
    y1 = u[:, 1] * img_h * (1 + 2 * spread) - spread * img_h
    x2 = x1 + (0.3 + u[:, 2] * img_w * 0.6)
    y2 = y1 + (0.3 + u[:, 3] * img_h * 0.6)
    b = torch.randint(0, n, (k,), generator=g).double() + 0.5  # truncates to the image; flat in column 0
    return x, torch.stack([b, x1, y1, x2, y2], 1)


CASES = [
    # seed, (n, c, h, w), k, scale, (ph, pw)
    (1, (2, 3, 9, 11), 7, 1.0, (2, 2)),
    (2, (2, 2, 12, 15), 6, 0.25, (7, 7)),
    (3, (1, 2, 13, 21), 5, 1 / 16, (3, 5)),
    (4, (3, 1, 6, 7), 9, 0.5, (1, 1)),
    (5, (1, 2, 25, 42), 4, 1 / 32, (14, 14)),
]


def test_numeric_reference_reproduces_pixels_and_known_integrals():
    x = torch.arange(12, dtype=torch.float64).view(1, 3, 4)
    assert torch.equal(_surface(x, [0.0, 2.0, 3.0], [1.0])[0], torch.tensor([[4.0, 6.0, 7.0]], dtype=torch.float64))
    one = torch.ones(1, 1, 2, 2, dtype=torch.float64)
    one[0, 0, 1, :] = 0
    one[0, 0, :, 1] = 0  # a single pixel of 1 at (0, 0): the surface k(x) k(y) has integral 1
    rois = torch.tensor([[0, -1, -1, 1, 1], [0, -2, 0, 0, 1]], dtype=torch.float64)
    expected = torch.tensor([0.25, 0.125], dtype=torch.float64)
    assert torch.allclose(numeric_prroi_pool(one, rois, 1.0, 1, 1).flatten(), expected, atol=1e-14)
    assert torch.allclose(prroi_pool(one, rois, 1.0, 1, 1).flatten(), expected, atol=1e-14)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("case", CASES, ids=[f"case{c[0]}" for c in CASES])
def test_forward_matches_numeric_integration(device, case):
    seed, shape, k, scale, (ph, pw) = case
    x64, rois64 = make_case(seed, *shape, k, scale)
    for dtype in ALL_DTYPES:
        x, rois = x64.to(device, dtype), rois64.to(device, dtype)
        out = prroi_pool(x, rois, scale, ph, pw)
        assert out.dtype == dtype and out.shape == (k, shape[1], ph, pw)
        expected = numeric_prroi_pool(x, rois, scale, ph, pw)  # on the rounded inputs
        atol, rtol = TOL[dtype]
        torch.testing.assert_close(out.cpu().double(), expected, atol=atol, rtol=rtol, msg=lambda m: f"{dtype}: {m}")


@pytest.mark.parametrize("device", devices())
def test_gradients_match_finite_differences_of_numeric_integration(device):
    """The analytic gradients (features and the four roi coordinates) against central differences of
    the independent numeric integration, fp64."""
    x64, rois64 = make_case(21, 2, 2, 8, 9, 4, 0.5)
    scale, ph, pw = 0.5, 2, 3
    g = torch.Generator().manual_seed(22)
    weights = torch.randn(4, 2, ph, pw, generator=g, dtype=torch.float64)
    x = x64.to(device, copy=True).requires_grad_()
    rois = rois64.to(device, copy=True).requires_grad_()
    (prroi_pool(x, rois, scale, ph, pw) * weights.to(device)).sum().backward()
    f = lambda xx, rr: (numeric_prroi_pool(xx, rr, scale, ph, pw) * weights).sum().item()
    eps = 1e-6
    for kk in range(4):
        for col in range(5):
            plus, minus = rois64.clone(), rois64.clone()
            plus[kk, col] += eps
            minus[kk, col] -= eps
            fd = (f(x64, plus) - f(x64, minus)) / (2 * eps)
            assert rois.grad[kk, col].item() == pytest.approx(fd, abs=1e-6, rel=1e-5), (kk, col)
    assert torch.all(rois.grad[:, 0] == 0)
    for idx in [(0, 0, 3, 4), (1, 1, 0, 0), (1, 0, 7, 8), (0, 1, 5, 2)]:
        plus, minus = x64.clone(), x64.clone()
        plus[idx] += eps
        minus[idx] -= eps
        fd = (f(plus, rois64) - f(minus, rois64)) / (2 * eps)
        assert x.grad[idx].item() == pytest.approx(fd, abs=1e-7, rel=1e-6), idx


@pytest.mark.parametrize("device", devices())
def test_gradcheck_fp64(device):
    x64, rois64 = make_case(31, 2, 2, 7, 8, 5, 0.5)
    x = x64.to(device, copy=True).requires_grad_()
    rois = rois64.to(device, copy=True).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, r: prroi_pool(a, r, 0.5, 3, 2), (x, rois), eps=1e-6, atol=1e-5, rtol=1e-3)


def test_cpu_and_cuda_agree():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the CUDA path cannot run here")
    for seed, shape, k, scale, (ph, pw) in CASES:
        x64, rois64 = make_case(seed, *shape, k, scale)
        g = torch.Generator().manual_seed(seed + 100)
        weights = torch.randn(k, shape[1], ph, pw, generator=g, dtype=torch.float64)
        for dtype in ALL_DTYPES:
            results = {}
            for device in ("cpu", "cuda"):
                x = x64.to(device, dtype, copy=True).requires_grad_()
                rois = rois64.to(device, dtype, copy=True).requires_grad_()
                out = prroi_pool(x, rois, scale, ph, pw)
                (out * weights.to(device, dtype)).sum().backward()
                results[device] = [t.detach().cpu().double() for t in (out, x.grad, rois.grad)]
            atol, rtol = TOL[dtype]
            for name, a, b in zip(("output", "grad_input", "grad_rois"), results["cpu"], results["cuda"]):
                # The same math, summed in other orders (CUDA: atomics, a tree per roi) and rounded once
                # at the end; grad_rois sums signed terms, so its scale is that of its largest element.
                size = max(1.0, b.abs().max().item()) if name == "grad_rois" else 1.0
                torch.testing.assert_close(a, b, atol=atol * size, rtol=rtol, msg=lambda m: f"{name} {dtype}: {m}")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_reduced_precision_gradients_in_input_dtype(device, dtype):
    x64, rois64 = make_case(41, 2, 3, 10, 12, 6, 0.25)
    x, rois = x64.to(device, dtype, copy=True).requires_grad_(), rois64.to(device, dtype, copy=True).requires_grad_()
    prroi_pool(x, rois, 0.25, 7, 7).sum().backward()
    assert x.grad.dtype == dtype and rois.grad.dtype == dtype
    # The same rounded inputs in fp64.
    xr, rr = x.detach().double().requires_grad_(), rois.detach().double().requires_grad_()
    prroi_pool(xr, rr, 0.25, 7, 7).sum().backward()
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(x.grad.double().cpu(), xr.grad.cpu(), atol=atol, rtol=rtol)
    # grad_rois sums C * 49 terms of either sign: compare relative to the largest element.
    scale = rr.grad.abs().max().item()
    torch.testing.assert_close(rois.grad.double().cpu(), rr.grad.cpu(), atol=atol * max(scale, 1), rtol=rtol)


@pytest.mark.parametrize("device", devices())
def test_constant_map_and_linear_ramp(device):
    # Inside [0, W - 1] x [0, H - 1] the surface of a constant is the constant (no roi gradient), and
    # that of a linear ramp is the ramp (the bin average is the ramp at the bin's center).
    h, w = 9, 11
    yy, xx = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij")
    x = torch.stack([torch.full((h, w), 1.75, dtype=torch.float64), 0.5 + 2 * xx - 0.75 * yy]).unsqueeze(0).to(device)
    rois = torch.tensor([[0, 1.2, 0.4, 8.9, 7.1], [0, 3.3, 3.3, 3.35, 3.31]], dtype=torch.float64, device=device)
    rois.requires_grad_()
    out = prroi_pool(x, rois, 1.0, 3, 4)
    assert torch.allclose(out[:, 0], torch.full_like(out[:, 0], 1.75), atol=1e-12)
    for k in range(2):
        x1, y1, x2, y2 = rois[k, 1:].tolist()
        cx = x1 + (torch.arange(4, dtype=torch.float64) + 0.5) * (x2 - x1) / 4
        cy = y1 + (torch.arange(3, dtype=torch.float64) + 0.5) * (y2 - y1) / 3
        assert torch.allclose(out[k, 1].cpu(), 0.5 + 2 * cx[None, :] - 0.75 * cy[:, None], atol=1e-10)
    out[:, 0].sum().backward()
    assert torch.allclose(rois.grad, torch.zeros_like(rois.grad), atol=1e-12)


@pytest.mark.parametrize("device", devices())
def test_zero_area_and_nonfinite_rois_give_zeros_and_no_gradient(device):
    nan, inf = float("nan"), float("inf")
    x = torch.rand(1, 2, 6, 7, dtype=torch.float64, device=device).requires_grad_()
    rois = torch.tensor([[0, 2, 1, 2, 4],      # zero width
                         [0, 1, 3, 5, 3],      # zero height
                         [0, 5, 4, 1, 1],      # x2 < x1, y2 < y1
                         [0, nan, 0, 3, 3],
                         [0, 0, 0, 3, nan],
                         [0, -inf, -inf, inf, inf],
                         [0, 0, 0, inf, 2]], dtype=torch.float64, device=device).requires_grad_()
    out = prroi_pool(x, rois, 1.0, 2, 2)
    assert torch.all(out == 0)
    (out * 3).sum().backward()
    assert torch.all(x.grad == 0) and torch.all(rois.grad == 0)


@pytest.mark.parametrize("device", devices())
def test_more_than_65535_rois(device):
    x64, rois64 = make_case(51, 2, 1, 6, 7, 70000, 0.25)
    out = prroi_pool(x64.to(device, torch.float32), rois64.to(device, torch.float32), 0.25, 2, 2).cpu()
    rounded = rois64.float().double()
    picks = torch.cat([torch.arange(20), torch.arange(65530, 65545), torch.arange(69985, 70000)])
    expected = numeric_prroi_pool(x64.float(), rounded[picks], 0.25, 2, 2)
    torch.testing.assert_close(out[picks].double(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device", devices())
def test_noncontiguous_input_and_stride0_grad(device):
    x64, rois64 = make_case(61, 2, 3, 10, 12, 8, 0.5)
    xt = x64.transpose(2, 3).contiguous().transpose(2, 3).to(device).requires_grad_()  # W-major strides
    xc = x64.to(device, copy=True).requires_grad_()
    rd = rois64.to(device)
    rt = torch.cat([rd, rd], 1)[:, :5].detach().requires_grad_()  # row stride 10
    rc = rois64.to(device, copy=True).requires_grad_()
    assert not xt.is_contiguous() and not rt.is_contiguous()
    out_t = prroi_pool(xt, rt, 0.5, 4, 3)
    out_c = prroi_pool(xc, rc, 0.5, 4, 3)
    assert torch.equal(out_t, out_c)
    out_t.sum().backward()  # a stride-0 grad_output
    out_c.sum().backward()
    assert torch.equal(rt.grad, rc.grad)  # one fixed-order sum per roi on both devices
    if device == "cpu":
        assert torch.equal(xt.grad, xc.grad)
    else:  # atomicAdd: the summation order may differ
        torch.testing.assert_close(xt.grad, xc.grad, atol=1e-12, rtol=1e-12)
    # The backward ops on their own, with a non-contiguous grad.
    grad = torch.randn(4, 3, 8, 3, dtype=torch.float64).to(device).permute(2, 3, 0, 1)
    assert not grad.is_contiguous()
    gi = torch.ops.detops._prroi_pool_backward(grad, rc.detach(), 0.5, 4, 3, 2, 3, 10, 12)
    gi_c = torch.ops.detops._prroi_pool_backward(grad.contiguous(), rc.detach(), 0.5, 4, 3, 2, 3, 10, 12)
    torch.testing.assert_close(gi, gi_c, atol=1e-12, rtol=1e-12)
    gr = torch.ops.detops._prroi_pool_rois_backward(grad, xt.detach(), rt.detach(), 0.5, 4, 3)
    gr_c = torch.ops.detops._prroi_pool_rois_backward(grad.contiguous(), xc.detach(), rc.detach(), 0.5, 4, 3)
    assert torch.equal(gr, gr_c)


@pytest.mark.parametrize("device", devices())
def test_only_requested_gradients_are_computed(device):
    x64, rois64 = make_case(71, 1, 2, 6, 7, 3, 1.0)
    x, rois = x64.to(device, copy=True).requires_grad_(), rois64.to(device, copy=True)
    prroi_pool(x, rois, 1.0, 2, 2).sum().backward()
    assert x.grad is not None and rois.grad is None
    x, rois = x64.to(device, copy=True), rois64.to(device, copy=True).requires_grad_()
    prroi_pool(x, rois, 1.0, 2, 2).sum().backward()
    assert x.grad is None and rois.grad is not None and rois.grad.shape == (3, 5)


def test_double_backward_is_refused():
    x64, rois64 = make_case(81, 1, 1, 5, 6, 2, 1.0)
    x, rois = x64.clone().requires_grad_(), rois64.clone().requires_grad_()
    out = prroi_pool(x, rois, 1.0, 2, 2)
    (gx, gr) = torch.autograd.grad(out.sum(), (x, rois), create_graph=True)
    with pytest.raises(RuntimeError, match="double backward is not supported"):
        gr.sum().backward()


def test_meta_shapes():
    x = torch.empty(2, 5, 13, 17, device="meta")
    rois = torch.empty(11, 5, device="meta")
    assert prroi_pool(x, rois, 0.25, 7, 3).shape == (11, 5, 7, 3)
    grad = torch.empty(11, 5, 7, 3, device="meta")
    assert torch.ops.detops._prroi_pool_backward(grad, rois, 0.25, 7, 3, 2, 5, 13, 17).shape == (2, 5, 13, 17)
    assert torch.ops.detops._prroi_pool_rois_backward(grad, x, rois, 0.25, 7, 3).shape == (11, 5)
    with pytest.raises(RuntimeError, match="rois must be a 2-D tensor"):
        prroi_pool(x, torch.empty(11, 4, device="meta"), 0.25, 7, 3)


@pytest.mark.parametrize("device", devices())
def test_bad_input_raises_and_process_stays_usable(device):
    x64, rois64 = make_case(91, 2, 3, 8, 8, 4, 1.0)
    x, rois = x64.float().to(device), rois64.float().to(device)
    with pytest.raises(RuntimeError, match="rois must be a 2-D tensor"):
        prroi_pool(x, rois[:, :4], 1.0, 2, 2)
    with pytest.raises(IndexError, match="input must be a 4-D tensor"):
        prroi_pool(x[0], rois, 1.0, 2, 2)
    bad = rois.clone()
    bad[2, 0] = 5
    with pytest.raises(IndexError, match=r"rois\[2, 0\] = 5 is not a batch index"):
        prroi_pool(x, bad, 1.0, 2, 2)
    bad[2, 0] = float("nan")
    with pytest.raises(IndexError, match=r"rois\[2, 0\]"):
        prroi_pool(x, bad, 1.0, 2, 2)
    with pytest.raises(RuntimeError, match="rois dtype"):
        prroi_pool(x, rois.double(), 1.0, 2, 2)
    with pytest.raises(NotImplementedError, match="input must be float64, float32, float16 or bfloat16"):
        prroi_pool(x.int(), rois.int(), 1.0, 2, 2)
    with pytest.raises(RuntimeError, match="pooled_height must be positive"):
        prroi_pool(x, rois, 1.0, 0, 2)
    with pytest.raises(RuntimeError, match="pooled_width must be positive"):
        prroi_pool(x, rois, 1.0, 2, -1)
    for scale in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="spatial_scale must be a positive finite number"):
            prroi_pool(x, rois, scale, 2, 2)
    with pytest.raises(ValueError, match="height and width must be positive"):
        prroi_pool(x[:, :, :0], rois, 1.0, 2, 2)
    grad = torch.ones(4, 3, 2, 2, device=device)
    with pytest.raises(ValueError, match=r"grad must have shape \[4, 3, 2, 2\]"):
        torch.ops.detops._prroi_pool_backward(grad[:, :2], rois, 1.0, 2, 2, 2, 3, 8, 8)
    with pytest.raises(TypeError, match="input dtype"):
        torch.ops.detops._prroi_pool_rois_backward(grad, x.double(), rois, 1.0, 2, 2)
    with pytest.raises(IndexError, match=r"rois\[2, 0\]"):
        torch.ops.detops._prroi_pool_rois_backward(grad, x, bad, 1.0, 2, 2)
    out = prroi_pool(x, rois, 1.0, 2, 2)
    torch.testing.assert_close(out.cpu().double(), numeric_prroi_pool(x, rois, 1.0, 2, 2), atol=1e-5, rtol=1e-5)


def test_cuda_rois_on_cpu_is_rejected():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the cross-device check needs one")
    x64, rois64 = make_case(95, 1, 1, 5, 6, 2, 1.0)
    with pytest.raises(RuntimeError, match="same device"):
        prroi_pool(x64.cuda(), rois64, 1.0, 2, 2)
