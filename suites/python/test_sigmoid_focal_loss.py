"""torch.ops.detops.sigmoid_focal_loss against torchvision.ops.sigmoid_focal_loss, and
torch.ops.detops.sigmoid_focal_loss_mmcv against mmcv's formula written here in plain PyTorch (mmcv is not a
dependency). In every dtype the truth is the peer's formula in fp64 on our (rounded) inputs; in fp32 and fp64
ours must also match torchvision run in the same dtype. Gradients: torch.autograd.gradcheck in fp64, and the
peer's autograd gradient. See docs/ops/sigmoid_focal_loss.md.
"""
import math
import zlib

import pytest
import torch

from conftest import devices

torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed: no peer to compare against")
from torchvision.ops import sigmoid_focal_loss as tv_focal  # noqa: E402

detops = torch.ops.detops
DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
# (atol, rtol) per dtype, as in the C++ harness table.
TOL = {torch.float64: (1e-10, 1e-10), torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 2e-3), torch.bfloat16: (8e-3, 1.6e-2)}
FLT_MIN = 1.1754943508222875e-38


def mmcv_focal(input, target, gamma=2.0, alpha=0.25, weight=None, reduction="mean"):
    """mmcv.ops.sigmoid_focal_loss's formula (sigmoid_focal_loss_forward_cuda_kernel and its Python wrapper):
    class target[n] is the positive of row n, C is background; log(max(p, FLT_MIN)); loss *= weight[target[n]];
    'mean' divides the sum by N. Background rows get weight 1 here (mmcv reads weight[C], out of bounds)."""
    n, c = input.shape
    p = torch.sigmoid(input)
    pos = torch.nn.functional.one_hot(target, c + 1)[:, :c].to(input.dtype)
    term_p = (1 - p) ** gamma * torch.log(torch.clamp(p, min=FLT_MIN))
    term_n = p ** gamma * torch.log(torch.clamp(1 - p, min=FLT_MIN))
    loss = -pos * alpha * term_p - (1 - pos) * (1 - alpha) * term_n
    if weight is not None:
        w = torch.cat([weight, weight.new_ones(1)])[target]
        loss = loss * w[:, None]
    if reduction == "mean":
        return loss.sum() / n
    return loss.sum() if reduction == "sum" else loss


def logits(g, shape, kind="normal"):
    if kind == "large":
        x = torch.rand(shape, generator=g, dtype=torch.float64) * 60 - 30
        flat = x.view(-1)
        exact = [30.0, -30.0, 9.39, -9.39, 20.0, -20.0]
        flat[: min(len(exact), flat.numel())] = torch.tensor(exact[: flat.numel()], dtype=torch.float64)
        return x
    return torch.randn(shape, generator=g, dtype=torch.float64) * 2


def targets(g, shape, kind="binary"):
    if kind == "fractional":
        return torch.rand(shape, generator=g, dtype=torch.float64)
    return (torch.rand(shape, generator=g, dtype=torch.float64) < 0.3).double()


CONFIGS = [
    # (shape, alpha, gamma, logit kind, target kind)
    ((17,), 0.25, 2.0, "normal", "binary"),
    ((), 0.25, 2.0, "normal", "binary"),
    ((6, 80), 0.25, 2.0, "normal", "binary"),
    ((2, 3, 5, 7), -1.0, 2.0, "normal", "binary"),
    ((40,), 0.0, 0.5, "normal", "binary"),
    ((40,), 1.0, 5.0, "normal", "binary"),
    ((40,), 0.5, 0.0, "normal", "fractional"),
    ((9, 11), 0.25, 2.0, "normal", "fractional"),
    ((8, 16), 0.25, 2.0, "large", "binary"),
    ((8, 16), -1.0, 0.5, "large", "fractional"),
]


def assert_loss_and_grad_close(ours, truth, x, xp, g, where):
    """ours (in x's dtype and device) against the fp64 CPU truth, and d/dx of both for one seeded random
    grad_output; returns the dtype's (atol, rtol)."""
    dtype = x.dtype
    assert ours.dtype == dtype and ours.shape == truth.shape, where
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(ours.detach().double().cpu(), truth.detach(), atol=atol, rtol=rtol,
                               msg=lambda m: f"forward {where}: {m}")
    up = torch.randn(truth.shape, generator=g, dtype=torch.float64)
    (grad,) = torch.autograd.grad(ours, x, up.to(x.device, dtype))
    (truth_grad,) = torch.autograd.grad(truth, xp, up)
    assert grad.dtype == dtype
    torch.testing.assert_close(grad.double().cpu(), truth_grad, atol=atol, rtol=rtol,
                               msg=lambda m: f"d/dinputs {where}: {m}")
    return atol, rtol


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{'x'.join(map(str, c[0])) or 'scalar'}-a{c[1]}-g{c[2]}-{c[3]}-{c[4]}")
def test_matches_torchvision(device, reduction, cfg):
    shape, alpha, gamma, lk, tk = cfg
    g = torch.Generator().manual_seed(zlib.crc32(repr((cfg, reduction)).encode()))
    x64, t64 = logits(g, shape, lk), targets(g, shape, tk)
    for dtype in DTYPES:
        x = x64.to(device, dtype).requires_grad_()
        t = t64.to(device, dtype)
        xp = x.detach().double().cpu().requires_grad_()
        tp = t.detach().double().cpu()
        ours = detops.sigmoid_focal_loss(x, t, alpha, gamma, reduction)
        truth = tv_focal(xp, tp, alpha, gamma, reduction)
        where = f"{shape} alpha={alpha} gamma={gamma} {lk} {tk} {reduction} {dtype} {device}"
        assert torch.isfinite(ours).all(), f"non-finite loss: {where}"
        atol, rtol = assert_loss_and_grad_close(ours, truth, x, xp, g, where)
        if dtype in (torch.float32, torch.float64) and lk == "normal":
            same = tv_focal(x.detach(), t, alpha, gamma, reduction)
            torch.testing.assert_close(ours.detach(), same, atol=atol, rtol=rtol)


@pytest.mark.parametrize("device", devices())
def test_large_logits_stay_finite_in_half_precision(device):
    """OPS.md: mmcv returns NaN for logit 9.39 in fp16 (log(1 - p) once p rounds to 1). Ours computes log-sigmoid
    forms in fp32, so every loss and gradient is finite and matches the fp64 truth."""
    x64 = torch.tensor([9.39, -9.39, 12.0, -12.0, 17.0, 30.0, -30.0], dtype=torch.float64)
    for dtype in (torch.float16, torch.bfloat16):
        x = x64.to(device, dtype)
        assert torch.sigmoid(x.float()).to(dtype)[0].item() == 1.0 or dtype == torch.bfloat16
        for t in (torch.zeros_like(x), torch.ones_like(x)):
            xr = x.detach().requires_grad_()
            loss = detops.sigmoid_focal_loss(xr, t, 0.25, 2.0, "none")
            (grad,) = torch.autograd.grad(loss.sum(), xr)
            assert torch.isfinite(loss).all() and torch.isfinite(grad).all(), (dtype, t)
            truth = tv_focal(x.double().cpu(), t.double().cpu(), 0.25, 2.0)
            atol, rtol = TOL[dtype]
            torch.testing.assert_close(loss.double().cpu(), truth, atol=atol, rtol=rtol)
        weight = torch.ones(7, device=device, dtype=dtype)
        out = detops.sigmoid_focal_loss_mmcv(x.view(1, 7), torch.tensor([7], device=device), 2.0, 0.25, weight, "none")
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_long_half_precision_sums_accumulate_in_fp32(device, dtype):
    g = torch.Generator().manual_seed(11)
    x64, t64 = logits(g, (150000,)), targets(g, (150000,))
    x, t = x64.to(device, dtype), t64.to(device, dtype)
    truth = tv_focal(x.double().cpu(), t.double().cpu(), reduction="mean")
    ours = detops.sigmoid_focal_loss(x, t, reduction="mean")
    torch.testing.assert_close(ours.double().cpu(), truth, atol=TOL[dtype][0], rtol=TOL[dtype][1])


@pytest.mark.parametrize("device", devices())
def test_gradcheck_fp64(device):
    g = torch.Generator().manual_seed(17)
    x = logits(g, (4, 6)).to(device).requires_grad_()
    t = targets(g, (4, 6), "fractional").to(device)
    for reduction in ("none", "mean", "sum"):
        for alpha, gamma in ((0.25, 2.0), (-1.0, 0.5), (0.7, 5.0)):
            assert torch.autograd.gradcheck(lambda a: detops.sigmoid_focal_loss(a, t, alpha, gamma, reduction), (x,),
                                            eps=1e-6, atol=1e-5, rtol=1e-3)
    tgt = torch.tensor([0, 3, 5, 2], device=device)  # 5 = background (C = 5)
    xm = logits(g, (4, 5)).to(device).requires_grad_()
    w = torch.rand(5, generator=g, dtype=torch.float64).to(device)
    for reduction in ("none", "mean", "sum"):
        assert torch.autograd.gradcheck(lambda a: detops.sigmoid_focal_loss_mmcv(a, tgt, 2.0, 0.25, w, reduction), (xm,),
                                        eps=1e-6, atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("device", devices())
def test_stride0_and_noncontiguous(device):
    g = torch.Generator().manual_seed(5)
    x64, t64 = logits(g, (9, 13)), targets(g, (9, 13))
    x = x64.t().to(device).requires_grad_()  # non-contiguous
    xp = x64.t().clone().requires_grad_()
    detops.sigmoid_focal_loss(x, t64.t().to(device)).sum().backward()  # stride-0 grad_output
    tv_focal(xp, t64.t()).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), xp.grad, atol=1e-10, rtol=1e-10)


def test_targets_get_no_gradient():
    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    t = torch.rand(6, dtype=torch.float64, requires_grad=True)
    gx, gt = torch.autograd.grad(detops.sigmoid_focal_loss(x, t, reduction="sum"), (x, t), allow_unused=True)
    assert gx is not None and gt is None


def test_double_backward_is_refused_clearly():
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    t = torch.rand(5, dtype=torch.float64)
    (gx,) = torch.autograd.grad(detops.sigmoid_focal_loss(x, t, reduction="sum"), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward is not supported"):
        gx.sum().backward()


def test_errors_match_torchvision_types():
    x, t = torch.randn(3, 4), torch.rand(3, 4)
    for bad in (1.5, -0.5):
        with pytest.raises(ValueError, match="Invalid alpha value"):
            tv_focal(x, t, alpha=bad)
        with pytest.raises(ValueError, match="Invalid alpha value"):
            detops.sigmoid_focal_loss(x, t, bad)
    with pytest.raises(ValueError, match="Invalid Value for arg 'reduction'"):
        tv_focal(x, t, reduction="avg")
    with pytest.raises(ValueError, match="Invalid Value for arg 'reduction': 'avg'"):
        detops.sigmoid_focal_loss(x, t, reduction="avg")
    with pytest.raises(ValueError, match=r"targets must have the shape of inputs \[3, 4\]; got \[4, 3\]"):
        detops.sigmoid_focal_loss(x, t.t().contiguous())
    # Integer targets: torchvision raises RuntimeError (the loss cannot be cast to them); integer logits:
    # NotImplementedError (no log_sigmoid kernel). DetOps raises the same types, naming the argument.
    for ints in (torch.long, torch.int32):
        with pytest.raises(RuntimeError):
            tv_focal(x, t.to(ints))
        with pytest.raises(RuntimeError, match="targets must be a floating-point tensor"):
            detops.sigmoid_focal_loss(x, t.to(ints))
    with pytest.raises(NotImplementedError):
        tv_focal(x.long(), t.long())
    with pytest.raises(NotImplementedError, match="inputs must be float64, float32, float16 or bfloat16"):
        detops.sigmoid_focal_loss(x.long(), t)
    with pytest.raises(ValueError, match="gamma"):
        detops.sigmoid_focal_loss(x, t, 0.25, float("inf"))
    # Still usable afterwards.
    torch.testing.assert_close(detops.sigmoid_focal_loss(x, t), tv_focal(x, t))


def test_mmcv_errors():
    x = torch.randn(2, 3)
    with pytest.raises(IndexError, match=r"target\[1\] = 4 is not a class index: expected a value in \[0, 3\]"):
        detops.sigmoid_focal_loss_mmcv(x, torch.tensor([0, 4]))
    with pytest.raises(IndexError, match=r"target\[0\] = -1"):
        detops.sigmoid_focal_loss_mmcv(x, torch.tensor([-1, 0]))
    with pytest.raises(TypeError, match="target must be an int64 tensor"):
        detops.sigmoid_focal_loss_mmcv(x, torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"weight must have shape \[3\]"):
        detops.sigmoid_focal_loss_mmcv(x, torch.tensor([0, 1]), 2.0, 0.25, torch.ones(4))
    with pytest.raises(ValueError, match=r"input must be a 2-D tensor \[N, C\]"):
        detops.sigmoid_focal_loss_mmcv(x.view(-1), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="Invalid Value for arg 'reduction'"):
        detops.sigmoid_focal_loss_mmcv(x, torch.tensor([0, 1]), reduction="batchmean")


def test_defaults_match_torchvision_signature():
    g = torch.Generator().manual_seed(4)
    x, t = logits(g, (5, 3)), targets(g, (5, 3))
    torch.testing.assert_close(detops.sigmoid_focal_loss(x, t), tv_focal(x, t))
    torch.testing.assert_close(detops.sigmoid_focal_loss(x, t, reduction="mean"), tv_focal(x, t, reduction="mean"))
    torch.testing.assert_close(detops.sigmoid_focal_loss(inputs=x, targets=t, alpha=-1, gamma=1, reduction="sum"),
                               tv_focal(x, t, alpha=-1, gamma=1, reduction="sum"))


def test_empty_reductions_match_torchvision():
    e = torch.empty(0, 80)
    assert math.isnan(detops.sigmoid_focal_loss(e, e, reduction="mean").item())
    assert math.isnan(tv_focal(e, e, reduction="mean").item())
    assert detops.sigmoid_focal_loss(e, e, reduction="sum").item() == 0.0 == tv_focal(e, e, reduction="sum").item()
    assert detops.sigmoid_focal_loss(e, e).shape == (0, 80)


def test_meta_tensors_give_shapes():
    x = torch.empty(7, 80, device="meta")
    assert detops.sigmoid_focal_loss(x, x).shape == (7, 80)
    assert detops.sigmoid_focal_loss(x, x, reduction="sum").shape == ()
    tgt = torch.empty(7, dtype=torch.long, device="meta")
    assert detops.sigmoid_focal_loss_mmcv(x, tgt).shape == ()
    assert detops.sigmoid_focal_loss_mmcv(x, tgt, reduction="none").device.type == "meta"
    with pytest.raises(ValueError, match="reduction"):
        detops.sigmoid_focal_loss(x, x, reduction="bogus")
    with pytest.raises(ValueError, match="targets must have the shape"):
        detops.sigmoid_focal_loss(x, x[:3])


MMCV_CONFIGS = [
    # (N, C, weighted, background fraction, gamma, alpha)
    (12, 5, False, 0.3, 2.0, 0.25),
    (12, 5, True, 0.3, 2.0, 0.25),
    (30, 1, True, 0.5, 2.0, 0.25),
    (64, 80, True, 0.8, 2.0, 0.25),
    (10, 4, False, 1.0, 0.5, 0.5),
    (10, 4, True, 0.0, 5.0, 0.75),
]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("cfg", MMCV_CONFIGS, ids=lambda c: f"N{c[0]}-C{c[1]}-w{int(c[2])}-bg{c[3]}-g{c[4]}-a{c[5]}")
def test_mmcv_form_matches_mmcv_formula(device, reduction, cfg):
    n, c, weighted, bg, gamma, alpha = cfg
    g = torch.Generator().manual_seed(zlib.crc32(repr((cfg, reduction)).encode()))
    x64 = logits(g, (n, c))
    cls = torch.randint(0, c, (n,), generator=g)
    target = torch.where(torch.rand(n, generator=g) < bg, torch.full_like(cls, c), cls)
    w64 = torch.rand(c, generator=g, dtype=torch.float64) * 1.5 + 0.25 if weighted else None
    for dtype in DTYPES:
        x = x64.to(device, dtype).requires_grad_()
        w = w64.to(device, dtype) if weighted else None
        xp = x.detach().double().cpu().requires_grad_()
        wp = w.double().cpu() if weighted else None
        ours = detops.sigmoid_focal_loss_mmcv(x, target.to(device), gamma, alpha, w, reduction)
        truth = mmcv_focal(xp, target, gamma, alpha, wp, reduction)
        assert_loss_and_grad_close(ours, truth, x, xp, g, f"{cfg} {reduction} {dtype} {device}")


def test_mmcv_form_is_the_torchvision_form_on_one_hot_targets():
    """Without weights, mmcv's loss of row n is torchvision's with one-hot targets (alpha >= 0); 'mean' is the
    sum over N rows, not over N * C elements."""
    g = torch.Generator().manual_seed(23)
    x = logits(g, (20, 6))
    target = torch.randint(0, 7, (20,), generator=g)
    onehot = torch.nn.functional.one_hot(target, 7)[:, :6].double()
    torch.testing.assert_close(detops.sigmoid_focal_loss_mmcv(x, target, 2.0, 0.25, None, "none"),
                               tv_focal(x, onehot, 0.25, 2.0, "none"))
    torch.testing.assert_close(detops.sigmoid_focal_loss_mmcv(x, target, 2.0, 0.25, None, "mean"),
                               tv_focal(x, onehot, 0.25, 2.0, "sum") / 20)


@pytest.mark.parametrize("device", devices())
def test_mixed_dtypes_and_negative_gamma_as_torchvision(device):
    """torchvision's formula promotes logits and targets of two floating dtypes and takes any gamma; so do
    we: the result has the promoted dtype and the value torchvision gives, and the gradient reaches the
    logits in their own dtype."""
    g = torch.Generator().manual_seed(11)
    x64 = torch.randn(6, 7, generator=g, dtype=torch.float64) * 2
    t64 = (torch.rand(6, 7, generator=g, dtype=torch.float64) < 0.3).double()
    for xd, td in ((torch.float32, torch.float64), (torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                   (torch.float64, torch.float16)):
        x = x64.to(device, xd).requires_grad_()
        t = t64.to(device, td)
        for gamma, reduction in ((2.0, "sum"), (-0.5, "none"), (1.5, "mean")):
            ours = detops.sigmoid_focal_loss(x, t, 0.25, gamma, reduction)
            xr = x.detach().double().requires_grad_()
            truth = tv_focal(xr, t.double(), 0.25, gamma, reduction)
            assert ours.dtype == torch.promote_types(xd, td), (xd, td, ours.dtype)
            atol, rtol = TOL[ours.dtype]
            torch.testing.assert_close(ours.double().cpu(), truth.detach().cpu(), atol=atol, rtol=rtol,
                                       msg=lambda m: f"{xd} x {td} gamma={gamma} {reduction} {device}: {m}")
            (gx,) = torch.autograd.grad(ours.sum(), x)
            (gt,) = torch.autograd.grad(truth.sum(), xr)
            assert gx.dtype == xd
            atol, rtol = TOL[xd]
            torch.testing.assert_close(gx.double().cpu(), gt.cpu(), atol=atol, rtol=rtol,
                                       msg=lambda m: f"grad {xd} x {td} gamma={gamma} {reduction} {device}: {m}")
