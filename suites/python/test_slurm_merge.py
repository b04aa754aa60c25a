"""The Slurm template's merge (scripts/slurm/merge_nodes.sh) on records from several nodes (synthetic records of one
build on three hosts and GPUs, each with the calibration benchmark and its run's output dumps): one record with
every op once and each node's provenance, the comparison with the baseline deciding as for one run, a node that
wrote nothing named and the rest kept; and the split of the ops over the array's tasks (bench_shards.py group)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

import synthetic_records as sr

pytestmark = pytest.mark.no_detops_library

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import gate_scope  # noqa: E402


def node_record(tmp_path, i, ops, scale=None):
    rec = sr.make_record([(op, "case", "fp32", "fwd", 0.2) for op in ["calibration", *ops]],
                         [sr.correctness_test(f"{op}.forward.tiny.fp32.cuda") for op in ops], seed=10 + i, scale=scale)
    d = rec["context"]["detops"]
    d["host"], d["gpu"]["uuid"], d["run_id"] = f"node{i}", f"GPU-node-{i}", f"20250101T00000{i}Z_NVIDIA-H200_slurm-7-{i}"
    folder = tmp_path / "runs" / d["run_id"]
    (folder / "outputs").mkdir(parents=True)
    (folder / "outputs" / "index.json").write_text("{}")
    rec["outputs"] = {"dir": "outputs", "index": "outputs/index.json"}  # as run.sh attaches them
    return sr.write(folder / "record.json", rec)


GROUPS = [["roi_align", "nms"], ["roi_pool"], ["box_iou", "carafe"]]


def merge(tmp_path, parts, baseline):
    env = dict(os.environ, DETOPS_BASELINE=str(baseline), DETOPS_PYTHON=sys.executable)
    return subprocess.run(["bash", str(ROOT / "scripts/slurm/merge_nodes.sh"), str(tmp_path / "merged"), *map(str, parts)],
                          capture_output=True, text=True, env=env)


def test_nodes_merge_into_one_record_compared_as_one_run(tmp_path):
    parts = [node_record(tmp_path, i, g) for i, g in enumerate(GROUPS)]
    baseline = sr.write(tmp_path / "baseline.json", sr.make_record(
        [(op, "case", "fp32", "fwd", 0.2) for op in ["calibration", *sum(GROUPS, [])]],
        [sr.correctness_test(f"{op}.forward.tiny.fp32.cuda") for op in sum(GROUPS, [])], seed=1))
    r = merge(tmp_path, parts, baseline)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = json.loads((tmp_path / "merged" / "record.json").read_text())
    names = sorted(b["run_name"] for b in rec["benchmarks"] if b.get("aggregate_name") == "median")
    assert names == sorted(f"{op}/case/fp32/fwd" for op in ["calibration", *sum(GROUPS, [])])  # calibration once
    d = rec["context"]["detops"]
    assert [m["host"] for m in d["merged_from"]] == ["node0", "node1", "node2"] and d["complete"] is True
    assert all(m["output_dumps"].endswith("/outputs") for m in d["merged_from"])
    assert "outputs" not in rec and rec["correctness"]["summary"]["passed"] == 5
    assert "no regression" in (tmp_path / "merged" / "compare.md").read_text()
    assert (tmp_path / "merged" / "report.html").is_file()

    # A 10 % slower op on one node fails the merged comparison, as it would one run's.
    slow = node_record(tmp_path / "slow", 1, GROUPS[1], scale={"roi_pool/case/fp32/fwd": 1.10})
    r = merge(tmp_path, [parts[0], slow, parts[2]], baseline)
    assert r.returncode == 1 and "SLOWER" in (tmp_path / "merged" / "compare.md").read_text()


def test_a_node_without_a_record_is_named_and_the_rest_merged(tmp_path):
    parts = [node_record(tmp_path, i, g) for i, g in enumerate(GROUPS[:2])]
    baseline = sr.write(tmp_path / "baseline.json", sr.make_record([("calibration", "case", "fp32", "fwd", 0.2)], seed=1))
    r = merge(tmp_path, [parts[0], tmp_path / "runs" / "missing" / "record.json", parts[1]], baseline)
    assert r.returncode == 1
    assert "no record at" in r.stderr and "missing/record.json" in r.stderr
    rec = json.loads((tmp_path / "merged" / "record.json").read_text())
    assert len(rec["context"]["detops"]["merged_from"]) == 2


def test_nothing_to_merge_is_exit_2(tmp_path):
    r = merge(tmp_path, [tmp_path / "none.json"], tmp_path / "b.json")
    assert r.returncode == 2 and "no record to merge" in r.stderr


def test_the_array_tasks_split_every_op_once():
    for k in (1, 2, 5):
        got = []
        for i in range(k):
            out = subprocess.run([sys.executable, str(ROOT / "scripts/bench_shards.py"), "group", str(k), str(i), "--times",
                                  str(ROOT / "results/baselines/NVIDIA-H200_cuda13.0/record.json.gz")],
                                 capture_output=True, text=True, check=True).stdout.strip()
            got += [o for o in out.split(",") if o]
        assert sorted(got) == sorted(gate_scope.ALL_OPS), k
