"""The one table of DetOps / torchvision op pairs, used by suites/peer/test_peer.py and scripts/peer_bench.py.

Each Pair says how to build inputs (fp64 on the CPU, from a seed), how to call each side, which inputs are
cast to the dtype under test, which get gradients, what the truth is and the tolerance per dtype. Cases are
the real-model shapes of shared/OPS.md (the same names and shapes as the C++ benchmark cases; full size on
CUDA, scaled down on the CPU) and seeded random cases (the same size on both devices).
"""
import dataclasses
import math
from typing import Callable

import torch

F64, F32, F16, BF16 = torch.float64, torch.float32, torch.float16, torch.bfloat16
ALL_DTYPES = [F64, F32, F16, BF16]
DTYPE_NAME = {F64: "fp64", F32: "fp32", F16: "fp16", BF16: "bf16"}

# (atol, rtol) per dtype, as in suites/python and the C++ harness.
TOL = {F64: (1e-10, 1e-10), F32: (1e-4, 1e-5), F16: (1e-3, 2e-3), BF16: (8e-3, 1.6e-2)}
TOL_IOU = {F64: (1e-10, 1e-10), F32: (1e-5, 1e-5), F16: (1e-3, 2e-3), BF16: (8e-3, 1.6e-2)}
EXACT = {d: (0.0, 0.0) for d in ALL_DTYPES}


@dataclasses.dataclass
class Case:
    name: str
    kind: str          # "model" (shared/OPS.md shape) or "random" (seeded)
    params: dict       # full size (CUDA)
    cpu_params: dict   # what the CPU runs (scaled down for model cases; the same for random cases)
    seed: int

    def for_device(self, device):
        return self.params if device == "cuda" else self.cpu_params


@dataclasses.dataclass
class Pair:
    op: str
    torchvision: str
    make: Callable            # (params, seed) -> dict of fp64 CPU tensors and python scalars
    detops: Callable          # (inputs) -> output tensor
    tv: Callable              # (inputs) -> output tensor
    cases: list
    float_keys: tuple         # inputs cast to the dtype under test
    grad_keys: tuple = ()     # differentiable inputs (backward compared when non-empty)
    kind: str = "dense"       # "dense" (values within tolerance) or "nms" (keep lists)
    tol: dict = dataclasses.field(default_factory=lambda: dict(TOL))
    truth_dtype: Callable = lambda dtype: F64  # torchvision's dtype for the truth, given ours
    truth_note: str = "torchvision in fp64 on our rounded inputs"


# ---------------------------------------------------------------- input builders
def image_rois(g, k, n, img_h, img_w):
    """rois inside the image, as RPN proposals are (clipped to it). Clipping also keeps every bilinear sample
    point off x = W and y = H of the feature map, where RoIAlign's definition jumps from the edge value to 0
    and rounding alone decides the side: on the H200, one unclipped bf16 roi put a sample at x = 336.00000000000006
    in fp64 (0) and 336.0 in fp32 (the edge value, 0.45), a 0.45 "error" that no kernel can avoid."""
    u = torch.rand(k, 4, generator=g, dtype=F64)
    x1, y1 = u[:, 0] * img_w * 0.8, u[:, 1] * img_h * 0.8
    x2 = torch.clamp(x1 + 1 + u[:, 2] * img_w * 0.5, max=img_w)
    y2 = torch.clamp(y1 + 1 + u[:, 3] * img_h * 0.5, max=img_h)
    b = torch.randint(0, n, (k,), generator=g).to(F64)
    return torch.stack([b, x1, y1, x2, y2], 1)


def grid_rois(g, k, n, h, w, scale, ph, pw):
    """rois whose scaled sizes are whole multiples of the pooled size at integer positions: every bin edge is
    an integer in any dtype, so position-sensitive pooling agrees exactly on the bin contents. They may reach
    the last row and column: DetOps's ps_roi_pool clips its forward there as torchvision's does by default.

    The image coordinates (feature coordinates / scale) must also survive rounding to bf16, whose spacing is 8
    between 1024 and 2048: a roi edge at 1348 px becomes 1344 and its bins stop being whole (on the H200 that
    moved whole rows between bins, a 0.07 'error' against fp64). So positions and bin sizes step by q feature
    pixels, where q / scale is a multiple of bf16's spacing at the largest coordinate."""
    spacing = 2.0 ** (math.floor(math.log2(max(h, w) / scale)) - 7)  # bf16: 8 significand bits
    q = max(1, math.ceil(spacing * scale))
    while (q / scale) % spacing:
        q += 1
    mh = q * torch.randint(1, max(2, h // (ph * q) + 1), (k,), generator=g)
    mw = q * torch.randint(1, max(2, w // (pw * q) + 1), (k,), generator=g)
    rh, rw = (mh * ph).clamp(max=h // (ph * q) * ph * q), (mw * pw).clamp(max=w // (pw * q) * pw * q)
    y1 = q * (torch.rand(k, generator=g, dtype=F64) * ((h - rh) // q + 1).to(F64)).floor()
    x1 = q * (torch.rand(k, generator=g, dtype=F64) * ((w - rw) // q + 1).to(F64)).floor()
    b = torch.randint(0, n, (k,), generator=g).to(F64)
    return torch.stack([b, x1 / scale, y1 / scale, (x1 + rw) / scale, (y1 + rh) / scale], 1)


def make_roi(p, seed, grid=False):
    g = torch.Generator().manual_seed(seed)
    n, c, h, w = p["x"]
    x = torch.rand(n, c, h, w, generator=g, dtype=F64) * 2 - 1
    if grid:
        rois = grid_rois(g, p["k"], n, h, w, p["scale"], p["pooled"], p["pooled"])
    else:
        rois = image_rois(g, p["k"], n, h / p["scale"], w / p["scale"])
    return {"x": x, "rois": rois, **{k: v for k, v in p.items() if k not in ("x", "k", "shape")}}


def image_boxes(g, n, w=1344.0, h=800.0):
    """Boxes 16..545 px wide and high: at least twice bf16's spacing at the image's far edge (8 px at 1024..2048),
    so no box (nor a loss case's jittered prediction) collapses to zero area when rounded. Zero-area pairs are
    where torchvision's GIoU is 0/0 = NaN (DetOps gives the same NaN by default, and 0 with
    defined_degenerate=True; docs/ops/box_iou.md); the correctness and Python suites cover them."""
    xy = torch.rand(n, 2, generator=g, dtype=F64) * torch.tensor([w, h], dtype=F64)
    wh = torch.exp(torch.rand(n, 2, generator=g, dtype=F64) * 3.5 + 2.8)
    return torch.cat([xy, xy + wh], 1)


def make_nms(p, seed):
    g = torch.Generator().manual_seed(seed)
    n = p["n"]
    if p.get("grid"):
        boxes, scores, idxs = grid_case(n, p["iou"], seed, p.get("classes", 0))
    else:
        boxes = image_boxes(g, n)
        scores = torch.rand(n, generator=g, dtype=F64)
        idxs = torch.randint(0, max(p.get("classes", 1), 1), (n,), generator=g)
    return {"boxes": boxes, "scores": scores, "idxs": idxs, "iou": p["iou"]}


def grid_case(n, threshold, seed, classes=0):
    """Integer boxes in [0, 256), each accepted only away from the threshold (same class); distinct scores exact
    in bf16 (as suites/python/test_nms.py grid_case)."""
    from torchvision.ops import box_iou

    g = torch.Generator().manual_seed(seed)
    boxes, cls = [], []
    while len(boxes) < n:
        w, h = torch.randint(8, 65, (2,), generator=g).tolist()
        x, y = torch.randint(0, 256 - 64, (2,), generator=g).tolist()
        c = int(torch.randint(0, max(classes, 1), (1,), generator=g))
        cand = torch.tensor([[x, y, x + w, y + h]], dtype=F64)
        if boxes:
            iou = box_iou(torch.tensor(boxes, dtype=F64), cand)[:, 0]
            same = torch.tensor(cls) == c
            if ((iou - threshold).abs()[same] <= 1e-3).any():
                continue
        boxes.append(cand[0].tolist())
        cls.append(c)
    k = torch.arange(n, dtype=F64)
    scores = (1 + (k % 128) / 128) * torch.pow(2.0, (k // 128) - 12)
    scores = scores[torch.randperm(n, generator=g)]
    return torch.tensor(boxes, dtype=F64), scores, torch.tensor(cls, dtype=torch.int64)


def make_pairwise(p, seed):
    g = torch.Generator().manual_seed(seed)
    return {"b1": image_boxes(g, p["n"]), "b2": image_boxes(g, p["m"])}


def make_loss_pairs(p, seed):
    """Predictions near their targets (IoU mostly in (0, 1)), as a detector's positive anchors."""
    g = torch.Generator().manual_seed(seed)
    t = image_boxes(g, p["n"])
    wh = t[:, 2:] - t[:, :2]
    jitter = (torch.rand(p["n"], 4, generator=g, dtype=F64) - 0.5) * 0.4 * wh.repeat(1, 2)
    return {"b1": t + jitter, "b2": t, "reduction": p["reduction"]}


def scaled(x, c=8, h=None, w=None):
    return [x[0], c, h or max(x[2] // 8, 4), w or max(x[3] // 8, 4)]


# ---------------------------------------------------------------- the table
def _d():
    return torch.ops.detops


def _tvops():
    import torchvision.ops as tvo
    return tvo


def roi_align_cases():
    out = []
    for i, (name, k, pooled) in enumerate([("box_head_1000", 1000, 7), ("box_head_train_1024", 1024, 7),
                                           ("mask_head_100", 100, 14), ("mask_head_512", 512, 14)]):
        full = {"x": [2, 256, 200, 336], "k": k, "scale": 0.25, "pooled": pooled, "sr": 2, "aligned": True,
                "shape": f"x[2,256,200,336] rois[{k},5] {pooled}x{pooled} scale 1/4 sr2 aligned"}
        cpu = dict(full, x=[2, 4, 50, 84], k=min(k, 64), scale=1 / 16,
                   shape=f"x[2,4,50,84] rois[{min(k, 64)},5] {pooled}x{pooled} scale 1/16 sr2 aligned")
        out.append(Case(name, "model", full, cpu, 9001 + 10 * i))
    for seed, x, k, scale, pooled, sr, aligned in [(1, [2, 3, 20, 24], 17, 0.25, 7, 0, False),
                                                   (2, [1, 4, 25, 42], 9, 1 / 32, 14, 0, True),
                                                   (3, [3, 2, 13, 21], 30, 1 / 16, 1, 1, False)]:
        p = {"x": x, "k": k, "scale": scale, "pooled": pooled, "sr": sr, "aligned": aligned,
             "shape": f"x{x} rois[{k},5] {pooled}x{pooled} sr{sr}{' aligned' if aligned else ''}"}
        out.append(Case(f"random_{seed}", "random", p, p, seed))
    return out


def roi_pool_cases():
    full = {"x": [2, 256, 200, 336], "k": 1000, "scale": 0.25, "pooled": 7,
            "shape": "x[2,256,200,336] rois[1000,5] 7x7 scale 1/4"}
    cpu = dict(full, x=[2, 4, 50, 84], k=64, scale=1 / 16, shape="x[2,4,50,84] rois[64,5] 7x7 scale 1/16")
    out = [Case("box_head_1000", "model", full, cpu, 9101)]
    for seed, x, k, scale, pooled in [(1, [2, 3, 20, 24], 17, 0.25, 7), (2, [3, 2, 13, 21], 30, 1 / 16, 3)]:
        p = {"x": x, "k": k, "scale": scale, "pooled": pooled, "shape": f"x{x} rois[{k},5] {pooled}x{pooled}"}
        out.append(Case(f"random_{seed}", "random", p, p, seed))
    return out


def ps_cases(align):
    sfx = " sr2" if align else ""
    full = {"x": [2, 490, 200, 336], "k": 1000, "scale": 0.25, "pooled": 7, "sr": 2,
            "shape": f"x[2,490,200,336] rois[1000,5] 7x7 scale 1/4{sfx}"}
    cpu = dict(full, x=[2, 98, 50, 84], k=64, scale=1 / 16, shape=f"x[2,98,50,84] rois[64,5] 7x7 scale 1/16{sfx}")
    out = [Case("rfcn_1000", "model", full, cpu, 9201 if align else 9301)]
    for seed, x, k, scale, pooled in [(1, [2, 18, 20, 24], 17, 0.25, 3), (2, [3, 4, 13, 21], 30, 1 / 16, 1)]:
        p = {"x": x, "k": k, "scale": scale, "pooled": pooled, "sr": 0, "shape": f"x{x} rois[{k},5] {pooled}x{pooled}"}
        out.append(Case(f"random_{seed}", "random", p, p, seed))
    return out


def nms_cases(batched):
    out = []
    sizes = ([("boxes_5000_80_classes", 5000, 0.5, 80), ("boxes_20000_80_classes", 20000, 0.5, 80)] if batched else
             [("rpn_2000_iou_0_7", 2000, 0.7, 0), ("boxes_1000", 1000, 0.5, 0), ("boxes_5000", 5000, 0.5, 0),
              ("boxes_20000", 20000, 0.5, 0), ("boxes_100000", 100000, 0.5, 0)])
    for i, (name, n, iou, classes) in enumerate(sizes):
        full = {"n": n, "iou": iou, "classes": classes,
                "shape": f"boxes[{n},4] IoU {iou}" + (f", {classes} classes" if batched else "")}
        cpu = dict(full, n=min(n, 1500), shape=f"boxes[{min(n, 1500)},4] IoU {iou}" + (f", {classes} classes" if batched else ""))
        out.append(Case(name, "model", full, cpu, (9601 if batched else 9501) + 10 * i))
    for seed, iou in [(30, 0.3), (50, 0.5), (70, 0.7)]:
        p = {"n": 150, "iou": iou, "classes": 5 if batched else 0, "grid": True,
             "shape": f"boxes[150,4] integer, margin-clean, IoU {iou}"}
        out.append(Case(f"grid_iou_{iou}", "random", p, p, seed))
    return out


def pairwise_cases(v):
    full = {"n": 4000, "m": 4000, "shape": "boxes1[4000,4] boxes2[4000,4] -> [4000,4000]"}
    cpu = {"n": 300, "m": 300, "shape": "boxes1[300,4] boxes2[300,4] -> [300,300]"}
    rnd = {"n": 57, "m": 31, "shape": "boxes1[57,4] boxes2[31,4]"}
    return [Case("boxes_4000x4000", "model", full, cpu, 9401 + 10 * v), Case("random_1", "random", rnd, rnd, 1)]


def loss_cases(v):
    full = {"n": 240000, "reduction": "sum", "shape": "boxes1[240000,4] boxes2[240000,4] reduction sum"}
    cpu = dict(full, n=2000, shape="boxes1[2000,4] boxes2[2000,4] reduction sum")
    rnd = {"n": 97, "reduction": "none", "shape": "boxes1[97,4] boxes2[97,4] reduction none"}
    return [Case("pairs_240000_sum", "model", full, cpu, 9501 + 10 * v), Case("random_1", "random", rnd, rnd, 1)]


# RetinaNet's classification head starts at the prior 0.01 (bias -log(99)); about one positive per 10,000 elements.
FOCAL_PRIOR_LOGIT = -math.log(99.0)


def make_focal(p, seed):
    g = torch.Generator().manual_seed(seed)
    dims = p["dims"]
    x = torch.randn(dims, generator=g, dtype=F64) * p["scale"] + p["bias"]
    t = (torch.rand(dims, generator=g, dtype=F64) < p["pos"]).to(F64)
    return {"x": x, "t": t, "alpha": p["alpha"], "gamma": p["gamma"], "reduction": p["reduction"]}


def focal_cases():
    """The C++ benchmark shapes (suites/specs/sigmoid_focal_loss.cpp): 240,000 anchors x 80 classes and 2 images x
    201,600 anchors x 80 classes (OPS.md), reduction sum, logits around the prior; the CPU runs 2,000 anchors per
    image. The random case: soft logits, 30 % positives, reduction mean."""
    base = {"bias": FOCAL_PRIOR_LOGIT, "scale": 1.0, "pos": 1e-4, "alpha": 0.25, "gamma": 2.0, "reduction": "sum"}
    out = []
    for i, (name, dims, cpu_dims) in enumerate([("anchors_240000x80_sum", [240000, 80], [2000, 80]),
                                                 ("retinanet_2x201600x80_sum", [2, 201600, 80], [2, 1000, 80])]):
        full = dict(base, dims=dims, shape=f"inputs{dims} targets{dims} reduction sum")
        cpu = dict(base, dims=cpu_dims, shape=f"inputs{cpu_dims} targets{cpu_dims} reduction sum")
        out.append(Case(name, "model", full, cpu, 9701 + 2 * i))
    rnd = {"dims": [37, 11], "bias": 0.0, "scale": 2.0, "pos": 0.3, "alpha": 0.25, "gamma": 2.0, "reduction": "mean",
           "shape": "inputs[37,11] targets[37,11] reduction mean"}
    out.append(Case("random_1", "random", rnd, rnd, 1))
    return out


def _pairwise(name, v):
    def ours(i):
        f = getattr(_d(), name)
        return f(i["b1"], i["b2"]) if name in ("box_iou", "generalized_box_iou") else f(i["b1"], i["b2"], 1e-7)

    def theirs(i):
        f = getattr(_tvops(), name)
        return f(i["b1"], i["b2"]) if name in ("box_iou", "generalized_box_iou") else f(i["b1"], i["b2"], 1e-7)

    return Pair(name, f"torchvision.ops.{name}", make_pairwise, ours, theirs, pairwise_cases(v), ("b1", "b2"),
                tol=dict(TOL_IOU))


def _loss(name, v):
    def ours(i):
        return getattr(_d(), name)(i["b1"], i["b2"], reduction=i["reduction"], eps=1e-7)

    def theirs(i):
        return getattr(_tvops(), name)(i["b1"], i["b2"], reduction=i["reduction"], eps=1e-7)

    # Sums of up to 240,000 terms: the half types accumulate in fp32; their tolerance is relative.
    return Pair(name, f"torchvision.ops.{name}", make_loss_pairs, ours, theirs, loss_cases(v), ("b1", "b2"),
                grad_keys=("b1", "b2"), tol=dict(TOL_IOU))


def _roi_align(i):
    return _d().roi_align(i["x"], i["rois"], i["scale"], i["pooled"], i["pooled"], i["sr"], i["aligned"])


def _tv_roi_align(i):
    return _tvops().roi_align(i["x"], i["rois"], (i["pooled"], i["pooled"]), spatial_scale=i["scale"],
                              sampling_ratio=i["sr"], aligned=i["aligned"])


PAIRS = [
    Pair("roi_align", "torchvision.ops.roi_align", make_roi, _roi_align, _tv_roi_align, roi_align_cases(),
         ("x", "rois"), grad_keys=("x",)),
    Pair("roi_pool", "torchvision.ops.roi_pool", make_roi,
         lambda i: _d().roi_pool(i["x"], i["rois"], i["scale"], i["pooled"], i["pooled"])[0],
         lambda i: _tvops().roi_pool(i["x"], i["rois"], (i["pooled"], i["pooled"]), spatial_scale=i["scale"]),
         roi_pool_cases(), ("x", "rois"), grad_keys=("x",), tol=dict(EXACT),
         truth_dtype=lambda d: d if d in (F64, F32) else F32,
         truth_note="torchvision in the same dtype (fp32 on our rounded inputs for fp16/bf16: bin edges are computed "
                    "in fp32 there, and torchvision has no bf16); RoIPool selects values, so exact"),
    Pair("ps_roi_align", "torchvision.ops.ps_roi_align", make_roi,
         lambda i: _d().ps_roi_align(i["x"], i["rois"], i["scale"], i["pooled"], i["pooled"], i["sr"])[0],
         lambda i: _tvops().ps_roi_align(i["x"], i["rois"], (i["pooled"], i["pooled"]), spatial_scale=i["scale"],
                                         sampling_ratio=i["sr"]),
         ps_cases(True), ("x", "rois"), grad_keys=("x",)),
    Pair("ps_roi_pool", "torchvision.ops.ps_roi_pool", lambda p, s: make_roi(p, s, grid=True),
         lambda i: _d().ps_roi_pool(i["x"], i["rois"], i["scale"], i["pooled"], i["pooled"])[0],
         lambda i: _tvops().ps_roi_pool(i["x"], i["rois"], (i["pooled"], i["pooled"]), spatial_scale=i["scale"]),
         ps_cases(False), ("x", "rois"), grad_keys=("x",),
         truth_note="torchvision in fp64 on our rounded inputs; rois on integer bin edges (bins follow the "
                    "dtype's arithmetic, as torchvision's, so fp32 and fp64 edges differ elsewhere)"),
    Pair("nms", "torchvision.ops.nms", make_nms,
         lambda i: _d().nms(i["boxes"], i["scores"], i["iou"]),
         lambda i: _tvops().nms(i["boxes"], i["scores"], i["iou"]),
         nms_cases(False), ("boxes", "scores"), kind="nms",
         truth_note="torchvision in fp64 on our rounded inputs: the same keep list on margin-clean cases, "
                    "else the validity check"),
    Pair("batched_nms", "torchvision.ops.batched_nms", make_nms,
         lambda i: _d().batched_nms(i["boxes"], i["scores"], i["idxs"], i["iou"]),
         lambda i: _tvops().batched_nms(i["boxes"], i["scores"], i["idxs"], i["iou"]),
         nms_cases(True), ("boxes", "scores"), kind="nms",
         truth_note="torchvision in fp64 on our rounded inputs: the same keep list on margin-clean cases, "
                    "else the validity check"),
]
for _v, _name in enumerate(["box_iou", "generalized_box_iou", "distance_box_iou", "complete_box_iou"]):
    PAIRS.append(_pairwise(_name, _v))
for _v, _name in enumerate(["generalized_box_iou_loss", "distance_box_iou_loss", "complete_box_iou_loss"], start=1):
    PAIRS.append(_loss(_name, _v))
# Sums of up to 32M terms: ours accumulates the half types in fp32; the tolerance is relative to the sum.
PAIRS.append(Pair("sigmoid_focal_loss", "torchvision.ops.sigmoid_focal_loss", make_focal,
                  lambda i: _d().sigmoid_focal_loss(i["x"], i["t"], i["alpha"], i["gamma"], i["reduction"]),
                  lambda i: _tvops().sigmoid_focal_loss(i["x"], i["t"], i["alpha"], i["gamma"], i["reduction"]),
                  focal_cases(), ("x", "t"), grad_keys=("x",), tol=dict(TOL_IOU)))

# Ops of the issue that DetOps does not have yet: listed so the suite says so (skipped with the reason).
PENDING = ["deform_conv2d"]


def detops_has(op):
    try:
        getattr(torch.ops.detops, op)
        return True
    except (AttributeError, RuntimeError):
        return False


def load_library(path=None):
    import os
    import pathlib

    path = path or os.environ.get("DETOPS_TORCH_LIBRARY")
    if not path:
        root = pathlib.Path(__file__).resolve().parents[2]
        for preset in ("dev", "ci", "release"):
            cand = root / "build" / preset / "ops" / "libdetops_torch.so"
            if cand.exists():
                path = str(cand)
                break
    if not path or not pathlib.Path(path).exists():
        raise FileNotFoundError("libdetops_torch.so not found: build first or set DETOPS_TORCH_LIBRARY")
    torch.ops.load_library(str(path))
    return path


def cast_inputs(pair, base, dtype, device):
    """The inputs in the dtype under test on device (floats rounded to dtype; integer tensors as they are)."""
    out = {}
    for k, v in base.items():
        if torch.is_tensor(v):
            v = v.to(device, dtype) if k in pair.float_keys else v.to(device)
        out[k] = v
    return out


def as_truth_inputs(pair, inp, dtype):
    """Our rounded inputs, converted to torchvision's truth dtype."""
    return {k: (v.detach().to(dtype) if torch.is_tensor(v) and k in pair.float_keys else v) for k, v in inp.items()}


_KERNEL_CACHE = {}


def torchvision_kernel_missing(pair, dtype, device):
    """None when torchvision runs the pair in dtype on device, else the reason (its error message)."""
    key = (pair.op, dtype, device)
    if key not in _KERNEL_CACHE:
        case = next(c for c in pair.cases if c.kind == "random")
        inp = cast_inputs(pair, pair.make(case.cpu_params, case.seed), dtype, device)
        try:
            pair.tv(inp)
            _KERNEL_CACHE[key] = None
        except (RuntimeError, NotImplementedError) as e:
            msg = str(e).splitlines()[0]
            _KERNEL_CACHE[key] = f"torchvision has no {DTYPE_NAME[dtype]} kernel for {pair.op} on {device} ({msg})"
    return _KERNEL_CACHE[key]


def max_abs_error(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    if a.numel() == 0:
        return 0.0
    return float((a - b).abs().max())
