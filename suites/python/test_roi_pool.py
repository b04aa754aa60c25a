"""torch.ops.detops.roi_pool against torchvision's roi_pool on the same inputs.

RoIPool selects values, so outputs and argmax must agree exactly, not within a tolerance. Bin edges are
computed in the accumulation type: fp64 for fp64, fp32 for fp32, fp16 and bf16. So fp64 and fp32 are
compared with torchvision in the same dtype, and fp16/bf16 with torchvision fp32 on the same rounded
inputs: torchvision has no bf16 kernel, and its fp16 kernel computes the bin edges in fp16. (torchvision
fp64 is not the target for the half types: its fp64 bin edges differ from its fp32 ones for some roi
sizes, see test_bin_edges_follow_torchvision_in_each_dtype.)

The default starts each bin's max at -FLT_MAX, as torchvision does (bins of NaN or -inf only give -FLT_MAX,
argmax -1); exact_max=True, DetOps's option, takes the true maximum. Both are pinned below.
"""
import math

import pytest
import torch

from conftest import devices

torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed: no peer to compare against")
tv_roi_pool = torch.ops.torchvision.roi_pool  # (input, rois, spatial_scale, ph, pw) -> (output, argmax)

ALL_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def peer_dtype(dtype):
    return dtype if dtype in (torch.float64, torch.float32) else torch.float32


def make_features(g, n, c, h, w, kind="distinct"):
    """Each H x W plane: a seeded permutation of evenly spaced values, spacing max(2/(HW-1), 1e-3), plus a
    per-plane offset, so values within a bin differ by >= 1e-3 (no kinks for gradcheck)."""
    hw = h * w
    spacing = max(2 / (hw - 1), 1e-3) if hw > 1 else 1.0
    planes = [(torch.randperm(hw, generator=g).double() - (hw - 1) / 2) * spacing
              + (torch.rand(1, generator=g, dtype=torch.float64) * 2 - 1) for _ in range(n * c)]
    x = torch.stack(planes).view(n, c, h, w)
    if kind == "negative":
        x = x - x.max() - 0.25
    elif kind == "ties":
        x = torch.floor(torch.rand(n, c, h, w, generator=g, dtype=torch.float64) * 3) - 1
    return x


def make_rois(g, n, h, w, k, scale):
    """Random rois in image coordinates: mostly inside, a quarter partly outside, some degenerate."""
    img_h, img_w = h / scale, w / scale
    u = torch.rand(k, 4, generator=g, dtype=torch.float64)
    x1, y1 = u[:, 0] * img_w * 1.1 - 0.2 * img_w, u[:, 1] * img_h * 1.1 - 0.2 * img_h
    x2, y2 = x1 + 1 + u[:, 2] * img_w * 0.6, y1 + 1 + u[:, 3] * img_h * 0.6
    x2[::7], x1[::7] = x1[::7].clone(), x2[::7].clone()  # degenerate: x2 < x1
    b = torch.randint(0, n, (k,), generator=g).to(torch.float64)
    return torch.stack([b, x1, y1, x2, y2], 1)


CASES = [
    # seed, (n, c, h, w), k, scale, (ph, pw), features
    (1, (2, 3, 20, 24), 17, 0.25, (7, 7), "distinct"),
    (2, (2, 3, 20, 24), 17, 1.0, (7, 7), "distinct"),
    (3, (1, 4, 25, 42), 9, 1 / 32, (14, 14), "distinct"),
    (4, (3, 2, 13, 21), 30, 1 / 16, (1, 1), "distinct"),
    (5, (2, 5, 50, 84), 40, 1 / 8, (7, 7), "distinct"),
    (6, (2, 3, 9, 9), 0, 0.5, (3, 3), "distinct"),
    (7, (2, 3, 16, 16), 12, 0.25, (3, 5), "ties"),
    (8, (2, 3, 16, 16), 12, 0.5, (7, 7), "negative"),
    (9, (1, 2, 1, 1), 5, 1 / 16, (7, 7), "distinct"),
]


def _run(op, x, rois, scale, pooled):
    return op(x, rois, scale, pooled[0], pooled[1])


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("case", CASES, ids=[f"case{c[0]}" for c in CASES])
def test_forward_and_backward_match_torchvision(device, case):
    seed, shape, k, scale, pooled, kind = case
    g = torch.Generator().manual_seed(seed)
    x64 = make_features(g, *shape, kind)
    rois64 = make_rois(g, shape[0], shape[2], shape[3], k, scale)
    for dtype in ALL_DTYPES:
        x, rois = x64.to(device, dtype, copy=True).requires_grad_(), rois64.to(device, dtype)
        xp = x.detach().to(peer_dtype(dtype)).requires_grad_()
        rp = rois.to(peer_dtype(dtype))
        out, argmax = _run(torch.ops.detops.roi_pool, x, rois, scale, pooled)
        tv_out, tv_argmax = _run(tv_roi_pool, xp, rp, scale, pooled)
        where = f"{dtype} {device} vs torchvision {peer_dtype(dtype)}"
        assert out.dtype == dtype and argmax.dtype == torch.int32, where
        assert torch.equal(argmax, tv_argmax), f"argmax {where}"
        assert torch.equal(out.to(peer_dtype(dtype)), tv_out), f"output {where}"

        # .sum().backward(): a stride-0 grad_output of ones, so every gradient element is a count of the
        # bins whose max it is: exact in every dtype and summation order.
        out.sum().backward(retain_graph=True)
        tv_out.sum().backward(retain_graph=True)
        assert torch.equal(x.grad.to(peer_dtype(dtype)), xp.grad), f"grad of sum {where}"

        # A random grad_output: sums in a different order on CUDA (atomics).
        w = torch.randn(out.shape, generator=g, dtype=torch.float64).to(device)
        x.grad, xp.grad = None, None
        (out * w.to(dtype)).sum().backward()
        (tv_out * w.to(dtype).to(peer_dtype(dtype))).sum().backward()
        tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
        torch.testing.assert_close(x.grad.to(peer_dtype(dtype)), xp.grad, atol=tol, rtol=tol,
                                   msg=lambda m: f"grad {where}: {m}")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("roi_height,extra_row_in", [(29, torch.float64), (57, torch.float32)])
def test_bin_edges_follow_torchvision_in_each_dtype(device, roi_height, extra_row_in):
    """pooled 7: in fp64, 7 * fl64(29/7) > 29, so the last bin of a 29-row roi ends at row 30; in fp32,
    7 * fl32(57/7) > 57. torchvision fp32 and fp64 disagree there; each of ours agrees with its own."""
    x = torch.zeros(1, 1, 64, 4, dtype=torch.float64)
    x[0, 0, roi_height, 2] = 10.0  # one row below the roi: only an overlong last bin sees it
    rois = torch.tensor([[0, 0, 0, 3, roi_height - 1]], dtype=torch.float64)
    results = {}
    for dtype in (torch.float64, torch.float32):
        tv_out, tv_argmax = tv_roi_pool(x.to(dtype), rois.to(dtype), 1.0, 7, 1)
        results[dtype] = tv_argmax[0, 0, 6, 0].item()
        out, argmax = torch.ops.detops.roi_pool(x.to(device, dtype), rois.to(device, dtype), 1.0, 7, 1)
        assert torch.equal(argmax.cpu(), tv_argmax) and torch.equal(out.cpu(), tv_out), dtype
    assert results[extra_row_in] == roi_height * 4 + 2, "the case lost its point: no overlong last bin"
    assert results[torch.float64] != results[torch.float32]
    for dtype in (torch.float16, torch.bfloat16):  # bin edges in fp32
        _, argmax = torch.ops.detops.roi_pool(x.to(device, dtype), rois.to(device, dtype), 1.0, 7, 1)
        assert argmax[0, 0, 6, 0].item() == results[torch.float32], dtype


@pytest.mark.parametrize("device", devices())
def test_gradcheck_fp64(device):
    g = torch.Generator().manual_seed(11)
    x = make_features(g, 2, 2, 9, 10).to(device).requires_grad_()
    rois = make_rois(g, 2, 9, 10, 6, 0.5).to(device)
    assert torch.autograd.gradcheck(lambda t: torch.ops.detops.roi_pool(t, rois, 0.5, 3, 2)[0], (x,),
                                    eps=1e-6, atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_ties_keep_the_first_maximum(device, dtype):
    x = torch.full((1, 2, 6, 7), 0.5, dtype=dtype, device=device)
    x[0, 1] = -3.0  # negatives only: the max is -3, not 0
    rois = torch.tensor([[0, 1, 2, 6, 5]], dtype=dtype, device=device)  # rows [2, 6) x columns [1, 7)
    out, argmax = torch.ops.detops.roi_pool(x, rois, 1.0, 2, 3)
    first = torch.tensor([[2 * 7 + 1, 2 * 7 + 3, 2 * 7 + 5], [4 * 7 + 1, 4 * 7 + 3, 4 * 7 + 5]], dtype=torch.int32)
    assert torch.equal(argmax[0, 0].cpu(), first) and torch.equal(argmax[0, 1].cpu(), first)
    assert torch.all(out[0, 0] == 0.5) and torch.all(out[0, 1] == -3.0)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_ties_created_by_half_rounding_keep_the_first(device, dtype):
    # 100 + i/1000 are distinct in fp64 but collapse to a few values in fp16 (step 1/16) and to 100 in bf16.
    g = torch.Generator().manual_seed(3)
    x64 = (100 + torch.randperm(48, generator=g).double() / 1000).view(1, 1, 6, 8)
    rois = torch.tensor([[0, 0, 0, 7, 5]], dtype=torch.float64)
    out, argmax = torch.ops.detops.roi_pool(x64.to(device, dtype), rois.to(device, dtype), 1.0, 2, 2)
    tv_out, tv_argmax = tv_roi_pool(x64.to(dtype).float(), rois.float(), 1.0, 2, 2)
    assert torch.equal(argmax.cpu(), tv_argmax) and torch.equal(out.cpu().float(), tv_out)
    rounded = x64.to(dtype).double()[0, 0]
    for i in range(2):
        for j in range(2):
            a = argmax[0, 0, i, j].item()
            block = rounded[3 * i:3 * i + 3, 4 * j:4 * j + 4]
            first = (block == block.max()).nonzero()[0]  # row-major first maximum
            assert a == (3 * i + first[0].item()) * 8 + 4 * j + first[1].item()


FLT_MAX = torch.finfo(torch.float32).max
NAN, INF = float("nan"), float("inf")

# One 4 x 8 plane whose 1 x 2 bins (roi [0, 0, 0, 7, 3] pooled 4 x 4) are, row by row:
#   row 0: NaN only | -inf only | NaN and -inf | below -FLT_MAX (fp64; -inf in the other dtypes)
#   row 1: exactly -FLT_MAX (-inf in fp16 / bf16) | -FLT_MAX and below | NaN then -2 | -inf then -3
#   row 2: -1e300 then -4 | 5 then NaN | NaN then -FLT_MAX | 6 and 6 (a tie: the first)
#   row 3: -FLT_MAX then -1e300 | -inf then NaN | 1 then -inf | NaN then 7
SPECIAL_PLANE = [[NAN, NAN, -INF, -INF, NAN, -INF, -1e300, -2e300],
                 [-FLT_MAX, -FLT_MAX, -FLT_MAX, -1e301, NAN, -2.0, -INF, -3.0],
                 [-1e300, -4.0, 5.0, NAN, NAN, -FLT_MAX, 6.0, 6.0],
                 [-FLT_MAX, -1e300, -INF, NAN, 1.0, -INF, NAN, 7.0]]
SPECIAL_ROI = [[0, 0, 0, 7, 3]]


def _special_inputs(dtype, device):
    x = torch.tensor(SPECIAL_PLANE, dtype=torch.float64).view(1, 1, 4, 8).to(device, dtype)
    return x, torch.tensor(SPECIAL_ROI, dtype=torch.float64).to(device, dtype)


def _random_special_inputs(g, dtype, device):
    """Planes of NaN, -inf, -FLT_MAX, -1e300 and a few ordinary values, random rois pooled 3 x 3: bins of every
    kind above, and mixed ones, at random."""
    choices = torch.tensor([NAN, -INF, -FLT_MAX, -1e300, 0.0], dtype=torch.float64)
    pick = torch.randint(0, 5, (2, 3, 9, 11), generator=g)
    x = choices[pick]
    ordinary = pick == 4
    x[ordinary] = torch.randn(int(ordinary.sum()), generator=g, dtype=torch.float64)
    rois = make_rois(g, 2, 9, 11, 20, 1.0)
    return x.to(device, dtype), rois.to(device, dtype)


def _tv_in(dtype, exact_geometry):
    """The dtype torchvision runs in for a DetOps dtype: the same, except bf16 (torchvision has no kernel) and fp16
    where bin edges are not exact in fp16 (torchvision computes them in fp16, DetOps in fp32): fp32 then, its
    output and gradient rounded to the dtype (-FLT_MAX to -inf, as torchvision's fp16 kernel stores it)."""
    if dtype == torch.bfloat16 or (dtype == torch.float16 and not exact_geometry):
        return torch.float32
    return dtype


def _forward_backward(op, x, rois, pooled, weights, **kw):
    """(output, argmax, gradient of sum(output * weights)) of op on a copy of x."""
    x = x.detach().clone().requires_grad_()
    out, argmax = op(x, rois, 1.0, pooled[0], pooled[1], **kw)
    (grad,) = torch.autograd.grad(out, x, weights.to(out.dtype))
    return out, argmax, grad


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("inputs", ["special_plane", "random"])
def test_default_is_torchvision_for_bins_without_a_value_above_minus_flt_max(device, dtype, inputs):
    """torchvision starts a bin's max at -FLT_MAX (argmax -1) and takes strictly greater values only: bins of NaN
    only, -inf only, values at or below -FLT_MAX give -FLT_MAX (-inf in fp16) with argmax -1 and no gradient.
    The default gives exactly that: output, argmax and the gradient (small integer weights, so every sum is
    exact in every dtype), against torchvision on the CPU (see _tv_in for fp16 and bf16)."""
    g = torch.Generator().manual_seed(21)
    if inputs == "special_plane":
        x, rois = _special_inputs(dtype, device)
        pooled = (4, 4)
    else:
        x, rois = _random_special_inputs(g, dtype, device)
        pooled = (3, 3)
    weights = torch.randint(1, 4, (rois.shape[0], x.shape[1], *pooled), generator=g).double()
    out, argmax, grad = _forward_backward(torch.ops.detops.roi_pool, x, rois, pooled, weights.to(device))
    tv = _tv_in(dtype, exact_geometry=inputs == "special_plane")  # bins of 1 x 2 pixels: exact in fp16
    tv_out, tv_argmax, tv_grad = _forward_backward(tv_roi_pool, x.cpu().to(tv), rois.cpu().to(tv), pooled, weights)
    assert torch.equal(argmax.cpu(), tv_argmax)
    torch.testing.assert_close(out.cpu(), tv_out.to(dtype), atol=0, rtol=0, equal_nan=True)
    torch.testing.assert_close(grad.cpu(), tv_grad.to(dtype), atol=0, rtol=0)
    assert not bool(torch.isnan(out).any())  # torchvision's start: never NaN
    if inputs == "special_plane":
        lowest = -FLT_MAX if dtype in (torch.float64, torch.float32) else -INF
        want = torch.tensor([[lowest, lowest, lowest, lowest], [lowest, lowest, -2, -3],
                             [-4, 5, lowest, 6], [lowest, lowest, 1, 7]], dtype=torch.float64)
        want_argmax = [[-1, -1, -1, -1], [-1, -1, 13, 15], [17, 18, -1, 22], [-1, -1, 28, 31]]
        assert argmax[0, 0].tolist() == want_argmax
        assert torch.equal(out[0, 0].cpu().double(), want)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_exact_max_takes_the_true_maximum(device, dtype):
    """exact_max=True: the largest non-NaN value at its first position (-inf and fp64 values below -FLT_MAX
    included); a bin of NaNs only gives NaN with argmax -1. Mixed bins agree with the default. The gradient goes
    to each argmax (a gradient of weights 1, 2, 4, ... per bin: every element's sum names its bins)."""
    x, rois = _special_inputs(dtype, device)
    below = -1e300 if dtype == torch.float64 else -INF  # -1e300 rounds to -inf outside fp64
    at_flt_max = -FLT_MAX if dtype in (torch.float64, torch.float32) else -INF
    want = torch.tensor([[NAN, -INF, -INF, below], [at_flt_max, at_flt_max, -2, -3],
                         [-4, 5, at_flt_max, 6], [at_flt_max, -INF, 1, 7]], dtype=torch.float64)
    # The same positions in every dtype: outside fp64, -1e300 and -1e301 round to -inf and -FLT_MAX (bins (1, 1),
    # (3, 0)) still wins; in fp16 / bf16 -FLT_MAX is -inf too, and the tie keeps the first.
    want_argmax = [[-1, 2, 5, 6], [8, 10, 13, 15], [17, 18, 21, 22], [24, 26, 28, 31]]
    weights = (2.0 ** torch.arange(16, dtype=torch.float64)).view(1, 1, 4, 4)
    out, argmax, grad = _forward_backward(torch.ops.detops.roi_pool, x, rois, (4, 4), weights.to(device),
                                          exact_max=True)
    assert argmax[0, 0].tolist() == want_argmax
    torch.testing.assert_close(out[0, 0].cpu().double(), want, atol=0, rtol=0, equal_nan=True)
    want_grad = torch.zeros(32, dtype=torch.float64)
    for b, a in enumerate(sum(want_argmax, [])):
        if a >= 0:
            want_grad[a] += 2.0 ** b
    if dtype in (torch.float16, torch.bfloat16):
        want_grad = want_grad.to(dtype).double()  # 2^15 is exact; the sums here are single terms
    assert torch.equal(grad.cpu().double().flatten(), want_grad)
    # Bins with a value above -FLT_MAX: the same as the default.
    default, default_argmax = torch.ops.detops.roi_pool(x, rois, 1.0, 4, 4)
    has_value = default_argmax >= 0
    assert torch.equal(argmax[has_value], default_argmax[has_value])
    assert torch.equal(out[has_value], default[has_value])


@pytest.mark.parametrize("device", devices())
def test_nan_and_infinite_coordinates(device):
    nan, inf = float("nan"), float("inf")
    g = torch.Generator().manual_seed(5)
    x = make_features(g, 1, 2, 6, 7).to(device)
    rois = torch.tensor([[0, nan, 0, 3, 3], [0, 0, 0, 3, nan], [0, -inf, -inf, inf, inf], [0, -1e30, 2, 1e30, 2]],
                        dtype=torch.float64, device=device)
    out, argmax = torch.ops.detops.roi_pool(x, rois, 0.5, 1, 1)
    assert torch.all(out[:2] == 0) and torch.all(argmax[:2] == -1)  # NaN coordinates: empty bins
    flat = x.view(2, -1)
    assert torch.equal(out[2].flatten(), flat.max(1).values)  # infinite roi: the whole map
    assert torch.equal(argmax[2].flatten().long(), flat.argmax(1))
    assert torch.equal(out[3].flatten(), x[0, :, 1, :].max(1).values)  # row round(2 * 0.5) = 1


@pytest.mark.parametrize("device", devices())
def test_more_than_65535_rois(device):
    g = torch.Generator().manual_seed(7)
    x = make_features(g, 2, 1, 6, 7)
    rois = make_rois(g, 2, 6, 7, 70000, 0.25)
    out, argmax = torch.ops.detops.roi_pool(x.to(device, torch.float32), rois.to(device, torch.float32), 0.25, 2, 2)
    tv_out, tv_argmax = tv_roi_pool(x.float(), rois.float(), 0.25, 2, 2)
    assert torch.equal(argmax.cpu(), tv_argmax) and torch.equal(out.cpu(), tv_out)


@pytest.mark.parametrize("device", devices())
def test_noncontiguous_input_and_backward_op(device):
    g = torch.Generator().manual_seed(9)
    x = make_features(g, 2, 3, 10, 12).to(device)
    rois = make_rois(g, 2, 10, 12, 8, 0.5).to(device)
    xt = x.transpose(2, 3).contiguous().transpose(2, 3)  # same values, W-major strides
    out, argmax = torch.ops.detops.roi_pool(xt, rois, 0.5, 4, 3)
    ref_out, ref_argmax = torch.ops.detops.roi_pool(x, rois, 0.5, 4, 3)
    assert torch.equal(out, ref_out) and torch.equal(argmax, ref_argmax)
    # The backward op on its own, with a non-contiguous grad, against torchvision's with the same argmax.
    grad = torch.randn(4, 3, 8, 3, generator=g, dtype=torch.float64).to(device).permute(2, 3, 0, 1)
    ours = torch.ops.detops._roi_pool_backward(grad, rois, argmax, 0.5, 4, 3, 2, 3, 10, 12)
    theirs = torch.ops.torchvision._roi_pool_backward(grad.cpu(), rois.cpu(), argmax.cpu(), 0.5, 4, 3, 2, 3, 10, 12)
    torch.testing.assert_close(ours.cpu(), theirs, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("device", devices())
def test_bad_input_raises_and_process_stays_usable(device):
    g = torch.Generator().manual_seed(12)
    x = make_features(g, 2, 3, 8, 8).float().to(device)
    rois = make_rois(g, 2, 8, 8, 4, 1.0).float().to(device)
    with pytest.raises(RuntimeError, match="rois must be a 2-D tensor"):
        torch.ops.detops.roi_pool(x, rois[:, :4], 1.0, 2, 2)
    bad = rois.clone()
    bad[2, 0] = 5
    with pytest.raises(IndexError, match=r"rois\[2, 0\]"):
        torch.ops.detops.roi_pool(x, bad, 1.0, 2, 2)
    with pytest.raises(RuntimeError, match="pooled_height must be non-negative"):
        torch.ops.detops.roi_pool(x, rois, 1.0, -1, 2)
    out, argmax = torch.ops.detops.roi_pool(x, rois, 1.0, 2, 2)
    grad = torch.ones_like(out)
    with pytest.raises(RuntimeError, match="argmax must be int32"):
        torch.ops.detops._roi_pool_backward(grad, rois, argmax.long(), 1.0, 2, 2, 2, 3, 8, 8)
    bad_argmax = argmax.clone()
    bad_argmax[1, 2, 0, 1] = 64
    with pytest.raises(IndexError, match=r"argmax\[1, 2, 0, 1\] = 64"):
        torch.ops.detops._roi_pool_backward(grad, rois, bad_argmax, 1.0, 2, 2, 2, 3, 8, 8)
    with pytest.raises(ValueError, match="height \\* width must be at most 2147483647"):
        torch.ops.detops.roi_pool(x[:, :1, :1, :1].expand(2, 1, 65536, 32768), rois, 1.0, 2, 2)
    out2, argmax2 = torch.ops.detops.roi_pool(x, rois, 1.0, 2, 2)
    tv_out, tv_argmax = tv_roi_pool(x.cpu(), rois.cpu(), 1.0, 2, 2)
    assert torch.equal(out2.cpu(), tv_out) and torch.equal(argmax2.cpu(), tv_argmax)


def test_argmax_is_int32_and_not_differentiable():
    g = torch.Generator().manual_seed(13)
    x = make_features(g, 1, 2, 6, 7).requires_grad_()
    rois = make_rois(g, 1, 6, 7, 3, 0.5)
    out, argmax = torch.ops.detops.roi_pool(x, rois, 0.5, 2, 2)
    assert argmax.dtype == torch.int32 and not argmax.requires_grad and out.requires_grad


def test_double_backward_is_refused_clearly():
    g = torch.Generator().manual_seed(14)
    x = make_features(g, 1, 2, 6, 7).requires_grad_()
    rois = make_rois(g, 1, 6, 7, 3, 0.5)
    out, _ = torch.ops.detops.roi_pool(x, rois, 0.5, 2, 2)
    (gx,) = torch.autograd.grad((out * out).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward is not supported"):
        gx.sum().backward()


def test_meta_tensors_give_shapes():
    x = torch.empty(2, 3, 10, 12, device="meta")
    rois = torch.empty(5, 5, device="meta")
    out, argmax = torch.ops.detops.roi_pool(x, rois, 0.25, 7, 6)
    assert out.shape == argmax.shape == (5, 3, 7, 6) and argmax.dtype == torch.int32 and out.device.type == "meta"
    gi = torch.ops.detops._roi_pool_backward(torch.empty(5, 3, 7, 6, device="meta"), rois, argmax, 0.25, 7, 6,
                                             2, 3, 10, 12)
    assert gi.shape == (2, 3, 10, 12)
