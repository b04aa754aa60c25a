"""torch.ops.detops.carafe (mmcv.ops.carafe, content-aware reassembly of features) against an independent
plain-PyTorch evaluation: F.unfold of the features (k x k windows, zero padding (k - 1) / 2), repeated over each
s x s output block, weighted by the masks and summed over the taps. In every dtype the truth is that evaluation
in fp64 on our (rounded) inputs, forward and autograd backward; an element passes when
|ours - truth| <= atol + rtol * max(|truth|, magnitude), magnitude being the same evaluation on |inputs| (the sum
of |terms| behind the element), as in the C++ harness. See docs/ops/carafe.md.
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


def truth(x, masks, k, g, s):
    """CARAFE from its definition with F.unfold: out[n, c, y, x] = sum over taps t of masks[n, grp(c) k k + t, y, x]
    * window_t(features)[n, c, y // s, x // s]. Differentiable (autograd gives the reference gradients)."""
    n, c, h, w = x.shape
    cols = F.unfold(x, k, padding=(k - 1) // 2).view(n, g, c // g, k * k, h, w)
    cols = cols.repeat_interleave(s, 4).repeat_interleave(s, 5)  # [N, G, C / G, k k, H s, W s]
    return (cols * masks.view(n, g, 1, k * k, h * s, w * s)).sum(3).view(n, c, h * s, w * s)


def softmax_masks(n, k, g, s, h, w, seed, dtype=torch.float64, device="cpu"):
    """CARAFE's normalised kernels: softmax over each group's k k taps at every output position."""
    logits = torch.randn(n, g, k * k, h * s, w * s, generator=_gen(seed), dtype=torch.float64) * 2
    return torch.softmax(logits, 2).reshape(n, g * k * k, h * s, w * s).to(dtype=dtype, device=device)


def features(n, c, h, w, seed, dtype=torch.float64, device="cpu"):
    return (torch.rand(n, c, h, w, generator=_gen(seed), dtype=torch.float64) * 2 - 1).to(dtype=dtype, device=device)


def assert_close_mag(actual, expected, magnitude, dtype, what):
    atol, rtol = TOL[dtype]
    a, e, m = actual.double().cpu(), expected.double().cpu(), magnitude.double().cpu()
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    bound = atol + rtol * torch.maximum(e.abs(), m)
    err = (a - e).abs()
    bad = ~(err <= bound)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {a.numel()} elements out of tolerance; worst "
                           f"|err| {err.max().item():.3g} at {tuple(torch.nonzero(bad)[0].tolist())}")


def check_forward_backward(x, masks, k, g, s, grad_output=None, what=""):
    """The op's output and both autograd gradients against truth's, in x's dtype's tolerance."""
    dtype = x.dtype
    xl, ml = x.detach().clone().requires_grad_(), masks.detach().clone().requires_grad_()
    out = detops.carafe(xl, ml, k, g, s)
    assert out.dtype == dtype and out.device == x.device
    xr, mr = x.detach().double().requires_grad_(), masks.detach().double().requires_grad_()
    ref = truth(xr, mr, k, g, s)
    xa, ma = x.detach().double().abs().requires_grad_(), masks.detach().double().abs().requires_grad_()
    mag = truth(xa, ma, k, g, s)
    assert_close_mag(out, ref, mag, dtype, f"forward {what}")
    if grad_output is None:
        grad_output = torch.randn(out.shape, generator=_gen(5), dtype=torch.float64).to(dtype=dtype, device=x.device)
    out.backward(grad_output)
    ref.backward(grad_output.double())
    mag.backward(grad_output.double().abs())
    for name, ours, r, m in (("features", xl, xr, xa), ("masks", ml, mr, ma)):
        assert ours.grad.dtype == dtype and ours.grad.shape == ours.shape
        assert_close_mag(ours.grad, r.grad, m.grad, dtype, f"grad {name} {what}")


# (batch, channels, h, w, kernel_size, group_size, scale_factor): every kernel_size 1, 3, 5, 7 with every scale
# 1..4 and group sizes 1, 2, 4; channel counts around the kernels' 8- and 16-channel chunks; maps smaller than the
# window; the CUDA kernels' tile edges.
CONFIGS = [
    (2, 3, 5, 6, 1, 1, 1), (1, 6, 5, 6, 1, 2, 2), (2, 12, 5, 6, 1, 4, 3), (1, 3, 5, 6, 1, 1, 4),
    (2, 6, 5, 6, 3, 2, 1), (1, 12, 5, 6, 3, 4, 2), (2, 3, 5, 6, 3, 1, 3), (1, 6, 5, 6, 3, 2, 4),
    (2, 12, 5, 6, 5, 4, 1), (1, 3, 5, 6, 5, 1, 2), (2, 6, 5, 6, 5, 2, 3), (1, 12, 5, 6, 5, 4, 4),
    (2, 3, 5, 6, 7, 1, 1), (1, 6, 5, 6, 7, 2, 2), (2, 12, 5, 6, 7, 4, 3), (1, 3, 5, 6, 7, 1, 4),
    (2, 16, 7, 9, 5, 1, 2),   # FPN-like: k 5, group 1, scale 2
    (3, 34, 4, 5, 5, 2, 2),   # 17 channels per group: two full chunks and a ragged one
    (1, 4, 1, 1, 7, 1, 2),    # a 1 x 1 map
    (2, 4, 13, 2, 3, 2, 3),   # a tall, narrow map
    # The CUDA kernels' 8 x 32 pixel tiles and 16-channel chunks: maps one short of, at and one past a tile
    (1, 17, 7, 31, 5, 1, 2), (2, 34, 8, 32, 5, 2, 2), (1, 20, 9, 33, 3, 4, 2), (1, 3, 17, 65, 5, 1, 1),
    (2, 7, 3, 4, 7, 1, 3), (1, 10, 2, 5, 7, 2, 4),  # k 7 at scales 3 and 4 on maps smaller than the window
]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "n{}_c{}_{}x{}_k{}_g{}_s{}".format(*c))
def test_forward_and_backward_match_unfold_form(cfg, dtype, device):
    n, c, h, w, k, g, s = cfg
    x = features(n, c, h, w, 1, dtype, device)
    masks = softmax_masks(n, k, g, s, h, w, 2, dtype, device)
    check_forward_backward(x, masks, k, g, s, what=f"{cfg} {dtype} {device}")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_signed_unnormalised_masks(dtype, device):
    """The op normalises nothing: any mask values are used as given."""
    x = features(2, 6, 6, 7, 3, dtype, device)
    masks = features(2, 50, 12, 14, 4, dtype, device) * 3
    check_forward_backward(x, masks, 5, 2, 2, what="signed masks")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fpn_p5_to_p4(dtype, device):
    """CARAFE in FPN upsampling: k 5, group 1, scale 2, 256 channels, batch 2, P5 25x42 -> 50x84."""
    x = torch.randn(2, 256, 25, 42, generator=_gen(6), dtype=torch.float64).to(dtype=dtype, device=device)
    masks = softmax_masks(2, 5, 1, 2, 25, 42, 7, dtype, device)
    check_forward_backward(x, masks, 5, 1, 2, what=f"fpn p5 {dtype} {device}")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available: the P3 -> P2 size runs on the GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fpn_p3_to_p2_backward_cuda(dtype):
    """mmcv's backward failed at these sizes with `invalid configuration argument`: 100x168 -> 200x336."""
    x = torch.randn(2, 256, 100, 168, generator=_gen(8), dtype=torch.float64).to(dtype=dtype, device="cuda")
    masks = softmax_masks(2, 5, 1, 2, 100, 168, 9, dtype, "cuda")
    check_forward_backward(x, masks, 5, 1, 2, what=f"fpn p3 {dtype}")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_types_accumulate_in_fp32(dtype, device):
    """k 33 over a 33 x 33 map, all-one masks: up to 1089 terms of 1.25..1.5 per output. An fp16 running sum
    stalls past 1024 (its step there is 1, each term rounds down by up to 0.5), a bf16 one at 512."""
    x = (torch.rand(1, 2, 33, 33, generator=_gen(10), dtype=torch.float64) * 0.25 + 1.25).to(dtype=dtype, device=device)
    masks = torch.ones(1, 33 * 33, 33, 33, dtype=dtype, device=device)
    out = detops.carafe(x, masks, 33, 1, 1)
    ref = truth(x.double(), masks.double(), 33, 1, 1)
    assert ref.max() > 1300
    assert_close_mag(out, ref, ref, dtype, f"half accumulation {dtype}")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_k1_masks_of_ones_is_nearest_upsampling(dtype, device):
    x = features(2, 5, 4, 7, 11, dtype, device)
    for s in (1, 2, 3):
        masks = torch.ones(2, 1, 4 * s, 7 * s, dtype=dtype, device=device)
        assert torch.equal(detops.carafe(x, masks, 1, 1, s), F.interpolate(x, scale_factor=s, mode="nearest"))


@pytest.mark.parametrize("device", devices())
def test_off_map_taps_are_absent(device):
    """Taps whose feature lies off the map are skipped (as mmcv does), not multiplied by 0: NaN masks there
    change nothing, and they get gradient 0."""
    n, c, h, w, k, g, s = 2, 4, 4, 5, 5, 2, 2
    x = features(n, c, h, w, 12, device=device)
    masks = softmax_masks(n, k, g, s, h, w, 13, device=device)
    on_map = F.unfold(torch.ones(1, 1, h, w, dtype=torch.float64), k, padding=(k - 1) // 2).view(1, 1, k * k, h, w)
    on_map = on_map.repeat_interleave(s, 3).repeat_interleave(s, 4).expand(n, g, -1, -1, -1).reshape(masks.shape)
    on_map = on_map.to(device) > 0
    nan_masks = masks.masked_fill(~on_map, float("nan")).requires_grad_()
    out = detops.carafe(x, nan_masks, k, g, s)
    assert not out.isnan().any()
    torch.testing.assert_close(out, truth(x, masks * on_map, k, g, s))
    out.sum().backward()
    assert torch.count_nonzero(nan_masks.grad[~on_map]) == 0


@pytest.mark.parametrize("device", devices())
def test_batch_0_and_zero_channels(device):
    x = torch.zeros(0, 4, 3, 5, device=device, requires_grad=True)
    masks = torch.zeros(0, 18, 6, 10, device=device, requires_grad=True)
    out = detops.carafe(x, masks, 3, 2, 2)
    assert out.shape == (0, 4, 6, 10)
    out.sum().backward()
    assert x.grad.shape == x.shape and masks.grad.shape == masks.shape
    x0 = torch.zeros(2, 0, 3, 5, device=device, requires_grad=True)
    m0 = torch.rand(2, 9, 6, 10, device=device, requires_grad=True)
    out0 = detops.carafe(x0, m0, 3, 1, 2)
    assert out0.shape == (2, 0, 6, 10)
    out0.sum().backward()
    assert torch.count_nonzero(m0.grad) == 0


@pytest.mark.parametrize("device", devices())
def test_noncontiguous_inputs_and_stride0_grad(device):
    x = features(2, 6, 5, 7, 14, device=device).to(memory_format=torch.channels_last)
    masks = softmax_masks(2, 3, 2, 2, 5, 7, 15, device=device).transpose(2, 3).contiguous().transpose(2, 3)
    assert not x.is_contiguous() and not masks.is_contiguous()
    stride0 = torch.tensor(0.75, dtype=torch.float64, device=device).expand(2, 6, 10, 14)
    check_forward_backward(x, masks, 3, 2, 2, grad_output=stride0, what="non-contiguous, stride-0 grad")


@pytest.mark.parametrize("device", devices())
def test_gradcheck_fp64(device):
    x = features(2, 4, 4, 5, 16, device=device).requires_grad_()
    masks = features(2, 18, 8, 10, 17, device=device).requires_grad_()  # signed: no symmetry hides an index
    assert torch.autograd.gradcheck(lambda a, b: detops.carafe(a, b, 3, 2, 2), (x, masks))
    x3 = features(1, 3, 3, 4, 18, device=device).requires_grad_()
    m3 = features(1, 25, 9, 12, 19, device=device).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: detops.carafe(a, b, 5, 1, 3), (x3, m3))


@pytest.mark.parametrize("device", devices())
def test_only_requested_gradients_and_double_backward_raises(device):
    x = features(1, 4, 3, 4, 20, device=device)
    masks = softmax_masks(1, 3, 1, 2, 3, 4, 21, device=device).requires_grad_()
    out = detops.carafe(x, masks, 3, 1, 2)
    out.sum().backward()
    assert x.grad is None and masks.grad is not None
    xg = x.clone().requires_grad_()
    (gx,) = torch.autograd.grad(detops.carafe(xg, masks, 3, 1, 2).sum(), xg, create_graph=True)
    with pytest.raises(RuntimeError, match="carafe: double backward is not supported"):
        gx.sum().backward()


@pytest.mark.parametrize("device", devices())
def test_bad_inputs_raise_naming_the_argument(device):
    x = features(2, 4, 3, 5, 22, torch.float32, device)
    m = softmax_masks(2, 3, 2, 2, 3, 5, 23, torch.float32, device)
    cases = [
        (ValueError, "kernel_size must be an odd integer >= 1; got 4", lambda: detops.carafe(x, m, 4, 2, 2)),
        (ValueError, "kernel_size must be an odd integer >= 1; got 0", lambda: detops.carafe(x, m, 0, 2, 2)),
        (ValueError, "group_size must be >= 1", lambda: detops.carafe(x, m, 3, 0, 2)),
        (ValueError, "C = 4 must be divisible by group_size = 3", lambda: detops.carafe(x, m, 3, 3, 2)),
        (ValueError, "scale_factor must be >= 1", lambda: detops.carafe(x, m, 3, 2, 0)),
        (ValueError, "features must be a 4-D tensor", lambda: detops.carafe(x[0], m, 3, 2, 2)),
        (ValueError, "masks must have shape .* = [2, 18, 6, 10]; got [2, 9, 6, 10]",
         lambda: detops.carafe(x, m[:, :9], 3, 2, 2)),
        (ValueError, "masks must have shape .*; got [2, 18, 3, 5]", lambda: detops.carafe(x, m[:, :, ::2, ::2], 3, 2, 2)),
        (TypeError, "masks dtype \\(Float\\) must match features dtype \\(Half\\)",
         lambda: detops.carafe(x.half(), m, 3, 2, 2)),
        (TypeError, "features must be float64, float32, float16 or bfloat16", lambda: detops.carafe(x.int(), m.int(), 3, 2, 2)),
        (RuntimeError, "features and masks must be on the same device", lambda: detops.carafe(x, m.to("meta"), 3, 2, 2)),
        (RuntimeError, "kernel_size", lambda: detops.carafe(x, m, 3.0, 2, 2)),
    ]
    for exc, words, call in cases:
        with pytest.raises(exc, match=words.replace("[", r"\[").replace("]", r"\]")):
            call()


def test_meta_shapes_and_checks():
    x = torch.empty(2, 8, 5, 7, device="meta")
    m = torch.empty(2, 50, 10, 14, device="meta")
    out = detops.carafe(x, m, 5, 2, 2)
    assert out.shape == (2, 8, 10, 14) and out.device.type == "meta"
    g = torch.empty(2, 8, 10, 14, device="meta")
    assert detops._carafe_backward_features(g, m, 2, 8, 5, 7, 5, 2, 2).shape == (2, 8, 5, 7)
    assert detops._carafe_backward_masks(g, x, 5, 2, 2).shape == (2, 50, 10, 14)
    with pytest.raises(ValueError, match="masks must have shape"):
        detops.carafe(x, torch.empty(2, 50, 5, 7, device="meta"), 5, 2, 2)
    with pytest.raises(ValueError, match="group_size"):
        detops.carafe(x, m, 5, 3, 2)


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    x = features(2, 4, 3, 5, 24, device=device).requires_grad_()
    m = softmax_masks(2, 3, 2, 2, 3, 5, 25, device=device).requires_grad_()
    torch.library.opcheck(detops.carafe.default, (x, m, 3, 2, 2))


@pytest.mark.parametrize("device", devices())
def test_python_function_and_module(device):
    from detops import ops
    x = features(2, 4, 3, 5, 26, device=device)
    m = softmax_masks(2, 3, 2, 2, 3, 5, 27, device=device)
    expected = truth(x, m, 3, 2, 2)
    torch.testing.assert_close(ops.carafe(x, m, 3, 2, 2), expected)
    module = ops.CARAFE(3, 2, 2)
    torch.testing.assert_close(module(x, m), expected)
    assert "kernel_size=3, group_size=2, scale_factor=2" in repr(module)
    with pytest.raises(TypeError, match="CARAFE: scale_factor must be an int"):
        ops.CARAFE(3, 2, 2.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available: the CUDA determinism check needs a GPU")
def test_cuda_bitwise_reproducible_and_equal_to_cpu():
    x = torch.randn(2, 64, 30, 31, generator=_gen(28)).cuda().requires_grad_()
    m = softmax_masks(2, 5, 2, 2, 30, 31, 29, torch.float32, "cuda").requires_grad_()
    go = torch.randn(2, 64, 60, 62, generator=_gen(30)).cuda()
    results = []
    for _ in range(2):
        x.grad = m.grad = None
        out = detops.carafe(x, m, 5, 2, 2)
        out.backward(go)
        results.append([out.detach().clone(), x.grad.clone(), m.grad.clone()])
    for a, c in zip(*results):
        assert torch.equal(a, c)
    xc, mc = x.detach().cpu().requires_grad_(), m.detach().cpu().requires_grad_()
    out_cpu = detops.carafe(xc, mc, 5, 2, 2)
    out_cpu.backward(go.cpu())
    for a, c in zip(results[0], (out_cpu, xc.grad, mc.grad)):
        torch.testing.assert_close(a.cpu(), c.detach(), atol=1e-5, rtol=1e-5)  # the same sums, FMA aside
