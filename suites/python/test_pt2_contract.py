"""PyTorch 2's contract for custom ops, for every op in torch.ops.detops, on the CPU and (when present) CUDA:

- torch.library.opcheck with each of its four utilities (test_schema, test_autograd_registration,
  test_faketensor, test_aot_dispatch_dynamic), in fp32 and fp64 and in fp16/bf16 (every op supports
  them), forward and backward ops alike;
- torch.compile(fullgraph=True) of each public op's forward, and of forward + backward where the op has
  differentiable inputs, against eager;
- torch.export of a small module calling the op, run against eager.

The samples below are per op. test_every_op_has_samples fails for an op registered in torch.ops.detops (as
every op defined through the op kit is) that has none, so a new op cannot skip the contract.
"""
import pytest
import torch

from conftest import devices

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
UTILITIES = ["test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"]


def _op(name):
    return getattr(torch.ops.detops, name).default


# ---------------------------------------------------------------------------------------------------
# Inputs that look like a detector's: regions of several sizes, some crossing the map's border, two
# images; boxes with distinct scores.

def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _feature(n, c, h, w, dtype, device, seed=1, grad=False):
    x = torch.randn(n, c, h, w, generator=_gen(seed), dtype=torch.float64).to(dtype=dtype, device=device)
    return x.requires_grad_(grad)


def _rois(k, n, h, w, scale, dtype, device, seed=2, grad=False):
    g = _gen(seed)
    img_h, img_w = h / scale, w / scale
    u = torch.rand(k, 4, generator=g, dtype=torch.float64)
    x1, y1 = u[:, 0] * img_w * 0.9 - 0.1 * img_w, u[:, 1] * img_h * 0.9 - 0.1 * img_h  # some start off the map
    x2, y2 = x1 + 1 + u[:, 2] * img_w * 0.6, y1 + 1 + u[:, 3] * img_h * 0.6  # some end past it
    b = torch.arange(k, dtype=torch.float64) % n
    rois = torch.stack([b, x1, y1, x2, y2], 1).to(dtype=dtype, device=device)
    return rois.requires_grad_(grad)


def _boxes(n, dtype, device, seed=3, grad=False):
    g = _gen(seed)
    xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * 50
    wh = 1 + torch.rand(n, 2, generator=g, dtype=torch.float64) * 30
    return torch.cat([xy, xy + wh], 1).to(dtype=dtype, device=device).requires_grad_(grad)


def _scores(n, dtype, device, seed=4):
    return (torch.randperm(n, generator=_gen(seed)).to(torch.float64) / n).to(dtype=dtype, device=device)


N, C, H, W, K, SCALE = 2, 8, 12, 14, 6, 0.5


def _roi_align(dtype, device, grad=True):
    x = _feature(N, C, H, W, dtype, device, grad=grad)
    rois = _rois(K, N, H, W, SCALE, dtype, device)
    return [((x, rois, SCALE, 3, 3, 2, True), {}), ((x, rois, SCALE, 2, 3, -1, False), {})]


def _roi_align_backward(dtype, device):
    rois = _rois(K, N, H, W, SCALE, dtype, device)
    grad = torch.randn(K, C, 3, 3, generator=_gen(5), dtype=torch.float64).to(dtype=dtype, device=device)
    return [((grad, rois, SCALE, 3, 3, N, C, H, W, 2, True), {}), ((grad, rois, SCALE, 3, 3, N, C, H, W, -1, False), {})]


def _roi_pool(dtype, device, grad=True):
    x = _feature(N, C, H, W, dtype, device, grad=grad)
    rois = _rois(K, N, H, W, SCALE, dtype, device)
    return [((x, rois, SCALE, 3, 3), {}), ((x, rois, SCALE, 3, 3), {"exact_max": True})]


def _roi_pool_backward(dtype, device):
    (args, _), _ = _roi_pool(dtype, device, grad=False)
    _, argmax = torch.ops.detops.roi_pool(*args)
    grad = torch.randn(K, C, 3, 3, generator=_gen(5), dtype=torch.float64).to(dtype=dtype, device=device)
    return [((grad, args[1], argmax, SCALE, 3, 3, N, C, H, W), {})]


def _ps_roi_align(dtype, device, grad=True):
    x = _feature(N, C, H, W, dtype, device, grad=grad)
    return [((x, _rois(K, N, H, W, SCALE, dtype, device), SCALE, 2, 2, 2), {}),
            ((x, _rois(K, N, H, W, SCALE, dtype, device), SCALE, 2, 2, -1, True), {})]


def _ps_roi_align_backward(dtype, device):
    (args, _), _ = _ps_roi_align(dtype, device, grad=False)
    _, mapping = torch.ops.detops.ps_roi_align(*args)
    grad = torch.randn(K, C // 4, 2, 2, generator=_gen(5), dtype=torch.float64).to(dtype=dtype, device=device)
    return [((grad, args[1], mapping, SCALE, 2, 2, 2, N, C, H, W), {})]


def _ps_roi_pool(dtype, device, grad=True):
    x = _feature(N, C, H, W, dtype, device, grad=grad)
    rois = _rois(K, N, H, W, SCALE, dtype, device)
    return [((x, rois, SCALE, 2, 2), {}), ((x, rois, SCALE, 2, 2, True), {})]


def _ps_roi_pool_backward(dtype, device):
    (args, _), _ = _ps_roi_pool(dtype, device, grad=False)
    _, mapping = torch.ops.detops.ps_roi_pool(*args)
    grad = torch.randn(K, C // 4, 2, 2, generator=_gen(5), dtype=torch.float64).to(dtype=dtype, device=device)
    return [((grad, args[1], mapping, SCALE, 2, 2, N, C, H, W), {}),
            ((grad, args[1], mapping, SCALE, 2, 2, N, C, H, W, True), {})]


def _prroi_pool(dtype, device, grad=True):
    x = _feature(N, C, H, W, dtype, device, grad=grad)
    return [((x, _rois(K, N, H, W, SCALE, dtype, device, grad=grad), SCALE, 3, 3), {})]


def _prroi_pool_backward(dtype, device):
    grad = torch.randn(K, C, 3, 3, generator=_gen(5), dtype=torch.float64).to(dtype=dtype, device=device)
    return [((grad, _rois(K, N, H, W, SCALE, dtype, device), SCALE, 3, 3, N, C, H, W), {})]


def _prroi_pool_rois_backward(dtype, device):
    grad = torch.randn(K, C, 3, 3, generator=_gen(5), dtype=torch.float64).to(dtype=dtype, device=device)
    x = _feature(N, C, H, W, dtype, device)
    return [((grad, x, _rois(K, N, H, W, SCALE, dtype, device), SCALE, 3, 3), {})]


def _nms(dtype, device, grad=False):
    return [((_boxes(40, dtype, device), _scores(40, dtype, device), 0.5), {})]


def _batched_nms(dtype, device, grad=False):
    idxs = (torch.arange(40) % 3).to(device)
    return [((_boxes(40, dtype, device), _scores(40, dtype, device), idxs, 0.5), {})]


def _pairwise(eps):
    def build(dtype, device, grad=True):
        args = (_boxes(7, dtype, device, seed=3, grad=grad), _boxes(5, dtype, device, seed=6, grad=grad))
        args += (1e-7,) if eps else ()
        return [(args, {}), (args, {"defined_degenerate": True})]
    return build


def _pairwise_backward(dtype, device):
    b1, b2 = _boxes(7, dtype, device, seed=3), _boxes(5, dtype, device, seed=6)
    out_dtype = torch.ops.detops.box_iou(b1, b2).dtype  # float32 for half-precision boxes
    g = torch.rand(7, 5, generator=_gen(5), dtype=torch.float64).to(dtype=out_dtype, device=device)
    return [((g, b1, b2, v, 1e-7), {}) for v in ("iou", "giou", "diou", "ciou")] + \
           [((g, b1, b2, "ciou", 1e-7, True), {})]


def _loss(dtype, device, grad=True):
    b1, b2 = _boxes(9, dtype, device, seed=3, grad=grad), _boxes(9, dtype, device, seed=6, grad=grad)
    return [((b1, b2, r, 1e-7), {}) for r in ("none", "mean", "sum")] + [((b1, b2, "mean", 1e-7), {"defined_degenerate": True})]


def _loss_backward(dtype, device):
    b1, b2 = _boxes(9, dtype, device, seed=3), _boxes(9, dtype, device, seed=6)
    loss_dtype = torch.ops.detops.iou_loss(b1[:1], b2[:1]).dtype  # float32 for half-precision boxes
    g_none = torch.rand(9, generator=_gen(5), dtype=torch.float64).to(dtype=loss_dtype, device=device)
    g_sum = torch.tensor(0.5, dtype=loss_dtype, device=device)
    return [((g_none, b1, b2, v, "none", 1e-7), {}) for v in ("iou", "giou", "diou", "ciou")] + \
           [((g_sum, b1, b2, "ciou", "sum", 1e-7), {}), ((g_sum, b1, b2, "giou", "sum", 1e-7, True), {})]


def _logits(shape, dtype, device, grad):
    x = (torch.randn(*shape, generator=_gen(7), dtype=torch.float64) * 3 - 2).to(dtype=dtype, device=device)
    return x.requires_grad_(grad)


def _focal(dtype, device, grad=True):
    x = _logits((6, 5), dtype, device, grad)
    t = (torch.rand(6, 5, generator=_gen(8)) < 0.3).to(dtype=dtype, device=device)
    return [((x, t, 0.25, 2.0, r), {}) for r in ("none", "mean", "sum")] + [((x, t, -1.0, 1.5, "none"), {})]


def _focal_backward(dtype, device):
    x = _logits((6, 5), dtype, device, False)
    t = (torch.rand(6, 5, generator=_gen(8)) < 0.3).to(dtype=dtype, device=device)
    g = torch.rand(6, 5, generator=_gen(9), dtype=torch.float64).to(dtype=dtype, device=device)
    return [((g, x, t, 0.25, 2.0, "none"), {}), ((torch.tensor(1.0, dtype=dtype, device=device), x, t, 0.25, 2.0, "mean"), {})]


def _focal_mmcv(dtype, device, grad=True):
    x = _logits((6, 5), dtype, device, grad)
    target = torch.tensor([0, 4, 5, 2, 5, 1], device=device)
    w = torch.linspace(0.5, 1.5, 5, dtype=torch.float64).to(dtype=dtype, device=device)
    return [((x, target, 2.0, 0.25, w, "mean"), {}), ((x, target, 2.0, 0.25, None, "none"), {})]


def _focal_mmcv_backward(dtype, device):
    x = _logits((6, 5), dtype, device, False)
    target = torch.tensor([0, 4, 5, 2, 5, 1], device=device)
    g = torch.rand(6, 5, generator=_gen(9), dtype=torch.float64).to(dtype=dtype, device=device)
    return [((g, x, target, 2.0, 0.25, None, "none"), {})]


def _softmax_focal(dtype, device, grad=True):
    x = _logits((6, 5), dtype, device, grad)
    target = torch.tensor([0, 4, -1, 2, 3, 1], device=device)  # -1: an ignored row
    w = torch.linspace(0.5, 1.5, 5, dtype=torch.float64).to(dtype=dtype, device=device)
    return [((x, target, 2.0, 0.25, w, "mean"), {}), ((x, target, 1.5, 0.25, None, "none"), {}),
            ((x, target, 2.0, 0.5, None, "sum"), {})]


def _softmax_focal_backward(dtype, device):
    x = _logits((6, 5), dtype, device, False)
    target = torch.tensor([0, 4, -1, 2, 3, 1], device=device)
    g = torch.rand(6, generator=_gen(9), dtype=torch.float64).to(dtype=dtype, device=device)
    w = torch.linspace(0.5, 1.5, 5, dtype=torch.float64).to(dtype=dtype, device=device)
    return [((g, x, target, 2.0, 0.25, w, "none"), {}),
            ((torch.tensor(1.0, dtype=dtype, device=device), x, target, 2.0, 0.25, None, "mean"), {})]


def _masked_conv2d(dtype, device, grad=True):
    x = _feature(N, C, H, W, dtype, device, grad=grad)
    w = _feature(5, C, 3, 3, dtype, device, seed=10, grad=grad)
    b = torch.linspace(-1, 1, 5, dtype=torch.float64).to(dtype=dtype, device=device).requires_grad_(grad)
    mask = (torch.rand(N, H, W, generator=_gen(11)) < 0.5).to(device)  # padding 1, stride 1: the input's size
    mask_s2 = (torch.rand(1, 6, 7, generator=_gen(12)) - 0.3).to(dtype=dtype, device=device)  # stride 2, all images
    return [((x, mask, w, b, [1, 1], [1, 1]), {}), ((x, mask_s2, w, None, [1, 1], [2, 2]), {})]


def _masked_conv2d_backward_input(dtype, device):
    (args, _), _ = _masked_conv2d(dtype, device, grad=False)
    g = torch.randn(N, 5, H, W, generator=_gen(13), dtype=torch.float64).to(dtype=dtype, device=device)
    return [((g, args[1], args[2], N, C, H, W, [1, 1], [1, 1]), {})]


def _masked_conv2d_backward_weight(dtype, device):
    (args, _), _ = _masked_conv2d(dtype, device, grad=False)
    g = torch.randn(N, 5, H, W, generator=_gen(13), dtype=torch.float64).to(dtype=dtype, device=device)
    return [((g, args[0], args[1], args[2], [1, 1], [1, 1]), {})]


def _deform_conv2d(dtype, device, grad=True):
    """DCNv2 with weight groups 2 and offset groups 2, stride 1; DCNv1 (torchvision's [N, 1] mask placeholder)
    with stride 2. Offsets within +-2 px, some samples leaving the map."""
    g = _gen(14)
    x = _feature(N, C, H, W, dtype, device, grad=grad)
    w = _feature(6, C // 2, 3, 3, dtype, device, seed=15, grad=grad)
    b = torch.linspace(-1, 1, 6, dtype=torch.float64).to(dtype=dtype, device=device).requires_grad_(grad)
    offset = (torch.rand(N, 36, H, W, generator=g, dtype=torch.float64) * 4 - 2).to(dtype=dtype, device=device)
    mask = torch.sigmoid(torch.randn(N, 18, H, W, generator=g, dtype=torch.float64)).to(dtype=dtype, device=device)
    offset_s2 = (torch.rand(N, 18, 6, 7, generator=g, dtype=torch.float64) * 4 - 2).to(dtype=dtype, device=device)
    placeholder = torch.zeros(N, 1, dtype=dtype, device=device)
    return [((x, w, offset.requires_grad_(grad), mask.requires_grad_(grad), b, 1, 1, 1, 1, 1, 1, 2, 2, True), {}),
            ((x, w, offset_s2.requires_grad_(grad), placeholder, b, 2, 2, 1, 1, 1, 1, 2, 1, False), {})]


def _deform_conv2d_backward(dtype, device):
    out = []
    for (args, _), (h, w) in zip(_deform_conv2d(dtype, device, grad=False), ((H, W), (6, 7))):
        g = torch.randn(N, 6, h, w, generator=_gen(16), dtype=torch.float64).to(dtype=dtype, device=device)
        out.append(((g,) + args, {}))
    return out

def _carafe_masks(k, g, s, dtype, device, seed):
    """Softmax-normalised over each group's k k taps, as CARAFE's encoder makes them."""
    logits = torch.randn(N, g, k * k, H * s, W * s, generator=_gen(seed), dtype=torch.float64)
    return torch.softmax(logits, 2).reshape(N, g * k * k, H * s, W * s).to(dtype=dtype, device=device)


_CARAFE_PARAMS = ((5, 2, 2), (3, 4, 1))  # (kernel_size, group_size, scale_factor)


def _carafe(dtype, device, grad=True):
    x = _feature(N, C, H, W, dtype, device, seed=17, grad=grad)
    return [((x, _carafe_masks(k, g, s, dtype, device, 18 + i).requires_grad_(grad), k, g, s), {})
            for i, (k, g, s) in enumerate(_CARAFE_PARAMS)]


def _carafe_backward_features(dtype, device):
    out = []
    for (x, masks, k, g, s), _ in _carafe(dtype, device, grad=False):
        grad = _feature(N, C, H * s, W * s, dtype, device, seed=20)
        out.append(((grad, masks, N, C, H, W, k, g, s), {}))
    return out


def _carafe_backward_masks(dtype, device):
    out = []
    for (x, masks, k, g, s), _ in _carafe(dtype, device, grad=False):
        grad = _feature(N, C, H * s, W * s, dtype, device, seed=21)
        out.append(((grad, x, k, g, s), {}))
    return out


def _deform_roi_pool(dtype, device, grad=True, modulated=False):
    """Offsets N(0, 0.1^2) (bins moved across the rois' and the map's borders); with and without offsets."""
    g = _gen(22)
    x = _feature(N, C, H, W, dtype, device, grad=grad)
    rois = _rois(K, N, H, W, SCALE, dtype, device)
    off = (torch.randn(K, 2, 3, 3, generator=g, dtype=torch.float64) * 0.1).to(dtype=dtype, device=device)
    if not modulated:
        return [((x, rois, off.requires_grad_(grad), [3, 3], SCALE, 2, 0.1), {}), ((x, rois, None, [3, 3], SCALE), {})]
    mask = torch.rand(K, 1, 3, 3, generator=g, dtype=torch.float64).to(dtype=dtype, device=device).requires_grad_(grad)
    return [((x, rois, off.requires_grad_(grad), mask, [3, 3], SCALE, 0, 0.2), {}),
            ((x, rois, None, mask, [3, 3], SCALE, 2), {})]


def _modulated_deform_roi_pool(dtype, device, grad=True):
    return _deform_roi_pool(dtype, device, grad, modulated=True)


def _deform_roi_pool_backward(dtype, device):
    grad = torch.randn(K, C, 3, 3, generator=_gen(23), dtype=torch.float64).to(dtype=dtype, device=device)
    (x, rois, off, mask, size, scale, sr, gamma), _ = _modulated_deform_roi_pool(dtype, device, grad=False)[0]
    return [((grad, x, rois, off, mask, size, scale, sr, gamma), {}), ((grad, x, rois, None, None, size, scale, 0, 0.1), {})]


# op name -> builder(dtype, device) -> [(args, kwargs), ...]. Forward ops take grad=: whether the
# differentiable tensors require grad.
FORWARD = {
    "roi_align": _roi_align, "roi_pool": _roi_pool, "ps_roi_align": _ps_roi_align, "ps_roi_pool": _ps_roi_pool,
    "prroi_pool": _prroi_pool, "nms": _nms, "batched_nms": _batched_nms,
    "box_iou": _pairwise(False), "generalized_box_iou": _pairwise(False),
    "distance_box_iou": _pairwise(True), "complete_box_iou": _pairwise(True),
    "iou_loss": _loss, "generalized_box_iou_loss": _loss, "distance_box_iou_loss": _loss,
    "complete_box_iou_loss": _loss, "sigmoid_focal_loss": _focal, "sigmoid_focal_loss_mmcv": _focal_mmcv,
    "softmax_focal_loss": _softmax_focal, "masked_conv2d": _masked_conv2d, "deform_conv2d": _deform_conv2d,
    "carafe": _carafe, "deform_roi_pool": _deform_roi_pool, "modulated_deform_roi_pool": _modulated_deform_roi_pool,
}
BACKWARD = {
    "_roi_align_backward": _roi_align_backward, "_roi_pool_backward": _roi_pool_backward,
    "_ps_roi_align_backward": _ps_roi_align_backward, "_ps_roi_pool_backward": _ps_roi_pool_backward,
    "_prroi_pool_backward": _prroi_pool_backward, "_prroi_pool_rois_backward": _prroi_pool_rois_backward,
    "_box_iou_pairwise_backward": _pairwise_backward, "_box_iou_loss_backward": _loss_backward,
    "_sigmoid_focal_loss_backward": _focal_backward,
    "_sigmoid_focal_loss_mmcv_backward": _focal_mmcv_backward,
    "_softmax_focal_loss_backward": _softmax_focal_backward,
    "_masked_conv2d_backward_input": _masked_conv2d_backward_input,
    "_masked_conv2d_backward_weight": _masked_conv2d_backward_weight,
    "_deform_conv2d_backward": _deform_conv2d_backward,
    "_carafe_backward_features": _carafe_backward_features, "_carafe_backward_masks": _carafe_backward_masks,
    "_deform_roi_pool_backward": _deform_roi_pool_backward,
}
SAMPLES = {**FORWARD, **BACKWARD}


def registered_ops():
    names = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("detops::")]
    return sorted({n.split("::", 1)[1].split(".", 1)[0] for n in names})


def test_every_op_has_samples():
    ops = registered_ops()
    assert "roi_align" in ops, f"torch.ops.detops looks unloaded: {ops}"
    missing = [op for op in ops if op not in SAMPLES]
    assert not missing, (f"ops registered in torch.ops.detops without PT2-contract samples: {missing}; add them "
                         "to FORWARD or BACKWARD in suites/python/test_pt2_contract.py")
    stale = [op for op in SAMPLES if op not in ops]
    assert not stale, f"samples for ops the library does not register: {stale}"


def _device_params():
    return [pytest.param(d, id=d) for d in devices()]


@pytest.mark.parametrize("utility", UTILITIES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("device", _device_params())
@pytest.mark.parametrize("op", sorted(SAMPLES))
def test_opcheck(op, device, dtype, utility):
    build = SAMPLES[op]
    samples = build(dtype, device)
    for args, kwargs in samples:
        torch.library.opcheck(_op(op), args, kwargs, test_utils=utility)


def _flat_tensors(out):
    return [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]


def _assert_same(actual, expected, what):
    for a, e in zip(_flat_tensors(actual), _flat_tensors(expected), strict=True):
        if a.dtype.is_floating_point:
            torch.testing.assert_close(a, e, msg=lambda m: f"{what}: {m}")
        else:
            assert torch.equal(a.cpu(), e.cpu()), f"{what}: {a} != {e}"


def _fresh(args, grad):
    """A copy of the sample's tensors: leaves again (requires_grad as in the sample when grad)."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a.detach().clone().requires_grad_(grad and a.requires_grad))
        else:
            out.append(a)
    return tuple(out)


PUBLIC = sorted(FORWARD)


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield


@pytest.mark.parametrize("device", _device_params())
@pytest.mark.parametrize("op", PUBLIC)
def test_compile_forward(op, device):
    fn = _op(op)
    for args, kwargs in FORWARD[op](torch.float32, device, grad=False):
        compiled = torch.compile(lambda *a: fn(*a, **kwargs), fullgraph=True)
        _assert_same(compiled(*args), fn(*args, **kwargs), f"{op} compiled forward")


@pytest.mark.parametrize("device", _device_params())
@pytest.mark.parametrize("op", PUBLIC)
def test_compile_forward_backward(op, device):
    fn = _op(op)
    samples = FORWARD[op](torch.float32, device, grad=True)
    if not any(isinstance(a, torch.Tensor) and a.requires_grad for a in samples[0][0]):
        pytest.skip(f"{op} has no differentiable inputs (forward only)")

    def loss(*a):
        out = fn(*a)
        out = out[0] if isinstance(out, (tuple, list)) else out
        return (out.float() * torch.linspace(0.5, 1.5, out.numel(), device=out.device).view(out.shape)).sum()

    for args, _ in samples:
        compiled = torch.compile(loss, fullgraph=True)
        eager_args, compiled_args = _fresh(args, True), _fresh(args, True)
        loss(*eager_args).backward()
        compiled(*compiled_args).backward()
        for e, c in zip(eager_args, compiled_args):
            if isinstance(e, torch.Tensor) and e.requires_grad:
                torch.testing.assert_close(c.grad, e.grad, msg=lambda m: f"{op} compiled backward: {m}")


class _Call(torch.nn.Module):
    def __init__(self, op, scalars):
        super().__init__()
        self.op, self.scalars = op, scalars

    def forward(self, *tensors):
        it = iter(tensors)
        return self.op(*[next(it) if s is _TENSOR else s for s in self.scalars])


_TENSOR = object()


@pytest.mark.parametrize("device", _device_params())
@pytest.mark.parametrize("op", PUBLIC)
def test_export(op, device):
    fn = _op(op)
    for args, _ in FORWARD[op](torch.float32, device, grad=False):
        tensors = tuple(a for a in args if isinstance(a, torch.Tensor))
        module = _Call(fn, [_TENSOR if isinstance(a, torch.Tensor) else a for a in args])
        exported = torch.export.export(module, tensors)
        assert any(node.target == fn for node in exported.graph.nodes if node.op == "call_function"), \
            f"{op}: the exported graph does not call torch.ops.detops.{op}"
        _assert_same(exported.module()(*tensors), fn(*args), f"{op} exported")
