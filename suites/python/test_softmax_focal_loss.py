"""torch.ops.detops.softmax_focal_loss against mmcv.ops.softmax_focal_loss's formula, written here in plain PyTorch
(mmcv is not a dependency): its forward (SoftmaxFocalLossFunction.forward and softmax_focal_loss_forward_cuda_kernel)
and its backward (softmax_focal_loss_backward_cuda1/2_kernel). In every dtype the truth is the formula in fp64 on
our (rounded) inputs; gradients: torch.autograd.gradcheck in fp64, autograd of the formula, and mmcv's
hand-written backward. Where mmcv's formula breaks (fp16 logits far apart, -log p beyond 87.3 in fp32) the truth is
the exact log-softmax form, and the test shows mmcv's value beside it. See docs/ops/softmax_focal_loss.md.
"""
import math
import zlib

import pytest
import torch

from conftest import devices

detops = torch.ops.detops
DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
# (atol, rtol) per dtype, as in the C++ harness table.
TOL = {torch.float64: (1e-10, 1e-10), torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 2e-3), torch.bfloat16: (8e-3, 1.6e-2)}
FLT_MIN = 1.1754943508222875e-38


def _reduce(loss, n, reduction):
    if reduction == "mean":
        return loss.sum() / n
    return loss.sum() if reduction == "sum" else loss


def mmcv_formula(input, target, gamma=2.0, alpha=0.25, weight=None, reduction="mean"):
    """mmcv's forward: softmax with the row maximum subtracted, in input's dtype; for target[n] >= 0,
    loss[n] = -alpha (1 - p_t)^gamma log(max(p_t, FLT_MIN)) * weight[target[n]]; target[n] < 0 gives 0 (mmcv then
    multiplies by weight[target[n]], read out of bounds; here 0 stays 0); 'mean' divides the sum by N."""
    n = input.shape[0]
    z = input - input.max(dim=1, keepdim=True).values.detach()
    p = z.exp()
    p = p / p.sum(dim=1, keepdim=True)
    valid = target >= 0
    t = target.clamp(min=0)
    pt = p.gather(1, t[:, None])[:, 0]
    floor = torch.tensor(FLT_MIN, dtype=input.dtype)  # 0 in fp16: mmcv's (T)FLT_MIN
    loss = -alpha * (1 - pt) ** gamma * torch.log(torch.maximum(pt, floor.to(input.device)))
    if weight is not None:
        loss = loss * weight[t]
    loss = torch.where(valid, loss, torch.zeros_like(loss))
    return _reduce(loss, n, reduction)


def exact_formula(input, target, gamma=2.0, alpha=0.25, weight=None, reduction="mean"):
    """The definition without mmcv's clamp and rounding: log p_t from log_softmax, 1 - p_t = -expm1(log p_t)."""
    n = input.shape[0]
    valid = target >= 0
    t = target.clamp(min=0)
    logp = torch.log_softmax(input, dim=1).gather(1, t[:, None])[:, 0]
    loss = -alpha * (-torch.expm1(logp)) ** gamma * logp
    if weight is not None:
        loss = loss * weight[t]
    loss = torch.where(valid, loss, torch.zeros_like(loss))
    return _reduce(loss, n, reduction)


def mmcv_backward(input, target, grad_output, gamma=2.0, alpha=0.25, weight=None, reduction="mean"):
    """mmcv's hand-written backward, per row: buff[n] = alpha (-(1 - p)^gamma + gamma (1 - p)^(gamma - 1) p
    log(max(p, FLT_MIN))) * weight[t]; grad_input[n, c] = buff[n] (delta(c, t) - p_c), times the upstream gradient
    (/ N for 'mean'). For 'none' the upstream gradient of row n scales row n (mmcv's own 'none' backward multiplies
    [N, C] by [N], which broadcasts over the classes: wrong, or an error when N != C)."""
    n, c = input.shape
    p = torch.softmax(input, dim=1)
    valid = target >= 0
    t = target.clamp(min=0)
    pt = p.gather(1, t[:, None])[:, 0]
    buff = alpha * (-(1 - pt) ** gamma + gamma * (1 - pt) ** (gamma - 1) * pt * torch.log(pt.clamp(min=FLT_MIN)))
    if weight is not None:
        buff = buff * weight[t]
    buff = torch.where(valid, buff, torch.zeros_like(buff))
    flag = torch.nn.functional.one_hot(t, c).to(input.dtype)
    grad = buff[:, None] * (flag - p)
    up = grad_output[:, None] if reduction == "none" else grad_output
    return grad * up / (n if reduction == "mean" else 1)


def logits(g, n, c, kind="normal"):
    if kind == "large":
        return torch.rand(n, c, generator=g, dtype=torch.float64) * 60 - 30
    return torch.randn(n, c, generator=g, dtype=torch.float64) * 2


def targets(g, n, c, ignored=0.0):
    t = torch.randint(0, c, (n,), generator=g)
    return torch.where(torch.rand(n, generator=g) < ignored, torch.full_like(t, -1), t)


CONFIGS = [
    # (N, C, weighted, ignored fraction, gamma, alpha)
    (12, 5, False, 0.0, 2.0, 0.25),
    (12, 5, True, 0.0, 2.0, 0.25),
    (30, 1, True, 0.0, 2.0, 0.25),
    (20, 2, False, 0.2, 1.0, 0.5),
    (64, 81, True, 0.25, 2.0, 0.25),
    (6, 1204, False, 0.0, 2.0, 0.25),
    (3, 2100, True, 0.0, 2.0, 0.25),
    (10, 4, False, 0.0, 0.0, 1.0),
    (10, 7, True, 0.3, 5.0, 0.75),
    (10, 7, False, 0.0, 0.5, -0.5),
]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"N{c[0]}-C{c[1]}-w{int(c[2])}-ign{c[3]}-g{c[4]}-a{c[5]}")
def test_matches_mmcv_formula(device, reduction, cfg):
    n, c, weighted, ignored, gamma, alpha = cfg
    g = torch.Generator().manual_seed(zlib.crc32(repr((cfg, reduction)).encode()))
    x64, target = logits(g, n, c), targets(g, n, c, ignored)
    w64 = torch.rand(c, generator=g, dtype=torch.float64) * 1.5 + 0.25 if weighted else None
    up = torch.randn(n if reduction == "none" else (), generator=g, dtype=torch.float64)
    for dtype in DTYPES:
        x = x64.to(device, dtype).requires_grad_()
        w = w64.to(device, dtype) if weighted else None
        xp = x.detach().double().cpu().requires_grad_()
        wp = w.double().cpu() if weighted else None
        ours = detops.softmax_focal_loss(x, target.to(device), gamma, alpha, w, reduction)
        truth = mmcv_formula(xp, target, gamma, alpha, wp, reduction)
        where = f"{cfg} {reduction} {dtype} {device}"
        assert ours.dtype == dtype and ours.shape == truth.shape, where
        atol, rtol = TOL[dtype]
        torch.testing.assert_close(ours.detach().double().cpu(), truth.detach(), atol=atol, rtol=rtol,
                                   msg=lambda m: f"forward {where}: {m}")
        (grad,) = torch.autograd.grad(ours, x, up.to(device, dtype))
        (truth_grad,) = torch.autograd.grad(truth, xp, up)
        assert grad.dtype == dtype and grad.shape == (n, c)
        torch.testing.assert_close(grad.double().cpu(), truth_grad, atol=atol, rtol=rtol,
                                   msg=lambda m: f"d/dinput {where}: {m}")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_gradient_is_mmcv_backward_formula(device, reduction):
    """Our fused backward equals mmcv's two backward kernels (buff, then buff * (flag - softmax)), with the
    upstream gradient of row n applied to row n for 'none'."""
    g = torch.Generator().manual_seed(31)
    x = logits(g, 40, 9).to(device).requires_grad_()
    target = targets(g, 40, 9, ignored=0.2).to(device)
    w = (torch.rand(9, generator=g, dtype=torch.float64) + 0.5).to(device)
    up = torch.randn(40 if reduction == "none" else (), generator=g, dtype=torch.float64).to(device)
    for gamma, alpha in ((2.0, 0.25), (0.0, 0.25), (1.5, 0.6), (5.0, 1.0)):
        (ours,) = torch.autograd.grad(detops.softmax_focal_loss(x, target, gamma, alpha, w, reduction), x, up)
        theirs = mmcv_backward(x.detach(), target, up, gamma, alpha, w, reduction)
        torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_huge_logits_stay_finite_in_half_precision(device, dtype):
    """|x| = 1e4: p_t rounds to 0 or 1. mmcv's fp16 formula (softmax in fp16, log(max(p, (half)FLT_MIN)) with
    (half)FLT_MIN = 0) gives inf; ours computes log-softmax in fp32 and matches the exact loss alpha * (gap)."""
    x64 = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 5e3], [0.0, 0.0, 1e4], [1e4, 1e4, -1e4]], dtype=torch.float64)
    target = torch.tensor([1, 1, 0, 2])
    x = x64.to(device, dtype).requires_grad_()
    ours = detops.softmax_focal_loss(x, target.to(device), 2.0, 0.25, None, "none")
    (grad,) = torch.autograd.grad(ours.sum(), x)
    assert torch.isfinite(ours).all() and torch.isfinite(grad).all(), (ours, grad)
    xr = x.detach().double().cpu().requires_grad_()
    truth = exact_formula(xr, target, reduction="none")
    (truth_grad,) = torch.autograd.grad(truth.sum(), xr)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(ours.detach().double().cpu(), truth.detach(), atol=atol, rtol=rtol)
    torch.testing.assert_close(grad.double().cpu(), truth_grad, atol=atol, rtol=rtol)
    gap = (xr[0, 0] - xr[0, 1]).item()  # row 0: the target logit 2e4 (bf16: 19968) below the maximum
    assert ours[0].item() == pytest.approx(0.25 * gap, rel=TOL[dtype][1])
    if dtype == torch.float16:
        mmcv16 = mmcv_formula(x64.half(), target, reduction="none")
        assert math.isinf(mmcv16[0].item()), mmcv16


def test_no_saturation_at_flt_min_in_fp32():
    """mmcv clamps p_t at FLT_MIN, so its -log p_t stops at 87.3 in fp32 (a logit gap of 200 gives alpha * 87.3);
    ours is the exact alpha * 200, in fp32 and fp64 alike."""
    x = torch.tensor([[0.0, 200.0]])
    target = torch.tensor([0])
    for dtype in (torch.float32, torch.float64):
        ours = detops.softmax_focal_loss(x.to(dtype), target, 2.0, 0.25, None, "sum")
        assert ours.item() == pytest.approx(0.25 * 200.0, rel=1e-6)
    assert mmcv_formula(x, target, reduction="sum").item() == pytest.approx(-0.25 * math.log(FLT_MIN), rel=1e-6)


@pytest.mark.parametrize("device", devices())
def test_large_logits_match_exact_formula(device):
    """Logit gaps up to 60 (p_t from about 1 down to e^-60), every dtype, against the exact (log-softmax) form."""
    g = torch.Generator().manual_seed(3)
    x64 = logits(g, 24, 16, "large")
    target = torch.cat([x64[:8].argmax(1), x64[8:16].argmin(1), torch.randint(0, 16, (8,), generator=g)])
    for dtype in DTYPES:
        for gamma in (2.0, 1.0, 5.0):
            x = x64.to(device, dtype).requires_grad_()
            ours = detops.softmax_focal_loss(x, target.to(device), gamma, 0.25, None, "none")
            xr = x.detach().double().cpu().requires_grad_()
            truth = exact_formula(xr, target, gamma, reduction="none")
            atol, rtol = TOL[dtype]
            torch.testing.assert_close(ours.detach().double().cpu(), truth.detach(), atol=atol, rtol=rtol)
            (grad,) = torch.autograd.grad(ours.sum(), x)
            (truth_grad,) = torch.autograd.grad(truth.sum(), xr)
            torch.testing.assert_close(grad.double().cpu(), truth_grad, atol=atol, rtol=rtol)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_long_half_precision_sums_accumulate_in_fp32(device, dtype):
    g = torch.Generator().manual_seed(11)
    x64, target = logits(g, 20000, 10), targets(g, 20000, 10)
    x = x64.to(device, dtype)
    for reduction in ("mean", "sum"):
        truth = mmcv_formula(x.double().cpu(), target, reduction=reduction)
        ours = detops.softmax_focal_loss(x, target.to(device), reduction=reduction)
        torch.testing.assert_close(ours.double().cpu(), truth, atol=TOL[dtype][0], rtol=TOL[dtype][1])


@pytest.mark.parametrize("device", devices())
def test_gradcheck_fp64(device):
    g = torch.Generator().manual_seed(17)
    x = logits(g, 6, 5).to(device).requires_grad_()
    target = torch.tensor([0, 4, -1, 2, 2, 1], device=device)
    w = torch.rand(5, generator=g, dtype=torch.float64).to(device)
    for reduction in ("none", "mean", "sum"):
        for gamma, alpha, weight in ((2.0, 0.25, None), (0.5, 0.25, w), (0.0, 0.7, w), (5.0, -0.5, None)):
            assert torch.autograd.gradcheck(
                lambda a: detops.softmax_focal_loss(a, target, gamma, alpha, weight, reduction), (x,),
                eps=1e-6, atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("device", devices())
def test_ignored_rows(device):
    """A negative target (any negative value, as mmcv's `label >= 0` test) gives loss 0 and gradient 0, the row still
    counts in 'mean''s N, and weight[target] is not read for it (the last weight is NaN here)."""
    g = torch.Generator().manual_seed(19)
    x = logits(g, 5, 3).to(device).requires_grad_()
    target = torch.tensor([0, -1, 1, -7, 0], device=device)
    w = torch.tensor([1.0, 2.0, float("nan")], dtype=torch.float64, device=device)
    none = detops.softmax_focal_loss(x, target, 2.0, 0.25, w, "none")
    assert torch.isfinite(none).all() and none[1].item() == 0.0 and none[3].item() == 0.0
    mean = detops.softmax_focal_loss(x, target, 2.0, 0.25, w, "mean")
    torch.testing.assert_close(mean, none.sum() / 5)
    (grad,) = torch.autograd.grad(mean, x)
    assert torch.isfinite(grad).all() and (grad[1] == 0).all() and (grad[3] == 0).all()
    assert (grad[0] != 0).all()
    everything_ignored = torch.full((5,), -1, device=device)
    assert detops.softmax_focal_loss(x, everything_ignored, reduction="sum").item() == 0.0


def test_one_class_gives_zero():
    """C = 1: p_t = 1, so the loss and its gradient are 0 (no 0 * inf, for gamma < 1 too)."""
    x = torch.randn(7, 1, dtype=torch.float64, requires_grad=True)
    target = torch.zeros(7, dtype=torch.long)
    for gamma in (2.0, 0.5, 0.0):
        loss = detops.softmax_focal_loss(x, target, gamma, 0.25, None, "none")
        (grad,) = torch.autograd.grad(loss.sum(), x)
        assert (loss == 0).all() and (grad == 0).all(), (gamma, loss, grad)


@pytest.mark.parametrize("device", devices())
def test_stride0_and_noncontiguous(device):
    g = torch.Generator().manual_seed(5)
    x64, target = logits(g, 13, 9), targets(g, 13, 9, ignored=0.2)
    x = x64.t().contiguous().t().to(device).requires_grad_()  # non-contiguous
    xp = x64.clone().requires_grad_()
    detops.softmax_focal_loss(x, target.to(device), reduction="none").sum().backward()  # stride-0 grad_output
    mmcv_formula(xp, target, reduction="none").sum().backward()
    torch.testing.assert_close(x.grad.cpu(), xp.grad, atol=1e-10, rtol=1e-10)


def test_target_and_weight_get_no_gradient():
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    w = torch.rand(3, dtype=torch.float64, requires_grad=True)
    gx, gw = torch.autograd.grad(detops.softmax_focal_loss(x, torch.tensor([0, 1, 2, 0]), weight=w), (x, w),
                                 allow_unused=True)
    assert gx is not None and gw is None


def test_double_backward_is_refused_clearly():
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(detops.softmax_focal_loss(x, torch.tensor([0, 1, 2, 0])), x, create_graph=True)
    with pytest.raises(RuntimeError, match="softmax_focal_loss: double backward is not supported"):
        gx.sum().backward()


def test_errors():
    x = torch.randn(2, 3)
    with pytest.raises(IndexError, match=r"target\[1\] = 3 is not a class index: expected a value in \[0, 3\)"):
        detops.softmax_focal_loss(x, torch.tensor([0, 3]))
    with pytest.raises(IndexError, match=r"target\[0\] = 9"):
        detops.softmax_focal_loss(x, torch.tensor([9, -1]), reduction="none")
    with pytest.raises(TypeError, match="target must be an int64 tensor"):
        detops.softmax_focal_loss(x, torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"target must have shape \[2\]"):
        detops.softmax_focal_loss(x, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"weight must have shape \[3\]"):
        detops.softmax_focal_loss(x, torch.tensor([0, 1]), 2.0, 0.25, torch.ones(4))
    with pytest.raises(TypeError, match="weight dtype"):
        detops.softmax_focal_loss(x, torch.tensor([0, 1]), 2.0, 0.25, torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"input must be a 2-D tensor \[N, C\]"):
        detops.softmax_focal_loss(x.view(-1), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"at least one class"):
        detops.softmax_focal_loss(torch.empty(2, 0), torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="input must be float64, float32, float16 or bfloat16"):
        detops.softmax_focal_loss(x.long(), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="Invalid Value for arg 'reduction': 'batchmean'"):
        detops.softmax_focal_loss(x, torch.tensor([0, 1]), reduction="batchmean")
    with pytest.raises(ValueError, match="gamma must be finite"):
        detops.softmax_focal_loss(x, torch.tensor([0, 1]), float("inf"))
    with pytest.raises(ValueError, match="alpha must be finite"):
        detops.softmax_focal_loss(x, torch.tensor([0, 1]), 2.0, float("nan"))
    # Still usable afterwards.
    torch.testing.assert_close(detops.softmax_focal_loss(x, torch.tensor([0, 1])),
                               mmcv_formula(x, torch.tensor([0, 1])))


def test_empty_rows():
    e = torch.empty(0, 80, requires_grad=True)
    t = torch.empty(0, dtype=torch.long)
    assert math.isnan(detops.softmax_focal_loss(e, t).item())  # mmcv: sum / 0
    assert detops.softmax_focal_loss(e, t, reduction="sum").item() == 0.0
    none = detops.softmax_focal_loss(e, t, reduction="none")
    assert none.shape == (0,)
    (grad,) = torch.autograd.grad(detops.softmax_focal_loss(e, t, reduction="sum"), e)
    assert grad.shape == (0, 80)


def test_meta_tensors_give_shapes():
    x = torch.empty(7, 81, device="meta")
    t = torch.empty(7, dtype=torch.long, device="meta")
    assert detops.softmax_focal_loss(x, t).shape == ()
    out = detops.softmax_focal_loss(x, t, reduction="none")
    assert out.shape == (7,) and out.device.type == "meta"
    with pytest.raises(ValueError, match="reduction"):
        detops.softmax_focal_loss(x, t, reduction="bogus")
    with pytest.raises(ValueError, match="target must have shape"):
        detops.softmax_focal_loss(x, t[:3])


def test_defaults_and_the_python_function():
    """mmcv's argument order and defaults (gamma=2.0, alpha=0.25, weight=None, reduction='mean'), also through
    detops.ops.softmax_focal_loss."""
    from detops.ops import softmax_focal_loss

    g = torch.Generator().manual_seed(4)
    x, target = logits(g, 8, 6), targets(g, 8, 6)
    torch.testing.assert_close(detops.softmax_focal_loss(x, target), mmcv_formula(x, target))
    torch.testing.assert_close(softmax_focal_loss(x, target), mmcv_formula(x, target))
    w = torch.rand(6, generator=g, dtype=torch.float64)
    torch.testing.assert_close(
        softmax_focal_loss(input=x, target=target, gamma=1.0, alpha=0.5, weight=w, reduction="sum"),
        mmcv_formula(x, target, 1.0, 0.5, w, "sum"))


def test_gamma_zero_is_alpha_times_cross_entropy():
    g = torch.Generator().manual_seed(8)
    x, target = logits(g, 16, 11), targets(g, 16, 11, ignored=0.25)
    ce = torch.nn.functional.cross_entropy(x, target, ignore_index=-1, reduction="sum")
    torch.testing.assert_close(detops.softmax_focal_loss(x, target, 0.0, 0.3, None, "sum"), 0.3 * ce)
