"""torch.ops.detops.masked_conv2d (mmcv.ops.masked_conv2d without its limits) against its definition written
with PyTorch: torch.nn.functional.conv2d, then zeroed where the mask is not > 0. In every dtype the truth is that
formula in fp64 on our (rounded) inputs, forward and autograd backward; an element passes when
|ours - truth| <= atol + rtol * max(|truth|, magnitude), magnitude being the same formula on |inputs| (the sum of
|terms| behind the element), as in the C++ harness. See docs/ops/masked_conv2d.md.
"""
import pytest
import torch
import torch.nn.functional as F

from conftest import devices

detops = torch.ops.detops
DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float64: (1e-10, 1e-10), torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 2e-3), torch.bfloat16: (8e-3, 1.6e-2)}


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _inputs(n, c_in, h, w, c_out, kh, kw, dtype, device, seed, bias=True):
    g = _gen(seed)
    x = (torch.rand(n, c_in, h, w, generator=g, dtype=torch.float64) * 2 - 1).to(dtype=dtype, device=device)
    wt = (torch.rand(c_out, c_in, kh, kw, generator=g, dtype=torch.float64) * 2 - 1).to(dtype=dtype, device=device)
    b = (torch.rand(c_out, generator=g, dtype=torch.float64) * 2 - 1).to(dtype=dtype, device=device) if bias else None
    return x, wt, b


def _out_size(size, k, pad, stride):
    return (size + 2 * pad - k) // stride + 1


def truth(x, mask, w, b, padding, stride):
    """The definition in fp64: conv2d, zero where mask <= 0 (or NaN); a [1, ...] mask covers every image."""
    sel = (mask > 0).to(device=x.device)
    out = F.conv2d(x.double(), w.double(), None if b is None else b.double(), stride=stride, padding=padding)
    return out * sel[:, None].double()


def assert_close_mag(actual, expected, magnitude, dtype, what):
    atol, rtol = TOL[dtype]
    a, e, m = actual.double().cpu(), expected.double().cpu(), magnitude.double().cpu()
    bound = atol + rtol * torch.maximum(e.abs(), m)
    err = (a - e).abs()
    bad = ~(err <= bound)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {a.numel()} elements out of tolerance; worst "
                           f"|err| {err.max().item():.3g} at {tuple(torch.nonzero(bad)[0].tolist())}")


CONFIGS = [  # (n, c_in, h, w, c_out, (kh, kw), padding, stride, bias, mask batch 1)
    (1, 3, 10, 9, 4, (3, 3), (1, 1), (1, 1), True, False),
    (3, 3, 10, 9, 4, (3, 3), (0, 0), (2, 2), True, False),
    (3, 2, 8, 11, 5, (1, 1), (0, 0), (1, 1), False, False),
    (2, 4, 9, 9, 3, (1, 1), (1, 1), (2, 2), True, True),
    (2, 3, 12, 13, 6, (2, 3), (1, 0), (2, 1), False, False),
    (2, 16, 20, 19, 70, (3, 3), (1, 1), (1, 1), True, False),  # CUDA: several 64-wide tiles and 16-wide k slices
]


def _case(cfg, dtype, device, seed=11):
    n, c_in, h, w, c_out, (kh, kw), pad, stride, bias, batch_one = cfg
    x, wt, b = _inputs(n, c_in, h, w, c_out, kh, kw, dtype, device, seed, bias)
    ho, wo = _out_size(h, kh, pad[0], stride[0]), _out_size(w, kw, pad[1], stride[1])
    mask = (torch.rand(1 if batch_one else n, ho, wo, generator=_gen(seed + 1)) < 0.5).to(device)
    return x, mask, wt, b, pad, stride


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cfg", range(len(CONFIGS)))
def test_forward_and_backward_match_conv2d_times_mask(cfg, dtype, device):
    x, mask, w, b, pad, stride = _case(CONFIGS[cfg], dtype, device)
    leaves = [t.detach().clone().requires_grad_() for t in (x, w) + ((b,) if b is not None else ())]
    out = detops.masked_conv2d(leaves[0], mask, leaves[1], leaves[2] if b is not None else None, pad, stride)
    assert out.dtype == dtype and out.device == x.device
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref = truth(ref_leaves[0], mask, ref_leaves[1], ref_leaves[2] if b is not None else None, pad, stride)
    mag = truth(x.double().abs(), mask, w.double().abs(), None if b is None else b.double().abs(), pad, stride)
    assert_close_mag(out, ref, mag, dtype, f"forward {dtype} {device}")
    assert torch.count_nonzero(out * ~(mask > 0)[:, None]) == 0, "a position outside the mask is not 0"
    go = torch.randn(out.shape, generator=_gen(5), dtype=torch.float64).to(dtype=dtype, device=device)
    out.backward(go)
    ref.backward(go.double())
    abs_leaves = [t.detach().double().abs().requires_grad_() for t in leaves]
    truth(abs_leaves[0], mask, abs_leaves[1], abs_leaves[2] if b is not None else None, pad, stride).backward(
        go.double().abs())
    for name, ours, r, m in zip(("features", "weight", "bias"), leaves, ref_leaves, abs_leaves):
        assert ours.grad.dtype == dtype
        assert_close_mag(ours.grad, r.grad, m.grad, dtype, f"grad {name} {dtype} {device}")


@pytest.mark.parametrize("device", devices())
def test_gradcheck_fp64(device):
    x, w, b = _inputs(2, 3, 7, 6, 4, 3, 3, torch.float64, device, 21)
    mask = (torch.rand(2, 4, 8, generator=_gen(22)) < 0.6).to(device)
    args = [t.requires_grad_() for t in (x, w, b)]
    assert torch.autograd.gradcheck(lambda xx, ww, bb: detops.masked_conv2d(xx, mask, ww, bb, (1, 2), (2, 1)), args)


@pytest.mark.parametrize("device", devices())
def test_nonbinary_mask_selects_positive_values_and_does_not_scale(device):
    x, w, b = _inputs(2, 3, 6, 6, 2, 3, 3, torch.float32, device, 31)
    values = torch.tensor([-1.0, 0.0, float("nan"), 0.5, 2.0, -0.0, 1e-30, float("inf"), float("-inf")])
    mask = values[torch.randint(0, len(values), (2, 6, 6), generator=_gen(32))].to(device)
    out = detops.masked_conv2d(x, mask, w, b, 1)
    expected = F.conv2d(x, w, b, padding=1) * (mask > 0)[:, None]
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    for int_mask in (mask.nan_to_num(0).round().to(torch.int64), (mask > 0).to(torch.uint8) * 3):
        torch.testing.assert_close(detops.masked_conv2d(x, int_mask, w, b, 1),
                                   F.conv2d(x, w, b, padding=1) * (int_mask > 0)[:, None], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device", devices())
def test_all_zero_mask_gives_zeros_and_zero_gradients(device):
    x, w, b = (t.requires_grad_() for t in _inputs(3, 4, 8, 8, 5, 3, 3, torch.float32, device, 41))
    mask = torch.zeros(3, 8, 8, dtype=torch.bool, device=device)
    out = detops.masked_conv2d(x, mask, w, b, 1)
    assert out.shape == (3, 5, 8, 8) and torch.count_nonzero(out) == 0
    out.sum().backward()
    for t in (x, w, b):
        assert t.grad is not None and torch.count_nonzero(t.grad) == 0


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_all_one_mask_is_conv2d(dtype, device):
    x, w, b = _inputs(2, 5, 11, 12, 7, 3, 3, dtype, device, 51)
    mask = torch.ones(1, 6, 14, dtype=torch.bool, device=device)  # [1, ...]: every image
    out = detops.masked_conv2d(x, mask, w, b, (1, 2), (2, 1))
    # conv2d in fp64 (cuDNN's fp32 convolution may use TF32), rounded to the dtype
    expected = F.conv2d(x.double(), w.double(), b.double(), stride=(2, 1), padding=(1, 2)).to(dtype)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("device", devices())
def test_mmcv_call_same_padding_mask_of_input_size(device):
    """mmcv's use: stride 1, padding (k - 1) / 2, a [1, H, W] mask; here any batch shares it."""
    x, w, b = _inputs(2, 3, 9, 10, 4, 3, 3, torch.float32, device, 61)
    mask = (torch.rand(1, 9, 10, generator=_gen(62)) > 0.5).float().to(device)
    out = detops.masked_conv2d(x, mask, w, b, 1)
    torch.testing.assert_close(out, F.conv2d(x, w, b, padding=1) * mask[:, None], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device", devices())
def test_int_or_pair_arguments_and_defaults(device):
    x, w, b = _inputs(1, 2, 7, 8, 3, 3, 3, torch.float32, device, 71)
    mask = torch.ones(1, 5, 6, dtype=torch.bool, device=device)
    base = detops.masked_conv2d(x, mask, w)  # bias None, padding 0, stride 1
    torch.testing.assert_close(base, F.conv2d(x, w))
    mask_p = torch.ones(1, 4, 8, dtype=torch.bool, device=device)
    a = detops.masked_conv2d(x, mask_p, w, b, 1, (2, 1))
    torch.testing.assert_close(a, detops.masked_conv2d(x, mask_p, w, b, padding=(1, 1), stride=[2, 1]))
    from detops import ops
    torch.testing.assert_close(a, ops.masked_conv2d(x, mask_p, w, b, padding=1, stride=(2, 1)))


@pytest.mark.parametrize("device", devices())
def test_bad_inputs_raise_naming_the_argument(device):
    x, w, b = _inputs(2, 3, 8, 8, 4, 3, 3, torch.float32, device, 81)
    m = torch.ones(2, 6, 6, dtype=torch.bool, device=device)
    cases = [
        (ValueError, "mask must have shape", lambda: detops.masked_conv2d(x, torch.ones(1, 8, 8, device=device), w, b)),
        (ValueError, "C_in", lambda: detops.masked_conv2d(x, m, w[:, :2].contiguous(), b)),
        (ValueError, "padding must be >= 0", lambda: detops.masked_conv2d(x, m, w, b, (-1, 0))),
        (ValueError, "stride must be >= 1", lambda: detops.masked_conv2d(x, m, w, b, 0, 0)),
        (ValueError, "masked_conv2d: padding must be one int or two ints", lambda: detops.masked_conv2d(x, m, w, b, [1, 1, 1])),
        (ValueError, "masked_conv2d: stride must be one int or two ints", lambda: detops.masked_conv2d(x, m, w, b, 0, [])),
        (ValueError, "bias must have shape [4]", lambda: detops.masked_conv2d(x, m, w, b[:3])),
        (ValueError, "features must be a 4-D tensor", lambda: detops.masked_conv2d(x[0], m, w, b)),
        (ValueError, "padded input", lambda: detops.masked_conv2d(x, m, torch.ones(4, 3, 9, 9, device=device), b)),
        (TypeError, "weight dtype", lambda: detops.masked_conv2d(x, m, w.double(), b)),
        (TypeError, "features must be float64", lambda: detops.masked_conv2d(x.int(), m, w.int(), None)),
        (TypeError, "mask must be a bool, integer or floating-point", lambda: detops.masked_conv2d(x, m.to(torch.complex64), w, b)),
        (RuntimeError, "same device", lambda: detops.masked_conv2d(x, m.to("meta"), w, b)),
    ]
    for exc, words, call in cases:
        with pytest.raises(exc, match=words.replace("[", r"\[").replace("]", r"\]")):
            call()


def test_meta_shapes_and_checks():
    x = torch.empty(2, 3, 11, 12, device="meta")
    w = torch.empty(5, 3, 3, 3, device="meta")
    m = torch.empty(1, 6, 14, dtype=torch.bool, device="meta")
    out = detops.masked_conv2d(x, m, w, None, (1, 2), (2, 1))
    assert out.shape == (2, 5, 6, 14) and out.device.type == "meta"
    with pytest.raises(ValueError, match="mask must have shape"):
        detops.masked_conv2d(x, torch.empty(2, 11, 12, device="meta"), w, None, (1, 2), (2, 1))


@pytest.mark.parametrize("device", devices())
def test_mask_gets_no_gradient_and_double_backward_raises(device):
    x, w, b = (t.requires_grad_() for t in _inputs(1, 2, 5, 5, 2, 3, 3, torch.float64, device, 91))
    mask = torch.rand(1, 5, 5, generator=_gen(92), dtype=torch.float64).to(device).requires_grad_()
    out = detops.masked_conv2d(x, mask, w, b, 1)
    (gx,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    assert mask.grad is None
    with pytest.raises(RuntimeError, match="masked_conv2d: double backward is not supported"):
        gx.sum().backward()


@pytest.mark.parametrize("device", devices())
def test_only_requested_gradients_and_noncontiguous_inputs(device):
    x, w, b = _inputs(2, 3, 9, 8, 4, 3, 3, torch.float64, device, 101)
    x = x.to(memory_format=torch.channels_last)
    w = w.transpose(2, 3).contiguous().transpose(2, 3).requires_grad_()
    mask = (torch.rand(2, 9, 8, generator=_gen(102)) < 0.5).to(device)
    out = detops.masked_conv2d(x, mask, w, b, 1)
    out.backward(torch.ones_like(out))
    assert x.grad is None and w.grad is not None
    ref_w = w.detach().clone().requires_grad_()
    truth(x, mask, ref_w, b, 1, 1).backward(torch.ones_like(out))
    torch.testing.assert_close(w.grad, ref_w.grad)


@pytest.mark.parametrize("device", devices())
def test_masked_conv2d_module(device):
    from detops import ops
    conv = ops.MaskedConv2d(3, 4, 3, stride=2, padding=1).to(device).double()
    x = torch.rand(2, 3, 9, 10, generator=_gen(111), dtype=torch.float64).to(device)
    torch.testing.assert_close(conv(x), F.conv2d(x, conv.weight, conv.bias, stride=2, padding=1))
    mask = (torch.rand(2, 5, 5, generator=_gen(112)) < 0.5).to(device)
    torch.testing.assert_close(conv(x, mask), truth(x, mask, conv.weight, conv.bias, 1, 2))
    dilated = ops.MaskedConv2d(3, 4, 3, dilation=2).to(device)
    with pytest.raises(ValueError, match="dilation 1"):
        dilated(x.float(), mask)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available: the CPU path has no TF32 mode")
def test_cuda_fp32_tf32_flag_follows_torch_matmul():
    """The CUDA GEMMs run fp32 in fp32 unless torch.backends.cuda.matmul.allow_tf32 (the flag of mmcv's addmm):
    with it off the forward and gradients are within fp32's tolerance of the fp64 truth, with it on within
    TF32's (10-bit mantissa products, fp32 sums)."""
    x, w, b = _inputs(2, 64, 20, 22, 64, 3, 3, torch.float32, "cuda", 131)
    mask = (torch.rand(2, 20, 22, generator=_gen(132)) < 0.5).cuda()
    ref_leaves = [t.double().requires_grad_() for t in (x, w, b)]
    ref = truth(ref_leaves[0], mask, ref_leaves[1], ref_leaves[2], 1, 1)
    go = torch.randn(ref.shape, generator=_gen(133), dtype=torch.float64).cuda()
    ref.backward(go)
    abs_leaves = [t.double().abs().requires_grad_() for t in (x, w, b)]
    mag = truth(abs_leaves[0], mask, abs_leaves[1], abs_leaves[2], 1, 1)
    mag.backward(go.abs())
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        for allow, tol in ((False, TOL[torch.float32]), (True, (1e-4, 2 * 2.0 ** -11))):
            torch.backends.cuda.matmul.allow_tf32 = allow
            leaves = [t.detach().clone().requires_grad_() for t in (x, w, b)]
            out = detops.masked_conv2d(leaves[0], mask, leaves[1], leaves[2], 1)
            out.backward(go.float())
            checks = [(out, ref, mag)] + [(l.grad, r.grad, m.grad) for l, r, m in zip(leaves, ref_leaves, abs_leaves)]
            for what, (ours, r, m) in zip(("forward", "grad features", "grad weight", "grad bias"), checks):
                r, m = r.detach(), m.detach()
                err, bound = (ours.detach().double() - r).abs(), tol[0] + tol[1] * torch.maximum(r.abs(), m)
                assert bool((err <= bound).all()), f"allow_tf32={allow} {what}: worst |err| {err.max().item():.3g}"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available: the CUDA determinism check needs a GPU")
def test_cuda_bitwise_reproducible():
    x, w, b = (t.requires_grad_() for t in _inputs(2, 64, 30, 31, 70, 3, 3, torch.float32, "cuda", 121))
    mask = (torch.rand(2, 30, 31, generator=_gen(122)) < 0.5).cuda()
    results = []
    for _ in range(2):
        for t in (x, w, b):
            t.grad = None
        out = detops.masked_conv2d(x, mask, w, b, 1)
        out.backward(torch.ones_like(out))
        results.append([out.detach().clone(), x.grad.clone(), w.grad.clone(), b.grad.clone()])
    for a, c in zip(*results):
        assert torch.equal(a, c)
