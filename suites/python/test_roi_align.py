"""torch.ops.detops.roi_align against torchvision.ops.roi_align on the same random inputs."""
import pytest
import torch

from conftest import assert_sum_backward_close, devices, random_image_rois

torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed: no peer to compare against")
from torchvision.ops import roi_align as tv_roi_align  # noqa: E402

# (atol, rtol) per dtype, as in the C++ harness table; fp32 scaled for coordinate rounding as RoIAlign's spec says.
TOL = {torch.float64: (1e-10, 1e-10), torch.float32: (1e-4, 1e-5), torch.float16: (1e-3, 2e-3), torch.bfloat16: (8e-3, 1.6e-2)}


def make_inputs(seed, n, c, h, w, k, scale, dtype, device):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, c, h, w, generator=g, dtype=torch.float64) * 2 - 1
    rois = random_image_rois(g, n, k, h, w, scale)
    return x.to(device, dtype), rois.to(device, dtype)


CASES = [
    # seed, (n, c, h, w), k, scale, (ph, pw), sampling_ratio, aligned
    (1, (2, 3, 20, 24), 17, 0.25, (7, 7), 2, True),
    (2, (2, 3, 20, 24), 17, 0.25, (7, 7), 0, False),
    (3, (1, 4, 25, 42), 9, 1 / 32, (14, 14), 0, True),
    (4, (3, 2, 13, 21), 30, 1 / 16, (1, 1), 1, False),
    (5, (2, 5, 50, 84), 40, 1 / 8, (7, 7), 4, True),
    (6, (2, 3, 9, 9), 0, 0.5, (3, 3), 2, True),
]


def dtypes(device):
    return [torch.float64, torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("case", CASES, ids=[f"case{c[0]}" for c in CASES])
def test_forward_and_backward_match_torchvision(device, case):
    """Ours in each dtype against torchvision in fp64 on the same (rounded) inputs, forward and backward.

    torchvision computes fp16 RoIAlign entirely in fp16 (sample positions included) and has no bf16, so
    its fp64 result on our rounded inputs is the fair target; in fp32 and fp64 both run the same
    algorithm and must also agree with each other directly.
    """
    seed, shape, k, scale, pooled, sr, aligned = case
    for dtype in dtypes(device):
        x, rois = make_inputs(seed, *shape, k, scale, dtype, device)
        xp, rp = x.detach().double().requires_grad_(), rois.double()
        x = x.detach().requires_grad_()

        ours = torch.ops.detops.roi_align(x, rois, scale, pooled[0], pooled[1], sr, aligned)
        truth = tv_roi_align(xp, rp, pooled, spatial_scale=scale, sampling_ratio=sr, aligned=aligned)
        atol, rtol = TOL[dtype]
        torch.testing.assert_close(ours.double(), truth, atol=atol, rtol=rtol,
                                   msg=lambda m: f"forward {dtype} {device} vs torchvision fp64: {m}")
        if dtype in (torch.float32, torch.float64):
            same = tv_roi_align(x.detach(), rois, pooled, spatial_scale=scale, sampling_ratio=sr, aligned=aligned)
            torch.testing.assert_close(ours.detach(), same, atol=atol, rtol=rtol,
                                       msg=lambda m: f"forward {dtype} {device} vs torchvision {dtype}: {m}")

        assert_sum_backward_close(ours, truth, x, xp, atol, rtol)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_layouts_give_the_same_forward(device, dtype):
    """Any memory layout of the map (channels_last, W-major strides, a strided channel view) must give the
    contiguous input's output bit for bit, with channel counts around the warp width (1, 31, 33)."""
    for seed, shape in [(21, (2, 33, 11, 13)), (22, (1, 31, 9, 7)), (23, (3, 1, 10, 12))]:
        x, rois = make_inputs(seed, *shape, 25, 0.5, dtype, device)
        want = torch.ops.detops.roi_align(x, rois, 0.5, 5, 4, 2, True)
        layouts = {
            "channels_last": x.contiguous(memory_format=torch.channels_last),
            "W-major": x.transpose(2, 3).contiguous().transpose(2, 3),
            "every other channel": torch.stack([x, x], 2).flatten(1, 2)[:, ::2],
        }
        for name, xl in layouts.items():
            assert torch.equal(xl, x)
            got = torch.ops.detops.roi_align(xl, rois, 0.5, 5, 4, 2, True)
            assert got.is_contiguous() and torch.equal(got, want), f"{name} {shape} {dtype} {device}"


@pytest.mark.parametrize("device", devices())
def test_gradcheck_fp64(device):
    x, rois = make_inputs(11, 1, 2, 6, 7, 3, 0.5, torch.float64, device)
    x.requires_grad_()
    assert torch.autograd.gradcheck(lambda t: torch.ops.detops.roi_align(t, rois, 0.5, 3, 2, 2, True), (x,),
                                    eps=1e-6, atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("device", devices())
def test_bad_input_raises_and_process_stays_usable(device):
    x, rois = make_inputs(12, 2, 3, 8, 8, 4, 1.0, torch.float32, device)
    # Argument errors raise ValueError / IndexError (subclasses of Exception, as ATen's own checks do).
    with pytest.raises(RuntimeError, match="rois must be a 2-D tensor"):
        torch.ops.detops.roi_align(x, rois[:, :4], 1.0, 2, 2, 2, True)
    bad = rois.clone()
    bad[2, 0] = 5
    with pytest.raises(IndexError, match=r"rois\[2, 0\]"):
        torch.ops.detops.roi_align(x, bad, 1.0, 2, 2, 2, True)
    with pytest.raises(RuntimeError, match="pooled_height must be non-negative"):
        torch.ops.detops.roi_align(x, rois, 1.0, -1, 2, 2, True)
    out = torch.ops.detops.roi_align(x, rois, 1.0, 2, 2, 2, True)
    ref = tv_roi_align(x, rois, (2, 2), 1.0, 2, True)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_double_backward_is_refused_clearly():
    x, rois = make_inputs(13, 1, 2, 6, 7, 3, 0.5, torch.float64, "cpu")
    x.requires_grad_()
    out = torch.ops.detops.roi_align(x, rois, 0.5, 2, 2, 2, True)
    (g,) = torch.autograd.grad((out * out).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward is not supported"):
        g.sum().backward()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CPU backward is deterministic")
def test_cuda_backward_refuses_deterministic_mode():
    x, rois = make_inputs(14, 1, 2, 6, 7, 3, 0.5, torch.float32, "cuda")
    x.requires_grad_()
    out = torch.ops.detops.roi_align(x, rois, 0.5, 2, 2, 2, True)
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.raises(RuntimeError, match="_roi_align_backward"):
            out.sum().backward()
    finally:
        torch.use_deterministic_algorithms(False)


def test_meta_tensors_give_shapes():
    x = torch.empty(2, 3, 10, 12, device="meta")
    rois = torch.empty(5, 5, device="meta")
    out = torch.ops.detops.roi_align(x, rois, 0.25, 7, 6, 2, True)
    assert out.shape == (5, 3, 7, 6) and out.device.type == "meta"
