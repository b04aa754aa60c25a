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


PLAIN = "plain PyTorch"


@dataclasses.dataclass
class Pair:
    op: str
    torchvision: str          # the peer's name: "torchvision.ops.X", or "plain PyTorch: ..." (see peer_kind)
    make: Callable            # (params, seed) -> dict of fp64 CPU tensors and python scalars
    detops: Callable          # (inputs) -> output tensor
    tv: Callable              # (inputs) -> output tensor: the peer (torchvision's op or the plain-PyTorch form)
    cases: list
    float_keys: tuple         # inputs cast to the dtype under test
    grad_keys: tuple = ()     # differentiable inputs (backward compared when non-empty; absent/None inputs skipped)
    kind: str = "dense"       # "dense" (values within tolerance) or "nms" (keep lists)
    tol: dict = dataclasses.field(default_factory=lambda: dict(TOL))
    grad_tol: dict = dataclasses.field(default_factory=dict)  # {grad key: {dtype: (atol, rtol)}}: where tol is not it
    # {grad key: dtypes} whose gradient, where it misses the tolerance, is judged against the peer's own error in
    # that dtype on the same inputs (test_peer.py: at most PEER_ERROR_FACTOR times it): gradients summed from so
    # many contributions (thousands of RPN proposals over one pixel) that the dtype's rounding of the sum, not
    # the kernel, sets the error; the fp64 checks hold the kernel's logic to the tight tolerance.
    grad_vs_peer: dict = dataclasses.field(default_factory=dict)
    truth_dtype: Callable = lambda dtype: F64  # the peer's dtype for the truth, given ours
    truth_note: str = "torchvision in fp64 on our rounded inputs"
    # "torchvision" or PLAIN: what a user without mmcv writes in PyTorch (ops torchvision lacks, issue 12).
    peer_kind: str = "torchvision"
    # What DetOps must provide for the pair to run, "torch.ops.detops.X" or "detops.ops.X" (default: the op in
    # torch.ops.detops). Missing: the pair is skipped with the reason (allowed only for ops in LANDING).
    requires: tuple = ()
    # A floor timed beside both sides (scripts/peer_bench.py): deform_conv2d's dense cuDNN convolution.
    floor: Callable = None    # (inputs) -> output tensor
    floor_name: str = ""
    floor_grad_keys: tuple = ()
    # Memory-bound ops: the inputs every call reads at least once. With the output (and, backward, grad_output and
    # the gradients of grad_keys) they are the bytes of the DRAM floor (bytes / peak bandwidth; docs/peers.md).
    dram_reads: tuple = ()
    # The input a warm case's touch rewrites before a forward sample (scripts/peer_bench.py; a backward's touch
    # rewrites grad_output): the RoI ops' feature map.
    main_input: str = "x"


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


def proposal_boxes(g, k, img_h=800.0, img_w=1344.0):
    """RPN-like proposals [k, 4], the Python twin of the C++ bench_proposal_rois (harness/bench_inputs.h): sqrt(area)
    log-uniform in [4, 400] px, aspect h/w log-uniform in [1/3, 3], centres uniform in the image, not clipped (boxes
    near the border cross it). The same distribution, not the same numbers: torch's generator, not mt19937_64."""
    u = torch.rand(k, 4, generator=g, dtype=F64)
    size = torch.exp(math.log(4.0) + u[:, 0] * (math.log(400.0) - math.log(4.0)))
    aspect = torch.exp(math.log(1 / 3) + u[:, 1] * (math.log(3.0) - math.log(1 / 3)))
    w, h = size / aspect.sqrt(), size * aspect.sqrt()
    cx, cy = u[:, 2] * img_w, u[:, 3] * img_h
    return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)


# How far (feature-map pixels) every sample of a guarded proposal keeps from where the op's definition jumps, and
# how far its adaptive grid's bin size keeps from an integer (where ceil jumps). fp32 positions at |x| < 400 are
# ~1e-4 px off the fp64 ones at worst (a few roundings of 3e-5), so 1e-3 leaves a margin of 10.
SAMPLE_MARGIN = 1e-3


def _axis_risky(start, size, pooled, sr, limit, min_size):
    """RoIAlign-style samples along one axis (start + i * bin + (iy + 0.5) * bin / grid, bin = max(size, min_size) /
    pooled, grid = sr or ceil(bin)), per roi: True where a sample lies within SAMPLE_MARGIN of -1 or limit (beyond
    them a sample is 0, at them the edge value; an exact hit too, since the fp64 truth's own rounding may move it
    off), where an adaptive grid's bin size is within SAMPLE_MARGIN of an integer but not one (fp32 and fp64 could
    take different sample counts; an exact integer comes from exact arithmetic, the same in both), or where the bin
    is empty (size 0: ps_roi_align's bins are then NaN on both sides). start and size in feature-map pixels, fp64,
    from rois already rounded to the dtype under test. The minimum size is a max(), continuous: no guard."""
    eff = size.clamp(min=min_size) if min_size else size
    b = eff / pooled
    risky = b <= 0
    if sr > 0:
        grid = torch.full(size.shape, float(sr), dtype=F64)
    else:
        dist = (b - b.round()).abs()
        risky |= (dist > 0) & (dist < SAMPLE_MARGIN)
        grid = b.ceil().clamp(min=1)
    gmax = int(grid.max()) if size.numel() else 1
    i = torch.arange(pooled, dtype=F64).view(1, -1, 1)
    iy = torch.arange(gmax, dtype=F64).view(1, 1, -1)
    pos = start.view(-1, 1, 1) + i * b.view(-1, 1, 1) + (iy + 0.5) * (b / grid).view(-1, 1, 1)
    near = ((pos + 1).abs() < SAMPLE_MARGIN) | ((pos - limit).abs() < SAMPLE_MARGIN)
    near &= iy < grid.view(-1, 1, 1)
    return risky | near.flatten(1).any(1)


def _ps_pool_axis_risky(v1, v2, pooled):
    """ps_roi_pool's bins along one axis: r = round half away from zero of the scaled coordinates, n = max(r2 - r1,
    1), bin edges floor(i * fl(n / pooled)) and ceil(i * fl(n / pooled)) in the dtype's arithmetic (torchvision's,
    and DetOps's default): True where fp32 edges differ from fp64 ones (the last edge, pooled * fl(n / pooled), is
    n +- an ulp, and ceil may take the next row: n = 29, 31, 57, ... 8 % of the sizes below 400). The scaled
    coordinates themselves are exact in both (a dtype's value times a power of two), so a rounding tie is decided
    alike and needs no guard."""
    r1, r2 = v1.sign() * (v1.abs() + 0.5).floor(), v2.sign() * (v2.abs() + 0.5).floor()
    n = (r2 - r1).clamp(min=1)
    edges = {}
    for dt in (F32, F64):
        b = n.to(dt).view(-1, 1) / pooled
        i = torch.arange(pooled + 1, dtype=dt).view(1, -1)
        edges[dt] = torch.cat([(i * b).floor(), (i * b).ceil()], 1).to(F64)
    return (edges[F32] != edges[F64]).any(1)


def guarded_proposals(g, p, n, h, w):
    """Proposals (proposal_boxes) as rois [n * per_image, 5] grouped by image, per_image = p["k"] // n. Unclipped, so
    some cross the border, where RoIAlign's definition jumps (a sample beyond x = W or below x = -1 is 0, one at it
    the edge value) and rounding alone would decide the side in fp32 against the fp64 truth (the 0.45 'error' of
    image_rois' docstring). p["guard"] names the op whose geometry is checked: "roi_align" (aligned and min size 1
    when not aligned, from p), "ps_roi_align" (always aligned, no min size) or "ps_roi_pool" (bin edges); each
    roi is checked after rounding to every dtype (bf16, fp16, fp32, fp64: what the peer suite feeds both sides) and
    redrawn from the same distribution while a check fails. None: no guard (roi_pool: its truth is in the same
    dtype, so both sides round alike). The redraws make the guarded sizes and positions a slightly thinned copy of
    the distribution; the C++ benchmarks time the unguarded one."""
    scale, pooled, guard = p["scale"], p["pooled"], p.get("guard")
    per_image = p["k"] // n
    if per_image * n != p["k"]:
        raise ValueError(f"{p['k']} proposals do not split evenly over {n} images")
    img_h, img_w = h / scale, w / scale
    boxes = proposal_boxes(g, per_image * n, img_h, img_w)
    for _ in range(200):
        if guard is None:
            break
        bad = torch.zeros(boxes.shape[0], dtype=torch.bool)
        for dt in ALL_DTYPES:
            bx = boxes.to(dt).to(F64) * scale
            if guard == "ps_roi_pool":
                bad |= _ps_pool_axis_risky(bx[:, 0], bx[:, 2], pooled) | _ps_pool_axis_risky(bx[:, 1], bx[:, 3], pooled)
                continue
            if guard == "roi_align":
                off, min_size = (0.5, 0.0) if p["aligned"] else (0.0, 1.0)
            elif guard == "ps_roi_align":
                off, min_size = 0.5, 0.0
            else:
                raise ValueError(f"unknown proposal guard {guard!r}")
            s = bx - off
            for a, limit in ((0, w), (1, h)):
                bad |= _axis_risky(s[:, a], s[:, a + 2] - s[:, a], pooled, p.get("sr", 0), limit, min_size)
        if not bad.any():
            break
        boxes[bad] = proposal_boxes(g, int(bad.sum()), img_h, img_w)
    else:
        raise RuntimeError(f"guarded_proposals: {int(bad.sum())} proposals still near a jump after 200 redraws")
    b = torch.arange(n, dtype=F64).repeat_interleave(per_image)
    return torch.cat([b.view(-1, 1), boxes], 1)


def make_roi(p, seed, grid=False):
    """x uniform in [-1, 1), rois by p["boxes"]: "proposals" (guarded_proposals), else grid_rois (grid) or
    image_rois."""
    g = torch.Generator().manual_seed(seed)
    n, c, h, w = p["x"]
    x = torch.rand(n, c, h, w, generator=g, dtype=F64) * 2 - 1
    if p.get("boxes") == "proposals":
        rois = guarded_proposals(g, p, n, h, w)
    elif grid:
        rois = grid_rois(g, p["k"], n, h, w, p["scale"], p["pooled"], p["pooled"])
    else:
        rois = image_rois(g, p["k"], n, h / p["scale"], w / p["scale"])
    skip = ("x", "k", "shape", "boxes", "guard", "l2")
    return {"x": x, "rois": rois, **{k: v for k, v in p.items() if k not in skip}}


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


def cold_and_warm(name, full, cpu, seed):
    """A model case twice, on the same inputs: cold (the L2 flushed before each sample) and name + "_warm" (the op's
    main input rewritten in place before each sample instead: scripts/peer_bench.py), as the C++ cases are."""
    def warm(p):
        return dict(p, l2="warm", shape=p["shape"] + " warm L2")
    return [Case(name, "model", dict(full, l2="cold"), dict(cpu, l2="cold"), seed),
            Case(name + "_warm", "model", warm(full), warm(cpu), seed)]


def roi_align_cases():
    out = []
    for i, (name, k, pooled) in enumerate([("box_head_1000", 1000, 7), ("box_head_train_1024", 1024, 7),
                                           ("mask_head_100", 100, 14), ("mask_head_512", 512, 14)]):
        full = {"x": [2, 256, 200, 336], "k": k, "scale": 0.25, "pooled": pooled, "sr": 2, "aligned": True,
                "shape": f"x[2,256,200,336] rois[{k},5] {pooled}x{pooled} scale 1/4 sr2 aligned"}
        cpu = dict(full, x=[2, 4, 50, 84], k=min(k, 64), scale=1 / 16,
                   shape=f"x[2,4,50,84] rois[{min(k, 64)},5] {pooled}x{pooled} scale 1/16 sr2 aligned")
        out.append(Case(name, "model", full, cpu, 9001 + 10 * i))
    # Issue 13: RPN proposals, 1000 per image (a mask head's 128 positives per image), cold and warm; the C++
    # benchmark cases of the same names (suites/specs/roi_align.cpp).
    for i, (name, per_image, pooled, sr, aligned) in enumerate([("rpn_box_sr2", 1000, 7, 2, False),
                                                                ("rpn_box_sr0_aligned", 1000, 7, 0, True),
                                                                ("rpn_box_sr0", 1000, 7, 0, False),
                                                                ("rpn_mask_sr0_aligned", 128, 14, 0, True)]):
        tail = f"{pooled}x{pooled} scale 1/4 sr{sr}{' (adaptive)' if sr <= 0 else ''}{' aligned' if aligned else ''}"
        full = {"x": [2, 256, 200, 336], "k": 2 * per_image, "scale": 0.25, "pooled": pooled, "sr": sr,
                "aligned": aligned, "boxes": "proposals", "guard": "roi_align",
                "shape": f"x[2,256,200,336] proposals[{2 * per_image},5] {tail}"}
        k_cpu = 2 * min(per_image, 32)
        cpu = dict(full, x=[2, 4, 50, 84], k=k_cpu, scale=1 / 16,
                   shape=f"x[2,4,50,84] proposals[{k_cpu},5] {tail.replace('scale 1/4', 'scale 1/16')}")
        out += cold_and_warm(name, full, cpu, 9041 + 10 * i)
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
    # Issue 13: 1000 RPN proposals per image, cold and warm. No guard: the truth is torchvision in the same
    # dtype (fp32 for the halves), which rounds its bin edges as DetOps does.
    full = {"x": [2, 256, 200, 336], "k": 2000, "scale": 0.25, "pooled": 7, "boxes": "proposals",
            "shape": "x[2,256,200,336] proposals[2000,5] 7x7 scale 1/4"}
    cpu = dict(full, x=[2, 4, 50, 84], k=64, scale=1 / 16, shape="x[2,4,50,84] proposals[64,5] 7x7 scale 1/16")
    out += cold_and_warm("rpn_box", full, cpu, 9111)
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
    # Issue 13: 1000 RPN proposals per image, cold and warm; ps_roi_align with torchvision's default sampling_ratio
    # (-1, adaptive). Guarded (guarded_proposals) against fp32-vs-fp64 sample sides and bin edges.
    sfx = " sr-1 (adaptive)" if align else ""
    full = {"x": [2, 490, 200, 336], "k": 2000, "scale": 0.25, "pooled": 7, "sr": -1, "boxes": "proposals",
            "guard": "ps_roi_align" if align else "ps_roi_pool",
            "shape": f"x[2,490,200,336] proposals[2000,5] 7x7 scale 1/4{sfx}"}
    cpu = dict(full, x=[2, 98, 50, 84], k=64, scale=1 / 16, shape=f"x[2,98,50,84] proposals[64,5] 7x7 scale 1/16{sfx}")
    out += cold_and_warm("rpn_rfcn", full, cpu, 9211 if align else 9311)
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
         ("x", "rois"), grad_keys=("x",), grad_vs_peer={"x": (F32,)}),
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
                  focal_cases(), ("x", "t"), grad_keys=("x",), tol=dict(TOL_IOU), dram_reads=("x", "t")))

# ---------------------------------------------------------------- issue 12: mmcv's ops and deform_conv2d
# mmcv's ops have no torchvision counterpart: their peer is what a user without mmcv writes in plain PyTorch
# (peer_kind PLAIN), the truth that form in fp64 on our rounded inputs. Each plain form is checked against an
# independent fp64 evaluation in test_peer.py (test_plain_peer_matches_independent_fp64), so the peer is known
# right. prroi_pool has no pair (NO_PEER says why).
PLAIN_TRUTH = ("the plain-PyTorch peer in fp64 on our rounded inputs (itself checked against an independent fp64 "
               "evaluation)")


def dims(x):
    return "[" + ",".join(str(v) for v in x) + "]"


def _dops(name):
    """detops.ops.<name>, DetOps's own: detops.ops resolves names it lacks to torchvision.ops (deform_conv2d!)."""
    import detops.ops as dops

    if name not in vars(dops):
        raise AttributeError(f"detops.ops has no {name} of its own (only torchvision's, through its fallback)")
    return vars(dops)[name]


def _reduce(loss, reduction):
    return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()


# masked_conv2d (mmcv) against the dense convolution, then the mask.
def make_masked_conv(p, seed):
    g = torch.Generator().manual_seed(seed)
    n, c, h, w = p["x"]
    co, k, s, pad = p["c_out"], p["k"], p["stride"], p["padding"]
    ho, wo = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    x = torch.rand(n, c, h, w, generator=g, dtype=F64) * 2 - 1
    weight = (torch.rand(co, c, k, k, generator=g, dtype=F64) * 2 - 1) / math.sqrt(c * k * k)
    bias = torch.rand(co, generator=g, dtype=F64) - 0.5
    mask = (torch.rand(n, ho, wo, generator=g, dtype=F64) < p["density"]).to(F64)
    return {"x": x, "weight": weight, "bias": bias, "mask": mask, "stride": s, "padding": pad}


def plain_masked_conv2d(i):
    """The dense convolution, then mmcv's selection (mask > 0; zeros elsewhere)."""
    out = torch.nn.functional.conv2d(i["x"], i["weight"], i["bias"], i["stride"], i["padding"])
    return out * (i["mask"] > 0).unsqueeze(1)


# The weight gradient sums the selected positions' products per element (10,080 at fpn_p3_3x3_density30): an fp32
# GEMM accumulating them in order along the positions leaves ~sqrt(10,080) x 2^-24 x the partial sums (~50): 1.5e-4
# measured on the H100, over fp32's atol 1e-4 from the order of accumulation alone (as deform_conv2d's). atol 5e-4
# in fp32; the gradients are sums of ~10^4 terms of either sign (tens), so a wrong tap or channel still fails.
MASKED_CONV_GRAD_TOL = {"weight": {d: (max(a, 5e-4), r) if d == F32 else (a, r) for d, (a, r) in TOL.items()}}


def masked_conv_cases():
    """FPN P3 and P4 (256 channels, 3x3, padding 1, batch 2) at mask densities 0.3 and 0.05 (sparse: where a masked
    convolution should pay off); the CPU runs 8 channels on a map 8 times smaller. Random: other strides, paddings,
    kernels and batches."""
    out = []
    for i, (name, x, density) in enumerate([("fpn_p3_3x3_density30", [2, 256, 100, 168], 0.3),
                                             ("fpn_p3_3x3_density5", [2, 256, 100, 168], 0.05),
                                             ("fpn_p4_3x3_density30", [2, 256, 50, 84], 0.3),
                                             ("fpn_p4_3x3_density5", [2, 256, 50, 84], 0.05)]):
        full = {"x": x, "c_out": 256, "k": 3, "stride": 1, "padding": 1, "density": density,
                "shape": f"x{dims(x)} weight[256,256,3,3] pad 1, mask density {density:g}"}
        cx = scaled(x)
        cpu = dict(full, x=cx, c_out=8, shape=f"x{dims(cx)} weight[8,8,3,3] pad 1, mask density {density:g}")
        out.append(Case(name, "model", full, cpu, 9801 + 10 * i))
    for seed, x, co, k, s, pad, density in [(1, [1, 3, 9, 11], 4, 3, 1, 1, 0.5), (2, [3, 5, 12, 10], 6, 3, 2, 0, 0.3),
                                             (3, [2, 4, 7, 8], 5, 1, 1, 0, 0.05)]:
        p = {"x": x, "c_out": co, "k": k, "stride": s, "padding": pad, "density": density,
             "shape": f"x{dims(x)} weight[{co},{x[1]},{k},{k}] stride {s} pad {pad}, mask density {density:g}"}
        out.append(Case(f"random_{seed}", "random", p, p, seed))
    return out


# The focal losses in mmcv's form: logits [N, C], int64 class targets.
def make_class_logits(p, seed):
    """softmax form: targets in [0, C) (C - 1 the background class), a fraction `ignored` of -1 (ignored rows);
    sigmoid form: targets in [0, C] (C = background)."""
    g = torch.Generator().manual_seed(seed)
    n, c = p["n"], p["c"]
    x = torch.randn(n, c, generator=g, dtype=F64) * p["scale"] + p["bias"]
    t = torch.randint(0, c, (n,), generator=g)
    background = torch.rand(n, generator=g) < p["background"]
    if p["form"] == "softmax":
        t[background] = c - 1
        t[torch.rand(n, generator=g) < p.get("ignored", 0.0)] = -1
    else:
        t[background] = c
    weight = torch.rand(c, generator=g, dtype=F64) + 0.5 if p.get("weight") else None
    return {"x": x, "t": t, "weight": weight, "gamma": p["gamma"], "alpha": p["alpha"], "reduction": p["reduction"]}


def plain_softmax_focal_loss(i):
    """mmcv's definition in PyTorch: -alpha (1 - p_t)^gamma log p_t per row from log_softmax and gather, times
    weight[t]; rows with a negative target give 0 (and count in the mean's N, as mmcv)."""
    x, t = i["x"], i["t"]
    tc = t.clamp(min=0)
    logpt = torch.nn.functional.log_softmax(x, dim=1).gather(1, tc.unsqueeze(1)).squeeze(1)
    loss = -i["alpha"] * (1 - logpt.exp()).pow(i["gamma"]) * logpt
    if i["weight"] is not None:
        loss = loss * i["weight"][tc]
    return _reduce(torch.where(t >= 0, loss, torch.zeros_like(loss)), i["reduction"])


def plain_sigmoid_focal_loss_mmcv(i):
    """mmcv's definition in PyTorch: torchvision's elementwise formula on one-hot targets (class C = background: no
    positive), times the row's weight[target] (1 for background rows, DetOps's definition), 'mean' over the N rows."""
    x, t = i["x"], i["t"]
    onehot = torch.nn.functional.one_hot(t, x.shape[1] + 1)[:, :-1].to(x.dtype)
    p = torch.sigmoid(x)
    ce = torch.nn.functional.binary_cross_entropy_with_logits(x, onehot, reduction="none")
    pt = p * onehot + (1 - p) * (1 - onehot)
    loss = ce * (1 - pt).pow(i["gamma"]) * (i["alpha"] * onehot + (1 - i["alpha"]) * (1 - onehot))
    if i["weight"] is not None:
        loss = loss * torch.cat([i["weight"], i["weight"].new_ones(1)])[t].unsqueeze(1)
    if i["reduction"] == "mean":
        return loss.sum() / x.shape[0]
    return _reduce(loss, i["reduction"])


def class_loss_cases(form):
    """reduction 'none' on the model shapes: what mmdet's FocalLoss calls (it weights and reduces itself), and a
    gradient of out.sum() per element that the tolerance can see ('mean' over 400k rows makes every gradient ~1e-6,
    below any atol). The random cases take 'mean' and 'sum' with per-class weights (and ignored rows)."""
    if form == "softmax":
        models = [("retinanet_2x201600x81_none", 403200, 81, 2000), ("lvis_100000x1204_none", 100000, 1204, 200)]
        base = {"form": form, "bias": 0.0, "scale": 1.0, "background": 0.75, "gamma": 2.0, "alpha": 0.25,
                "reduction": "none"}
        rnd = [(1, dict(base, n=37, c=11, scale=2.0, weight=True, ignored=0.2, reduction="mean")),
               (2, dict(base, n=29, c=5, scale=2.0, gamma=0.5, alpha=0.5, reduction="sum"))]
    else:
        models = [("retinanet_2x201600x80_none", 403200, 80, 2000)]
        base = {"form": form, "bias": FOCAL_PRIOR_LOGIT, "scale": 1.0, "background": 0.99, "gamma": 2.0,
                "alpha": 0.25, "reduction": "none"}
        rnd = [(1, dict(base, n=31, c=7, bias=0.0, scale=2.0, background=0.3, weight=True, reduction="mean")),
               (2, dict(base, n=23, c=3, bias=0.0, scale=2.0, background=0.3, gamma=1.5, alpha=0.5, reduction="sum"))]
    out = []
    for i, (name, n, c, cpu_n) in enumerate(models):
        full = dict(base, n=n, c=c, shape=f"input[{n},{c}] target[{n}] reduction none")
        cpu = dict(full, n=cpu_n, shape=f"input[{cpu_n},{c}] target[{cpu_n}] reduction none")
        out.append(Case(name, "model", full, cpu, (9901 if form == "softmax" else 9951) + 10 * i))
    for seed, p in rnd:
        p["shape"] = (f"input[{p['n']},{p['c']}] target[{p['n']}]{' weight' if p.get('weight') else ''}"
                      f"{' 20% ignored' if p.get('ignored') else ''} reduction {p['reduction']}")
        out.append(Case(f"random_{seed}", "random", p, p, seed))
    return out


# carafe (mmcv) against F.unfold and a weighted sum.
def make_carafe(p, seed):
    g = torch.Generator().manual_seed(seed)
    n, c, h, w = p["x"]
    k, grp, s = p["k"], p["group"], p["scale"]
    f = torch.rand(n, c, h, w, generator=g, dtype=F64) * 2 - 1
    logits = torch.randn(n, grp, k * k, h * s, w * s, generator=g, dtype=F64)
    masks = torch.softmax(logits, 2).reshape(n, grp * k * k, h * s, w * s)  # normalised, as CARAFE's encoder gives
    return {"f": f, "masks": masks, "k": k, "group": grp, "scale": s}


def plain_carafe(i):
    """F.unfold gives each source pixel's k x k neighbourhood (zeros outside the map); output pixel (y, x) sums its
    source pixel's (y // s, x // s) neighbourhood weighted by its group's k*k mask channels. The masks are viewed per
    source pixel ([.., H, s, W, s]), so the unfolded features are not upsampled (no s^2 larger copy)."""
    f, m, k, grp, s = i["f"], i["masks"], i["k"], i["group"], i["scale"]
    n, c, h, w = f.shape
    cols = torch.nn.functional.unfold(f, k, padding=(k - 1) // 2).view(n, grp, c // grp, k * k, h, w)
    out = torch.einsum("ngckyx,ngkyaxb->ngcyaxb", cols, m.view(n, grp, k * k, h, s, w, s))
    return out.reshape(n, c, h * s, w * s)


def carafe_cases():
    """FPN upsampling with CARAFE (k_up 5, group 1, scale 2, 256 channels, batch 2): P5 -> P4, P4 -> P3, P3 -> P2;
    the CPU runs 8 channels on maps 8 times smaller (at least 4). Random: kernels 1, 3 and 7 (wider than the map),
    groups 2 and 4, scales 1, 3 and 4."""
    out = []
    for i, (name, x) in enumerate([("fpn_25x42_to_50x84", [2, 256, 25, 42]), ("fpn_50x84_to_100x168", [2, 256, 50, 84]),
                                   ("fpn_100x168_to_200x336", [2, 256, 100, 168])]):
        def shape(x):
            return f"features{dims(x)} masks[{x[0]},25,{2 * x[2]},{2 * x[3]}] k 5 group 1 scale 2"
        full = {"x": x, "k": 5, "group": 1, "scale": 2, "shape": shape(x)}
        cx = scaled(x)
        out.append(Case(name, "model", full, dict(full, x=cx, shape=shape(cx)), 10001 + 10 * i))
    for seed, x, k, grp, s in [(1, [1, 6, 5, 7], 3, 2, 3), (2, [2, 4, 4, 3], 1, 4, 1), (3, [1, 2, 3, 4], 7, 1, 4)]:
        p = {"x": x, "k": k, "group": grp, "scale": s,
             "shape": f"features{dims(x)} masks[{x[0]},{grp * k * k},{s * x[2]},{s * x[3]}] k {k} group {grp} "
                      f"scale {s}"}
        out.append(Case(f"random_{seed}", "random", p, p, seed))
    return out


# deform_roi_pool / modulated_deform_roi_pool (mmcv) against grid_sample.
OFFSET_CLIP = 0.4  # |offset| (bin shifts of gamma * offset * roi size; trained layers give ~N(0, 0.1))


def inner_rois(g, k, n, h, w, scale, shift):
    """rois (image coordinates) whose sample points, with bins shifted by up to shift x the roi's size, stay in
    [2, size - 4] of the map, and still in [0.7, size - 2.7] after the coordinates are rounded to bf16 (at most 1
    feature pixel at scale 1/4 and 1344 px): no sample reaches the last pixel, where roi_align's bilinear rule (clamp
    to the edge pixel, zero only beyond -1 and H) and grid_sample's zero padding differ (docs/peers.md). Maps of at
    least 14 pixels a side."""
    def axis(size):
        r = 1 + torch.rand(k, generator=g, dtype=F64) * (0.5 * size - 1)
        margin = 2.5 + shift * r
        lo = margin + torch.rand(k, generator=g, dtype=F64) * (size - 1 - 2 * margin - r)
        return lo, lo + r

    x1, x2 = axis(w)
    y1, y2 = axis(h)
    b = torch.randint(0, n, (k,), generator=g).to(F64)
    return torch.stack([b, x1 / scale, y1 / scale, x2 / scale, y2 / scale], 1)


# The bilinear surface's derivative jumps at integer coordinates (pixel-cell edges): a sample within rounding of one
# (fp32 geometry: ~1e-5 px at 300) takes one side in ours and the other in the fp64 truth, an offset-gradient
# difference of gamma x roi size x the channels' slopes (90 on 1000 rois over P2 in fp32, before this margin).
EDGE_MARGIN = 2e-3  # feature pixels

# The offset and mask gradients sum over channels and samples (offset: gamma * roi size / count * the bilinear slopes;
# mask: 1 / count * the sampled values), and ours computes the sample positions in fp32 (as mmcv does), ~1e-5 px
# off at x ~ 300: each slope moves by that times the map's second difference (up to 4 on maps in [-1, 1]), each
# value by that times the slope. Over 256 channels x 4 samples (x gamma x roi sizes up to 168 px for the offset)
# that is ~1e-2 (offset) and ~1e-3 (mask) where the sum cancels to a small value, beyond fp32's atol 1e-4. Measured
# at full size on the CPU: offset at most 7.3e-3 (fp32, box_head_1000; 3.1e-3 beyond fp16's tolerance), mask 6.3e-4
# (fp32). So below fp64 the offset gradient takes atol 3e-2 and the mask gradient 3e-3 (median magnitudes ~17 and
# ~2: a wrong factor or axis still fails); the dtype's tolerance elsewhere. The random cases pass at the dtype's.
def _grad_tol(atol):
    return {d: (max(a, atol), r) if d != F64 else (a, r) for d, (a, r) in TOL.items()}


DEFORM_ROI_GRAD_TOL = {"offset": _grad_tol(3e-2), "mask": _grad_tol(3e-3)}


def deform_roi_samples(rois, offset, scale, ph, sr, gamma):
    """mmcv's sample coordinates in fp64: x [K, ph, pw, sr] (bin column c along dim 2), y [K, ph, pw, sr] (bin row a
    along dim 1), each bin shifted by gamma * roi size * offset[k, :, a, c]."""
    x1, y1 = rois[:, 1] * scale - 0.5, rois[:, 2] * scale - 0.5
    rw, rh = rois[:, 3] * scale - 0.5 - x1, rois[:, 4] * scale - 0.5 - y1
    t = (torch.arange(sr, dtype=F64) + 0.5) / sr
    b = torch.arange(ph, dtype=F64)
    sx = (x1[:, None, None, None] + gamma * rw[:, None, None, None] * offset[:, 0, :, :, None]
          + (b[None, None, :, None] + t) * (rw / ph)[:, None, None, None])
    sy = (y1[:, None, None, None] + gamma * rh[:, None, None, None] * offset[:, 1, :, :, None]
          + (b[None, :, None, None] + t) * (rh / ph)[:, None, None, None])
    return sx, sy


def make_deform_roi(p, seed):
    g = torch.Generator().manual_seed(seed)
    n, c, h, w = p["x"]
    k, ph = p["k"], p["pooled"]
    x = torch.rand(n, c, h, w, generator=g, dtype=F64) * 2 - 1
    # rois and offsets exact in every dtype (bf16's 8 bits), so every dtype samples where the fp64 truth does
    rois = inner_rois(g, k, n, h, w, p["scale"], p["gamma"] * OFFSET_CLIP).to(torch.bfloat16).to(F64)

    def draw(shape):  # N(0, 0.1) on a grid of 1/256, |offset| <= 102/256 < OFFSET_CLIP
        lim = math.floor(OFFSET_CLIP * 256)
        return (torch.randn(shape, generator=g, dtype=F64) * 25.6).round().clamp(-lim, lim) / 256

    offset = draw((k, 2, ph, ph))
    for _ in range(100):  # redraw the offsets of bins with a sample within EDGE_MARGIN of a pixel-cell edge
        near = torch.stack([(v - v.round()).abs().lt(EDGE_MARGIN).any(-1)
                            for v in deform_roi_samples(rois, offset, p["scale"], ph, p["sr"], p["gamma"])], 1)
        if not near.any():
            break
        offset = torch.where(near, draw(offset.shape), offset)
    else:
        raise AssertionError("make_deform_roi: could not keep the samples off the pixel-cell edges")
    mask = torch.sigmoid(torch.randn(k, 1, ph, ph, generator=g, dtype=F64))
    return {"x": x, "rois": rois, "offset": offset, "mask": mask, "pooled": ph, "scale": p["scale"], "sr": p["sr"],
            "gamma": p["gamma"]}


def plain_deform_roi_pool(i, modulated=False):
    """mmcv's deform_roi_pool with grid_sample, for a fixed sampling_ratio (the adaptive grid, sampling_ratio 0,
    differs per roi and would need a loop over rois): the sr x sr sample points of every bin, shifted by
    gamma * roi size * offset, as a grid per image (rois grouped by batch index), grid_sample (bilinear, zeros,
    align_corners=False: pixel i at (2 i + 1) / size - 1), the mean over the samples; times the mask when modulated.
    Equal to mmcv's rule where no sample reaches the border (inner_rois)."""
    x, rois, off, ph, sr, gamma = i["x"], i["rois"], i["offset"], i["pooled"], i["sr"], i["gamma"]
    n, c, h, w = x.shape
    x1, y1 = rois[:, 1] * i["scale"] - 0.5, rois[:, 2] * i["scale"] - 0.5
    rw, rh = rois[:, 3] * i["scale"] - 0.5 - x1, rois[:, 4] * i["scale"] - 0.5 - y1
    t = (torch.arange(sr, dtype=x.dtype, device=x.device) + 0.5) / sr
    b = torch.arange(ph, dtype=x.dtype, device=x.device)
    # sample (a, b, v, u) of roi k: y along a (bin row) and v, x along b (bin column) and u: [K, ph, pw, sr, sr]
    sx = (x1[:, None, None] + gamma * rw[:, None, None] * off[:, 0])[..., None, None] + \
        ((b[None, :, None] + t[None, None, :]) * (rw / ph)[:, None, None])[:, None, :, None, :]
    sy = (y1[:, None, None] + gamma * rh[:, None, None] * off[:, 1])[..., None, None] + \
        ((b[None, :, None] + t[None, None, :]) * (rh / ph)[:, None, None])[:, :, None, :, None]
    grid = torch.stack(torch.broadcast_tensors((2 * sx + 1) / w - 1, (2 * sy + 1) / h - 1), -1)
    idx = rois[:, 0].long()
    parts, order = [], []
    for img in range(n):
        sel = (idx == img).nonzero().squeeze(1)
        if sel.numel() == 0:
            continue
        v = torch.nn.functional.grid_sample(x[img:img + 1], grid[sel].reshape(1, -1, sr * sr, 2), mode="bilinear",
                                            padding_mode="zeros", align_corners=False)
        parts.append(v.mean(-1).view(c, sel.numel(), ph, ph).transpose(0, 1))
        order.append(sel)
    out = torch.cat(parts).index_select(0, torch.argsort(torch.cat(order)))
    return out * i["mask"] if modulated else out


def deform_roi_cases(modulated):
    """The box head's 7x7 on 1000 rois over P2 (x[2,256,200,336], scale 1/4) and, for deform_roi_pool, 512 rois over
    P4 (x[2,256,50,84], scale 1/16); sampling_ratio 2, gamma 0.1, offsets N(0, 0.1) clipped to 0.4. The CPU runs 4
    channels, 64 rois, maps of 50x84 and 25x42. rois inside the map (inner_rois). Random: sampling ratios 1 and 3,
    gamma 0.2, pooled 3 and 14."""
    models = [("box_head_1000", [2, 256, 200, 336], 1000, 0.25, [2, 4, 50, 84], 1 / 16)]
    if not modulated:
        models.append(("p4_box_head_512", [2, 256, 50, 84], 512, 1 / 16, [2, 4, 25, 42], 1 / 8))
    out = []
    for i, (name, x, k, scale, cx, cscale) in enumerate(models):
        full = {"x": x, "k": k, "scale": scale, "pooled": 7, "sr": 2, "gamma": 0.1,
                "shape": f"x{dims(x)} rois[{k},5] offset[{k},2,7,7]{f' mask[{k},1,7,7]' if modulated else ''} 7x7 "
                         f"scale 1/{round(1 / scale)} sr2 gamma 0.1"}
        cpu = dict(full, x=cx, k=64, scale=cscale,
                   shape=f"x{dims(cx)} rois[64,5] 7x7 scale 1/{round(1 / cscale)} sr2 gamma 0.1")
        out.append(Case(name, "model", full, cpu, (10151 if modulated else 10101) + 10 * i))
    for seed, x, k, scale, pooled, sr, gamma in [(1, [2, 3, 20, 24], 17, 0.25, 7, 1, 0.1),
                                                 (2, [1, 4, 16, 14], 9, 0.5, 3, 3, 0.2),
                                                 (3, [3, 2, 30, 28], 11, 1.0, 14, 2, 0.1)]:
        p = {"x": x, "k": k, "scale": scale, "pooled": pooled, "sr": sr, "gamma": gamma,
             "shape": f"x{dims(x)} rois[{k},5] {pooled}x{pooled} scale {scale:g} sr{sr} gamma {gamma:g}"}
        out.append(Case(f"random_{seed}", "random", p, p, seed))
    return out


def _deform_roi(i, modulated):
    """DetOps's Python wrappers (mmcv's signatures), what a user calls."""
    size = (i["pooled"], i["pooled"])
    if modulated:
        return _dops("modulated_deform_roi_pool")(i["x"], i["rois"], i["offset"], i["mask"], size, i["scale"], i["sr"],
                                                  i["gamma"])
    return _dops("deform_roi_pool")(i["x"], i["rois"], i["offset"], size, i["scale"], i["sr"], i["gamma"])


# deform_conv2d against torchvision.ops.deform_conv2d, with the dense convolution of the same shape as its floor.
def make_deform_conv(p, seed):
    """Offsets of a few pixels (N(0, 1), |offset| < 4) on a grid of 1/64 + 1/128: exact in bf16 and fp16, never an
    integer, so no sample point sits on a cell edge (where the bilinear derivative jumps) or moves across one when
    the position is computed in another precision. DCNv2 mask = sigmoid(N(0, 1))."""
    g = torch.Generator().manual_seed(seed)
    n, c, h, w = p["x"]
    co, k, s, pad, dil = p["c_out"], p["k"], p["stride"], p["padding"], p["dilation"]
    og, wg = p["offset_groups"], p["groups"]
    ho, wo = (h + 2 * pad - dil * (k - 1) - 1) // s + 1, (w + 2 * pad - dil * (k - 1) - 1) // s + 1
    x = torch.rand(n, c, h, w, generator=g, dtype=F64) * 2 - 1
    weight = (torch.rand(co, c // wg, k, k, generator=g, dtype=F64) * 2 - 1) / math.sqrt(c // wg * k * k)
    bias = torch.rand(co, generator=g, dtype=F64) - 0.5
    steps = (torch.randn(n, 2 * og * k * k, ho, wo, generator=g, dtype=F64) * 64).round().clamp(-255, 254)
    offset = (steps + 0.5) / 64
    mask = torch.sigmoid(torch.randn(n, og * k * k, ho, wo, generator=g, dtype=F64)) if p["mask"] else None
    return {"x": x, "weight": weight, "bias": bias, "offset": offset, "mask": mask, "stride": s, "padding": pad,
            "dilation": dil}


# The weight gradient sums N x H_out x W_out products per element (33,600 at issue_2x256x100x168): in fp32 the
# peer's own error is 8.7e-5 there (torchvision on the CPU against fp64), 87% of fp32's atol 1e-4 from the order of
# accumulation alone. So the weight gradient takes atol 5e-4 in fp32 (the gradients reach ~200: a wrong tap or
# channel still fails). In fp16 / bf16 each product's column value is the bilinear sample rounded to the dtype
# (torchvision's im2col rounds it the same way; the sum itself is accumulated in fp32): ~sqrt(33,600) roundings of
# values ~0.5 by up to half an ulp leave an error of a few times 2^-12 x 0.5 x 183 = 0.022 in fp16 (measured 0.025
# on the H100) and 8 times that in bf16 (0.22): atol 0.05 / 0.5. Accumulating in fp16 instead (an error of ~5
# there) or a wrong tap or channel (~70) still fails. The dtype's tolerance elsewhere.
DEFORM_CONV_GRAD_TOL = {"weight": {F64: TOL[F64], F32: (max(TOL[F32][0], 5e-4), TOL[F32][1]),
                                   F16: (5e-2, TOL[F16][1]), BF16: (5e-1, TOL[BF16][1])}}


def _deform_conv(f, i):
    return f(i["x"], i["offset"], i["weight"], i["bias"], stride=i["stride"], padding=i["padding"],
             dilation=i["dilation"], mask=i["mask"])


def dense_conv_floor(i):
    """cuDNN's dense convolution of the same shape (PyTorch's defaults: TF32 allowed for fp32 convolutions)."""
    return torch.nn.functional.conv2d(i["x"], i["weight"], i["bias"], i["stride"], i["padding"], i["dilation"],
                                      i["x"].shape[1] // i["weight"].shape[1])


def deform_conv_cases():
    """DCNv2 in ResNet-50's stages 2-4 at 800x1344, batch 2 (3x3, padding 1, C_out = C_in) and the issue's comparison
    point x[2,256,100,168]; the CPU runs 8 channels on maps 8 times smaller. Random: DCNv1 and DCNv2 with stride 2,
    padding 2, dilation 2, offset groups 2 and weight groups 2."""
    out = []
    for i, (name, x) in enumerate([("resnet50_c3_2x128x100x168", [2, 128, 100, 168]),
                                   ("resnet50_c4_2x256x50x84", [2, 256, 50, 84]),
                                   ("resnet50_c5_2x512x25x42", [2, 512, 25, 42]),
                                   ("issue_2x256x100x168", [2, 256, 100, 168])]):
        full = {"x": x, "c_out": x[1], "k": 3, "stride": 1, "padding": 1, "dilation": 1, "offset_groups": 1,
                "groups": 1, "mask": True,
                "shape": f"x{dims(x)} weight[{x[1]},{x[1]},3,3] pad 1 DCNv2 offset[{x[0]},18,{x[2]},{x[3]}]"}
        cx = scaled(x)
        cpu = dict(full, x=cx, c_out=8, shape=f"x{dims(cx)} weight[8,8,3,3] pad 1 DCNv2")
        out.append(Case(name, "model", full, cpu, 10201 + 10 * i))
    for seed, x, co, s, pad, dil, og, wg, mask in [(1, [1, 3, 7, 9], 4, 1, 1, 1, 1, 1, False),
                                                   (2, [2, 4, 9, 8], 6, 2, 2, 2, 2, 2, True)]:
        p = {"x": x, "c_out": co, "k": 3, "stride": s, "padding": pad, "dilation": dil, "offset_groups": og,
             "groups": wg, "mask": mask,
             "shape": f"x{dims(x)} weight[{co},{x[1] // wg},3,3] stride {s} pad {pad} dilation {dil} offset groups {og}"
                      f" groups {wg} {'DCNv2' if mask else 'DCNv1'}"}
        out.append(Case(f"random_{seed}", "random", p, p, seed))
    return out


# The focal losses read their logits (and targets) once: memory-bound, with a DRAM floor. So do carafe and, where
# its mask is sparse, masked_conv2d (whose dense rows are reported the same way).
PAIRS.extend([
    Pair("deform_conv2d", "torchvision.ops.deform_conv2d", make_deform_conv,
         lambda i: _deform_conv(_dops("deform_conv2d"), i), lambda i: _deform_conv(_tvops().deform_conv2d, i),
         deform_conv_cases(), ("x", "weight", "bias", "offset", "mask"),
         grad_keys=("x", "weight", "bias", "offset", "mask"), grad_tol=DEFORM_CONV_GRAD_TOL,
         requires=("torch.ops.detops.deform_conv2d", "detops.ops.deform_conv2d"),
         floor=dense_conv_floor, floor_name="dense conv2d (cuDNN)", floor_grad_keys=("x", "weight", "bias")),
    Pair("masked_conv2d", f"{PLAIN}: conv2d then mask", make_masked_conv,
         lambda i: _d().masked_conv2d(i["x"], i["mask"], i["weight"], i["bias"], [i["padding"]] * 2, [i["stride"]] * 2),
         plain_masked_conv2d, masked_conv_cases(), ("x", "weight", "bias", "mask"), grad_keys=("x", "weight", "bias"),
         grad_tol=MASKED_CONV_GRAD_TOL, peer_kind=PLAIN, truth_note=PLAIN_TRUTH, dram_reads=("x", "weight", "bias", "mask")),
    Pair("softmax_focal_loss", f"{PLAIN}: log_softmax, gather, focal weight", make_class_logits,
         lambda i: _d().softmax_focal_loss(i["x"], i["t"], i["gamma"], i["alpha"], i["weight"], i["reduction"]),
         plain_softmax_focal_loss, class_loss_cases("softmax"), ("x", "weight"), grad_keys=("x",),
         peer_kind=PLAIN, truth_note=PLAIN_TRUTH, dram_reads=("x", "t", "weight")),
    Pair("sigmoid_focal_loss_mmcv", f"{PLAIN}: one-hot targets, torchvision's formula", make_class_logits,
         lambda i: _d().sigmoid_focal_loss_mmcv(i["x"], i["t"], i["gamma"], i["alpha"], i["weight"], i["reduction"]),
         plain_sigmoid_focal_loss_mmcv, class_loss_cases("sigmoid"), ("x", "weight"), grad_keys=("x",),
         peer_kind=PLAIN, truth_note=PLAIN_TRUTH, dram_reads=("x", "t", "weight")),
    Pair("carafe", f"{PLAIN}: unfold, weighted sum", make_carafe,
         lambda i: _dops("carafe")(i["f"], i["masks"], i["k"], i["group"], i["scale"]),
         plain_carafe, carafe_cases(), ("f", "masks"), grad_keys=("f", "masks"), peer_kind=PLAIN,
         truth_note=PLAIN_TRUTH, requires=("torch.ops.detops.carafe", "detops.ops.carafe"), dram_reads=("f", "masks")),
    Pair("deform_roi_pool", f"{PLAIN}: grid_sample", make_deform_roi, lambda i: _deform_roi(i, False),
         lambda i: plain_deform_roi_pool(i, False), deform_roi_cases(False), ("x", "rois", "offset"),
         grad_keys=("x", "offset"), grad_tol={"offset": DEFORM_ROI_GRAD_TOL["offset"]}, peer_kind=PLAIN,
         truth_note=PLAIN_TRUTH + "; rois inside the map (pairs.inner_rois)",
         requires=("torch.ops.detops.deform_roi_pool", "detops.ops.deform_roi_pool")),
    Pair("modulated_deform_roi_pool", f"{PLAIN}: grid_sample, times the mask", make_deform_roi,
         lambda i: _deform_roi(i, True), lambda i: plain_deform_roi_pool(i, True), deform_roi_cases(True),
         ("x", "rois", "offset", "mask"), grad_keys=("x", "offset", "mask"), grad_tol=DEFORM_ROI_GRAD_TOL,
         peer_kind=PLAIN,
         truth_note=PLAIN_TRUTH + "; rois inside the map (pairs.inner_rois)",
         requires=("torch.ops.detops.modulated_deform_roi_pool", "detops.ops.modulated_deform_roi_pool")),
])

# Ops being written (issue 12): their pairs are skipped, with the reason, while DetOps lacks them. Any other pair
# whose op is missing fails test_table_is_complete.
LANDING = set()  # all of issue 12's ops have landed (deform_conv2d, carafe, the deformable RoI pools)

# Public torch.ops.detops ops without a pair, and why (test_every_op_has_a_pair_or_a_reason).
NO_PEER = {
    "prroi_pool": "Precise RoI Pooling integrates the bilinear surface over each bin exactly (a closed form per "
                  "pixel cell, gradients for the roi coordinates too): no short plain-PyTorch form; a sampled "
                  "approximation would not be the same op. Checked against its fp64 reference (suites/specs, "
                  "suites/python/test_prroi_pool.py).",
    "iou_loss": "the plain IoU loss, the box_iou_loss family's base case: torchvision has no iou loss and issue 12 "
                "asks for no plain-PyTorch pair; checked against the fp64 reference (suites/specs/box_iou.cpp).",
}


def pair_missing(pair):
    """None when DetOps has everything the pair calls, else why not."""
    for req in pair.requires or (f"torch.ops.detops.{pair.op}",):
        where, name = req.rsplit(".", 1)
        if where == "torch.ops.detops" and not detops_has(name):
            return f"torch.ops.detops.{name} does not exist yet (being written): pair skipped"
        if where == "detops.ops":
            try:
                _dops(name)
            except (AttributeError, ImportError):
                return f"detops.ops.{name} does not exist yet (being written): pair skipped"
    return None


def grad_keys(pair, inp):
    """The pair's differentiable inputs present in this case (DCNv1 has no mask)."""
    return [k for k in pair.grad_keys if torch.is_tensor(inp.get(k))]


def detops_has(op):
    try:
        getattr(torch.ops.detops, op)
        return True
    except (AttributeError, RuntimeError):
        return False


def load_library(path=None):
    import os
    import pathlib
    import sys

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
    # The Python package on top (detops.ops: the wrappers some pairs call, the fake kernels of nms / batched_nms).
    pkg = str(pathlib.Path(__file__).resolve().parents[2] / "ops" / "python")
    if pkg not in sys.path:
        sys.path.insert(0, pkg)
    import detops  # noqa: F401
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
    who = "torchvision" if pair.peer_kind == "torchvision" else f"the peer ({pair.torchvision})"
    if key not in _KERNEL_CACHE:
        case = next(c for c in pair.cases if c.kind == "random")
        inp = cast_inputs(pair, pair.make(case.cpu_params, case.seed), dtype, device)
        try:
            pair.tv(inp)
            _KERNEL_CACHE[key] = None
        except (RuntimeError, NotImplementedError) as e:
            msg = str(e).splitlines()[0]
            _KERNEL_CACHE[key] = f"{who} has no {DTYPE_NAME[dtype]} kernel for {pair.op} on {device} ({msg})"
    return _KERNEL_CACHE[key]


def max_abs_error(a, b):
    """max |a - b| in fp64 (NaN when either holds a NaN where it matters), computed where a lies: a CUDA result is
    not copied to the host (a feature-map gradient is hundreds of MB; the copy took most of the peer runner's
    time)."""
    a = a.detach()
    b = b.detach().to(a.device)
    if a.numel() == 0:
        return 0.0
    return float((a.double() - b.double()).abs().max())
