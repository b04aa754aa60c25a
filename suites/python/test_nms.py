"""torch.ops.detops.nms / batched_nms against torchvision.ops.nms / batched_nms on the same inputs.

Exact comparisons use integer-coordinate boxes whose same-class IoUs all stay at least 1e-3 away from the
threshold and distinct scores: then any implementation with a correct IoU returns the same keep list.
torchvision runs in float64 on our (rounded) inputs. Random real-valued boxes, equal scores and the large
cases are checked for validity instead (see docs/ops/nms.md).
"""
import pytest
import torch

from conftest import devices

torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed: no peer to compare against")
from torchvision import ops as tv  # noqa: E402

# One copy of the NMS validity check and the margin-clean grid generator, shared with the peer suite.
from peer.nms_checks import check_validity  # noqa: E402
from peer.pairs import grid_case  # noqa: E402

detops = torch.ops.detops
DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.7])
def test_nms_matches_torchvision_exactly(device, dtype, threshold):
    boxes, scores, _ = grid_case(150, threshold, seed=int(threshold * 100))
    b, s = boxes.to(device, dtype), scores.to(device, dtype)
    ours = detops.nms(b, s, threshold)
    theirs = tv.nms(b.double(), s.double(), threshold)
    assert ours.dtype == torch.int64 and ours.device == b.device
    assert ours.cpu().tolist() == theirs.cpu().tolist()


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", DTYPES)
def test_batched_nms_matches_torchvision_exactly(device, dtype):
    boxes, scores, idxs = grid_case(200, 0.5, seed=7, classes=5)
    b, s, i = boxes.to(device, dtype), scores.to(device, dtype), idxs.to(device)
    ours = detops.batched_nms(b, s, i, 0.5)
    theirs = tv.batched_nms(b.double(), s.double(), i, 0.5)
    assert ours.cpu().tolist() == theirs.cpu().tolist()


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", DTYPES)
def test_random_boxes_valid_and_close_to_torchvision(device, dtype):
    g = torch.Generator().manual_seed(3)
    n = 1500
    xy = torch.rand(n, 2, generator=g) * torch.tensor([1344.0, 800.0])
    wh = torch.exp(torch.rand(n, 2, generator=g) * 3.5 + 2)
    boxes = torch.cat([xy, xy + wh], 1).to(dtype)
    scores = torch.rand(n, generator=g).to(dtype)
    keep = detops.nms(boxes.to(device), scores.to(device), 0.5)
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    check_validity(boxes.double(), scores, keep, 0.5, tol)
    if dtype in (torch.float64, torch.float32):
        # torchvision in the same dtype computes the same IoU formula; the lists agree unless a pair sits
        # within rounding of the threshold, which this seed does not have (checked: the assertion is exact).
        assert keep.cpu().tolist() == tv.nms(boxes.to(device), scores.to(device), 0.5).cpu().tolist()


@pytest.mark.parametrize("device", devices())
def test_batched_nms_fp16_negative_coordinates(device):
    """The offset trick fails here: 80 classes of boxes up to 1344 (offsets ~1e5 overflow fp16's precision)."""
    boxes, scores, _ = grid_case(120, 0.5, seed=11)
    g = torch.Generator().manual_seed(5)
    idxs = torch.randint(0, 80, (120,), generator=g)
    boxes = boxes * 5 - 700  # integers in [-700, 580]: exact in fp16
    b = boxes.to(device, torch.float16)
    s = scores.to(device, torch.float16)
    ours = detops.batched_nms(b, s, idxs.to(device), 0.5)
    truth = tv.batched_nms(boxes, scores, idxs, 0.5)  # float64: the offsets are exact there
    assert ours.cpu().tolist() == truth.tolist()


@pytest.mark.parametrize("device", devices())
def test_hundred_thousand_boxes(device):
    g = torch.Generator().manual_seed(1)
    n = 100_000
    objects = torch.rand(1000, 4, generator=g) * torch.tensor([1344.0, 800.0, 200.0, 200.0]) + torch.tensor([0, 0, 12.0, 12.0])
    which = torch.randint(0, 1000, (n,), generator=g)
    o = objects[which]
    c = o[:, :2] + o[:, 2:] * (torch.rand(n, 2, generator=g) - 0.5) * 0.16
    wh = o[:, 2:] * (0.85 + 0.33 * torch.rand(n, 2, generator=g))
    boxes = torch.cat([c - wh / 2, c + wh / 2], 1)
    scores = torch.rand(n, generator=g)
    keep = detops.nms(boxes.to(device), scores.to(device), 0.5)
    assert 0 < keep.numel() < n
    check_validity(boxes, scores, keep, 0.5, 2e-6)


@pytest.mark.parametrize("device", devices())
def test_empty_and_requires_grad(device):
    empty = detops.nms(torch.zeros(0, 4, device=device), torch.zeros(0, device=device), 0.5)
    assert empty.shape == (0,) and empty.dtype == torch.int64
    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11]], device=device, requires_grad=True)
    scores = torch.tensor([0.5, 0.9], device=device, requires_grad=True)
    assert detops.nms(boxes, scores, 0.5).cpu().tolist() == [1]


@pytest.mark.parametrize("device", devices())
def test_bad_inputs_raise_torchvisions_exception_types(device):
    """torchvision 0.26's types (RuntimeError for shapes, NotImplementedError for non-floating boxes); our
    messages name the argument and the expected shape. Thresholds outside [0, 1] are accepted, as torchvision."""
    boxes = torch.zeros(3, 4, device=device)
    scores = torch.zeros(3, device=device)
    with pytest.raises(RuntimeError, match=r"boxes must be a 2-D tensor \[N, 4\]"):
        detops.nms(torch.zeros(3, 5, device=device), scores, 0.5)
    with pytest.raises(RuntimeError, match=r"scores must be a 1-D tensor \[N\]"):
        detops.nms(boxes, torch.zeros(4, device=device), 0.5)
    with pytest.raises(NotImplementedError, match="boxes must be float64, float32, float16 or bfloat16"):
        detops.nms(boxes.long(), scores, 0.5)
    with pytest.raises(RuntimeError, match="scores must be float64, float32, float16 or bfloat16"):
        detops.nms(boxes, scores.long(), 0.5)
    with pytest.raises(RuntimeError, match=r"idxs must be a 1-D tensor \[N\]"):
        detops.batched_nms(boxes, scores, torch.zeros(3, 1, device=device, dtype=torch.long), 0.5)
    assert detops.nms(boxes, scores, -0.5).numel() == 3  # zero-area boxes: IoU 0 / 0 = NaN suppresses nothing
