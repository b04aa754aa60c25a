"""Every DetOps / torchvision pair of suites/peer/pairs.py on the same inputs: forward and backward, each case,
dtype and device (CPU always, CUDA when present). See docs/peers.md for the truth and tolerance per pair."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed in this Python")
torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed: no peer to compare against")

from peer import nms_checks, pairs  # noqa: E402
from peer.pairs import ALL_DTYPES, DTYPE_NAME, PAIRS, PENDING  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

PARAMS = [pytest.param(p, c, id=f"{p.op}-{c.name}") for p in PAIRS for c in p.cases]
DT = [pytest.param(d, id=DTYPE_NAME[d]) for d in ALL_DTYPES]


def run_pair(pair, case, dtype, device, backward):
    """Ours in dtype and torchvision in its truth dtype on the same rounded inputs; returns (ours, truth,
    our grads, truth grads, inputs)."""
    base = pair.make(case.for_device(device), case.seed)
    inp = pairs.cast_inputs(pair, base, dtype, device)
    tin = pairs.as_truth_inputs(pair, inp, pair.truth_dtype(dtype))
    grads = pair.grad_keys if backward else ()
    for k in grads:
        inp[k] = inp[k].detach().requires_grad_()
        tin[k] = tin[k].detach().requires_grad_()
    ours, truth = pair.detops(inp), pair.tv(tin)
    g_ours = g_truth = ()
    if grads:
        # .sum(): a stride-0 grad_output of ones; gradients are then sums of same-signed weights (RoI ops) or
        # derivatives of a sum (losses), so the forward's tolerance applies.
        g_ours = torch.autograd.grad(ours.sum(), [inp[k] for k in grads])
        g_truth = torch.autograd.grad(truth.sum(), [tin[k] for k in grads])
    return ours, truth, g_ours, g_truth, inp


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("pair,case", PARAMS)
def test_matches_torchvision_truth(pair, case, dtype, device):
    """Forward (and backward where the pair has one) of ours in dtype against torchvision in its truth dtype
    (pair.truth_note) on the same rounded inputs. The OPS.md model shapes run at full size on CUDA only."""
    ours, truth, g_ours, g_truth, inp = run_pair(pair, case, dtype, device, backward=True)
    where = f"{pair.op} {case.name} {DTYPE_NAME[dtype]} {device}"
    if pair.kind == "nms":
        assert ours.dtype == torch.int64 and ours.device.type == device, where
        boxes, scores = inp["boxes"], inp["scores"]
        idxs = inp["idxs"] if pair.op == "batched_nms" else None
        distinct = scores.unique().numel() == scores.numel()
        if distinct and nms_checks.margin_clean(boxes, inp["iou"], idxs=idxs if idxs is not None else None):
            assert ours.cpu().tolist() == truth.cpu().tolist(), f"keep list differs from torchvision: {where}"
        else:
            tol = 1e-12 if dtype == torch.float64 else 2e-6
            nms_checks.check_validity(boxes, scores, ours, inp["iou"], tol, idxs)
        return
    atol, rtol = pair.tol[dtype]
    assert ours.shape == truth.shape, where
    torch.testing.assert_close(ours.detach().to(truth.dtype), truth.detach(), atol=atol, rtol=rtol,
                               msg=lambda m: f"forward {where} vs {pair.truth_note}: {m}")
    for k, a, b in zip(pair.grad_keys, g_ours, g_truth):
        torch.testing.assert_close(a.to(b.dtype), b, atol=atol, rtol=rtol,
                                   msg=lambda m: f"grad of {k} {where} vs {pair.truth_note}: {m}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("pair", [pytest.param(p, id=p.op) for p in PAIRS])
def test_torchvision_same_dtype(pair, dtype, device):
    """Ours against torchvision run in the same dtype (what the speed runner times), on the pair's first random
    case. Skipped where torchvision has no kernel for the dtype. fp32/fp64: within the dtype tolerance. fp16:
    torchvision computes in fp16 (sample positions included), so its own error can exceed the tolerance; there
    ours must be at least as close to the fp64 truth as torchvision's fp16 result is (or within tolerance)."""
    missing = pairs.torchvision_kernel_missing(pair, dtype, device)
    if missing:
        pytest.skip(missing)
    case = next(c for c in pair.cases if c.kind == "random")
    inp = pairs.cast_inputs(pair, pair.make(case.for_device(device), case.seed), dtype, device)
    ours, theirs = pair.detops(inp), pair.tv(inp)
    where = f"{pair.op} {case.name} {DTYPE_NAME[dtype]} {device} vs torchvision {DTYPE_NAME[dtype]}"
    if pair.kind == "nms":
        assert ours.cpu().tolist() == theirs.cpu().tolist(), where  # margin-clean grid case
        return
    atol, rtol = pair.tol[dtype]
    if dtype in (torch.float16, torch.bfloat16):
        truth = pair.tv(pairs.as_truth_inputs(pair, inp, pair.truth_dtype(dtype)))
        ours_err, tv_err = pairs.max_abs_error(ours, truth), pairs.max_abs_error(theirs, truth)
        assert ours_err <= max(tv_err, atol), f"{where}: ours is {ours_err:g} from the truth, torchvision {tv_err:g}"
        return
    torch.testing.assert_close(ours.detach().to(theirs.dtype), theirs.detach(), atol=atol, rtol=rtol,
                               msg=lambda m: f"{where}: {m}")


@pytest.mark.parametrize("op", PENDING)
def test_pending_pairs(op):
    """Pairs of the issue whose DetOps op does not exist yet: skipped until it does, then this fails as a
    reminder to add the pair to suites/peer/pairs.py."""
    if not pairs.detops_has(op):
        pytest.skip(f"torch.ops.detops.{op} does not exist yet: no peer comparison")
    assert op in [p.op for p in PAIRS], f"detops.{op} exists now: add its pair to suites/peer/pairs.py"


def test_table_is_complete():
    """Every pair has a model case and a random case, its detops op exists, and its truth dtype is a float type."""
    for p in PAIRS:
        assert pairs.detops_has(p.op), p.op
        kinds = {c.kind for c in p.cases}
        assert kinds == {"model", "random"}, p.op
        for d in ALL_DTYPES:
            assert p.truth_dtype(d).is_floating_point and d in p.tol
