"""torch.ops.detops box IoU family against torchvision.ops on the same inputs.

Pairwise (forward and backward): box_iou, generalized_box_iou, distance_box_iou, complete_box_iou. Losses (forward and backward):
generalized_box_iou_loss, distance_box_iou_loss, complete_box_iou_loss, and iou_loss (torchvision has none:
its truth is 1 - inter / (union + eps) from torchvision's own _loss_inter_union). In every dtype the truth is
torchvision in fp64 on our (rounded) inputs; in fp32 and fp64 ours must also match torchvision run in the
same dtype.
"""
import math
import zlib

import pytest
import torch

from conftest import devices

torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed: no peer to compare against")
from torchvision import ops as tv  # noqa: E402
from torchvision.ops._utils import _loss_inter_union, _upcast_non_float  # noqa: E402

detops = torch.ops.detops
DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
# (atol, rtol) per dtype, as in the C++ harness table.
TOL = {torch.float64: (1e-10, 1e-10), torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 2e-3), torch.bfloat16: (8e-3, 1.6e-2)}

# ours(a, b, **options) and torchvision's. Looked up at call time: conftest loads the library after this import.
PAIRWISE = {
    "box_iou": (lambda a, b, **k: detops.box_iou(a, b, **k), tv.box_iou),
    "generalized_box_iou": (lambda a, b, **k: detops.generalized_box_iou(a, b, **k), tv.generalized_box_iou),
    "distance_box_iou": (lambda a, b, **k: detops.distance_box_iou(a, b, 1e-7, **k),
                         lambda a, b: tv.distance_box_iou(a, b, 1e-7)),
    "complete_box_iou": (lambda a, b, **k: detops.complete_box_iou(a, b, 1e-7, **k),
                         lambda a, b: tv.complete_box_iou(a, b, 1e-7)),
}


def out_dtype(dtype):
    """Ours, like torchvision, returns float32 for float16 / bfloat16 boxes (float64 for float64)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def tv_iou_loss(boxes1, boxes2, reduction="none", eps=1e-7):
    """1 - IoU with the conventions of torchvision's other box losses (half-precision boxes upcast to float32)."""
    boxes1, boxes2 = _upcast_non_float(boxes1), _upcast_non_float(boxes2)
    inter, union = _loss_inter_union(boxes1, boxes2)
    loss = 1 - inter / (union + eps)
    if reduction == "mean":
        return loss.mean() if loss.numel() > 0 else 0.0 * loss.sum()
    return loss.sum() if reduction == "sum" else loss


# Looked up at call time: conftest loads the library after this module is imported.
LOSSES = {
    "iou_loss": (lambda *a, **k: detops.iou_loss(*a, **k), tv_iou_loss),
    "generalized_box_iou_loss": (lambda *a, **k: detops.generalized_box_iou_loss(*a, **k), tv.generalized_box_iou_loss),
    "distance_box_iou_loss": (lambda *a, **k: detops.distance_box_iou_loss(*a, **k), tv.distance_box_iou_loss),
    "complete_box_iou_loss": (lambda *a, **k: detops.complete_box_iou_loss(*a, **k), tv.complete_box_iou_loss),
}


def boxes_from(cx, cy, w, h):
    return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)


def random_boxes(g, n, c_lo=0.0, c_hi=100.0, s_lo=5.0, s_hi=40.0):
    u = torch.rand(n, 4, generator=g, dtype=torch.float64)
    return boxes_from(c_lo + (c_hi - c_lo) * u[:, 0], c_lo + (c_hi - c_lo) * u[:, 1],
                      s_lo + (s_hi - s_lo) * u[:, 2], s_lo + (s_hi - s_lo) * u[:, 3])


def integer_boxes(g, n, span=48, s_lo=2, s_hi=12):
    xy = torch.randint(0, span, (n, 2), generator=g).double()
    wh = torch.randint(s_lo, s_hi + 1, (n, 2), generator=g).double()
    return torch.cat([xy, xy + wh], 1)


def overlapping(g, n, c_lo=0.0, c_hi=100.0, s_lo=5.0, s_hi=40.0):
    a = random_boxes(g, n, c_lo, c_hi, s_lo, s_hi)
    w, h = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
    c = (a[:, :2] + a[:, 2:]) / 2 + torch.randn(n, 2, generator=g, dtype=torch.float64) * 0.4 * torch.stack([w, h], 1)
    s = 0.5 + torch.rand(n, 2, generator=g, dtype=torch.float64)
    return a, boxes_from(c[:, 0], c[:, 1], w * s[:, 0], h * s[:, 1])


# Valid boxes (w, h > 0) in layouts where torchvision's result is finite: the parity cases.
def pairwise_inputs(name, g):
    if name == "random":
        return random_boxes(g, 13), random_boxes(g, 17)
    if name == "identical":
        a = random_boxes(g, 9)
        return a, a.clone()
    if name == "disjoint":
        b = random_boxes(g, 8)
        b[:, [0, 2]] += 1000
        return random_boxes(g, 6), b
    if name == "nested":
        a = random_boxes(g, 8, s_lo=10)
        c, wh = (a[:, :2] + a[:, 2:]) / 2, a[:, 2:] - a[:, :2]
        f = 0.2 + 0.7 * torch.rand(8, 2, generator=g, dtype=torch.float64)
        return a, torch.cat([c - wh * f / 2, c + wh * f / 2], 1)
    if name == "touching":
        a = integer_boxes(g, 10)
        b = a.clone()
        b[:, [0, 2]] += (a[:, 2] - a[:, 0]).unsqueeze(1)  # b.x1 == a.x2
        return a, b
    if name == "large_1e4":
        return random_boxes(g, 10, 1e4, 5e4, 300, 3000), random_boxes(g, 12, 1e4, 5e4, 300, 3000)
    if name == "negative":
        return random_boxes(g, 7, -200, -50), random_boxes(g, 5, -200, -50)
    if name == "empty_n":
        return random_boxes(g, 0), random_boxes(g, 4)
    if name == "empty_m":
        return random_boxes(g, 4), random_boxes(g, 0)
    raise ValueError(name)


PAIRWISE_LAYOUTS = ["random", "identical", "disjoint", "nested", "touching", "large_1e4", "negative", "empty_n", "empty_m"]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("layout", PAIRWISE_LAYOUTS)
@pytest.mark.parametrize("op", list(PAIRWISE))
def test_pairwise_matches_torchvision(device, layout, op):
    ours_fn, tv_fn = PAIRWISE[op]
    g = torch.Generator().manual_seed(zlib.crc32(f"{op}/{layout}".encode()))
    a64, b64 = pairwise_inputs(layout, g)
    for dtype in DTYPES:
        a, b = a64.to(device, dtype), b64.to(device, dtype)
        ours = ours_fn(a, b)
        assert ours.dtype == out_dtype(dtype) == tv_fn(a, b).dtype and ours.shape == (a.shape[0], b.shape[0])
        truth = tv_fn(a.double(), b.double())
        atol, rtol = TOL[dtype]
        torch.testing.assert_close(ours.double(), truth, atol=atol, rtol=rtol,
                                   msg=lambda m: f"{op} {layout} {dtype} {device} vs torchvision fp64: {m}")
        if dtype in (torch.float32, torch.float64):
            same = tv_fn(a, b)
            torch.testing.assert_close(ours, same, atol=atol, rtol=rtol,
                                       msg=lambda m: f"{op} {layout} {dtype} {device} vs torchvision {dtype}: {m}")


@pytest.mark.parametrize("device", devices())
def test_fp16_areas_do_not_overflow(device):
    """OPS.md regression: areas of fp16 boxes with 1e4-scale coordinates exceed 65504."""
    g = torch.Generator().manual_seed(7)
    a = random_boxes(g, 20, 1e4, 5e4, 300, 3000).half().to(device)
    b = torch.cat([a[:10], random_boxes(g, 10, 1e4, 5e4, 300, 3000).half().to(device)])
    assert ((a[:, 2] - a[:, 0]).float() * (a[:, 3] - a[:, 1]).float() > 65504).all()
    for op, (ours_fn, tv_fn) in PAIRWISE.items():
        ours = ours_fn(a, b)
        assert torch.isfinite(ours).all(), op
        torch.testing.assert_close(ours.double(), tv_fn(a.double(), b.double()), atol=1e-3, rtol=2e-3)
        assert (ours.diagonal()[:10] == 1).all(), f"{op}: a box against itself"


def degenerate_sets(g):
    """Integer boxes cycling through valid, inverted x / y / both, zero width / height and points."""
    out = []
    for _ in range(2):
        b = integer_boxes(g, 21, span=24, s_lo=1, s_hi=8)
        for i in range(b.shape[0]):
            k = i % 7
            if k in (1, 3):
                b[i, [0, 2]] = b[i, [2, 0]]
            if k in (2, 3):
                b[i, [1, 3]] = b[i, [3, 1]]
            if k in (4, 6):
                b[i, 2] = b[i, 0]
            if k in (5, 6):
                b[i, 3] = b[i, 1]
        out.append(b)
    return out


def assert_same_values(ours, truth, atol, rtol, what):
    """Equal within (atol, rtol) where finite, NaN at the same places, the same infinities, and (exact zeros of the
    truth) the same sign of zero."""
    torch.testing.assert_close(ours, truth, atol=atol, rtol=rtol, equal_nan=True, msg=lambda m: f"{what}: {m}")
    zero = truth == 0
    assert torch.equal(torch.signbit(ours[zero]), torch.signbit(truth[zero])), f"{what}: signs of zero differ"


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", list(PAIRWISE))
def test_pairwise_default_degenerate_matches_torchvision(device, op):
    """By default degenerate boxes (zero-area, inverted, identical degenerate pairs) get torchvision's values, its
    0 / 0 = NaN, +-inf and -0.0 included, and its autograd's gradients, NaN and infinities at the same places."""
    ours_fn, tv_fn = PAIRWISE[op]
    g = torch.Generator().manual_seed(zlib.crc32(f"degenerate/{op}".encode()))
    a64, b64 = degenerate_sets(g)
    for x64, y64 in [(a64, b64), (a64, a64.clone())]:  # all pairs, and every degenerate box against itself
        up = torch.randn(x64.shape[0], y64.shape[0], generator=g, dtype=torch.float64)
        for dtype in DTYPES:
            x, y = x64.to(device, dtype).requires_grad_(), y64.to(device, dtype).requires_grad_()
            ours = ours_fn(x, y)
            xt, yt = x.detach().double().requires_grad_(), y.detach().double().requires_grad_()
            truth = tv_fn(xt, yt)
            assert ours.isnan().any() or op == "generalized_box_iou", f"{op}: the case must reach torchvision's NaN"
            atol, rtol = TOL[dtype]
            assert_same_values(ours.detach().double(), truth.detach(), atol, rtol, f"{op} {dtype} {device} forward")
            if dtype not in (torch.float32, torch.float64):
                continue  # float16 gradients of eps-sized denominators overflow (the C++ spec scales them)
            got = torch.autograd.grad(ours, (x, y), up.to(device, ours.dtype))
            want = torch.autograd.grad(truth, (xt, yt), up.to(device))
            for name, o, w in zip(("boxes1", "boxes2"), got, want):
                assert o.isnan().any() or op == "generalized_box_iou", f"{op}: torchvision's NaN gradients expected"
                torch.testing.assert_close(o.double(), w, atol=atol, rtol=rtol, equal_nan=True,
                                           msg=lambda m: f"{op} {dtype} {device} d/d{name}: {m}")
            if dtype == torch.float32:  # and torchvision run in float32 itself
                x2, y2 = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
                same = tv_fn(x2, y2)
                assert_same_values(ours.detach(), same.detach(), atol, rtol, f"{op} {device} vs torchvision float32")
                for o, w in zip(got, torch.autograd.grad(same, (x2, y2), up.to(device, dtype))):
                    torch.testing.assert_close(o, w, atol=atol, rtol=rtol, equal_nan=True)


@pytest.mark.parametrize("device", devices())
def test_pairwise_defined_degenerate_option(device):
    """defined_degenerate=True: where torchvision divides by a zero (or eps-only) denominator, ours applies
    docs/ops/box_iou.md's rule (the term is 0) and is never NaN, nor are its gradients; everywhere else it equals
    torchvision, gradients included."""
    g = torch.Generator().manual_seed(11)
    a, b = degenerate_sets(g)
    a, b = a.to(device), b.to(device)
    w1, h1 = (a[:, 2] - a[:, 0])[:, None], (a[:, 3] - a[:, 1])[:, None]
    w2, h2 = (b[:, 2] - b[:, 0])[None], (b[:, 3] - b[:, 1])[None]
    iw = (torch.minimum(a[:, None, 2], b[None, :, 2]) - torch.maximum(a[:, None, 0], b[None, :, 0])).clamp(min=0)
    ih = (torch.minimum(a[:, None, 3], b[None, :, 3]) - torch.maximum(a[:, None, 1], b[None, :, 1])).clamp(min=0)
    union = w1 * h1 + w2 * h2 - iw * ih
    cw = (torch.maximum(a[:, None, 2], b[None, :, 2]) - torch.minimum(a[:, None, 0], b[None, :, 0])).clamp(min=0)
    ch = (torch.maximum(a[:, None, 3], b[None, :, 3]) - torch.minimum(a[:, None, 1], b[None, :, 1])).clamp(min=0)
    no_aspect = ((w1 == 0) & (h1 == 0)) | ((w2 == 0) & (h2 == 0))
    ruled = {
        "box_iou": union <= 0,
        "generalized_box_iou": (union <= 0) | (cw * ch <= 0),
        "distance_box_iou": (union <= 0) | (cw * cw + ch * ch <= 0),
        "complete_box_iou": (union <= 0) | (cw * cw + ch * ch <= 0) | no_aspect,
    }
    for op, (ours_fn, tv_fn) in PAIRWISE.items():
        x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
        ours = ours_fn(x, y, defined_degenerate=True)
        assert not torch.isnan(ours).any(), op
        assert ruled[op].any() and not ruled[op].all(), f"{op}: the case must mix both kinds of pairs"
        truth = tv_fn(a, b)
        keep = ~ruled[op]
        torch.testing.assert_close(ours[keep], truth[keep], atol=1e-12, rtol=1e-12, msg=lambda m: f"{op}: {m}")
        grads = torch.autograd.grad(ours.sum(), (x, y))
        assert all(torch.isfinite(t).all() for t in grads), f"{op}: defined gradients are finite"
    # IoU is 0 wherever the union is <= 0 (torchvision: 0 / 0 = NaN for two zero-area boxes).
    assert (detops.box_iou(a, b, defined_degenerate=True)[union <= 0] == 0).all()


def test_pairwise_degenerate_values_by_hand():
    point = torch.tensor([[1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    box = torch.tensor([[0.0, 0.0, 2.0, 2.0]], dtype=torch.float64)
    for op, (ours_fn, _) in PAIRWISE.items():
        assert ours_fn(point, point, defined_degenerate=True).item() == 0.0, op  # union 0, enclosing 0, distance 0
        assert ours_fn(point, box, defined_degenerate=True).item() == 0.0, op  # inside: no overlap, same center
        assert math.isnan(ours_fn(point, point).item()), op  # torchvision's 0 / 0
    assert math.isnan(detops.complete_box_iou(point, box).item())  # atan(0 / 0)
    assert detops.box_iou(point, box).item() == 0.0  # union 4: a defined 0 in both modes
    inverted = torch.tensor([[2.0, 0.0, 0.0, 1.0]], dtype=torch.float64)  # area -2
    line = torch.tensor([[1.0, 0.0, 1.0, 1.0]], dtype=torch.float64)
    iou = detops.box_iou(inverted, line)
    assert iou.item() == 0.0 and torch.signbit(iou).item()  # 0 / -2 = -0.0, as torchvision
    nan_box = torch.tensor([[0.0, float("nan"), 2.0, 2.0]], dtype=torch.float64)
    inf_box = torch.tensor([[0.0, 0.0, float("inf"), 2.0]], dtype=torch.float64)
    for op, (ours_fn, _) in PAIRWISE.items():
        for options in ({}, {"defined_degenerate": True}):
            assert torch.isnan(ours_fn(nan_box, box, **options)).all(), op
            assert torch.isnan(ours_fn(box, inf_box, **options)).all(), op


def test_defined_degenerate_is_keyword_only():
    a = torch.tensor([[0.0, 0.0, 2.0, 2.0]])
    with pytest.raises((RuntimeError, TypeError)):
        detops.box_iou(a, a, True)
    with pytest.raises((RuntimeError, TypeError)):
        detops.generalized_box_iou_loss(a, a, "none", 1e-7, True)


def loss_inputs(name, g):
    if name == "overlapping":
        return overlapping(g, 16)
    if name == "disjoint":
        a, b = random_boxes(g, 12), random_boxes(g, 12)
        b[:, [0, 2]] += (a[:, 2] - b[:, 0] + 1 + 10 * torch.rand(12, generator=g, dtype=torch.float64)).unsqueeze(1)
        return a, b
    if name == "identical":  # every max / min ties: both split the gradient equally (torch.maximum's rule)
        a = random_boxes(g, 10)
        return a, a.clone()
    if name == "touching":
        a = integer_boxes(g, 10)
        b = a.clone()
        b[:, [0, 2]] += (a[:, 2] - a[:, 0]).unsqueeze(1)
        return a, b
    if name == "large_1e4":
        return overlapping(g, 12, 1e4, 5e4, 300, 3000)
    if name == "negative":
        return overlapping(g, 12, -200, -50)
    if name == "empty":
        return random_boxes(g, 0), random_boxes(g, 0)
    raise ValueError(name)


LOSS_LAYOUTS = ["overlapping", "disjoint", "identical", "touching", "large_1e4", "negative", "empty"]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("layout", LOSS_LAYOUTS)
@pytest.mark.parametrize("op", list(LOSSES))
def test_loss_forward_and_backward_match_torchvision(device, reduction, layout, op):
    ours_fn, tv_fn = LOSSES[op]
    g = torch.Generator().manual_seed(zlib.crc32(f"{op}/{layout}/{reduction}".encode()))
    a64, b64 = loss_inputs(layout, g)
    for dtype in DTYPES:
        a = a64.to(device, dtype).requires_grad_()
        b = b64.to(device, dtype).requires_grad_()
        ap, bp = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
        ours = ours_fn(a, b, reduction)
        truth = tv_fn(ap, bp, reduction=reduction)
        atol, rtol = TOL[dtype]
        assert ours.dtype == out_dtype(dtype) == tv_fn(a, b, reduction=reduction).dtype
        assert ours.shape == truth.shape
        torch.testing.assert_close(ours.double(), truth, atol=atol, rtol=rtol,
                                   msg=lambda m: f"{op} {layout} {reduction} {dtype} {device} forward: {m}")
        # A non-uniform upstream gradient for 'none' (uniform ones come from .sum().backward() below).
        up = torch.randn(truth.shape, generator=g, dtype=torch.float64)
        grads = torch.autograd.grad(ours, (a, b), up.to(device, ours.dtype))
        truth_grads = torch.autograd.grad(truth, (ap, bp), up.to(device))
        for name, got, want in zip(("boxes1", "boxes2"), grads, truth_grads):
            assert got.dtype == dtype
            torch.testing.assert_close(got.double(), want, atol=atol, rtol=rtol,
                                       msg=lambda m: f"{op} {layout} {reduction} {dtype} {device} d/d{name}: {m}")
        if dtype in (torch.float32, torch.float64):
            same = tv_fn(a.detach(), b.detach(), reduction=reduction)
            torch.testing.assert_close(ours.detach(), same, atol=atol, rtol=rtol)


def misaligned(boxes, offset):
    """boxes [n, 4] as a contiguous view starting `offset` elements into its storage, so that its rows are not
    aligned to their size (the CUDA loss kernels then take their per-coordinate loads and stores)."""
    flat = torch.empty(boxes.numel() + offset, dtype=boxes.dtype, device=boxes.device)
    view = flat[offset:].view(boxes.shape)
    view.copy_(boxes)
    return view


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("offset", [1, 2, 3])
@pytest.mark.parametrize("op", list(LOSSES))
def test_loss_with_rows_not_aligned_to_their_size(device, offset, op):
    """Boxes whose rows start off their size's alignment (a contiguous view at a storage offset) give
    torchvision's values, forward and backward, in every dtype."""
    ours_fn, tv_fn = LOSSES[op]
    g = torch.Generator().manual_seed(40 + offset)
    a64, b64 = overlapping(g, 300)
    for dtype in DTYPES:
        a = misaligned(a64.to(device, dtype), offset).requires_grad_()
        b = misaligned(b64.to(device, dtype), offset).requires_grad_()
        assert a.storage_offset() == offset and a.is_contiguous()
        ap, bp = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
        ours, truth = ours_fn(a, b, "none"), tv_fn(ap, bp, reduction="none")
        atol, rtol = TOL[dtype]
        torch.testing.assert_close(ours.double(), truth, atol=atol, rtol=rtol)
        up = torch.randn(truth.shape, generator=g, dtype=torch.float64)
        for got, want in zip(torch.autograd.grad(ours, (a, b), up.to(device, ours.dtype)),
                             torch.autograd.grad(truth, (ap, bp), up.to(device))):
            torch.testing.assert_close(got.double(), want, atol=atol, rtol=rtol)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", list(LOSSES))
def test_loss_sum_backward_gets_a_stride0_gradient(device, op):
    ours_fn, tv_fn = LOSSES[op]
    g = torch.Generator().manual_seed(5)
    a64, b64 = overlapping(g, 9)
    a, b = a64.to(device, copy=True).requires_grad_(), b64.to(device, copy=True).requires_grad_()
    ap, bp = a64.clone().requires_grad_(), b64.clone().requires_grad_()
    ours_fn(a, b).sum().backward()
    tv_fn(ap, bp).sum().backward()
    torch.testing.assert_close(a.grad.cpu(), ap.grad, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(b.grad.cpu(), bp.grad, atol=1e-10, rtol=1e-10)


def test_complete_box_iou_loss_eps_only_enters_alpha():
    """torchvision's complete_box_iou_loss passes no eps to its DIoU part (it keeps 1e-7 there); so do we."""
    g = torch.Generator().manual_seed(3)
    a, b = overlapping(g, 8)
    for eps in (0.0, 0.5):
        ours = detops.complete_box_iou_loss(a, b, "none", eps)
        torch.testing.assert_close(ours, tv.complete_box_iou_loss(a, b, eps=eps), atol=1e-12, rtol=1e-12)
    assert not torch.allclose(detops.complete_box_iou_loss(a, b, "none", 0.5), detops.complete_box_iou_loss(a, b))
    torch.testing.assert_close(detops.distance_box_iou_loss(a, b, "none", 0.5), tv.distance_box_iou_loss(a, b, eps=0.5),
                               atol=1e-12, rtol=1e-12)


def degenerate_loss_pairs(g):
    """(boxes1, boxes2) pairs cycling through zero-area, inverted, point and identical degenerate boxes."""
    a, b = degenerate_sets(g)
    b = b[torch.randperm(b.shape[0], generator=g)]
    return torch.cat([a, a]), torch.cat([b, a.clone()])  # the second half: each degenerate box against itself


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("eps", [1e-7, 0.0])
@pytest.mark.parametrize("op", list(LOSSES))
def test_loss_default_degenerate_matches_torchvision(device, eps, op):
    """By default the losses give torchvision's values on degenerate boxes (NaN, +-inf, eps-sized denominators)
    and its autograd's gradients, for each reduction; torchvision run in the same dtype (in float32 an identical
    pair's IoU, A / (A + 1e-7), rounds to 1, so CIoU's alpha = 0 / 0 is NaN there and not in float64)."""
    ours_fn, tv_fn = LOSSES[op]
    g = torch.Generator().manual_seed(zlib.crc32(f"degenerate/{op}/{eps}".encode()))
    a64, b64 = degenerate_loss_pairs(g)
    for reduction in ("none", "sum"):
        for dtype in (torch.float64, torch.float32):
            x, y = a64.to(device, dtype).requires_grad_(), b64.to(device, dtype).requires_grad_()
            xt, yt = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
            ours, truth = ours_fn(x, y, reduction, eps), tv_fn(xt, yt, reduction=reduction, eps=eps)
            atol, rtol = TOL[dtype]
            assert_same_values(ours.detach(), truth.detach(), atol, rtol, f"{op} {reduction} {dtype} forward")
            up = torch.randn(truth.shape, generator=g, dtype=torch.float64).to(device, dtype)
            got = torch.autograd.grad(ours, (x, y), up)
            want = torch.autograd.grad(truth, (xt, yt), up)
            for name, o, w in zip(("boxes1", "boxes2"), got, want):
                torch.testing.assert_close(o, w, atol=atol, rtol=rtol, equal_nan=True,
                                           msg=lambda m: f"{op} {reduction} {dtype} {device} d/d{name}: {m}")
    if eps == 0.0:
        assert torch.isnan(ours_fn(a64, b64, "none", 0.0)).any(), f"{op}: the case must reach torchvision's 0 / 0"


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", list(LOSSES))
def test_loss_defined_degenerate_option(device, op):
    """defined_degenerate=True: no NaN values or gradients for finite degenerate boxes (a quotient with a
    denominator <= 0 is 0; no aspect ratio without an extent), torchvision's losses on pairs of valid boxes."""
    ours_fn, tv_fn = LOSSES[op]
    g = torch.Generator().manual_seed(zlib.crc32(f"defined/{op}".encode()))
    a64, b64 = degenerate_loss_pairs(g)
    x, y = a64.to(device).requires_grad_(), b64.to(device).requires_grad_()
    ours = ours_fn(x, y, "none", 0.0, defined_degenerate=True)
    assert not ours.isnan().any()
    assert all(torch.isfinite(t).all() for t in torch.autograd.grad(ours.sum(), (x, y)))
    a, b = overlapping(g, 8)
    torch.testing.assert_close(ours_fn(a, b, "mean", 1e-7, defined_degenerate=True), tv_fn(a, b, reduction="mean"),
                               atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", ["iou_loss", "generalized_box_iou_loss", "distance_box_iou_loss"])
def test_loss_gradcheck_fp64(device, op):
    """CIoU is left out: its backward holds alpha constant (torchvision's no_grad), so it is not the derivative
    of its forward; test_loss_forward_and_backward_match_torchvision compares it with torchvision's backward."""
    g = torch.Generator().manual_seed(17)
    a, b = overlapping(g, 6)
    a, b = a.to(device).requires_grad_(), b.to(device).requires_grad_()
    for reduction in ("none", "mean", "sum"):
        assert torch.autograd.gradcheck(lambda x, y: LOSSES[op][0](x, y, reduction), (a, b), eps=1e-6, atol=1e-5, rtol=1e-3)


def test_bad_inputs_raise_torchvisions_exception_types():
    """The exception type torchvision 0.26 raises for each (checked against it in suites/peer/test_dropin_boxes.py);
    our messages name the argument and the expected shape."""
    a = torch.rand(3, 4)
    with pytest.raises(RuntimeError, match=r"boxes1 must be \[\.\.\., N, 4\]"):
        detops.box_iou(torch.rand(3, 5), a)
    with pytest.raises(IndexError, match=r"boxes2 must be \[\.\.\., M, 4\]"):
        detops.generalized_box_iou(a, a.view(-1))
    with pytest.raises(IndexError, match=r"boxes1 must be \[\.\.\., N, 4\]"):
        detops.distance_box_iou(torch.rand(3, 3), a)
    with pytest.raises(RuntimeError, match=r"leading \(batch\) dimensions of boxes1 \[2\] and boxes2 \[3\]"):
        detops.complete_box_iou(torch.rand(2, 3, 4), torch.rand(3, 5, 4))
    with pytest.raises(ValueError, match="Invalid Value for arg 'reduction': 'avg'"):
        detops.generalized_box_iou_loss(a, a, "avg")
    with pytest.raises(RuntimeError, match=r"boxes1 \[3\] and boxes2 \[2\] must broadcast"):
        detops.iou_loss(a, a[:2])
    with pytest.raises(IndexError, match=r"must broadcast to boxes1's shape"):
        detops.iou_loss(a[:1], a)
    with pytest.raises(ValueError, match=r"boxes1 must be \[\.\.\., 4\]"):
        detops.distance_box_iou_loss(torch.rand(3, 5), torch.rand(3, 5))
    # Still usable afterwards.
    torch.testing.assert_close(detops.box_iou(a, a).diagonal(), tv.box_iou(a, a).diagonal())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device for a CPU / CUDA device mismatch")
def test_device_mismatch_raises():
    a = torch.rand(3, 4)
    with pytest.raises(RuntimeError, match="boxes1 and boxes2 must be on the same device"):
        detops.box_iou(a, a.cuda())
    with pytest.raises(RuntimeError, match="boxes1 and boxes2 must be on the same device"):
        detops.iou_loss(a.cuda(), a)


def pairwise_grad_inputs(name, g):
    """The pairwise parity layouts, plus exact ties (integer boxes sharing edges) for the backward."""
    if name == "integer_ties":
        return integer_boxes(g, 20, span=16, s_lo=1, s_hi=6), integer_boxes(g, 24, span=16, s_lo=1, s_hi=6)
    if name == "shared_edges":  # boxes2[i] shares x1 and y2 with boxes1[i]
        a = integer_boxes(g, 10)
        b = integer_boxes(g, 10)
        b[:, 0], b[:, 3] = a[:, 0], a[:, 3]
        b[:, 1] = torch.minimum(b[:, 1], a[:, 3] - 1)
        b[:, 2] = torch.maximum(b[:, 2], a[:, 0] + 1)
        return a, b
    return pairwise_inputs(name, g)


def test_autograd_conventions_the_pairwise_backward_follows():
    """torch autograd's rules at the kinks of torchvision's formulas, checked here rather than assumed: the
    binary torch.max / torch.min give each tied argument half the gradient, and clamp(min=0) passes the gradient
    where its input is exactly 0. test_pairwise_backward_matches_torchvision_autograd's 'identical',
    'integer_ties', 'shared_edges' and 'touching' layouts put the backward on exactly these points."""
    x, y = torch.tensor(2.0, requires_grad=True), torch.tensor(2.0, requires_grad=True)
    torch.max(x, y).backward()
    assert x.grad.item() == y.grad.item() == 0.5
    x.grad = y.grad = None
    torch.min(x, y).backward()
    assert x.grad.item() == y.grad.item() == 0.5
    z = torch.tensor(0.0, requires_grad=True)
    z.clamp(min=0).backward()
    assert z.grad.item() == 1.0
    # Touching boxes: width exactly 0, so d IoU / d x gets inter's d / d width = height through the clamp.
    a = torch.tensor([[0.0, 0, 2, 2]], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([[2.0, 0, 4, 2]], dtype=torch.float64, requires_grad=True)
    (ga,) = torch.autograd.grad(detops.box_iou(a, b).sum(), a)
    (gt,) = torch.autograd.grad(tv.box_iou(a, b).sum(), a)
    assert ga[0, 2].item() != 0 and torch.equal(ga, gt)


PAIRWISE_GRAD_LAYOUTS = PAIRWISE_LAYOUTS + ["integer_ties", "shared_edges"]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("layout", PAIRWISE_GRAD_LAYOUTS)
@pytest.mark.parametrize("op", list(PAIRWISE))
def test_pairwise_backward_matches_torchvision_autograd(device, layout, op):
    """d/d boxes1 and d/d boxes2 under a random upstream gradient: in every dtype against torchvision's autograd in
    fp64 on the same (rounded) boxes, and in fp32 / fp64 against torchvision's autograd in the same dtype."""
    ours_fn, tv_fn = PAIRWISE[op]
    g = torch.Generator().manual_seed(zlib.crc32(f"grad/{op}/{layout}".encode()))
    a64, b64 = pairwise_grad_inputs(layout, g)
    up64 = torch.randn(a64.shape[0], b64.shape[0], generator=g, dtype=torch.float64)
    for dtype in DTYPES:
        a = a64.to(device, dtype).requires_grad_()
        b = b64.to(device, dtype).requires_grad_()
        out = ours_fn(a, b)
        got = torch.autograd.grad(out, (a, b), up64.to(device, out.dtype))
        assert [t.dtype for t in got] == [dtype, dtype]
        ap, bp = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
        want = torch.autograd.grad(tv_fn(ap, bp), (ap, bp), up64.to(device))
        atol, rtol = TOL[dtype]
        for name, o, w in zip(("boxes1", "boxes2"), got, want):
            torch.testing.assert_close(o.double(), w, atol=atol, rtol=rtol,
                                       msg=lambda m: f"{op} {layout} {dtype} {device} d/d{name} vs torchvision fp64: {m}")
        if dtype in (torch.float32, torch.float64):
            a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
            same = torch.autograd.grad(tv_fn(a2, b2), (a2, b2), up64.to(device, dtype))
            for name, o, w in zip(("boxes1", "boxes2"), got, same):
                torch.testing.assert_close(o, w, atol=atol, rtol=rtol,
                                           msg=lambda m: f"{op} {layout} {dtype} {device} d/d{name} vs torchvision {dtype}: {m}")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", ["box_iou", "generalized_box_iou", "distance_box_iou"])
def test_pairwise_gradcheck_fp64(device, op):
    """CIoU is left out: its backward holds alpha constant (torchvision's no_grad), so it is not the derivative of
    its forward; test_pairwise_backward_matches_torchvision_autograd compares it with torchvision's backward."""
    g = torch.Generator().manual_seed(23)
    fn = PAIRWISE[op][0]
    for a, b in [(random_boxes(g, 5), random_boxes(g, 6)), (random_boxes(g, 6).view(2, 3, 4), random_boxes(g, 4)),
                 (random_boxes(g, 1).view(4), random_boxes(g, 6).view(3, 2, 4))]:
        a, b = a.to(device).requires_grad_(), b.to(device).requires_grad_()
        assert torch.autograd.gradcheck(fn, (a, b), eps=1e-6, atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", list(PAIRWISE))
def test_pairwise_backward_batched_broadcast_and_one_box(device, op):
    """Batched and broadcast leading dimensions and the [4] one-box form: each gradient summed back to its own
    box tensor's shape, as torchvision's autograd does."""
    ours_fn, tv_fn = PAIRWISE[op]
    g = torch.Generator().manual_seed(zlib.crc32(f"batched/{op}".encode()))
    for s1, s2 in [((2, 1, 3), (4, 5)), ((3,), (2, 2, 5)), ((2, 3), (1, 5)), ((), (3, 5)), ((3,), (0, 5)), ((0, 3), (5,))]:
        a64 = random_boxes(g, math.prod(s1)).view(*s1, 4)
        b64 = random_boxes(g, math.prod(s2)).view(*s2, 4)
        for dtype in (torch.float64, torch.float32):
            a, b = a64.to(device, dtype).requires_grad_(), b64.to(device, dtype).requires_grad_()
            ap, bp = a64.clone().requires_grad_(), b64.clone().requires_grad_()
            out, truth = ours_fn(a, b), tv_fn(ap, bp)
            assert out.shape == truth.shape
            up = torch.randn(truth.shape, generator=g, dtype=torch.float64)
            got = torch.autograd.grad(out, (a, b), up.to(device, out.dtype))
            want = torch.autograd.grad(truth, (ap, bp), up)
            atol, rtol = TOL[dtype]
            for o, w in zip(got, want):
                assert o.shape == w.shape
                torch.testing.assert_close(o.cpu().double(), w, atol=atol, rtol=rtol, msg=lambda m: f"{op} {s1} {s2}: {m}")


@pytest.mark.parametrize("device", devices())
def test_detr_style_giou_loss_trains_through_the_pairwise_op(device):
    """loss_giou = 1 - diag(generalized_box_iou(src, tgt)) (DETR's matcher cost and loss) on cxcywh predictions:
    the gradient reaching the predictions equals torchvision's; only the predictions require grad."""
    g = torch.Generator().manual_seed(31)
    src64 = torch.cat([torch.rand(8, 2, generator=g, dtype=torch.float64),
                       0.1 + 0.3 * torch.rand(8, 2, generator=g, dtype=torch.float64)], 1)
    tgt = tv.box_convert(overlapping(g, 8)[1] / 100, "xyxy", "xyxy").to(device)
    grads = []
    for fn in (detops.generalized_box_iou, tv.generalized_box_iou):
        src = src64.clone().to(device).requires_grad_()
        loss = (1 - torch.diag(fn(tv.box_convert(src, "cxcywh", "xyxy"), tgt))).sum()
        loss.backward()
        grads.append(src.grad)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("device", devices())
def test_pairwise_backward_mixed_and_stride0(device):
    """float boxes1 against integer boxes2 (only boxes1 differentiable), and the stride-0 gradient of .sum()."""
    g = torch.Generator().manual_seed(37)
    a64, b_int = random_boxes(g, 6), integer_boxes(g, 7)
    for op, (ours_fn, tv_fn) in PAIRWISE.items():
        a, ap = a64.to(device, copy=True).requires_grad_(), a64.clone().requires_grad_()
        ours_fn(a, b_int.long().to(device)).sum().backward()
        tv_fn(ap, b_int.long()).sum().backward()
        # torchvision's complete_box_iou divides the integer box's w / h into float32 (int / int gives the default
        # dtype) before its atan; DetOps computes the pair in float64.
        tol = 1e-8 if op == "complete_box_iou" else 1e-12
        torch.testing.assert_close(a.grad.cpu(), ap.grad, atol=tol, rtol=1e-10, msg=op)


@pytest.mark.parametrize("device", devices())
def test_pairwise_empty_gives_zero_gradients(device):
    for s1, s2 in [((0, 4), (5, 4)), ((3, 4), (0, 4))]:
        a = torch.rand(s1, dtype=torch.float64, device=device, requires_grad=True)
        b = torch.rand(s2, dtype=torch.float64, device=device, requires_grad=True)
        for op, (ours_fn, _) in PAIRWISE.items():
            ga, gb = torch.autograd.grad(ours_fn(a, b).sum(), (a, b), allow_unused=False)
            assert ga.shape == a.shape and gb.shape == b.shape and not ga.any() and not gb.any(), op


def test_pairwise_double_backward_is_refused_clearly():
    g = torch.Generator().manual_seed(2)
    a, b = overlapping(g, 4)
    a.requires_grad_()
    for op, (ours_fn, _) in PAIRWISE.items():
        (ga,) = torch.autograd.grad(ours_fn(a, b).sum(), a, create_graph=True)
        with pytest.raises(RuntimeError, match="double backward is not supported"):
            ga.sum().backward()
    with torch.no_grad():
        assert not detops.box_iou(a, b).requires_grad


def test_pairwise_backward_op_bad_grad():
    a = torch.rand(3, 4)
    a[:, 2:] += a[:, :2] + 0.1
    with pytest.raises(ValueError, match=r"grad must have the output's shape \[3, 3\]"):
        detops._box_iou_pairwise_backward(torch.ones(3, 2), a, a, "giou", 1e-7)
    with pytest.raises(TypeError, match=r"grad dtype \(Double\) must be the output's dtype, Float"):
        detops._box_iou_pairwise_backward(torch.ones(3, 3, dtype=torch.float64), a, a, "iou", 1e-7)
    with pytest.raises(ValueError, match="variant must be 'iou', 'giou', 'diou' or 'ciou'"):
        detops._box_iou_pairwise_backward(torch.ones(3, 3), a, a, "xiou", 1e-7)


def test_loss_double_backward_is_refused_clearly():
    g = torch.Generator().manual_seed(2)
    a, b = overlapping(g, 4)
    a.requires_grad_()
    loss = detops.generalized_box_iou_loss(a, b, "sum")
    (ga,) = torch.autograd.grad(loss, a, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward is not supported"):
        ga.sum().backward()


def test_defaults_match_torchvision_signatures():
    g = torch.Generator().manual_seed(4)
    a, b = overlapping(g, 5)
    torch.testing.assert_close(detops.distance_box_iou(a, b), tv.distance_box_iou(a, b))
    torch.testing.assert_close(detops.complete_box_iou(a, b), tv.complete_box_iou(a, b))
    for op, (ours_fn, tv_fn) in LOSSES.items():
        torch.testing.assert_close(ours_fn(a, b), tv_fn(a, b), msg=op)
        torch.testing.assert_close(ours_fn(a, b, reduction="mean", eps=1e-6), tv_fn(a, b, reduction="mean", eps=1e-6), msg=op)


def test_meta_tensors_give_shapes():
    a, b = torch.empty(5, 4, device="meta"), torch.empty(7, 4, device="meta")
    assert detops.box_iou(a, b).shape == (5, 7)
    assert detops.box_iou(a.expand(2, 5, 4), b).shape == (2, 5, 7)
    assert detops.generalized_box_iou(a.long(), b.int()).dtype == torch.float32
    assert detops.distance_box_iou_loss(a.expand(3, 5, 4), b[:1]).shape == (3, 5)
    assert detops.complete_box_iou(a, b, 0.1).device.type == "meta"
    assert detops.iou_loss(a, a).shape == (5,)
    assert detops.complete_box_iou_loss(a, a, "mean").shape == ()
    with pytest.raises(ValueError, match="reduction"):
        detops.distance_box_iou_loss(a, a, "bogus")


def test_empty_mean_is_zero_not_nan():
    e = torch.empty(0, 4)
    for op, (ours_fn, _) in LOSSES.items():
        assert ours_fn(e, e, "mean").item() == 0.0, op
        assert ours_fn(e, e, "sum").item() == 0.0, op
        assert ours_fn(e, e).shape == (0,)
    assert math.isclose(detops.iou_loss(torch.tensor([[0.0, 0, 2, 2]]), torch.tensor([[1.0, 1, 3, 3]]), "mean").item(),
                        1 - 1 / (7 + 1e-7), rel_tol=1e-6)
