"""Drop-in behaviour of the box ops and NMS against torchvision 0.26 (issue 11): what torchvision accepts,
the dtypes and shapes it returns, the exception types it raises, and NMS's decision at IoUs exactly at a
threshold that float32 cannot represent. CPU always, CUDA when present. torchvision is the truth: every
expected value, shape, dtype and exception type below is taken from torchvision at run time.

NMS on CUDA: torchvision's CUDA kernel rounds the threshold to float32, its CPU kernel does not; DetOps decides
as torchvision's CPU kernel on both devices (docs/ops/nms.md), so the NMS truth is torchvision on the CPU.
"""
import math

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed in this Python")
torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed: no peer to compare against")
from torchvision import ops as tv  # noqa: E402

detops = torch.ops.detops
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
PAIRWISE = ["box_iou", "generalized_box_iou", "distance_box_iou", "complete_box_iou"]
TV_LOSSES = ["generalized_box_iou_loss", "distance_box_iou_loss", "complete_box_iou_loss"]


def boxes(*lead, dtype=torch.float64, seed=0, scale=20.0):
    """Valid boxes [*lead, 4] (x1 < x2, y1 < y2) with integer coordinates (exact in every dtype)."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.randint(0, int(scale), (*lead, 2), generator=g).double()
    wh = torch.randint(1, int(scale), (*lead, 2), generator=g).double()
    return torch.cat([xy, xy + wh], -1).to(dtype)


def raised(fn, *args, **kwargs):
    """The exception fn raises (None if it returns)."""
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - we compare types
        return e
    return None


def assert_gradients_match(truth, truth_inputs, ours, our_inputs):
    """The gradients of ours (on its device) and of torchvision's autograd for one seeded upstream gradient:
    each input's gradient has that input's shape and torchvision's values."""
    g = torch.rand(truth.shape, dtype=truth.dtype, generator=torch.Generator().manual_seed(9))
    expected = torch.autograd.grad(truth, truth_inputs, g)
    got = torch.autograd.grad(ours, our_inputs, g.to(ours.device))
    for x, e, o in zip(truth_inputs, expected, got):
        assert o.shape == x.shape
        torch.testing.assert_close(o.cpu(), e, atol=1e-10, rtol=1e-8)


def assert_same_exception_type(tv_fn, ours_fn, *args, what=""):
    expected = raised(tv_fn, *args)
    assert expected is not None, f"{what}: torchvision accepts this input; the case is wrong"
    got = raised(ours_fn, *args)
    assert got is not None, f"{what}: DetOps accepted an input torchvision rejects with {type(expected).__name__}"
    assert type(got) is type(expected), (
        f"{what}: DetOps raised {type(got).__name__} ({got}), torchvision {type(expected).__name__} ({expected})")
    return got


# ---- 1. Pairwise ops: integer and mixed dtypes, batched boxes ------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", PAIRWISE)
# uint8 is left out: torchvision subtracts uint8 corners before upcasting, and the difference wraps around
# (docs/ops/box_iou.md, Known differences).
@pytest.mark.parametrize("dtypes", [(torch.int64, torch.int64), (torch.int32, torch.int32), (torch.int16, torch.int16),
                                    (torch.int8, torch.int8), (torch.int64, torch.int32), (torch.float32, torch.float64),
                                    (torch.float16, torch.float32), (torch.int64, torch.float32),
                                    (torch.float16, torch.bfloat16), (torch.int64, torch.float16)],
                         ids=lambda d: f"{str(d[0])[6:]}-{str(d[1])[6:]}")
def test_pairwise_integer_and_mixed_dtypes(device, op, dtypes):
    a, b = boxes(5, dtype=dtypes[0], seed=1).to(device), boxes(7, dtype=dtypes[1], seed=2).to(device)
    truth = getattr(tv, op)(a.cpu(), b.cpu())
    ours = getattr(detops, op)(a, b)
    assert ours.dtype == truth.dtype and ours.shape == truth.shape
    atol = 1e-3 if torch.float16 in dtypes or torch.bfloat16 in dtypes else 1e-5
    torch.testing.assert_close(ours.cpu(), truth, atol=atol, rtol=atol)
    # The floating box tensors are differentiable: gradients in their own dtype, as torchvision's autograd gives.
    diff = [t for t in (a, b) if t.is_floating_point()]
    if diff:
        ta, tb = [t.cpu().clone().requires_grad_(t.is_floating_point()) for t in (a, b)]
        oa, ob = [t.clone().requires_grad_(t.is_floating_point()) for t in (a, b)]
        want = torch.autograd.grad(getattr(tv, op)(ta, tb).sum(), [t for t in (ta, tb) if t.requires_grad])
        got = torch.autograd.grad(getattr(detops, op)(oa, ob).sum(), [t for t in (oa, ob) if t.requires_grad])
        for o, w in zip(got, want):
            assert o.dtype == w.dtype and o.shape == w.shape
            torch.testing.assert_close(o.cpu().double(), w.double(), atol=10 * atol, rtol=10 * atol)
    meta = getattr(detops, op)(a.to("meta"), b.to("meta"))
    assert meta.dtype == truth.dtype and meta.shape == truth.shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", PAIRWISE)
def test_pairwise_bool_boxes_as_torchvision(device, op):
    a, b = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]], dtype=torch.bool), torch.tensor([[0, 0, 1, 1]], dtype=torch.bool)
    expected = raised(getattr(tv, op), a, b)
    if expected is not None:  # box_iou and generalized_box_iou cannot subtract bools
        assert_same_exception_type(getattr(tv, op), getattr(detops, op), a.to(device), b.to(device), what=op)
    else:  # distance_box_iou and complete_box_iou upcast bools to int
        truth = getattr(tv, op)(a, b)
        ours = getattr(detops, op)(a.to(device), b.to(device))
        assert ours.dtype == truth.dtype
        torch.testing.assert_close(ours.cpu(), truth, equal_nan=True)


# (boxes1 shape without the 4, boxes2 shape without the 4): leading dimensions that torchvision broadcasts.
ACCEPTED_PAIRWISE_SHAPES = [((3,), (5,)), ((2, 3), (2, 5)), ((2, 3), (5,)), ((3,), (2, 5)), ((2, 3), (1, 5)),
                            ((1, 3), (2, 5)), ((2, 1, 3), (4, 5)), ((2, 2, 3), (2, 5)), ((), (5,)), ((), (2, 5)),
                            ((0, 3), (1, 5)), ((2, 0), (2, 5)), ((3,), (0,)), ((3, 1, 2), (1, 4, 3))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", PAIRWISE)
@pytest.mark.parametrize("shapes", ACCEPTED_PAIRWISE_SHAPES, ids=str)
def test_pairwise_batched_shapes(device, op, shapes):
    a = boxes(*shapes[0], seed=3).requires_grad_()
    b = boxes(*shapes[1], seed=4).requires_grad_()
    truth = getattr(tv, op)(a, b)
    ad, bd = a.detach().to(device).requires_grad_(), b.detach().to(device).requires_grad_()
    ours = getattr(detops, op)(ad, bd)
    assert ours.shape == truth.shape
    torch.testing.assert_close(ours.detach().cpu(), truth.detach(), atol=1e-10, rtol=1e-10)
    # Gradients (torchvision's are plain autograd): each summed back to its own box tensor's shape.
    assert_gradients_match(truth, (a, b), ours, (ad, bd))
    a, b = a.detach(), b.detach()
    assert getattr(detops, op)(a.to("meta"), b.to("meta")).shape == truth.shape
    # float32 with strides: a transposed view of the batch dimensions
    if a.dim() >= 3:
        at = a.float().transpose(0, 1).contiguous().transpose(0, 1)
        torch.testing.assert_close(getattr(detops, op)(at.to(device), b.float().to(device)).cpu(),
                                   getattr(tv, op)(at, b.float()), atol=1e-5, rtol=1e-5)


REJECTED_PAIRWISE_SHAPES = [((2, 3, 4), (3, 5, 4)), ((3, 3, 4), (0, 5, 4)), ((3, 5), (5, 4)), ((3, 4), (5, 5)),
                            ((3, 3), (5, 4)), ((3, 4), (5, 3)), ((3, 2), (5, 4)), ((3,), (5, 4)), ((4,), (4,)),
                            ((), (5, 4)), ((3, 4), ()), ((3, 4), (0,))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["distance_box_iou", "complete_box_iou"])
@pytest.mark.parametrize("eps", [-1e-3, 0.0, 0.5, math.inf, math.nan])
def test_pairwise_accepts_any_eps(device, op, eps):
    a, b = boxes(4, seed=5), boxes(6, seed=6)
    truth = getattr(tv, op)(a, b, eps)
    torch.testing.assert_close(getattr(detops, op)(a.to(device), b.to(device), eps).cpu(), truth, equal_nan=True)


# ---- 2. Losses: any [..., 4], integer boxes, gradients ----------------------------------------------------------

LOSS_SHAPES = [((4,), (4,)), ((2, 3, 4), (2, 3, 4)), ((3, 4), (1, 4)), ((3, 4), (4,)), ((2, 3, 4), (3, 4)),
               ((3, 2, 4), (3, 1, 4)), ((0, 4), (0, 4)), ((2, 0, 4), (2, 0, 4))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", TV_LOSSES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("shapes", LOSS_SHAPES, ids=str)
def test_loss_shapes_and_gradients(device, op, reduction, shapes):
    a = boxes(*shapes[0][:-1], seed=7).requires_grad_()
    b = boxes(*shapes[1][:-1], seed=8).requires_grad_()
    truth = getattr(tv, op)(a, b, reduction=reduction)
    ad, bd = a.detach().to(device).requires_grad_(), b.detach().to(device).requires_grad_()
    ours = getattr(detops, op)(ad, bd, reduction)
    assert ours.shape == truth.shape and ours.dtype == truth.dtype
    torch.testing.assert_close(ours.detach().cpu(), truth.detach(), atol=1e-10, rtol=1e-10)
    if truth.numel() == 0 or truth.grad_fn is None:
        return
    assert_gradients_match(truth, (a, b), ours, (ad, bd))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", TV_LOSSES)
@pytest.mark.parametrize("dtypes", [(torch.int64, torch.int64), (torch.int32, torch.int32), (torch.uint8, torch.uint8),
                                    (torch.float16, torch.float32), (torch.int64, torch.float32)],
                         ids=lambda d: f"{str(d[0])[6:]}-{str(d[1])[6:]}")
def test_loss_integer_and_mixed_dtypes(device, op, dtypes):
    a, b = boxes(6, dtype=dtypes[0], seed=10), boxes(6, dtype=dtypes[1], seed=11)
    for reduction in ("none", "mean"):
        truth = getattr(tv, op)(a, b, reduction=reduction)
        ours = getattr(detops, op)(a.to(device), b.to(device), reduction)
        assert ours.dtype == truth.dtype and ours.shape == truth.shape
        torch.testing.assert_close(ours.cpu(), truth, atol=1e-5, rtol=1e-5, equal_nan=True)
    assert getattr(detops, op)(a.to("meta"), b.to("meta")).dtype == getattr(tv, op)(a, b).dtype


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", TV_LOSSES)
def test_loss_bool_boxes(device, op):
    # The only non-degenerate bool box is [0, 0, 1, 1] (True = 1).
    a = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1]], dtype=torch.bool)
    truth = getattr(tv, op)(a, a)
    ours = getattr(detops, op)(a.to(device), a.to(device))
    assert ours.dtype == truth.dtype
    torch.testing.assert_close(ours.cpu(), truth)


def test_iou_loss_takes_the_same_shapes_as_the_other_losses():
    # iou_loss has no torchvision counterpart; its shapes follow generalized_box_iou_loss's (torchvision).
    for s1, s2 in LOSS_SHAPES:
        a, b = boxes(*s1[:-1], seed=12), boxes(*s2[:-1], seed=13)
        assert detops.iou_loss(a, b).shape == tv.generalized_box_iou_loss(a, b).shape
    a, b = boxes(seed=14), boxes(seed=15)
    inter = (torch.min(a[2:], b[2:]) - torch.max(a[:2], b[:2])).clamp(min=0).prod()
    union = (a[2:] - a[:2]).prod() + (b[2:] - b[:2]).prod() - inter
    torch.testing.assert_close(detops.iou_loss(a, b), 1 - inter / (union + 1e-7))


REJECTED_LOSS_SHAPES = [((1, 4), (3, 4)), ((3, 4), (2, 4)), ((3, 5), (3, 5)), ((3, 4), (3, 3)), ((5,), (5,)),
                        ((), ()), ((3, 4), (2, 3, 4))]


REJECTED_SHAPES = ([(op, s) for op in PAIRWISE for s in REJECTED_PAIRWISE_SHAPES]
                   + [(op, s) for op in TV_LOSSES for s in REJECTED_LOSS_SHAPES])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,shapes", REJECTED_SHAPES, ids=str)
def test_rejected_shapes_raise_torchvisions_type(device, op, shapes):
    a, b = torch.rand(shapes[0]), torch.rand(shapes[1])
    err = assert_same_exception_type(getattr(tv, op), getattr(detops, op), a.to(device), b.to(device), what=op)
    assert "boxes" in str(err)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", TV_LOSSES)
@pytest.mark.parametrize("eps", [-1e-3, 0.0, 0.5, math.inf, math.nan])
def test_loss_accepts_any_eps(device, op, eps):
    a, b = boxes(5, seed=16), boxes(5, seed=17)
    truth = getattr(tv, op)(a, b, reduction="none", eps=eps)
    torch.testing.assert_close(getattr(detops, op)(a.to(device), b.to(device), "none", eps).cpu(), truth, equal_nan=True)


# ---- 3. reduction ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", TV_LOSSES)
@pytest.mark.parametrize("reduction", ["avg", "NONE", ""])
def test_invalid_reduction_is_torchvisions_value_error(device, op, reduction):
    a = boxes(3, seed=18).to(device)
    expected = raised(getattr(tv, op), a.cpu(), a.cpu(), reduction=reduction)
    assert type(expected) is ValueError and "Invalid Value for arg 'reduction'" in str(expected)
    with pytest.raises(ValueError, match=f"Invalid Value for arg 'reduction': '{reduction}'") as e:
        getattr(detops, op)(a, a, reduction)
    assert "'none', 'mean', 'sum'" in str(e.value)
    with pytest.raises(ValueError, match="Invalid Value for arg 'reduction'"):
        getattr(detops, op)(a.to("meta"), a.to("meta"), reduction)


# ---- 4. and 5. NMS: exception types, thresholds ----------------------------------------------------------------

NMS_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def nms_truth(boxes_, scores, threshold, idxs=None):
    """torchvision's CPU kernel; float16 / bfloat16 boxes (which it lacks) as their exact float32 values: DetOps
    holds their IoU in float32, as for float32 boxes."""
    if boxes_.dtype in (torch.float16, torch.bfloat16):
        boxes_, scores = boxes_.float(), scores.float()
    boxes_, scores = boxes_.cpu(), scores.cpu()
    if idxs is None:
        return tv.nms(boxes_, scores, threshold)
    # torchvision's per-class strategy (one nms per class): its coordinate-offset strategy, which it picks for
    # small inputs, adds class * (max coordinate + 1) to the boxes, which a NaN coordinate makes NaN for all.
    return tv.boxes._batched_nms_vanilla(boxes_, scores, idxs.cpu(), threshold)


def fifths_case(k):
    """Pairs [x, 0, x+5, 5] and [x, 0, x+5, k]: IoU k/5 exactly (integers, exact in every dtype)."""
    rows = []
    for i in range(6):
        x = 10.0 * i
        rows += [[x, 0, x + 5, 5], [x, 0, x + 5, k]]
    scores = [1 - i / 16 for i in range(len(rows))]  # distinct, exact in every dtype
    return torch.tensor(rows, dtype=torch.float64), torch.tensor(scores, dtype=torch.float64)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", NMS_DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("threshold,k", [(0.2, 1), (0.8, 4)])
def test_nms_iou_exactly_at_a_threshold_float_cannot_represent(device, dtype, threshold, k):
    b, s = fifths_case(k)
    b, s = b.to(dtype), s.to(dtype)
    truth = nms_truth(b, s, threshold)
    ours = detops.nms(b.to(device), s.to(device), threshold).cpu()
    assert ours.tolist() == truth.tolist()
    # float holds 1/5 and 4/5 above the double thresholds: the second box of each pair is suppressed; double
    # holds them equal: kept.
    assert len(truth) == (12 if dtype == torch.float64 else 6)
    idxs = torch.tensor([i // 4 for i in range(12)])
    assert detops.batched_nms(b.to(device), s.to(device), idxs.to(device), threshold).cpu().tolist() == \
        nms_truth(b, s, threshold, idxs).tolist()


def degenerate_nms_case():
    """Integer boxes: overlapping, disjoint, touching, inverted, zero-area lines and points, NaN coordinates."""
    rows = [[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [10, 0, 20, 10], [8, 2, 2, 8], [9, 9, 3, 3],
            [2, 2, 2, 8], [3, 3, 3, 3], [3, 3, 3, 3], [math.nan, 0, 10, 10], [0, 0, 10, math.nan], [40, 40, 50, 50],
            [41, 41, 49, 49], [5, 5, 5, 5]]
    scores = [1 - i / 32 for i in range(len(rows))]
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(19))
    return torch.tensor(rows, dtype=torch.float64)[order], torch.tensor(scores, dtype=torch.float64)[order]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", NMS_DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("threshold", [-0.5, -1e-9, 0.0, 0.3, 1.0, 1.5, math.inf, -math.inf, math.nan])
def test_nms_any_threshold_matches_torchvision(device, dtype, threshold):
    b, s = degenerate_nms_case()
    b, s = b.to(dtype), s.to(dtype)
    truth = nms_truth(b, s, threshold)
    assert detops.nms(b.to(device), s.to(device), threshold).cpu().tolist() == truth.tolist()
    idxs = torch.tensor([i % 2 for i in range(len(s))])
    assert detops.batched_nms(b.to(device), s.to(device), idxs.to(device), threshold).cpu().tolist() == \
        nms_truth(b, s, threshold, idxs).tolist()


NMS_BAD = {
    "boxes_five_columns": lambda: (torch.rand(3, 5), torch.rand(3)),
    "boxes_one_dimensional": lambda: (torch.rand(4), torch.rand(1)),
    "boxes_three_dimensional": lambda: (torch.rand(1, 3, 4), torch.rand(3)),
    "scores_two_dimensional": lambda: (torch.rand(3, 4), torch.rand(3, 1)),
    "scores_wrong_length": lambda: (torch.rand(3, 4), torch.rand(2)),
    "integer_boxes": lambda: (torch.ones(3, 4, dtype=torch.long), torch.rand(3)),
    "integer_boxes_and_scores": lambda: (torch.ones(3, 4, dtype=torch.int32), torch.ones(3, dtype=torch.int32)),
    "bool_boxes": lambda: (torch.ones(3, 4, dtype=torch.bool), torch.rand(3)),
    "integer_scores": lambda: (torch.rand(3, 4), torch.ones(3, dtype=torch.long)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(NMS_BAD))
def test_nms_bad_inputs_raise_torchvisions_type(device, case):
    b, s = NMS_BAD[case]()
    expected = raised(tv.nms, b, s, 0.5)
    got = raised(detops.nms, b.to(device), s.to(device), 0.5)
    assert expected is not None and got is not None
    assert type(got) is type(expected), f"DetOps {type(got).__name__} ({got}), torchvision {type(expected).__name__}"
    assert "boxes" in str(got) or "scores" in str(got)
    if b.numel() > 0:
        idxs = torch.zeros(b.shape[0] if b.dim() else 1, dtype=torch.long)
        expected = raised(tv.batched_nms, b, s, idxs, 0.5)
        got = raised(detops.batched_nms, b.to(device), s.to(device), idxs.to(device), 0.5)
        assert type(got) is type(expected), f"batched: DetOps {type(got).__name__} ({got}), torchvision {type(expected).__name__}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("idxs_dtype", [torch.float32, torch.float64, torch.bool, torch.int8, torch.int32])
def test_batched_nms_takes_any_real_idxs(device, idxs_dtype):
    b, s = degenerate_nms_case()
    b = b[~b.isnan().any(1)]
    s = s[: len(b)]
    idxs = torch.tensor([(0.5 if i % 3 else 2.0) for i in range(len(b))]).to(idxs_dtype)
    truth = tv.batched_nms(b, s, idxs, 0.3)
    assert detops.batched_nms(b.to(device), s.to(device), idxs.to(device), 0.3).cpu().tolist() == truth.tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(0, 4), (0, 5), (2, 0), (0,)])
def test_batched_nms_without_box_elements_is_empty(device, shape):
    b, s, i = torch.rand(shape), torch.rand(3), torch.zeros(2, dtype=torch.long)
    truth = tv.batched_nms(b, s, i, 0.5)
    ours = detops.batched_nms(b.to(device), s.to(device), i.to(device), 0.5)
    assert ours.shape == truth.shape == (0,) and ours.dtype == truth.dtype == torch.int64
