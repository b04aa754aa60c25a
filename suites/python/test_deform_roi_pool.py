"""torch.ops.detops.deform_roi_pool and modulated_deform_roi_pool (mmcv's deformable RoI pooling) against an
independent plain-PyTorch evaluation, against our roi_align (and torchvision's) with zero offsets, and through
autograd, gradcheck, Meta, opcheck and the error paths.

mmcv is not installed here, so the peer is `torch_deform_roi_pool` below, written from the definition
(docs/ops/deform_roi_pool.md) with tensor indexing: every sample point of every bin of a roi at once, the
bilinear surface read by gathering the four pixels around each point. It is differentiable, so its autograd
gives gradients for the features, the offsets and the mask that share nothing with the op's backward.
"""
import math

import pytest
import torch

from conftest import devices

ALL_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
# The harness's per-dtype table (harness/src/tolerance.cpp) for outputs of magnitude ~1.
TOL = {torch.float64: (1e-10, 1e-10), torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 2e-3),
       torch.bfloat16: (8e-3, 1.6e-2)}


def deform_roi_pool(*args, **kwargs):
    # Resolved at call time: conftest loads the library in a session fixture, after this import.
    return torch.ops.detops.deform_roi_pool(*args, **kwargs)


def modulated_deform_roi_pool(*args, **kwargs):
    return torch.ops.detops.modulated_deform_roi_pool(*args, **kwargs)


def _bilinear(plane, y, x):
    """plane [C, H, W]; y, x of one shape S -> [C, *S]: the bilinear surface with RoIAlign's border rules (a point
    with y outside [-1, H] or x outside [-1, W], NaN included, gives 0; coordinates below 0 read as 0; past the
    last row / column the surface is flat)."""
    _, h, w = plane.shape
    valid = (y >= -1) & (y <= h) & (x >= -1) & (x <= w)
    y = torch.where(valid, y, torch.zeros_like(y)).clamp(min=0)
    x = torch.where(valid, x, torch.zeros_like(x)).clamp(min=0)
    y0, x0 = y.detach().floor().long(), x.detach().floor().long()
    y_snap, x_snap = y0 >= h - 1, x0 >= w - 1
    y0, x0 = y0.clamp(max=h - 1), x0.clamp(max=w - 1)
    y1, x1 = torch.where(y_snap, y0, y0 + 1), torch.where(x_snap, x0, x0 + 1)
    y = torch.where(y_snap, y0.to(y.dtype), y)  # flat: no slope past the last row
    x = torch.where(x_snap, x0.to(x.dtype), x)
    ly, lx = y - y0, x - x0
    v = ((1 - ly) * (1 - lx) * plane[:, y0, x0] + (1 - ly) * lx * plane[:, y0, x1] +
         ly * (1 - lx) * plane[:, y1, x0] + ly * lx * plane[:, y1, x1])
    return torch.where(valid, v, torch.zeros_like(v))


def torch_deform_roi_pool(x, rois, offset, mask, output_size, spatial_scale=1.0, sampling_ratio=0, gamma=0.1):
    """x [N, C, H, W], rois [K, 5], offset [K, 2, ph, pw] or None, mask [K, 1, ph, pw] or None: fp64 tensors on
    the CPU (x, offset and mask may require grad) -> [K, C, ph, pw]."""
    ph_n, pw_n = output_size
    c = x.shape[1]
    outs = []
    for k in range(rois.shape[0]):
        b, x1, y1, x2, y2 = rois[k].tolist()
        sx, sy = x1 * spatial_scale - 0.5, y1 * spatial_scale - 0.5  # aligned: pixel centers on integers
        rw, rh = x2 * spatial_scale - 0.5 - sx, y2 * spatial_scale - 0.5 - sy
        bw, bh = rw / pw_n, rh / ph_n
        gh = sampling_ratio if sampling_ratio > 0 else (math.ceil(bh) if bh > 0 else 0)
        gw = sampling_ratio if sampling_ratio > 0 else (math.ceil(bw) if bw > 0 else 0)
        if gh * gw == 0:
            outs.append(x.new_zeros(c, ph_n, pw_n))
            continue
        i = torch.arange(ph_n, dtype=torch.float64).view(-1, 1, 1, 1)
        j = torch.arange(pw_n, dtype=torch.float64).view(1, -1, 1, 1)
        iy = torch.arange(gh, dtype=torch.float64).view(1, 1, -1, 1)
        ix = torch.arange(gw, dtype=torch.float64).view(1, 1, 1, -1)
        ys = sy + i * bh + (iy + 0.5) * bh / gh
        xs = sx + j * bw + (ix + 0.5) * bw / gw
        if offset is not None:
            ys = ys + gamma * rh * offset[k, 1].view(ph_n, pw_n, 1, 1)
            xs = xs + gamma * rw * offset[k, 0].view(ph_n, pw_n, 1, 1)
        ys, xs = torch.broadcast_tensors(ys, xs)
        out = _bilinear(x[int(b)], ys, xs).sum((-1, -2)) / (gh * gw)
        outs.append(out * mask[k, 0] if mask is not None else out)
    return torch.stack(outs) if outs else x.new_zeros(0, c, ph_n, pw_n)


def make_case(seed, n, c, h, w, k, scale, ph=3, pw=3, offset_std=0.1, modulated=False, spread=0.3):
    """fp64 CPU tensors: features U[-1, 1), k rois of several sizes, some crossing the map's border, batch indices
    in [0, n), offsets N(0, offset_std^2), a U[0, 1) mask (or None)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, c, h, w, generator=g, dtype=torch.float64) * 2 - 1
    img_h, img_w = h / scale, w / scale
    u = torch.rand(k, 4, generator=g, dtype=torch.float64)
    x1 = u[:, 0] * img_w * (1 + spread) - spread * img_w
    y1 = u[:, 1] * img_h * (1 + spread) - spread * img_h
    x2, y2 = x1 + 1 + u[:, 2] * img_w * 0.7, y1 + 1 + u[:, 3] * img_h * 0.7
    b = torch.randint(0, n, (k,), generator=g).double()
    rois = torch.stack([b, x1, y1, x2, y2], 1)
    offset = torch.randn(k, 2, ph, pw, generator=g, dtype=torch.float64) * offset_std
    mask = torch.rand(k, 1, ph, pw, generator=g, dtype=torch.float64) if modulated else None
    return x, rois, offset, mask


def _run(x, rois, offset, mask, output_size, *args):
    if mask is None:
        return deform_roi_pool(x, rois, offset, output_size, *args)
    return modulated_deform_roi_pool(x, rois, offset, mask, output_size, *args)


def _to(t, device, dtype, grad=False):
    return None if t is None else t.to(device, dtype, copy=True).requires_grad_(grad)


CASES = [
    # seed, (n, c, h, w), k, scale, (ph, pw), sampling_ratio, gamma, offset_std, modulated
    (1, (2, 3, 9, 11), 7, 1.0, (2, 2), 2, 0.1, 0.1, False),
    (2, (2, 2, 12, 15), 6, 0.25, (7, 7), 0, 0.1, 0.1, False),
    (3, (1, 2, 13, 21), 5, 1 / 16, (3, 5), 0, 0.1, 1.0, True),
    (4, (3, 1, 6, 7), 9, 0.5, (1, 1), 1, 0.3, 0.5, False),
    (5, (1, 2, 25, 42), 4, 1 / 32, (7, 7), 2, 0.1, 0.1, True),
    (6, (2, 4, 10, 10), 5, 0.5, (2, 3), 3, -0.2, 0.3, True),
]
IDS = [f"case{c[0]}" for c in CASES]


def test_reference_on_known_values():
    # A linear ramp is reproduced exactly by the bilinear surface: a bin's average is the ramp at its samples'
    # mean, the bin's center moved by its offset; the mask scales it.
    h, w = 9, 11
    yy, xx = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij")
    x = (0.5 + 2 * xx - 0.75 * yy).view(1, 1, h, w)
    rois = torch.tensor([[0, 2.5, 1.5, 8.5, 7.5]], dtype=torch.float64)  # aligned: [2, 8] x [1, 7] on the map
    offset = torch.tensor([[[[0.1, -0.2]], [[0.05, 0.0]]]], dtype=torch.float64)  # [1, 2, 1, 2]
    mask = torch.tensor([[[[1.0, 0.5]]]], dtype=torch.float64)
    cx = torch.tensor([3.5, 6.5]) + 0.1 * 6 * offset[0, 0, 0]
    cy = torch.tensor([4.0, 4.0]) + 0.1 * 6 * offset[0, 1, 0]
    expected = (0.5 + 2 * cx - 0.75 * cy) * mask[0, 0, 0]
    for f in (torch_deform_roi_pool, lambda *a: _run(*a[:5], 1.0, 2, 0.1)):
        out = f(x, rois, offset, mask, (1, 2))
        torch.testing.assert_close(out.view(2), expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_matches_plain_pytorch(device, case):
    seed, shape, k, scale, size, sr, gamma, std, modulated = case
    x64, rois64, off64, mask64 = make_case(seed, *shape, k, scale, *size, offset_std=std, modulated=modulated)
    for dtype in ALL_DTYPES:
        x, rois, off, mask = (_to(t, device, dtype) for t in (x64, rois64, off64, mask64))
        out = _run(x, rois, off, mask, list(size), scale, sr, gamma)
        assert out.dtype == dtype and out.shape == (k, shape[1], *size)
        # On the rounded inputs, in fp64.
        r = [None if t is None else t.double().cpu() for t in (x, rois, off, mask)]
        expected = torch_deform_roi_pool(*r, size, scale, sr, gamma)
        atol, rtol = TOL[dtype]
        torch.testing.assert_close(out.double().cpu(), expected, atol=atol, rtol=rtol, msg=lambda m: f"{dtype}: {m}")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gradients_match_plain_pytorch_autograd(device, case):
    """fp64: d(sum(weights * out)) for the features, the offsets and the mask, against autograd through the plain
    evaluation."""
    seed, shape, k, scale, size, sr, gamma, std, modulated = case
    x64, rois64, off64, mask64 = make_case(seed, *shape, k, scale, *size, offset_std=std, modulated=modulated)
    weights = torch.randn(k, shape[1], *size, generator=torch.Generator().manual_seed(seed + 50), dtype=torch.float64)
    x, off, mask = (_to(t, device, torch.float64, True) for t in (x64, off64, mask64))
    (_run(x, rois64.to(device), off, mask, list(size), scale, sr, gamma) * weights.to(device)).sum().backward()
    xr, offr, maskr = (_to(t, "cpu", torch.float64, True) for t in (x64, off64, mask64))
    (torch_deform_roi_pool(xr, rois64, offr, maskr, size, scale, sr, gamma) * weights).sum().backward()
    pairs = [("input", x, xr), ("offset", off, offr)] + ([("mask", mask, maskr)] if modulated else [])
    for name, ours, ref in pairs:
        torch.testing.assert_close(ours.grad.cpu(), ref.grad, atol=1e-10, rtol=1e-10, msg=lambda m: f"{name}: {m}")
    assert off.grad.abs().sum() > 0 and x.grad.abs().sum() > 0  # the case exercises both


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_zero_or_no_offset_is_roi_align_bit_for_bit(device, dtype):
    x64, rois64, _, _ = make_case(11, 2, 3, 12, 15, 8, 0.25, 7, 7)
    x, rois = x64.to(device, dtype), rois64.to(device, dtype)
    zero = torch.zeros(8, 2, 7, 7, device=device, dtype=dtype)
    for sr in (0, 2):
        expected = torch.ops.detops.roi_align(x, rois, 0.25, 7, 7, sr, True)
        assert torch.equal(deform_roi_pool(x, rois, None, [7, 7], 0.25, sr), expected)
        assert torch.equal(deform_roi_pool(x, rois, zero, [7, 7], 0.25, sr), expected)
        # gamma 0 ignores any offset; a mask of ones changes nothing.
        assert torch.equal(deform_roi_pool(x, rois, torch.ones_like(zero), [7, 7], 0.25, sr, 0.0), expected)
        ones = torch.ones(8, 1, 7, 7, device=device, dtype=dtype)
        assert torch.equal(modulated_deform_roi_pool(x, rois, None, ones, [7, 7], 0.25, sr), expected)


@pytest.mark.parametrize("device", devices())
def test_no_offset_matches_torchvision_roi_align(device):
    torchvision = pytest.importorskip("torchvision", reason="torchvision is the spec of roi_align; not installed")
    x64, rois64, _, _ = make_case(12, 2, 3, 12, 15, 8, 0.25, 7, 7)
    for dtype in (torch.float64, torch.float32):
        x, rois = x64.to(device, dtype), rois64.to(device, dtype)
        ours = deform_roi_pool(x, rois, None, 7, 0.25, 2)
        theirs = torchvision.ops.roi_align(x, rois, 7, 0.25, 2, aligned=True)
        atol, rtol = TOL[dtype]
        torch.testing.assert_close(ours, theirs, atol=atol, rtol=rtol)


@pytest.mark.parametrize("device", devices())
def test_gradcheck_fp64(device):
    x64, rois64, off64, mask64 = make_case(21, 2, 2, 7, 8, 4, 0.5, 2, 3, offset_std=0.3, modulated=True)
    x, off, mask = (_to(t, device, torch.float64, True) for t in (x64, off64, mask64))
    rois = rois64.to(device)
    assert torch.autograd.gradcheck(lambda a, o: deform_roi_pool(a, rois, o, [2, 3], 0.5, 2), (x, off),
                                    eps=1e-6, atol=1e-5, rtol=1e-3)
    assert torch.autograd.gradcheck(lambda a, o, m: modulated_deform_roi_pool(a, rois, o, m, [2, 3], 0.5, 0, 0.2),
                                    (x, off, mask), eps=1e-6, atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_reduced_precision_gradients(device, dtype):
    """Gradients come back in the input's dtype, accumulated in fp32: against fp64 on the same rounded values."""
    x64, rois64, off64, mask64 = make_case(41, 2, 3, 10, 12, 6, 0.25, 7, 7, modulated=True)
    x, rois, off, mask = _to(x64, device, dtype, True), rois64.to(device, dtype), _to(off64, device, dtype, True), \
        _to(mask64, device, dtype, True)
    modulated_deform_roi_pool(x, rois, off, mask, 7, 0.25).sum().backward()
    assert x.grad.dtype == off.grad.dtype == mask.grad.dtype == dtype
    xr, offr, maskr = (t.detach().double().requires_grad_() for t in (x, off, mask))
    modulated_deform_roi_pool(xr, rois.double(), offr, maskr, 7, 0.25).sum().backward()
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(x.grad.double(), xr.grad, atol=atol, rtol=rtol)
    torch.testing.assert_close(mask.grad.double(), maskr.grad, atol=atol, rtol=rtol)
    # The offset gradient sums C * samples slopes of either sign, scaled by gamma * roi size: relative to its
    # largest element.
    scale = max(offr.grad.abs().max().item(), 1.0)
    torch.testing.assert_close(off.grad.double(), offr.grad, atol=atol * scale, rtol=rtol)


@pytest.mark.parametrize("device", devices())
def test_offsets_far_off_the_map_and_nan_offsets_give_zero(device):
    x64, rois64, off64, _ = make_case(31, 2, 3, 8, 9, 6, 0.5, 2, 2)
    x, rois = _to(x64, device, torch.float32, True), rois64.to(device, torch.float32)
    far = torch.full((6, 2, 2, 2), 1e4, device=device).requires_grad_()  # every bin 1e3 rois away
    out = deform_roi_pool(x, rois, far, 2, 0.5)
    assert torch.all(out == 0)
    out.sum().backward()
    assert torch.all(x.grad == 0) and torch.all(far.grad == 0)
    nan_off = off64.to(device, torch.float32).clone()
    nan_off.view(-1)[::3] = float("nan")
    x.grad = None
    nan_off.requires_grad_()
    out = deform_roi_pool(x, rois, nan_off, 2, 0.5)
    hit = torch.isnan(nan_off.detach()).any(1, keepdim=True).expand_as(out)  # the bins with a NaN offset
    assert torch.all(out[hit] == 0) and torch.isfinite(out).all()
    expected = torch_deform_roi_pool(x64.float().double(), rois64.float().double(),
                                     nan_off.detach().double().cpu(), None, (2, 2), 0.5)
    torch.testing.assert_close(out.double().cpu(), expected, atol=1e-5, rtol=1e-5)
    out.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(nan_off.grad).all()


@pytest.mark.parametrize("device", devices())
def test_any_batch_size_and_no_rois(device):
    for n in (1, 3, 40):
        x64, rois64, off64, _ = make_case(50 + n, n, 2, 6, 7, 9, 1.0, 2, 2)
        out = deform_roi_pool(x64.to(device), rois64.to(device), off64.to(device), 2)
        torch.testing.assert_close(out.cpu(), torch_deform_roi_pool(x64, rois64, off64, None, (2, 2)),
                                   atol=1e-10, rtol=1e-10)
    x = torch.rand(2, 3, 6, 7, dtype=torch.float64, device=device, requires_grad=True)
    off = torch.zeros(0, 2, 4, 4, dtype=torch.float64, device=device, requires_grad=True)
    out = deform_roi_pool(x, torch.zeros(0, 5, dtype=torch.float64, device=device), off, 4)
    assert out.shape == (0, 3, 4, 4)
    out.sum().backward()
    assert torch.all(x.grad == 0) and off.grad.shape == (0, 2, 4, 4)


@pytest.mark.parametrize("device", devices())
def test_noncontiguous_inputs_stride0_grad_and_repeated_backward(device):
    x64, rois64, off64, mask64 = make_case(61, 2, 3, 10, 12, 8, 0.5, 4, 3, modulated=True)
    xt = x64.transpose(2, 3).contiguous().transpose(2, 3).to(device).requires_grad_()  # W-major strides
    offt = off64.transpose(2, 3).contiguous().transpose(2, 3).to(device).requires_grad_()
    maskt = mask64.transpose(2, 3).contiguous().transpose(2, 3).to(device).requires_grad_()
    rd = rois64.to(device)
    rt = torch.cat([rd, rd], 1)[:, :5]  # row stride 10
    assert not (xt.is_contiguous() or offt.is_contiguous() or maskt.is_contiguous() or rt.is_contiguous())
    xc, offc, maskc = (_to(t, device, torch.float64, True) for t in (x64, off64, mask64))
    out_t = modulated_deform_roi_pool(xt, rt, offt, maskt, [4, 3], 0.5)
    out_c = modulated_deform_roi_pool(xc, rd, offc, maskc, [4, 3], 0.5)
    assert torch.equal(out_t, out_c)
    out_t.sum().backward(retain_graph=True)  # a stride-0 grad_output
    out_c.sum().backward(retain_graph=True)
    first = [t.grad.clone() for t in (xt, offt, maskt)]
    for a, b in zip(first, (xc.grad, offc.grad, maskc.grad)):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)  # CUDA: atomics in any order
    out_t.sum().backward()  # repeated backward accumulates the same gradients again
    for a, t in zip(first, (xt, offt, maskt)):
        torch.testing.assert_close(t.grad, 2 * a, atol=1e-12, rtol=1e-12)
    # The backward op with a non-contiguous grad.
    grad = torch.randn(4, 3, 8, 3, dtype=torch.float64).to(device).permute(2, 3, 0, 1)
    assert not grad.is_contiguous()
    got = torch.ops.detops._deform_roi_pool_backward(grad, xt.detach(), rt, offt.detach(), maskt.detach(), [4, 3],
                                                     0.5, 0, 0.1)
    want = torch.ops.detops._deform_roi_pool_backward(grad.contiguous(), xc.detach(), rd, offc.detach(),
                                                      maskc.detach(), [4, 3], 0.5, 0, 0.1)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("device", devices())
def test_only_requested_gradients(device):
    x64, rois64, off64, mask64 = make_case(71, 1, 2, 6, 7, 3, 1.0, 2, 2, modulated=True)
    rois = rois64.to(device)
    for wants in ((True, False, False), (False, True, False), (False, False, True)):
        x, off, mask = (_to(t, device, torch.float64, w) for t, w in zip((x64, off64, mask64), wants))
        modulated_deform_roi_pool(x, rois, off, mask, 2).sum().backward()
        assert [t.grad is not None for t in (x, off, mask)] == list(wants)
    x = _to(x64, device, torch.float64, True)
    deform_roi_pool(x, rois, None, 2).sum().backward()  # no offset: the input's gradient only
    assert x.grad is not None
    # No offset, a mask that wants its gradient (autograd numbers only the tensors given: the mask comes second).
    mask, maskr = _to(mask64, device, torch.float64, True), mask64.clone().requires_grad_()
    modulated_deform_roi_pool(x64.to(device), rois, None, mask, 2).sum().backward()
    torch_deform_roi_pool(x64, rois64, None, maskr, (2, 2)).sum().backward()
    torch.testing.assert_close(mask.grad.cpu(), maskr.grad, atol=1e-12, rtol=1e-12)


def test_double_backward_is_refused():
    x64, rois64, off64, _ = make_case(81, 1, 1, 5, 6, 2, 1.0, 2, 2)
    x, off = x64.clone().requires_grad_(), off64.clone().requires_grad_()
    out = deform_roi_pool(x, rois64, off, 2)
    (gx, go) = torch.autograd.grad((out * out).sum(), (x, off), create_graph=True)
    with pytest.raises(RuntimeError, match="double backward is not supported"):
        go.sum().backward()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CPU backward is deterministic")
def test_cuda_backward_refuses_deterministic_mode():
    x64, rois64, off64, _ = make_case(82, 1, 2, 6, 7, 3, 1.0, 2, 2)
    x, off = _to(x64, "cuda", torch.float32, True), _to(off64, "cuda", torch.float32, True)
    out = deform_roi_pool(x, rois64.cuda().float(), off, 2)
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.raises(RuntimeError, match="_deform_roi_pool_backward"):
            out.sum().backward()
    finally:
        torch.use_deterministic_algorithms(False)


def test_cpu_and_cuda_agree():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the CUDA path cannot run here")
    for seed, shape, k, scale, size, sr, gamma, std, modulated in CASES:
        x64, rois64, off64, mask64 = make_case(seed, *shape, k, scale, *size, offset_std=std, modulated=modulated)
        weights = torch.randn(k, shape[1], *size, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        for dtype in ALL_DTYPES:
            results = {}
            for device in ("cpu", "cuda"):
                x, off, mask = (_to(t, device, dtype, True) for t in (x64, off64, mask64))
                out = _run(x, rois64.to(device, dtype), off, mask, list(size), scale, sr, gamma)
                (out * weights.to(device, dtype)).sum().backward()
                results[device] = [t.detach().cpu().double() for t in (out, x.grad, off.grad)]
            atol, rtol = TOL[dtype]
            for name, a, b in zip(("output", "grad_input", "grad_offset"), results["cpu"], results["cuda"]):
                # Summed in other orders (CUDA: atomics) and rounded once; grad_offset sums signed terms.
                size_ = max(1.0, b.abs().max().item()) if name == "grad_offset" else 1.0
                torch.testing.assert_close(a, b, atol=atol * size_, rtol=rtol, msg=lambda m: f"{name} {dtype}: {m}")


def test_meta_shapes():
    x = torch.empty(2, 5, 13, 17, device="meta")
    rois = torch.empty(11, 5, device="meta")
    off = torch.empty(11, 2, 7, 3, device="meta")
    mask = torch.empty(11, 1, 7, 3, device="meta")
    assert deform_roi_pool(x, rois, off, [7, 3], 0.25).shape == (11, 5, 7, 3)
    assert deform_roi_pool(x, rois, None, 7).shape == (11, 5, 7, 7)
    assert modulated_deform_roi_pool(x, rois, off, mask, [7, 3]).shape == (11, 5, 7, 3)
    grad = torch.empty(11, 5, 7, 3, device="meta")
    gi, go, gm = torch.ops.detops._deform_roi_pool_backward(grad, x, rois, off, mask, [7, 3], 0.25, 0, 0.1)
    assert (gi.shape, go.shape, gm.shape) == ((2, 5, 13, 17), (11, 2, 7, 3), (11, 1, 7, 3))
    with pytest.raises(ValueError, match=r"offset must have shape \[11, 2, 7, 3\]"):
        deform_roi_pool(x, rois, mask, [7, 3])
    with pytest.raises(ValueError, match="mask must be a tensor"):
        modulated_deform_roi_pool(x, rois, off, None, [7, 3])


@pytest.mark.parametrize("device", devices())
def test_bad_input_raises_and_process_stays_usable(device):
    x64, rois64, off64, _ = make_case(91, 2, 3, 8, 8, 4, 1.0, 2, 2)
    x, rois, off = x64.float().to(device), rois64.float().to(device), off64.float().to(device)
    bad = rois.clone()
    bad[2, 0] = 5
    with pytest.raises(IndexError, match=r"rois\[2, 0\] = 5 is not a batch index"):
        deform_roi_pool(x, bad, off, 2)
    bad[2, 0] = float("nan")
    with pytest.raises(IndexError, match=r"rois\[2, 0\]"):
        deform_roi_pool(x, bad, None, 2)
    # Mixed precision (mmcv: "expected Half but found Float") is refused, naming both arguments.
    with pytest.raises(TypeError, match=r"offset dtype \(Float\) must match input dtype \(Half\)"):
        deform_roi_pool(x.half(), rois.half(), off, 2)
    with pytest.raises(TypeError, match=r"mask dtype \(Float\) must match input dtype \(BFloat16\)"):
        modulated_deform_roi_pool(x.bfloat16(), rois.bfloat16(), None, torch.ones(4, 1, 2, 2, device=device), 2)
    with pytest.raises(ValueError, match=r"offset must have shape \[4, 2, 2, 2\]"):
        deform_roi_pool(x, rois, off[:, :, :1], 2)
    with pytest.raises(ValueError, match=r"mask must have shape \[4, 1, 2, 2\]"):
        modulated_deform_roi_pool(x, rois, off, off, 2)
    with pytest.raises(ValueError, match="mask must be a tensor"):
        modulated_deform_roi_pool(x, rois, off, None, 2)
    with pytest.raises(RuntimeError, match="rois must be a 2-D tensor"):
        deform_roi_pool(x, rois[:, :4], None, 2)
    with pytest.raises(IndexError, match="input must be a 4-D tensor"):
        deform_roi_pool(x[0], rois, None, 2)
    with pytest.raises(NotImplementedError, match="input must be float64, float32, float16 or bfloat16"):
        deform_roi_pool(x.int(), rois.int(), None, 2)
    with pytest.raises(RuntimeError, match="rois dtype"):
        deform_roi_pool(x, rois.double(), None, 2)
    with pytest.raises(ValueError, match="output_size must be one int or two ints"):
        deform_roi_pool(x, rois, None, [2, 2, 2])
    with pytest.raises(ValueError, match="sampling_ratio must be <= 1024"):
        deform_roi_pool(x, rois, None, 2, 1.0, 1025)
    with pytest.raises(ValueError, match="gamma must be a finite number"):
        deform_roi_pool(x, rois, off, 2, 1.0, 0, float("inf"))
    for scale in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="spatial_scale must be a positive finite number"):
            deform_roi_pool(x, rois, None, 2, scale)
    with pytest.raises(TypeError, match="input dtype"):
        torch.ops.detops._deform_roi_pool_backward(torch.ones(4, 3, 2, 2, device=device), x.double(), rois, None,
                                                   None, [2, 2], 1.0, 0, 0.1)
    out = deform_roi_pool(x, rois, off, 2)
    expected = torch_deform_roi_pool(x64.float().double(), rois64.float().double(), off64.float().double(), None,
                                     (2, 2))
    torch.testing.assert_close(out.cpu().double(), expected, atol=1e-5, rtol=1e-5)


def test_opcheck():
    x64, rois64, off64, mask64 = make_case(92, 2, 3, 8, 9, 4, 0.5, 2, 3, modulated=True)
    x, off, mask = (t.clone().requires_grad_() for t in (x64, off64, mask64))
    torch.library.opcheck(torch.ops.detops.deform_roi_pool.default, (x, rois64, off, [2, 3], 0.5, 2, 0.1))
    torch.library.opcheck(torch.ops.detops.deform_roi_pool.default, (x, rois64, None, [2, 3], 0.5, 0, 0.1))
    torch.library.opcheck(torch.ops.detops.modulated_deform_roi_pool.default, (x, rois64, off, mask, [2, 3], 0.5))


def test_python_wrappers_and_modules():
    from detops import ops
    x64, rois64, off64, mask64 = make_case(93, 2, 4, 8, 9, 5, 0.5, 2, 3, modulated=True)
    assert torch.equal(ops.deform_roi_pool(x64, rois64, off64, (2, 3), 0.5), deform_roi_pool(x64, rois64, off64,
                                                                                          [2, 3], 0.5))
    assert torch.equal(ops.modulated_deform_roi_pool(x64, rois64, off64, mask64, (2, 3), 0.5),
                       modulated_deform_roi_pool(x64, rois64, off64, mask64, [2, 3], 0.5))
    boxes = [rois64[rois64[:, 0] == i, 1:] for i in range(2)]  # a list of per-image boxes, as torchvision takes
    ordered = torch.cat([rois64[rois64[:, 0] == i] for i in range(2)])
    assert torch.equal(ops.deform_roi_pool(x64, boxes, None, 2), deform_roi_pool(x64, ordered, None, 2))
    with pytest.raises(AssertionError, match=r"Tensor\[K, 5\]"):
        ops.deform_roi_pool(x64, rois64[:, :4], None, 2)
    pool = ops.DeformRoIPool((2, 3), 0.5, 2)
    assert torch.equal(pool(x64, rois64, off64), deform_roi_pool(x64, rois64, off64, [2, 3], 0.5, 2))
    # The packs start as RoI Align (zero offsets) and, modulated, times a mask of sigmoid(0) = 0.5; their state
    # dicts have mmcv's keys.
    pack = ops.DeformRoIPoolPack((2, 3), 4, 16, 0.5).double()
    expected = torch.ops.detops.roi_align(x64, rois64, 0.5, 2, 3, 0, True)
    assert torch.equal(pack(x64, rois64), expected)
    mpack = ops.ModulatedDeformRoIPoolPack((2, 3), 4, 16, 0.5).double()
    assert torch.equal(mpack(x64, rois64), expected * 0.5)
    assert {"offset_fc.4.weight", "mask_fc.2.bias"} <= set(mpack.state_dict())
    x = x64.clone().requires_grad_()
    mpack(x, rois64).sum().backward()
    assert x.grad.abs().sum() > 0 and mpack.offset_fc[4].weight.grad is not None
