"""torch.ops.detops.ps_roi_align / ps_roi_pool against torchvision.ops.ps_roi_align / ps_roi_pool on the same inputs.

By default both give torchvision 0.26's answers; the options (ps_roi_align's zero_empty_bins, ps_roi_pool's
exact_bins) give DetOps's corrected semantics, pinned down by separate tests. Where DetOps still differs
(docs/ops/ps_roi.md, "Known differences"), the parity tests leave those inputs out.
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


def _float_bins(size, bins, dt):
    b = torch.tensor(float(size), dtype=dt) / torch.tensor(float(bins), dtype=dt)
    return [(math.floor(float(torch.tensor(float(i), dtype=dt) * b)), math.ceil(float(torch.tensor(float(i + 1), dtype=dt) * b)))
            for i in range(bins)]


def pool_rois_fp32_bins_agree(rois, scale, ph, pw):
    """Mask of the rois whose bins are the same in DetOps's fp32 arithmetic (fp32, fp16, bf16) and in
    torchvision's fp64 one, with the roi corners rounded alike in both: there an fp64 torchvision result is
    the truth for the lower dtypes. (torchvision's bins depend on the dtype: floor(i * b), ceil((i + 1) * b)
    with b = roi_size / bins in the input's type.)"""
    keep = []
    for r in rois.double().cpu().tolist():
        corners = {dt: [round_half_away(float(torch.tensor(v, dtype=dt) * torch.tensor(scale, dtype=dt))) for v in r[1:]]
                   for dt in (torch.float32, torch.float64)}
        ok = corners[torch.float32] == corners[torch.float64]
        x1, y1, x2, y2 = corners[torch.float64]
        for size, bins in ((max(y2 - y1, 1), ph), (max(x2 - x1, 1), pw)):
            ok = ok and _float_bins(size, bins, torch.float32) == _float_bins(size, bins, torch.float64)
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
        if op == "pool" and dtype != torch.float64:
            # ps_roi_pool's bins follow the dtype (as torchvision's): against the fp64 truth, only the rois whose
            # fp32 bins equal the fp64 ones. fp32 is also compared with torchvision fp32 on every roi below.
            keep = pool_rois_fp32_bins_agree(rois, scale, ph, pw)
            assert 2 * int(keep.sum()) >= k, "too few rois left to compare: the parity test would say little"
            if dtype == torch.float32:
                all_out, _ = ours(op, x, rois, scale, ph, pw, sr)
                torch.testing.assert_close(all_out, theirs_public(op, x, rois, scale, ph, pw, sr), atol=1e-4, rtol=1e-5,
                                           msg=lambda m: f"forward fp32 {device} vs torchvision fp32, every roi: {m}")
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
    if op == "pool":  # the corrected semantics: the backward is the forward's gradient everywhere
        fn = lambda t: torch.ops.detops.ps_roi_pool(t, rois, 0.5, 2, 3, True)[0]  # noqa: E731
    else:
        fn = lambda t: ours(op, t, rois, 0.5, 2, 3, 2)[0]  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x,), eps=1e-6, atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("device", devices())
def test_ps_roi_pool_default_gradcheck_off_the_last_row_and_column(device):
    """torchvision's ps_roi_pool backward is the forward's gradient where no bin reaches the last row or column."""
    x, _ = make_inputs(32, 1, 2, 2, 3, 8, 9, 0, 1.0, torch.float64, device)
    rois = torch.tensor([[0, 0, 0, 5, 6], [0, 2.4, 1.2, 7.3, 6.6], [0, 1, 3, 4, 5]], dtype=torch.float64, device=device)
    x.requires_grad_()
    assert torch.autograd.gradcheck(lambda t: torch.ops.detops.ps_roi_pool(t, rois, 1.0, 2, 3)[0], (x,),
                                    eps=1e-6, atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", ["align", "pool"])
def test_bad_input_raises_and_process_stays_usable(device, op):
    x, rois = make_inputs(41, 2, 2, 2, 2, 8, 8, 4, 1.0, torch.float32, device)
    fn = torch.ops.detops.ps_roi_align if op == "align" else torch.ops.detops.ps_roi_pool
    extra = (2,) if op == "align" else ()
    name = "ps_roi_" + op
    # Argument errors raise ValueError / IndexError / TypeError (subclasses of Exception, as ATen's own checks do).
    with pytest.raises(RuntimeError, match=r"input channels \(8\) must be a multiple of pooled_height \* pooled_width"):
        fn(x, rois, 1.0, 3, 1, *extra)
    with pytest.raises(RuntimeError, match=f"{name}: rois must be a 2-D tensor"):
        fn(x, rois[:, :4], 1.0, 2, 2, *extra)
    bad = rois.clone()
    bad[2, 0] = 5
    with pytest.raises(IndexError, match=r"rois\[2, 0\]"):
        fn(x, bad, 1.0, 2, 2, *extra)
    with pytest.raises(RuntimeError, match="pooled_height must be positive"):
        fn(x, rois, 1.0, 0, 2, *extra)
    with pytest.raises(RuntimeError, match="rois dtype"):
        fn(x, rois.double(), 1.0, 2, 2, *extra)
    out, mapping = fn(x, rois, 1.0, 2, 2, *extra)
    grad = torch.ones_like(out)
    backward = torch.ops.detops._ps_roi_align_backward if op == "align" else torch.ops.detops._ps_roi_pool_backward
    with pytest.raises(TypeError, match="channel_mapping must be int32"):
        backward(grad, rois, mapping.long(), 1.0, 2, 2, *extra, 2, 8, 8, 8)
    ref, ref_mapping = theirs(op, x, rois, 1.0, 2, 2, 2)
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
    with pytest.raises(RuntimeError, match="must be a multiple of"):
        ours(op, torch.empty(2, 40, 10, 12, device="meta"), rois, 0.25, 7, 6, 2)


@pytest.mark.parametrize("device", devices())
def test_ps_roi_pool_last_row_and_column(device):
    """torchvision 0.26's ps_roi_pool forward clips bins to [0, H-1) x [0, W-1), leaving out the map's last row and
    column, while its backward clips to [0, H) x [0, W). The default does the same; exact_bins=True pools the
    whole bin clipped to the map in both directions, so its forward is the adjoint of torchvision's backward."""
    x, _ = make_inputs(61, 1, 1, 1, 1, 5, 6, 0, 1.0, torch.float64, device)
    rois = torch.tensor([[0, 0, 0, 6, 5]], dtype=torch.float64, device=device)  # the whole 5 x 6 map
    out, _ = torch.ops.detops.ps_roi_pool(x, rois, 1.0, 1, 1)
    exact, _ = torch.ops.detops.ps_roi_pool(x, rois, 1.0, 1, 1, exact_bins=True)
    tv_out, mapping = torch.ops.torchvision.ps_roi_pool(x, rois, 1.0, 1, 1)
    torch.testing.assert_close(tv_out.flatten(), x[..., :4, :5].mean().reshape(1), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(out, tv_out, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(exact.flatten(), x.mean().reshape(1), atol=1e-12, rtol=1e-12)
    g = torch.tensor([[[[1.7]]]], dtype=torch.float64, device=device)
    tv_grad = torch.ops.torchvision._ps_roi_pool_backward(g, rois, mapping, 1.0, 1, 1, 1, 1, 5, 6)
    grad = torch.ops.detops._ps_roi_pool_backward(g, rois, mapping, 1.0, 1, 1, 1, 1, 5, 6)
    exact_grad = torch.ops.detops._ps_roi_pool_backward(g, rois, mapping, 1.0, 1, 1, 1, 1, 5, 6, exact_bins=True)
    torch.testing.assert_close(grad, tv_grad, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(exact_grad, tv_grad, atol=1e-12, rtol=1e-12)  # the map clip: the same bins here
    torch.testing.assert_close((g * exact).sum(), (exact_grad * x).sum(), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("device", devices())
def test_ps_roi_pool_bin_boundaries(device):
    """torchvision computes bin i's rows as [floor(i * b), ceil((i + 1) * b)) with b = roi_h / ph in floating point.
    For a 29-row roi and 7 bins, fp64 gives 7 * b = 29.000000000000004, so its last bin takes a 30th row; the
    default does the same. exact_bins=True uses exact integer arithmetic: the last bin is rows [24, 29)."""
    x, _ = make_inputs(71, 1, 1, 7, 1, 40, 5, 0, 1.0, torch.float64, device)
    rois = torch.tensor([[0, 0, 0, 3, 29]], dtype=torch.float64, device=device)
    out, _ = torch.ops.detops.ps_roi_pool(x, rois, 1.0, 7, 1)
    exact, _ = torch.ops.detops.ps_roi_pool(x, rois, 1.0, 7, 1, True)
    tv_out, _ = torch.ops.torchvision.ps_roi_pool(x, rois, 1.0, 7, 1)
    # Bin 6 reads input channel 6; exact rows floor(6 * 29 / 7) = 24 .. ceil(29) = 29.
    torch.testing.assert_close(exact[0, 0, 6, 0], x[0, 6, 24:29, 0:3].mean(), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(tv_out[0, 0, 6, 0], x[0, 6, 24:30, 0:3].mean(), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(out, tv_out, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(exact[0, 0, :6], tv_out[0, 0, :6], atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("sr", [0, 2])
def test_ps_roi_align_empty_and_nan_rois(device, sr):
    """A zero-size roi (or one with an extent in (-1, 0]) with an adaptive grid has no samples: torchvision 0.26
    divides 0 by 0 (NaN), and so does the default; zero_empty_bins=True returns 0. NaN coordinates give 0 either way
    (torchvision is not called: its 0.26 CPU kernel segfaults on them with sampling_ratio > 0)."""
    x, _ = make_inputs(81, 1, 1, 2, 2, 6, 6, 0, 1.0, torch.float64, device)
    nan = float("nan")
    empty = torch.tensor([[0, 2, 2, 2, 2], [0, 3, 1, 2.5, 4], [0, 5, 5, 1, 1]], dtype=torch.float64, device=device)
    out, _ = torch.ops.detops.ps_roi_align(x, empty, 1.0, 2, 2, sr)
    zero, _ = torch.ops.detops.ps_roi_align(x, empty, 1.0, 2, 2, sr, zero_empty_bins=True)
    tv_out, _ = torch.ops.torchvision.ps_roi_align(x, empty, 1.0, 2, 2, sr)
    # NaN exactly where torchvision has NaN; the values within fp64 rounding (CUDA sums in another order).
    torch.testing.assert_close(out, tv_out, atol=1e-12, rtol=1e-12, equal_nan=True)
    if sr == 0:
        assert torch.isnan(out[:2]).all(), "torchvision no longer returns NaN here: update docs/ops/ps_roi.md"
        assert torch.equal(zero, torch.zeros_like(zero))
    else:  # a fixed grid samples degenerate rois too (as torchvision): nothing is empty
        assert torch.equal(zero, out)
    rois = torch.tensor([[0, nan, 1, 3, 3], [0, 1, nan, 3, 3], [0, 1, 1, nan, 3], [0, 1, 1, 3, nan]],
                        dtype=torch.float64, device=device)
    x.requires_grad_()
    for option in (False, True):
        out, _ = torch.ops.detops.ps_roi_align(x, rois, 1.0, 2, 2, sr, option)
        (g,) = torch.autograd.grad(out.sum(), x)
        assert torch.equal(out, torch.zeros_like(out))
        assert torch.equal(g, torch.zeros_like(g))


@pytest.mark.parametrize("device", devices())
def test_ps_roi_pool_nan_and_infinite_rois(device):
    """NaN coordinates pool nothing (0); infinite ones are clamped to +-2^30, then the bins are clipped: to the map
    with exact_bins=True, and by default short of the last row and column, as torchvision's forward clips finite
    rois (torchvision itself casts infinite coordinates to int, which is undefined)."""
    x, _ = make_inputs(91, 1, 1, 1, 1, 5, 6, 0, 1.0, torch.float64, device)
    inf, nan = float("inf"), float("nan")
    rois = torch.tensor([[0, nan, 0, 3, 3], [0, -inf, -inf, inf, inf], [0, 0, 0, inf, 2]], dtype=torch.float64, device=device)
    exact, _ = torch.ops.detops.ps_roi_pool(x, rois, 1.0, 1, 1, True)
    assert exact[0].item() == 0
    torch.testing.assert_close(exact[1].flatten(), x.mean().reshape(1), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(exact[2].flatten(), x[..., 0:2, :].mean().reshape(1), atol=1e-12, rtol=1e-12)
    out, _ = torch.ops.detops.ps_roi_pool(x, rois, 1.0, 1, 1)
    assert out[0].item() == 0
    torch.testing.assert_close(out[1].flatten(), x[..., :4, :5].mean().reshape(1), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(out[2].flatten(), x[..., 0:2, :5].mean().reshape(1), atol=1e-12, rtol=1e-12)
