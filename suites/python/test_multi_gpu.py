"""Every op runs on the device of its inputs, not on the current device (a device guard in every binding).

On a machine with two or more CUDA devices, for every op registered in torch.ops.detops (forward and backward
ops, through the PT2-contract samples, so a new op is covered as soon as it has samples) and the public wrappers:

- inputs on cuda:1 while cuda:0 is current, and inputs on cuda:0 while cuda:1 is current: every output is on the
  inputs' device, equals the same call made with the inputs' device current (the outputs of a kernel launched
  on the wrong device, or on the wrong device's stream, would be garbage, an illegal-address error or a race),
  and nothing is allocated on the other device (an output or workspace made on the current device instead);
- the autograd path (forward, then backward through the op's autograd kernel) on cuda:1 likewise;
- one tensor argument on the other GPU: refused with an error naming the devices (a kernel handed a pointer into
  the other GPU's memory reads garbage, or faults, instead).

With fewer than two devices every test here is skipped, saying how many were seen.
"""
import pytest
import torch

from test_pt2_contract import FORWARD, SAMPLES, _op

DTYPES = [torch.float32, torch.float16]

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2,
    reason=f"needs two CUDA devices; this machine has "
           f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} (the device-guard tests of issue 16)")


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


def _allocations(device):
    """How many blocks the caching allocator has handed out on device so far (every allocation counts)."""
    return torch.cuda.memory_stats(device).get("allocation.all.allocated", 0)


def _assert_same_result(got, want, what):
    got, want = _tensors(got), _tensors(want)
    assert len(got) == len(want), f"{what}: {len(got)} outputs against {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        if g.dtype.is_floating_point:
            # Same kernel, same inputs, another GPU of the same model: equal but for the order of atomic adds.
            torch.testing.assert_close(g.cpu(), w.cpu(), msg=lambda m: f"{what}, output {k}: {m}")
        else:
            assert torch.equal(g.cpu(), w.cpu()), f"{what}, output {k}: {g.cpu()} != {w.cpu()}"


def _run_on(op, build, dtype, data_device, current_device):
    """(outputs, allocations made on current_device while the op was built and called with data on data_device)."""
    other = torch.device(current_device)
    torch.cuda.synchronize(data_device)
    torch.cuda.synchronize(other)
    with torch.cuda.device(other):
        before = _allocations(other)
        outs = [_op(op)(*args, **kwargs) for args, kwargs in build(dtype, data_device)]
        torch.cuda.synchronize(data_device)
        after = _allocations(other)
    return outs, after - before


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("data_device,current_device", [("cuda:1", "cuda:0"), ("cuda:0", "cuda:1")],
                         ids=["inputs_on_1", "inputs_on_0"])
@pytest.mark.parametrize("op", sorted(SAMPLES))
def test_op_runs_on_its_inputs_device(op, data_device, current_device, dtype):
    build = SAMPLES[op]
    with torch.cuda.device(data_device):  # the reference: the inputs' device current
        want = [_op(op)(*args, **kwargs) for args, kwargs in build(dtype, data_device)]
    got, stray = _run_on(op, build, dtype, data_device, current_device)
    for outs in got:
        for t in _tensors(outs):
            assert t.device == torch.device(data_device), \
                f"{op}: an output is on {t.device}; the inputs are on {data_device} (current device {current_device})"
    assert stray == 0, (f"{op}: {stray} allocations on the current device {current_device} while every input was on "
                        f"{data_device}")
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        _assert_same_result(g, w, f"{op} sample {k} on {data_device} with {current_device} current")


def _differentiable(samples):
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in samples[0][0])


def _grads(op, args, kwargs):
    out = _op(op)(*args, **kwargs)
    out = out[0] if isinstance(out, (tuple, list)) else out
    w = torch.linspace(0.5, 1.5, out.numel(), device=out.device, dtype=torch.float64).view(out.shape)
    (out.double() * w).sum().backward()
    return [a.grad for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


@pytest.mark.parametrize("op", sorted(FORWARD))
def test_autograd_on_second_gpu(op):
    """Forward and backward (the op's autograd kernel) with the inputs on cuda:1 and cuda:0 current: every gradient
    on cuda:1, equal to the one computed with cuda:1 current."""
    if not _differentiable(FORWARD[op](torch.float32, "cuda:1", grad=True)):
        pytest.skip(f"{op} has no differentiable inputs (forward only)")
    with torch.cuda.device("cuda:1"):
        want = [_grads(op, a, kw) for a, kw in FORWARD[op](torch.float32, "cuda:1", grad=True)]
    with torch.cuda.device("cuda:0"):
        before = _allocations("cuda:0")
        got = [_grads(op, a, kw) for a, kw in FORWARD[op](torch.float32, "cuda:1", grad=True)]
        torch.cuda.synchronize("cuda:1")
        stray = _allocations("cuda:0") - before
    assert stray == 0, f"{op}: {stray} allocations on cuda:0 (current) in forward + backward of inputs on cuda:1"
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        for t in g:
            assert t.device == torch.device("cuda:1"), f"{op} sample {k}: a gradient is on {t.device}"
        _assert_same_result(g, w, f"{op} sample {k} gradients")


def _tensor_positions(args):
    return [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]


@pytest.mark.parametrize("op", sorted(SAMPLES))
def test_one_argument_on_the_other_gpu_is_refused(op):
    """Each tensor argument in turn moved to cuda:1, the rest on cuda:0 (and cuda:0 current): an error naming the
    devices, never a result (the kernel would be handed a pointer into the other GPU's memory)."""
    args, kwargs = SAMPLES[op](torch.float32, "cuda:0")[0]
    args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    positions = _tensor_positions(args)
    if len(positions) < 2:
        pytest.skip(f"{op}: one tensor argument, nothing to mix")
    for i in positions:
        mixed = tuple(a.to("cuda:1") if k == i else a for k, a in enumerate(args))
        with torch.cuda.device("cuda:0"):
            with pytest.raises((RuntimeError, ValueError, TypeError)) as info:
                _op(op)(*mixed, **kwargs)
                torch.cuda.synchronize("cuda:0")
                torch.cuda.synchronize("cuda:1")
        assert "device" in str(info.value), f"{op}: argument {i} on cuda:1 raised without naming devices: {info.value}"
        assert "illegal" not in str(info.value).lower(), f"{op}: argument {i} on cuda:1 reached a kernel: {info.value}"


def test_public_wrappers_on_second_gpu():
    """The torchvision-style wrappers (detops.ops): list-of-boxes rois, deform_conv2d's defaults (no mask, no bias
    made on the current device), and the modules moved with .to('cuda:1')."""
    from detops import ops

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 12, 14, generator=g).to("cuda:1")
    boxes = [torch.tensor([[1.0, 1.0, 9.0, 7.0], [0.0, 2.0, 20.0, 21.0]]).to("cuda:1"),
             torch.tensor([[3.0, 3.0, 5.0, 5.0]]).to("cuda:1")]
    with torch.cuda.device("cuda:0"):
        before = _allocations("cuda:0")
        out = ops.roi_align(x, boxes, (3, 3), 0.5, 2, True)
        conv = ops.DeformConv2d(8, 4, 3, padding=1).to("cuda:1")
        offset = (torch.rand(2, 18, 12, 14, generator=g) * 2 - 1).to("cuda:1")
        y = conv(x, offset)
        keep = ops.nms(boxes[0], torch.tensor([0.9, 0.8]).to("cuda:1"), 0.5)
        torch.cuda.synchronize("cuda:1")
        stray = _allocations("cuda:0") - before
    assert (out.device, y.device, keep.device) == (torch.device("cuda:1"),) * 3
    assert stray == 0, f"{stray} allocations on cuda:0 (current) with every input on cuda:1"
    with torch.cuda.device("cuda:1"):
        torch.testing.assert_close(out.cpu(), ops.roi_align(x, boxes, (3, 3), 0.5, 2, True).cpu())
        torch.testing.assert_close(y.cpu(), conv(x, offset).cpu())
    cpu = ops.roi_align(x.cpu(), [b.cpu() for b in boxes], (3, 3), 0.5, 2, True)
    torch.testing.assert_close(out.cpu(), cpu, atol=1e-5, rtol=1e-5)
