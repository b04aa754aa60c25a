"""torch.ops.detops.ps_roi_align / ps_roi_pool against torchvision.ops.ps_roi_align / ps_roi_pool on the same inputs.

Where DetOps deliberately differs from torchvision 0.26 (docs/ops/ps_roi.md, "Known differences"), the parity
tests leave those inputs out and separate tests pin the difference down.
"""
import math
from fractions import Fraction

import pytest
import torch

from conftest import assert_sum_backward_close, devices, random_image_rois

torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed: no peer to compare against")
from torchvision.ops import ps_roi_align as tv_ps_roi_align  # noqa: E402
from torchvision.ops import ps_roi_pool as tv_ps_roi_pool  # noqa: E402

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
# (atol, rtol) per dtype, as in the C++ harness table; fp32 atol 1e-4 for fp32 sample positions (as RoIAlign's test).
TOL = {torch.float64: (1e-10, 1e-10), torch.float32: (1e-4, 1e-5), torch.float16: (1e-3, 2e-3), torch.bfloat16: (8e-3, 1.6e-2)}


def make_inputs(seed, n, c_out, ph, pw, h, w, k, scale, dtype, device):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, c_out * ph * pw, h, w, generator=g, dtype=torch.float64) * 2 - 1
    rois = random_image_rois(g, n, k, h, w, scale)
    return x.to(device, dtype), rois.to(device, dtype)


def round_half_away(v):
    f = Fraction(v)
    q = math.floor(abs(f) + Fraction(1, 2))
    return q if f >= 0 else -q


def _tv_bins_are_exact(start, size, bins, limit, dt):
    """Whether torchvision's floating-point bins (in dtype dt), with its forward clip to [0, limit-1] and its
    backward clip to [0, limit], cover the same pixels as DetOps' exact bins clipped to [0, limit]."""
    bin_size = torch.tensor(float(size), dtype=dt) / torch.tensor(float(bins), dtype=dt)

    def cells(lo, hi, top):
        lo, hi = min(max(lo, 0), top), min(max(hi, 0), top)
        return (lo, hi) if hi > lo else None

    for i in range(bins):
        lo_tv = start + math.floor(float(torch.tensor(float(i), dtype=dt) * bin_size))
        hi_tv = start + math.ceil(float(torch.tensor(float(i + 1), dtype=dt) * bin_size))
        lo_ex, hi_ex = start + (i * size) // bins, start - ((-(i + 1) * size) // bins)
        exact = cells(lo_ex, hi_ex, limit)
        if cells(lo_tv, hi_tv, limit - 1) != exact or cells(lo_tv, hi_tv, limit) != exact:
            return False
    return True


def pool_rois_torchvision_agrees_on(rois, scale, ph, pw, h, w):
    """Mask of the rois on which torchvision 0.26's ps_roi_pool (fp32 and fp64 arithmetic) pools the pixels of
    the definition: no bin reaching the last row or column, no bin boundary moved by float rounding."""
    keep = []
    for r in rois.double().cpu().tolist():
        ok = True
        for dt in (torch.float32, torch.float64):
            x1, y1, x2, y2 = (round_half_away(float(torch.tensor(v, dtype=dt) * torch.tensor(scale, dtype=dt))) for v in r[1:])
            rw, rh = max(x2 - x1, 1), max(y2 - y1, 1)
            ok = ok and _tv_bins_are_exact(y1, rh, ph, h, dt) and _tv_bins_are_exact(x1, rw, pw, w, dt)
        keep.append(ok)
    return torch.tensor(keep, dtype=torch.bool, device=rois.device)


def ours(op, x, rois, scale, ph, pw, sr):
    if op == "align":
        return torch.ops.detops.ps_roi_align(x, rois, scale, ph, pw, sr)
    return torch.ops.detops.ps_roi_pool(x, rois, scale, ph, pw)


def theirs(op, x, rois, scale, ph, pw, sr):
    if op == "align":
        return torch.ops.torchvision.ps_roi_align(x, rois, scale, ph, pw, sr)
    return torch.ops.torchvision.ps_roi_pool(x, rois, scale, ph, pw)


def theirs_public(op, x, rois, scale, ph, pw, sr):
    """torchvision.ops.ps_roi_align / ps_roi_pool (the public wrappers, which return the output only)."""
    if op == "align":
        return tv_ps_roi_align(x, rois, (ph, pw), spatial_scale=scale, sampling_ratio=sr)
    return tv_ps_roi_pool(x, rois, (ph, pw), spatial_scale=scale)


CASES = [
    # op, seed, (n, c_out, h, w), k, scale, (ph, pw), sampling_ratio (align only)
    ("align", 1, (2, 2, 20, 24), 17, 0.25, (7, 7), 2),
    ("align", 2, (2, 2, 20, 24), 17, 0.25, (7, 7), 0),
    ("align", 3, (1, 3, 25, 42), 9, 1 / 32, (3, 3), 0),
    ("align", 4, (3, 4, 13, 21), 30, 1 / 16, (1, 1), 1),
    ("align", 5, (2, 10, 50, 84), 40, 1 / 8, (7, 7), 2),  # R-FCN's 10 * 7 * 7 = 490 channels on a smaller map
    ("align", 6, (2, 2, 9, 9), 0, 0.5, (3, 3), 2),
    ("align", 7, (2, 1, 16, 16), 12, 1.0, (3, 5), 0),
    ("pool", 11, (2, 2, 20, 24), 17, 0.25, (7, 7), None),
    ("pool", 12, (1, 3, 25, 42), 9, 1 / 32, (3, 3), None),
    ("pool", 13, (3, 4, 13, 21), 30, 1 / 16, (1, 1), None),
    ("pool", 14, (2, 10, 50, 84), 40, 1 / 8, (7, 7), None),
    ("pool", 15, (2, 2, 9, 9), 0, 0.5, (3, 3), None),
    ("pool", 16, (2, 1, 40, 40), 25, 1.0, (3, 5), None),
    ("pool", 17, (2, 2, 40, 44), 25, 0.5, (2, 2), None),
]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}{c[1]}" for c in CASES])
def test_forward_and_backward_match_torchvision(device, case):
    """Ours in each dtype against torchvision in fp64 on the same (rounded) inputs, forward and backward.

    torchvision has no bf16 kernels and computes fp16 in fp16, so its fp64 result on our rounded inputs is the
    fair target; in fp32 and fp64 both run the same algorithm and must also agree with each other directly.
    channel_mapping must equal torchvision's exactly (int32).
    """
    op, seed, (n, c_out, h, w), k, scale, (ph, pw), sr = case
    for dtype in DTYPES:
        x, rois = make_inputs(seed, n, c_out, ph, pw, h, w, k, scale, dtype, device)
        if op == "pool":
            keep = pool_rois_torchvision_agrees_on(rois, scale, ph, pw, h, w)
            assert 2 * int(keep.sum()) >= k, "too few rois left to compare: the parity test would say little"
            rois = rois[keep]
        xp, rp = x.detach().double().requires_grad_(), rois.double()
        x = x.detach().requires_grad_()

        out, mapping = ours(op, x, rois, scale, ph, pw, sr)
        truth = theirs_public(op, xp, rp, scale, ph, pw, sr)
        _, truth_mapping = theirs(op, xp.detach(), rp, scale, ph, pw, sr)
        assert mapping.dtype == truth_mapping.dtype == torch.int32
        assert torch.equal(mapping.cpu(), truth_mapping.cpu()), f"channel_mapping {dtype} {device}"
        assert not mapping.requires_grad
        atol, rtol = TOL[dtype]
        torch.testing.assert_close(out.double(), truth, atol=atol, rtol=rtol,
                                   msg=lambda m: f"forward {dtype} {device} vs torchvision fp64: {m}")
        if dtype in (torch.float32, torch.float64):
            same = theirs_public(op, x.detach(), rois, scale, ph, pw, sr)
            torch.testing.assert_close(out.detach(), same, atol=atol, rtol=rtol,
                                       msg=lambda m: f"forward {dtype} {device} vs torchvision {dtype}: {m}")

        assert_sum_backward_close(out, truth, x, xp, atol, rtol)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", ["align", "pool"])
def test_backward_ops_take_torchvision_arguments(device, op):
    """The _*_backward ops accept torchvision's positional arguments (channel_mapping included) and agree with it."""
    x, rois = make_inputs(21, 2, 2, 3, 3, 12, 14, 7, 0.5, torch.float64, device)
    rois = rois if op == "align" else rois[pool_rois_torchvision_agrees_on(rois, 0.5, 3, 3, 12, 14)]
    _, mapping = theirs(op, x, rois, 0.5, 3, 3, 2)
    grad = torch.randn(rois.shape[0], 2, 3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3)).to(device)
    if op == "align":
        args = (grad, rois, mapping, 0.5, 3, 3, 2, 2, 18, 12, 14)
        got, want = torch.ops.detops._ps_roi_align_backward(*args), torch.ops.torchvision._ps_roi_align_backward(*args)
    else:
        args = (grad, rois, mapping, 0.5, 3, 3, 2, 18, 12, 14)
        got, want = torch.ops.detops._ps_roi_pool_backward(*args), torch.ops.torchvision._ps_roi_pool_backward(*args)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", ["align", "pool"])
def test_gradcheck_fp64(device, op):
    x, rois = make_inputs(31, 1, 2, 2, 3, 6, 7, 3, 0.5, torch.float64, device)
    x.requires_grad_()
    assert torch.autograd.gradcheck(lambda t: ours(op, t, rois, 0.5, 2, 3, 2)[0], (x,), eps=1e-6, atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", ["align", "pool"])
def test_bad_input_raises_and_process_stays_usable(device, op):
    x, rois = make_inputs(41, 2, 2, 2, 2, 8, 8, 4, 1.0, torch.float32, device)
    fn = torch.ops.detops.ps_roi_align if op == "align" else torch.ops.detops.ps_roi_pool
    extra = (2,) if op == "align" else ()
    name = "ps_roi_" + op
    # Argument errors raise ValueError / IndexError / TypeError (subclasses of Exception, as ATen's own checks do).
    with pytest.raises(ValueError, match=r"input channels \(8\) must be a multiple of pooled_height \* pooled_width"):
        fn(x, rois, 1.0, 3, 1, *extra)
    with pytest.raises(ValueError, match=f"{name}: rois must be a 2-D tensor"):
        fn(x, rois[:, :4], 1.0, 2, 2, *extra)
    bad = rois.clone()
    bad[2, 0] = 5
    with pytest.raises(IndexError, match=r"rois\[2, 0\]"):
        fn(x, bad, 1.0, 2, 2, *extra)
    with pytest.raises(ValueError, match="pooled_height must be positive"):
        fn(x, rois, 1.0, 0, 2, *extra)
    with pytest.raises(TypeError, match="rois dtype"):
        fn(x, rois.double(), 1.0, 2, 2, *extra)
    out, mapping = fn(x, rois, 1.0, 2, 2, *extra)
    grad = torch.ones_like(out)
    backward = torch.ops.detops._ps_roi_align_backward if op == "align" else torch.ops.detops._ps_roi_pool_backward
    with pytest.raises(TypeError, match="channel_mapping must be int32"):
        backward(grad, rois, mapping.long(), 1.0, 2, 2, *extra, 2, 8, 8, 8)
    ref, ref_mapping = theirs(op, x, rois, 1.0, 2, 2, 2)
    if op == "align":  # ps_roi_pool: these rois reach the last row, where torchvision's forward differs (below)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert torch.equal(mapping, ref_mapping)


@pytest.mark.parametrize("op", ["align", "pool"])
def test_double_backward_is_refused_clearly(op):
    x, rois = make_inputs(51, 1, 2, 2, 2, 6, 7, 3, 0.5, torch.float64, "cpu")
    x.requires_grad_()
    out, _ = ours(op, x, rois, 0.5, 2, 2, 2)
    (g,) = torch.autograd.grad((out * out).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward is not supported"):
        g.sum().backward()


@pytest.mark.parametrize("op", ["align", "pool"])
def test_meta_tensors_give_shapes(op):
    x = torch.empty(2, 3 * 7 * 6, 10, 12, device="meta")
    rois = torch.empty(5, 5, device="meta")
    out, mapping = ours(op, x, rois, 0.25, 7, 6, 2)
    assert out.shape == mapping.shape == (5, 3, 7, 6)
    assert out.device.type == mapping.device.type == "meta"
    assert mapping.dtype == torch.int32
    with pytest.raises(ValueError, match="must be a multiple of"):
        ours(op, torch.empty(2, 40, 10, 12, device="meta"), rois, 0.25, 7, 6, 2)


@pytest.mark.parametrize("device", devices())
def test_ps_roi_pool_includes_last_row_and_column(device):
    """Known difference: torchvision 0.26's ps_roi_pool forward clips bins to [0, H-1) x [0, W-1), leaving out the
    map's last row and column, while its backward clips to [0, H) x [0, W). DetOps pools the whole bin clipped
    to the map in both directions, so its forward is the adjoint of torchvision's (and its own) backward."""
    x, _ = make_inputs(61, 1, 1, 1, 1, 5, 6, 0, 1.0, torch.float64, device)
    rois = torch.tensor([[0, 0, 0, 6, 5]], dtype=torch.float64, device=device)  # the whole 5 x 6 map
    out, _ = torch.ops.detops.ps_roi_pool(x, rois, 1.0, 1, 1)
    tv_out, mapping = torch.ops.torchvision.ps_roi_pool(x, rois, 1.0, 1, 1)
    torch.testing.assert_close(out.flatten(), x.mean().reshape(1), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(tv_out.flatten(), x[..., :4, :5].mean().reshape(1), atol=1e-12, rtol=1e-12)
    g = torch.tensor([[[[1.7]]]], dtype=torch.float64, device=device)
    tv_grad = torch.ops.torchvision._ps_roi_pool_backward(g, rois, mapping, 1.0, 1, 1, 1, 1, 5, 6)
    torch.testing.assert_close((g * out).sum(), (tv_grad * x).sum(), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("device", devices())
def test_ps_roi_pool_bins_use_exact_integer_boundaries(device):
    """Known difference: torchvision computes bin i's rows as [floor(i * b), ceil((i + 1) * b)) with b = roi_h / ph
    in floating point. For a 29-row roi and 7 bins, fp64 gives 7 * b = 29.000000000000004, so its last bin takes a
    30th row. DetOps uses exact integer arithmetic: the last bin is rows [24, 29)."""
    x, _ = make_inputs(71, 1, 1, 7, 1, 40, 5, 0, 1.0, torch.float64, device)
    rois = torch.tensor([[0, 0, 0, 3, 29]], dtype=torch.float64, device=device)
    out, _ = torch.ops.detops.ps_roi_pool(x, rois, 1.0, 7, 1)
    tv_out, _ = torch.ops.torchvision.ps_roi_pool(x, rois, 1.0, 7, 1)
    # Bin 6 reads input channel 6; exact rows floor(6 * 29 / 7) = 24 .. ceil(29) = 29.
    torch.testing.assert_close(out[0, 0, 6, 0], x[0, 6, 24:29, 0:3].mean(), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(tv_out[0, 0, 6, 0], x[0, 6, 24:30, 0:3].mean(), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(out[0, 0, :6], tv_out[0, 0, :6], atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("sr", [0, 2])
def test_ps_roi_align_empty_and_nan_rois_give_zero(device, sr):
    """A zero-size roi with an adaptive grid has no samples: DetOps averages over max(count, 1) and returns 0 where
    torchvision 0.26 divides 0 by 0 (NaN). NaN coordinates give 0 (torchvision is not called: its 0.26 CPU
    kernel segfaults on them with sampling_ratio > 0)."""
    x, _ = make_inputs(81, 1, 1, 2, 2, 6, 6, 0, 1.0, torch.float64, device)
    nan = float("nan")
    rois = torch.tensor([[0, 2, 2, 2, 2], [0, nan, 1, 3, 3], [0, 1, nan, 3, 3], [0, 1, 1, nan, 3], [0, 1, 1, 3, nan]],
                        dtype=torch.float64, device=device)
    out, _ = torch.ops.detops.ps_roi_align(x, rois, 1.0, 2, 2, sr)
    if sr == 0:
        assert torch.equal(out[0], torch.zeros_like(out[0]))
        tv_out, _ = torch.ops.torchvision.ps_roi_align(x, rois[:1], 1.0, 2, 2, sr)
        assert torch.isnan(tv_out).all(), "torchvision no longer returns NaN here: update docs/ops/ps_roi.md"
    assert torch.isfinite(out).all()
    x.requires_grad_()
    out, _ = torch.ops.detops.ps_roi_align(x, rois[1:], 1.0, 2, 2, sr)
    out.sum().backward()
    assert torch.equal(out, torch.zeros_like(out))
    assert torch.equal(x.grad, torch.zeros_like(x.grad))


@pytest.mark.parametrize("device", devices())
def test_ps_roi_pool_nan_and_infinite_rois(device):
    """NaN coordinates pool nothing (0); infinite ones are clamped to +-2^30 and clipped to the map."""
    x, _ = make_inputs(91, 1, 1, 1, 1, 5, 6, 0, 1.0, torch.float64, device)
    inf, nan = float("inf"), float("nan")
    rois = torch.tensor([[0, nan, 0, 3, 3], [0, -inf, -inf, inf, inf], [0, 0, 0, inf, 2]], dtype=torch.float64, device=device)
    out, _ = torch.ops.detops.ps_roi_pool(x, rois, 1.0, 1, 1)
    assert out[0].item() == 0
    torch.testing.assert_close(out[1].flatten(), x.mean().reshape(1), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(out[2].flatten(), x[..., 0:2, :].mean().reshape(1), atol=1e-12, rtol=1e-12)
