"""DETOPS_SAVE_OUTPUTS: the correctness suite saves each forward output for cross-build comparisons."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

BIN = os.environ.get("DETOPS_CORRECTNESS_BIN")
pytestmark = pytest.mark.no_detops_library


@pytest.mark.skipif(not BIN, reason="DETOPS_CORRECTNESS_BIN is not set (CTest sets it to the correctness suite)")
def test_dumps_match_index_and_outputs(tmp_path):
    env = dict(os.environ, DETOPS_SAVE_OUTPUTS=str(tmp_path), DETOPS_SAVE_OUTPUTS_MAX_ELEMENTS="100")
    subprocess.run([BIN, "--gtest_filter=roi_pool.forward.*.cpu:nms.forward.two_boxes.*.cpu", "--gtest_brief=1"],
                   env=env, check=True, capture_output=True)
    index = json.loads((tmp_path / "index.json").read_text())
    roi = [k for k in index if k.startswith("roi_pool.forward.")]
    assert len(roi) >= 4 * 40, "every roi_pool forward case in every dtype is saved"
    for name, e in index.items():
        values = np.fromfile(tmp_path / e["file"], dtype="<f8")
        assert len(values) == e["elements_saved"] <= 100
        n = int(np.prod(e["shape"])) if e["shape"] else 1
        assert e["subsampled"] == (n > 100)
        assert e["dtype"] == name.split(".")[-2]
    # NMS keep indices (int64) are saved as float64 integers.
    nms = index["nms.forward.two_boxes.fp32.cpu"]
    kept = np.fromfile(tmp_path / nms["file"], dtype="<f8")
    assert nms["output_dtype"] == "Long" and np.all(kept == np.round(kept))
