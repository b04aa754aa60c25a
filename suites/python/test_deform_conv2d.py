"""torch.ops.detops.deform_conv2d and detops.ops.deform_conv2d / DeformConv2d against torchvision.ops.deform_conv2d,
run at test time on the same (rounded) inputs: forward and all five gradients (input, offset, weight, mask, bias).

The truth is torchvision in fp64 on our inputs. An element passes when |ours - truth| <= atol + rtol *
max(|truth|, magnitude), magnitude being the sum of |terms| behind it (as in the C++ harness): torchvision's
forward / backward on |input|, |weight|, |mask|, |bias|, |grad| (the bilinear weights are >= 0), and for the
offset gradient, whose terms are differences of corner values, 4 |mask| times torchvision's mask gradient with
the samples moved to their cells' centres (there a sample is a quarter of the four corners' sum), a bound on the
sum of |terms|. fp32 and fp64 are also compared with torchvision in the same dtype. See docs/ops/deform_conv2d.md.
"""
import math

import pytest
import torch

from conftest import devices

torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed: no peer to compare against")
from torchvision.ops import deform_conv2d as tv_deform_conv2d  # noqa: E402

detops = torch.ops.detops
ops = None  # detops.ops, importable once conftest's fixture has loaded the library (_detops_ops)
DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float64: (1e-10, 1e-10), torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 2e-3), torch.bfloat16: (8e-3, 1.6e-2)}
GRADS = ("input", "offset", "weight", "mask", "bias")


@pytest.fixture(autouse=True)
def _detops_ops(detops_library):
    global ops
    from detops import ops as loaded
    ops = loaded


@pytest.fixture(autouse=True)
def no_tf32():
    """fp32 GEMMs stay fp32 (the binding follows torch.backends.cuda.matmul.allow_tf32, as torchvision's addmm)."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _out_size(size, k, pad, dil, stride):
    return (size + 2 * pad - (dil * (k - 1) + 1)) // stride + 1


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


class Cfg:
    def __init__(self, name, n, c_in, h, w, c_out, kernel, stride=1, padding=1, dilation=1, groups=1, offset_groups=1,
                 mask=True, bias=True, offsets="random"):
        self.name, self.n, self.c_in, self.h, self.w, self.c_out = name, n, c_in, h, w, c_out
        self.kh, self.kw = _pair(kernel)
        self.stride, self.padding, self.dilation = _pair(stride), _pair(padding), _pair(dilation)
        self.groups, self.offset_groups, self.mask, self.bias, self.offsets = groups, offset_groups, mask, bias, offsets
        self.ho = _out_size(h, self.kh, self.padding[0], self.dilation[0], self.stride[0])
        self.wo = _out_size(w, self.kw, self.padding[1], self.dilation[1], self.stride[1])

    def __repr__(self):
        return self.name


CONFIGS = [
    Cfg("v1_3x3_pad1", 2, 4, 7, 8, 4, 3),
    Cfg("v2_g2_og2", 2, 4, 7, 8, 6, 3, groups=2, offset_groups=2),
    Cfg("v2_3x1_stride2x1_pad1x0_dil1x2_g2_og3_nobias", 1, 6, 9, 10, 4, (3, 1), (2, 1), (1, 0), (1, 2), 2, 3,
        bias=False),
    Cfg("v1_2x3_stride1x2_pad0x1_dil2x1_og4", 3, 4, 9, 11, 4, (2, 3), (1, 2), (0, 1), (2, 1), 1, 4, mask=False),
    Cfg("v2_1x1", 1, 2, 5, 5, 2, 1, padding=0),
    Cfg("v2_zero_offsets_pad1_samples_at_minus1", 2, 4, 7, 8, 4, 3, offset_groups=2, offsets="zero"),
    Cfg("v2_integer_offsets_stride2_pad2_dil2", 2, 2, 6, 7, 3, 3, 2, 2, 2, offsets="integer"),
    Cfg("v1_far_offsets", 2, 4, 6, 6, 4, 3, mask=False, offsets="far"),
    Cfg("v2_batch33", 33, 2, 4, 5, 3, 3),
    Cfg("v2_batch0", 0, 4, 7, 8, 4, 3),
]


def make_case(cfg, dtype, device, seed):
    """input, offset, weight, mask (None for DCNv1), bias (None without), grad_output, all rounded to dtype.
    Random offsets keep every sample point's fractional part in [0.01, 0.99] (off the bilinear kinks)."""
    g = _gen(seed)

    def u(*shape, lo=-1.0, hi=1.0):
        return torch.rand(*shape, generator=g, dtype=torch.float64) * (hi - lo) + lo

    x = u(cfg.n, cfg.c_in, cfg.h, cfg.w)
    w = u(cfg.c_out, cfg.c_in // cfg.groups, cfg.kh, cfg.kw)
    b = u(cfg.c_out) if cfg.bias else None
    oshape = (cfg.n, 2 * cfg.offset_groups * cfg.kh * cfg.kw, cfg.ho, cfg.wo)
    if cfg.offsets == "zero":
        off = torch.zeros(oshape, dtype=torch.float64)
    elif cfg.offsets == "integer":
        off = torch.randint(-2, 3, oshape, generator=g).to(torch.float64)
    else:
        r = 3.0 * max(cfg.h, cfg.w) if cfg.offsets == "far" else 2.0
        raw = u(*oshape, lo=-r, hi=r)
        off = raw.floor() + 0.01 + 0.98 * (raw - raw.floor())
    m = torch.sigmoid(2 * torch.randn(cfg.n, cfg.offset_groups * cfg.kh * cfg.kw, cfg.ho, cfg.wo, generator=g,
                                      dtype=torch.float64)) if cfg.mask else None
    go = torch.randn(cfg.n, cfg.c_out, cfg.ho, cfg.wo, generator=g, dtype=torch.float64)
    return [None if t is None else t.to(dtype=dtype, device=device) for t in (x, off, w, m, b, go)]


def run(fn, cfg, x, off, w, m, b, go):
    """fn's output and the gradients of <go, out> for (input, offset, weight, mask, bias) (None where absent)."""
    leaves = [None if t is None else t.detach().clone().requires_grad_() for t in (x, off, w, m, b)]
    out = fn(leaves[0], leaves[1], leaves[2], leaves[4], stride=cfg.stride, padding=cfg.padding,
             dilation=cfg.dilation, mask=leaves[3])
    out.backward(go)
    return out.detach(), [None if t is None else t.grad for t in leaves]


def truth_and_magnitudes(cfg, x, off, w, m, b, go):
    """torchvision in fp64 on these inputs, and the per-element magnitudes (module docstring)."""
    d = [None if t is None else t.double().cpu() for t in (x, off, w, m, b, go)]
    out, grads = run(tv_deform_conv2d, cfg, *d)
    a = [None if t is None else t.abs() for t in d]
    ones = torch.ones(cfg.n, cfg.offset_groups * cfg.kh * cfg.kw, cfg.ho, cfg.wo, dtype=torch.float64)
    mask_abs = a[3] if a[3] is not None else ones
    mag_out, mag = run(tv_deform_conv2d, cfg, a[0], d[1], a[2], a[3], a[4], a[5])
    _, centre = run(tv_deform_conv2d, cfg, a[0], d[1].floor() + 0.5, a[2], mask_abs, None, a[5])
    mag[1] = (4 * mask_abs * centre[3]).repeat_interleave(2, dim=1)
    return out, grads, mag_out, mag


def assert_close_mag(actual, expected, magnitude, tol, what):
    atol, rtol = tol
    a, e, m = actual.double().cpu(), expected.double().cpu(), magnitude.double().cpu()
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    bound = atol + rtol * torch.maximum(e.abs(), m)
    err = (a - e).abs()
    bad = ~(err <= bound)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {a.numel()} elements out of tolerance; worst |err| "
                           f"{err.max().item():.3g} at {tuple(torch.nonzero(bad)[0].tolist())}")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cfg", CONFIGS, ids=repr)
def test_forward_and_five_gradients_match_torchvision(cfg, dtype, device):
    x, off, w, m, b, go = make_case(cfg, dtype, device, seed=100 + CONFIGS.index(cfg))
    out, grads = run(ops.deform_conv2d, cfg, x, off, w, m, b, go)
    assert out.dtype == dtype and out.device == x.device and out.shape == (cfg.n, cfg.c_out, cfg.ho, cfg.wo)
    t_out, t_grads, mag_out, mags = truth_and_magnitudes(cfg, x, off, w, m, b, go)
    tol = TOL[dtype]
    assert_close_mag(out, t_out, mag_out, tol, f"forward {dtype} {device} vs torchvision fp64")
    for name, ours, t, mag in zip(GRADS, grads, t_grads, mags):
        if t is None:
            assert ours is None, f"grad {name}: torchvision gives none"
            continue
        assert ours is not None and ours.dtype == dtype, f"grad {name}: {None if ours is None else ours.dtype}"
        assert_close_mag(ours, t, mag, tol, f"grad {name} {dtype} {device} vs torchvision fp64")
    if dtype in (torch.float32, torch.float64) and cfg.n > 0:  # batch 0: empty outputs, zero gradients (above)
        # torchvision in the same dtype and device: both within tolerance of the truth, so within twice it.
        same_out, same_grads = run(tv_deform_conv2d, cfg, x, off, w, m, b, go)
        two = (2 * tol[0], 2 * tol[1])
        assert_close_mag(out, same_out, mag_out, two, f"forward vs torchvision {dtype} {device}")
        for name, ours, t, mag in zip(GRADS, grads, same_grads, mags):
            if t is not None:
                assert_close_mag(ours, t, mag, two, f"grad {name} vs torchvision {dtype} {device}")


@pytest.mark.parametrize("device", devices())
def test_gradcheck_fp64_all_five_inputs(device):
    cfg = Cfg("gc", 2, 4, 5, 6, 2, (3, 2), (1, 2), (1, 0), (1, 1), 2, 2)
    x, off, w, m, b, _ = make_case(cfg, torch.float64, device, seed=7)
    args = [t.requires_grad_() for t in (x, off, w, m, b)]

    def f(xx, oo, ww, mm, bb):
        return ops.deform_conv2d(xx, oo, ww, bb, stride=(1, 2), padding=(1, 0), mask=mm)

    # The CUDA input gradient is summed with atomicAdd in a varying order: repeated backwards may differ in the last
    # bits (the spec's determinism record says so), hence a nondeterminism tolerance there (torchvision's tests do
    # the same); the CPU path is deterministic and gets none.
    nondet = 1e-12 if device == "cuda" else 0.0
    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-5, rtol=1e-3, nondet_tol=nondet)


@pytest.mark.parametrize("device", devices())
def test_defaults_and_int_arguments_as_torchvision(device):
    x, off, w, m, b, _ = make_case(Cfg("d", 2, 3, 8, 9, 4, 3, padding=0), torch.float64, device, seed=11)
    torch.testing.assert_close(ops.deform_conv2d(x, off, w), tv_deform_conv2d(x, off, w))  # no bias, DCNv1
    torch.testing.assert_close(ops.deform_conv2d(x, off, w, b, mask=m), tv_deform_conv2d(x, off, w, b, mask=m))
    off2 = torch.rand(2, 18, 4, 5, generator=_gen(12), dtype=torch.float64).to(device)
    a = ops.deform_conv2d(x, off2, w, b, 2, 1, 1)  # stride, padding, dilation as ints
    torch.testing.assert_close(a, tv_deform_conv2d(x, off2, w, b, 2, 1, 1))
    torch.testing.assert_close(a, ops.deform_conv2d(x, off2, w, b, stride=(2, 2), padding=[1, 1], dilation=(1, 1)))
    # torchvision passes groups and offset_groups derived from the shapes, and a [B, 1] placeholder mask.
    raw = detops.deform_conv2d(x, w, off2, torch.zeros(2, 1, dtype=torch.float64, device=device), b, 2, 2, 1, 1, 1, 1,
                               1, 1, False)
    torch.testing.assert_close(raw, a)


@pytest.mark.parametrize("device", devices())
def test_bias_of_another_floating_dtype_is_accepted_as_torchvision(device):
    """torchvision adds the bias into the output in place, so any floating bias dtype works; the wrapper casts it."""
    x, off, w, m, b, _ = make_case(Cfg("b", 1, 3, 6, 6, 2, 3), torch.float64, device, seed=13)
    b32 = b.float().requires_grad_()
    out = ops.deform_conv2d(x, off, w, b32, padding=1, mask=m)
    torch.testing.assert_close(out, tv_deform_conv2d(x, off, w, b32.detach(), padding=1, mask=m))
    out.sum().backward()
    assert b32.grad.dtype == torch.float32
    torch.testing.assert_close(b32.grad, torch.full((2,), 36.0, device=device))


def _bad_cases(device):
    g = _gen(21)
    f64 = dict(dtype=torch.float64, device=device)
    x = torch.rand(2, 3, 8, 8, generator=g, dtype=torch.float64).to(device)
    w = torch.rand(4, 3, 3, 3, generator=g, dtype=torch.float64).to(device)
    o = torch.rand(2, 18, 6, 6, generator=g, dtype=torch.float64).to(device)
    m = torch.rand(2, 9, 6, 6, generator=g, dtype=torch.float64).to(device)
    b = torch.rand(4, generator=g, dtype=torch.float64).to(device)
    # (name, call(fn), words our message must contain)
    return [
        ("input_3d", lambda f: f(x[0], o, w, b, mask=m), "not enough values to unpack"),
        ("offset_3d", lambda f: f(x, o[0], w, b, mask=m), "offset tensor at dimension 1"),
        ("mask_3d", lambda f: f(x, o, w, b, mask=m[0]), "mask must be a 4-D tensor"),
        ("weight_3d", lambda f: f(x, o, w[0], b, mask=m), "weight must be a 4-D tensor"),
        ("integer_dtype", lambda f: f(x.int(), o.int(), w.int(), b.int(), mask=m.int()), "input must be float64"),
        ("offset_fp32_input_fp16", lambda f: f(x.half(), o.float(), w.half(), b.half(), mask=m.half()),
         "offset must have input's dtype (Half); got Float"),
        ("offset_fp32_input_fp64", lambda f: f(x, o.float(), w, b, mask=m), "offset must have input's dtype"),
        ("weight_fp32", lambda f: f(x, o, w.float(), b, mask=m), "weight must have input's dtype"),
        ("mask_fp32", lambda f: f(x, o, w, b, mask=m.float()), "mask must have input's dtype"),
        ("offset_rows_not_multiple_of_2_kh_kw", lambda f: f(x, o[:, :5], w, b, mask=m), "offset tensor at dimension 1"),
        ("offset_rows_17", lambda f: f(x, o[:, :17], w, b, mask=m), "offset tensor at dimension 1"),
        ("offset_input_sized", lambda f: f(x, torch.rand(2, 18, 8, 8, **f64), w, b, mask=m),
         "offset must have shape [2, 18, 6, 6]"),
        ("offset_batch", lambda f: f(x, o[:1], w, b, mask=m), "offset must have shape [2, 18, 6, 6]"),
        ("mask_rows", lambda f: f(x, o, w, b, mask=torch.rand(2, 18, 6, 6, **f64)), "mask must have shape [2, 9, 6, 6]"),
        ("bias_length", lambda f: f(x, o, w, b[:3], mask=m), "bias must have shape [4]"),
        ("weight_channels", lambda f: f(x, o, w[:, :2], b, mask=m), "weight.size(1) * groups"),
        ("weight_channels_above_input", lambda f: f(x, o, torch.rand(4, 6, 3, 3, **f64), b, mask=m), "weight.shape[1]"),
        ("out_channels_not_divisible", lambda f: f(torch.rand(2, 4, 8, 8, **f64), o, torch.rand(3, 2, 3, 3, **f64),
                                                   b[:3], mask=m), "divisible by groups"),
        ("channels_not_divisible_by_offset_groups", lambda f: f(x, torch.rand(2, 36, 6, 6, **f64), w, b,
                                                                mask=torch.rand(2, 18, 6, 6, **f64)),
         "divisible by offset_groups"),
        ("kernel_taller_than_padded_input", lambda f: f(x, o, torch.rand(4, 3, 9, 3, **f64), b, mask=m),
         "offset tensor at dimension 1"),
        ("stride_negative", lambda f: f(x, o, w, b, stride=(-1, 1), mask=m), "stride must be >= 1"),
        ("padding_negative", lambda f: f(x, o, w, b, padding=-1, mask=m), "padding must be >= 0"),
        ("dilation_zero", lambda f: f(x, o, w, b, dilation=0, mask=m), "dilation must be >= 1"),
        ("stride_three_values", lambda f: f(x, o, w, b, stride=(1, 1, 1), mask=m), "too many values to unpack"),
    ]


@pytest.mark.parametrize("device", devices())
def test_bad_inputs_raise_torchvisions_error_types_naming_the_argument(device):
    for name, call, words in _bad_cases(device):
        with pytest.raises(Exception) as theirs:
            call(tv_deform_conv2d)
        with pytest.raises(Exception) as ours:
            call(ops.deform_conv2d)
        assert type(ours.value) is type(theirs.value), (
            f"{name}: ours {type(ours.value).__name__}, torchvision {type(theirs.value).__name__}")
        assert words in str(ours.value), f"{name}: {str(ours.value)!r} lacks {words!r}"
    # The process stays usable.
    x, off, w, m, b, _ = make_case(CONFIGS[0], torch.float64, device, seed=22)
    torch.testing.assert_close(ops.deform_conv2d(x, off, w, b, padding=1), tv_deform_conv2d(x, off, w, b, padding=1))


@pytest.mark.parametrize("device", devices())
def test_inputs_torchvision_crashes_on_are_refused(device):
    """stride 0 kills torchvision's process (SIGFPE: a division by the stride) and a mask on another device is
    read as if it were the input's (garbage output); ours raises RuntimeError naming the argument. Not run
    against torchvision, which would take the test process down."""
    x, off, w, m, b, _ = make_case(Cfg("c", 2, 3, 8, 8, 4, 3, padding=0), torch.float32, device, seed=23)
    with pytest.raises(RuntimeError, match=r"stride must be >= 1; got \(0, 0\)"):
        ops.deform_conv2d(x, off, w, b, stride=0, mask=m)
    with pytest.raises(RuntimeError, match="input and mask must be on the same device"):
        ops.deform_conv2d(x, off, w, b, mask=m.to("meta"))


@pytest.mark.parametrize("device", devices())
def test_raw_op_bad_groups_raise_torchvisions_type(device):
    x, off, w, m, b, _ = make_case(Cfg("rg", 2, 4, 8, 8, 4, 3, padding=0, offset_groups=2), torch.float32, device,
                                   seed=38)
    for groups, offset_groups, words in ((0, 2, "groups must be >= 1"), (1, 0, "offset_groups must be >= 1"),
                                         (1, 3, "divisible by offset_groups 3")):
        args = (x, w, off, m, b, 1, 1, 0, 0, 1, 1, groups, offset_groups, True)
        with pytest.raises(RuntimeError) as theirs:
            torch.ops.torchvision.deform_conv2d(*args)
        with pytest.raises(RuntimeError, match=words) as ours:
            detops.deform_conv2d(*args)
        assert type(ours.value) is type(theirs.value)


@pytest.mark.parametrize("device", devices())
def test_mixed_dtypes_refused_naming_offset_and_input(device):
    x, off, w, m, b, _ = make_case(Cfg("mx", 1, 2, 6, 6, 2, 3), torch.float16, device, seed=24)
    with pytest.raises(RuntimeError, match=r"offset must have input's dtype \(Half\); got Float") as ours:
        ops.deform_conv2d(x, off.float(), w, b, padding=1, mask=m)
    with pytest.raises(RuntimeError) as theirs:  # torchvision: "expected scalar type Half but found Float"
        tv_deform_conv2d(x, off.float(), w, b, padding=1, mask=m)
    assert type(ours.value) is type(theirs.value)


@pytest.mark.parametrize("device", devices())
def test_nan_offsets_contribute_nothing(device):
    """A tap whose dy or dx is NaN contributes 0 to the output and to every gradient: the same as that tap with
    any finite offset and mask 0. torchvision gives NaN there (docs/ops/deform_conv2d.md)."""
    cfg = Cfg("nan", 2, 4, 6, 7, 3, 3, offset_groups=2)
    x, off, w, m, b, go = make_case(cfg, torch.float64, device, seed=25)
    nan = torch.rand(off.shape, generator=_gen(26)).to(device) < 0.2
    off_nan = off.masked_fill(nan, float("nan"))
    tap_nan = (nan[:, 0::2] | nan[:, 1::2])  # [B, og kh kw, Ho, Wo]: the taps with a NaN coordinate
    out, grads = run(ops.deform_conv2d, cfg, x, off_nan, w, m, b, go)
    t_out, t_grads = run(tv_deform_conv2d, cfg, x, off.masked_fill(nan, 0.0), w, m.masked_fill(tap_nan, 0.0), b, go)
    torch.testing.assert_close(out, t_out)
    for name, ours, t in zip(GRADS, grads, t_grads):
        if name == "offset":
            keep = ~tap_nan.repeat_interleave(2, dim=1)
            assert torch.count_nonzero(ours[~keep]) == 0, "grad offset of a NaN tap is not 0"
            torch.testing.assert_close(ours[keep], t[keep])
        elif name == "mask":
            assert torch.count_nonzero(ours[tap_nan]) == 0, "grad mask of a NaN tap is not 0"
            torch.testing.assert_close(ours[~tap_nan], t[~tap_nan])
        else:
            torch.testing.assert_close(ours, t, msg=lambda s: f"grad {name}: {s}")


@pytest.mark.parametrize("device", devices())
def test_batch0(device):
    cfg = Cfg("b0", 0, 3, 6, 7, 4, 3, groups=1)
    x, off, w, m, b, go = make_case(cfg, torch.float32, device, seed=27)
    out, grads = run(ops.deform_conv2d, cfg, x, off, w, m, b, go)
    assert out.shape == (0, 4, 6, 7)
    for name, ours, leaf in zip(GRADS, grads, (x, off, w, m, b)):
        assert ours.shape == leaf.shape and torch.count_nonzero(ours) == 0, name


@pytest.mark.parametrize("device", devices())
def test_only_requested_gradients_and_double_backward_refused(device):
    x, off, w, m, b, _ = make_case(Cfg("rq", 1, 2, 5, 5, 2, 3), torch.float64, device, seed=28)
    w.requires_grad_()
    m.requires_grad_()
    ops.deform_conv2d(x, off, w, b, padding=1, mask=m).sum().backward()
    assert x.grad is None and off.grad is None and b.grad is None and w.grad is not None and m.grad is not None
    x.requires_grad_()
    out = ops.deform_conv2d(x, off, w, b, padding=1, mask=m)
    (gx,) = torch.autograd.grad((out * out).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward is not supported"):
        gx.sum().backward()


@pytest.mark.parametrize("device", devices())
def test_noncontiguous_inputs_give_the_contiguous_result(device):
    cfg = Cfg("nc", 2, 4, 7, 8, 4, 3, groups=2, offset_groups=2)
    x, off, w, m, b, go = make_case(cfg, torch.float32, device, seed=29)
    out, grads = run(ops.deform_conv2d, cfg, x, off, w, m, b, go)
    off_nc, w_nc, m_nc, go_nc = (t.transpose(2, 3).contiguous().transpose(2, 3) for t in (off, w, m, go))  # W-major
    x_nc = x.to(memory_format=torch.channels_last)
    assert not any(t.is_contiguous() for t in (x_nc, off_nc, w_nc, m_nc, go_nc))
    out_nc, grads_nc = run(ops.deform_conv2d, cfg, x_nc, off_nc, w_nc, m_nc, b, go_nc)
    assert torch.equal(out, out_nc)
    for name, a, c in zip(GRADS, grads, grads_nc):
        # Bit for bit but CUDA's grad_input, whose atomic scatter's order varies between runs.
        tol = {} if device == "cuda" and name == "input" else dict(atol=0, rtol=0)
        torch.testing.assert_close(a, c, **tol, msg=lambda s: f"grad {name}: {s}")


def test_meta_shapes_and_checks():
    meta = dict(device="meta")
    x, w = torch.empty(2, 6, 11, 12, **meta), torch.empty(8, 3, 3, 3, **meta)
    off, m, b = torch.empty(2, 36, 5, 6, **meta), torch.empty(2, 18, 5, 6, **meta), torch.empty(8, **meta)
    out = detops.deform_conv2d(x, w, off, m, b, 2, 2, 0, 1, 1, 1, 2, 2, True)
    assert out.shape == (2, 8, 5, 6) and out.device.type == "meta"
    g = detops._deform_conv2d_backward(torch.empty(2, 8, 5, 6, **meta), x, w, off, m, b, 2, 2, 0, 1, 1, 1, 2, 2, True)
    assert [t.shape for t in g] == [x.shape, w.shape, off.shape, m.shape, b.shape]
    with pytest.raises(RuntimeError, match=r"offset must have shape \[2, 36, 5, 6\]"):
        detops.deform_conv2d(x, w, torch.empty(2, 36, 6, 6, **meta), m, b, 2, 2, 0, 1, 1, 1, 2, 2, True)
    assert ops.deform_conv2d(x, off, w, b, stride=2, padding=(0, 1), mask=m).shape == (2, 8, 5, 6)


def test_fake_tensor_mode_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x, w = torch.empty(3, 4, 9, 10), torch.empty(5, 4, 3, 1)
        off = torch.empty(3, 2 * 3, 9, 10)
        out = ops.deform_conv2d(x, off, w, padding=(1, 0))
        assert out.shape == (3, 5, 9, 10)


@pytest.mark.parametrize("use_mask", [False, True])
def test_opcheck(use_mask):
    cfg = Cfg("oc", 2, 4, 5, 6, 4, 3, groups=2, offset_groups=2, mask=use_mask)
    x, off, w, m, b, go = make_case(cfg, torch.float64, "cpu", seed=30)
    m = m if use_mask else torch.zeros(2, 1, dtype=torch.float64)
    args = [t.requires_grad_() for t in (x, w, off, m, b)]
    torch.library.opcheck(detops.deform_conv2d.default, (*args, 1, 1, 1, 1, 1, 1, 2, 2, use_mask))
    torch.library.opcheck(detops._deform_conv2d_backward.default,
                          (go, *[t.detach() for t in args], 1, 1, 1, 1, 1, 1, 2, 2, use_mask))


def test_deform_conv2d_module_as_torchvisions():
    for kwargs in (dict(stride=2, padding=1, dilation=1, groups=2, bias=True), dict(padding=(1, 0), bias=False)):
        torch.manual_seed(31)
        kernel = 3 if "groups" in kwargs else (3, 1)
        theirs = torchvision.ops.DeformConv2d(4, 6, kernel, **kwargs)
        torch.manual_seed(31)
        ours = ops.DeformConv2d(4, 6, kernel, **kwargs)
        assert repr(ours) == repr(theirs)
        assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
        for (n, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
            assert torch.equal(p, q), n
        ours, theirs = ours.double(), theirs.double()
        x = torch.rand(2, 4, 9, 8, generator=_gen(32), dtype=torch.float64)
        taps, hw = ours.kernel_size[0] * ours.kernel_size[1], _out_hw(ours, x)
        off = torch.rand(2, 2 * taps, *hw, generator=_gen(33), dtype=torch.float64) * 4 - 2
        mask = torch.rand(2, taps, *hw, generator=_gen(34), dtype=torch.float64)
        torch.testing.assert_close(ours(x, off), theirs(x, off))
        torch.testing.assert_close(ours(x, off, mask), theirs(x, off, mask))
    for bad in (dict(in_channels=3, groups=2), dict(out_channels=3, groups=2)):
        args = dict(in_channels=4, out_channels=6, kernel_size=3)
        args.update(bad)
        with pytest.raises(ValueError) as theirs_err:
            torchvision.ops.DeformConv2d(**args)
        with pytest.raises(ValueError, match=str(theirs_err.value)):
            ops.DeformConv2d(**args)


def _out_hw(mod, x):
    return tuple(_out_size(x.shape[2 + i], mod.kernel_size[i], mod.padding[i], mod.dilation[i], mod.stride[i])
                 for i in range(2))


def test_cpu_backward_deterministic_and_allowed_in_deterministic_mode():
    cfg = Cfg("det", 2, 4, 7, 8, 4, 3, offset_groups=2)
    x, off, w, m, b, go = make_case(cfg, torch.float32, "cpu", seed=35)
    torch.use_deterministic_algorithms(True)
    try:
        first = run(ops.deform_conv2d, cfg, x, off, w, m, b, go)
        second = run(ops.deform_conv2d, cfg, x, off, w, m, b, go)
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(first[0], second[0])
    for a, c in zip(first[1], second[1]):
        assert torch.equal(a, c)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: only the CUDA backward scatters with atomics")
def test_cuda_backward_refuses_deterministic_mode():
    cfg = Cfg("detc", 2, 4, 7, 8, 4, 3)
    x, off, w, m, b, _ = make_case(cfg, torch.float32, "cuda", seed=36)
    x.requires_grad_()
    torch.use_deterministic_algorithms(True)
    try:
        out = ops.deform_conv2d(x, off, w, b, padding=1, mask=m)  # the forward is deterministic: it runs
        with pytest.raises(RuntimeError, match="_deform_conv2d_backward"):
            out.sum().backward()
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CPU path has no TF32 mode")
def test_cuda_fp32_tf32_flag_follows_torch_matmul():
    """With torch.backends.cuda.matmul.allow_tf32 the fp32 GEMMs may use TF32 (as torchvision's addmm): the
    result stays within TF32's error of the fp64 truth; with it off, within fp32's."""
    cfg = Cfg("tf32", 2, 64, 20, 22, 64, 3)
    x, off, w, m, b, go = make_case(cfg, torch.float32, "cuda", seed=37)
    t_out, _, mag_out, _ = truth_and_magnitudes(cfg, x, off, w, m, b, go)
    assert_close_mag(ops.deform_conv2d(x, off, w, b, padding=1, mask=m), t_out, mag_out, TOL[torch.float32], "fp32")
    torch.backends.cuda.matmul.allow_tf32 = True
    out = ops.deform_conv2d(x, off, w, b, padding=1, mask=m)
    assert_close_mag(out, t_out, mag_out, (1e-4, 2 * 2.0 ** -11), "tf32")
    assert math.isfinite(out.abs().max().item())
