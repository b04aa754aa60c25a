"""scripts/kernel_profile.py's command line: bad arguments answered with one line and exit 2 before any GPU work,
and no CUDA device said as such (the profile itself needs a GPU: run on the lent H200, see docs/architecture.md)."""
import pathlib
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import kernel_profile  # noqa: E402


def test_unknown_op_is_named(capsys):
    assert kernel_profile.main(["--ops", "roi_pool,no_such_op"]) == 2
    err = capsys.readouterr().err
    assert "unknown ops ['no_such_op']" in err and "roi_pool" in err  # the known ops are listed


def test_unknown_dtype_is_named(capsys):
    assert kernel_profile.main(["--ops", "roi_pool", "--dtypes", "fp32,fp8"]) == 2
    assert "unknown dtypes ['fp8']" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device: the profile would run")
def test_no_cuda_device_is_said(capsys):
    assert kernel_profile.main(["--ops", "roi_pool"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_long_kernel_names_are_cut_to_the_column():
    name = "void detops::(anonymous namespace)::roi_pool_backward_kernel<float, int>(detops::RoiPoolParams, ...)"
    assert kernel_profile.short(name, 40) == name[:37] + "..."
    assert len(kernel_profile.short(name, 40)) == 40
    assert kernel_profile.short("  a \n b ", 40) == " a b "  # whitespace runs collapsed
