"""`detops.ops` as a drop-in for `torchvision.ops`: the same names, signatures, defaults and documented
arguments; rois as per-image lists; the nn.Module wrappers; box_iou's formats; torchvision's errors for
malformed boxes; the fallback to torchvision for names DetOps has no kernel for; and the package's
message when the library cannot be found. Results are compared with torchvision run on the same inputs."""
import inspect
import os
import subprocess
import sys
import pathlib

import pytest
import torch

tv_ops = pytest.importorskip("torchvision.ops", reason="torchvision is not installed")


@pytest.fixture(scope="module")
def ops(detops_library):
    import detops.ops  # after conftest's detops_library loaded the library
    return detops.ops



def devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

FUNCTIONS = ["roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool", "nms", "batched_nms", "box_iou",
             "generalized_box_iou", "distance_box_iou", "complete_box_iou", "generalized_box_iou_loss",
             "distance_box_iou_loss", "complete_box_iou_loss", "sigmoid_focal_loss"]
MODULES = ["RoIAlign", "RoIPool", "PSRoIAlign", "PSRoIPool"]


def _params(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("name", FUNCTIONS + MODULES)
def test_signature_matches_torchvision(name, ops):
    ours, theirs = getattr(ops, name), getattr(tv_ops, name)
    assert ours.__module__.startswith("detops."), f"detops.ops.{name} is not DetOps's own ({ours.__module__})"
    # Keyword-only extras (DetOps's explicit options) may follow torchvision's parameters.
    mine = [p for p in _params(ours) if p[1] != inspect.Parameter.KEYWORD_ONLY]
    assert mine == _params(theirs), f"{name}: {_params(ours)} != torchvision's {_params(theirs)}"


@pytest.mark.parametrize("name", FUNCTIONS)
def test_docstring_documents_every_argument(name, ops):
    fn = getattr(ops, name)
    doc = inspect.getdoc(fn) or ""
    assert "Returns" in doc, f"detops.ops.{name} has no Returns section"
    for p in inspect.signature(fn).parameters:
        assert p in doc, f"detops.ops.{name}'s docstring does not document '{p}'"


def test_unimplemented_names_fall_back_to_torchvision(ops):
    assert ops.box_convert is tv_ops.box_convert
    assert ops.MultiScaleRoIAlign is tv_ops.MultiScaleRoIAlign
    with pytest.raises(AttributeError, match="no_such_op"):
        ops.no_such_op


def _features(device, c=8):
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, c, 24, 30, generator=g, dtype=torch.float64).to(device)


def _box_list(device):
    """Per-image boxes, some crossing the image border (image 96 x 120 at scale 1/4), one image empty."""
    g = torch.Generator().manual_seed(1)
    out = []
    for n in (5, 0, 3):
        xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * torch.tensor([120.0, 96.0]) - 8
        wh = 2 + torch.rand(n, 2, generator=g, dtype=torch.float64) * 60
        out.append(torch.cat([xy, xy + wh], 1).to(device))
    return out


# (detops function, torchvision function, extra positional arguments after output_size)
LIST_ROIS = [("roi_align", (0.25, 2, True)), ("roi_align", (0.25,)), ("roi_pool", (0.25,)),
             ("ps_roi_align", (0.25, 2)), ("ps_roi_pool", (0.25,))]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name,extra", LIST_ROIS, ids=[f"{n}{len(e)}" for n, e in LIST_ROIS])
def test_list_of_boxes_matches_torchvision(name, extra, device, ops):
    x = torch.cat([_features(device), _features(device)[:1]])  # 3 images
    boxes = _box_list(device)
    ours = getattr(ops, name)(x, boxes, 2, *extra)
    theirs = getattr(tv_ops, name)(x, boxes, 2, *extra)
    assert ours.shape == theirs.shape == (8,) + theirs.shape[1:]
    torch.testing.assert_close(ours, theirs, atol=1e-10, rtol=1e-10)
    # The list form and the [K, 5] form give the same result.
    rois = torch.cat([torch.cat([torch.full_like(b[:, :1], i), b], 1) for i, b in enumerate(boxes)])
    torch.testing.assert_close(getattr(ops, name)(x, rois, 2, *extra), ours, atol=0, rtol=0)


@pytest.mark.parametrize("device", devices())
def test_modules_match_torchvision(device, ops):
    x = _features(device)
    boxes = _box_list(device)[:2]
    cases = [("RoIAlign", ((3, 2), 0.25, 2, True)), ("RoIAlign", (4, 0.25, -1)), ("RoIPool", ((3, 2), 0.25)),
             ("PSRoIAlign", (2, 0.25, 2)), ("PSRoIPool", (2, 0.25))]
    for name, args in cases:
        ours, theirs = getattr(ops, name)(*args), getattr(tv_ops, name)(*args)
        assert repr(ours) == repr(theirs)
        assert isinstance(ours, torch.nn.Module)
        rois = boxes if not name.startswith("PS") else \
            torch.cat([torch.cat([torch.full_like(b[:, :1], i), b], 1) for i, b in enumerate(boxes)])
        torch.testing.assert_close(ours(x, rois), theirs(x, rois), atol=1e-10, rtol=1e-10,
                                   msg=lambda m: f"{name}{args}: {m}")


def test_prroi_pool_module_matches_function(ops):
    x = _features("cpu")
    boxes = _box_list("cpu")[:2]
    module = ops.PrRoIPool(3, 0.25)
    assert repr(module) == "PrRoIPool(output_size=3, spatial_scale=0.25)"
    torch.testing.assert_close(module(x, boxes), ops.prroi_pool(x, boxes, 3, 0.25), atol=0, rtol=0)


@pytest.mark.parametrize("name", ["roi_align", "roi_pool"])
def test_malformed_boxes_raise_like_torchvision(name, ops):
    x = _features("cpu")
    for bad in (torch.zeros(3, 4, dtype=torch.float64), [torch.zeros(3, 5, dtype=torch.float64)], "boxes"):
        with pytest.raises(Exception) as theirs:
            getattr(tv_ops, name)(x, bad, 2)
        with pytest.raises(theirs.type) as mine:
            getattr(ops, name)(x, bad, 2)
        assert str(mine.value) == str(theirs.value)


@pytest.mark.parametrize("fmt", ["xyxy", "xywh", "cxcywh"])
def test_box_iou_formats_match_torchvision(fmt, ops):
    g = torch.Generator().manual_seed(2)
    b1 = torch.rand(6, 4, generator=g, dtype=torch.float64) * 20 + torch.tensor([0, 0, 1, 1.0])
    b2 = torch.rand(4, 4, generator=g, dtype=torch.float64) * 20 + torch.tensor([0, 0, 1, 1.0])
    if fmt == "xyxy":
        b1[:, 2:] += b1[:, :2]
        b2[:, 2:] += b2[:, :2]
    torch.testing.assert_close(ops.box_iou(b1, b2, fmt=fmt), tv_ops.box_iou(b1, b2, fmt=fmt), atol=1e-12, rtol=1e-12)
    with pytest.raises(ValueError, match="Unsupported Box IoU Calculation"):
        ops.box_iou(b1, b2, fmt="yxyx")


def test_missing_library_is_reported_with_the_places_looked_at():
    env = dict(os.environ, DETOPS_TORCH_LIBRARY="/nonexistent/libdetops_torch.so",
               PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[2] / "ops" / "python"))
    proc = subprocess.run([sys.executable, "-c", "import detops"], env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "libdetops_torch.so not found" in proc.stderr and "/nonexistent/libdetops_torch.so" in proc.stderr
    assert "DETOPS_TORCH_LIBRARY" in proc.stderr


def test_roi_align_in_deterministic_mode_matches_torchvision(ops):
    if not torch.cuda.is_available():
        pytest.skip("the deterministic-mode path differs only on CUDA (needs a GPU)")
    x = _features("cuda").float().requires_grad_()
    boxes = [b.float() for b in _box_list("cuda")[:2]]
    xt = x.detach().clone().requires_grad_()
    torch.use_deterministic_algorithms(True)
    try:
        ours = ops.roi_align(x, boxes, 3, 0.25, 2, True)
        theirs = tv_ops.roi_align(xt, boxes, 3, 0.25, 2, True)
        ours.sum().backward()  # DetOps's own CUDA backward would refuse deterministic mode here
        theirs.sum().backward()
    finally:
        torch.use_deterministic_algorithms(False)
    torch.testing.assert_close(ours, theirs, atol=0, rtol=0)
    torch.testing.assert_close(x.grad, xt.grad, atol=0, rtol=0)


# Malformed calls torchvision's own kernels refuse: DetOps must raise the same exception type (code written
# against torchvision catches that type). Conditions torchvision does not check (batch indices out of
# range, pooled size 0, spatial_scale <= 0, roi_pool's [K, 4] rois) DetOps refuses too, documented per op.
def _roi_bad_calls(x, rois):
    yield "rois with 4 columns", (x, rois[:, 1:])
    yield "1-D rois", (x, rois[0])
    yield "3-D input", (x[0], rois)
    yield "integer input", (x.long(), rois)
    yield "rois of another dtype", (x, rois.double())
    yield "integer input and rois", (x.long(), rois.long())


def _torchvision_exception(name, args):
    """The exception type torch.ops.torchvision.<name>(*args) raises, or None when it returns or crashes.
    Run in a forked child: on malformed rois torchvision's kernels may read out of bounds and segfault (seen
    on the H200 machine), which must not take the test process with it."""
    import builtins
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: CPU tensors only
        os.close(read)
        try:
            getattr(torch.ops.torchvision, name)(*args)
            answer = "-"
        except Exception as e:  # noqa: BLE001
            answer = type(e).__name__
        os.write(write, answer.encode())
        os._exit(0)
    os.close(write)
    answer = os.read(read, 200).decode()
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if not answer or answer == "-" or status != 0:
        return None
    return getattr(builtins, answer, None) or getattr(torch, answer, None)


ROI_OPS = [("roi_align", (1.0, 2, 2, 2, True)), ("roi_pool", (1.0, 2, 2)), ("ps_roi_align", (1.0, 2, 2, 2)),
           ("ps_roi_pool", (1.0, 2, 2))]


@pytest.mark.parametrize("name,extra", ROI_OPS, ids=[n for n, _ in ROI_OPS])
def test_roi_ops_raise_torchvisions_exception_types(name, extra):
    x = torch.randn(2, 8, 10, 10)
    rois = torch.tensor([[0, 1.0, 1, 5, 5], [1, 0, 0, 9, 9]])
    compared = 0
    for what, args in _roi_bad_calls(x, rois):
        theirs = _torchvision_exception(name, args + extra)
        if theirs is None:
            continue  # torchvision does not check this (or crashed on it); DetOps's refusal is documented
        with pytest.raises(Exception) as ours:
            getattr(torch.ops.detops, name)(*args, *extra)
        assert type(ours.value) is theirs, f"{name}, {what}: DetOps raised {type(ours.value).__name__} " \
                                           f"({ours.value}), torchvision {theirs.__name__}"
        compared += 1
    assert compared >= 3, f"{name}: torchvision refused only {compared} of the malformed calls"
