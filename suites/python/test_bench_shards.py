"""scripts/bench_shards.py (the benchmarks over several GPUs of one machine) with a stand-in for detops_bench that
writes synthetic records (suites/python/synthetic_records.py) for the benchmarks its filter selects: every op
measured exactly once, on one GPU, calibration on the first; the parts merged with each GPU's uuid; a failing GPU
reported and the others kept. No GPU needed (the real runner's one-GPU path is the main job's)."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.no_detops_library

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_shards  # noqa: E402
import gate_scope  # noqa: E402

FAKE = textwrap.dedent('''\
    import json, os, re, sys
    sys.path.insert(0, {py!r})
    import synthetic_records as sr
    args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
    flt, gpu = args["benchmark_filter"], os.environ["CUDA_VISIBLE_DEVICES"]
    if os.environ.get("FAKE_FAIL_GPU") == gpu:
        print("[1/3] something; 0s, about 1s left"); sys.exit(3)
    ops = {ops!r}
    neg = flt.startswith("-")
    chosen = [op for op in ops if bool(re.search(flt.lstrip("-"), op + "/case/fp32/fwd")) != neg]
    rec = sr.make_record([(op, "case", "fp32", "fwd", 0.1) for op in chosen], seed=int(gpu))
    rec["context"]["detops"]["gpu"]["uuid"] = "GPU-fake-" + gpu
    for i, op in enumerate(chosen):
        print(f"[{{i + 1}}/{{len(chosen)}}] {{op}}/case/fp32/fwd 0.1 ms; 1s, about 1s left")
    json.dump(rec, open(args["detops_record"], "w"))
''')
OPS = list(gate_scope.ALL_OPS) + ["calibration", "brand_new_op"]


def fake_bench(tmp_path):
    script = tmp_path / "fake_bench.py"
    script.write_text(FAKE.format(py=str(ROOT / "suites" / "python"), ops=OPS))
    wrapper = tmp_path / "fake_bench"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def run(tmp_path, *extra, env=None):
    return subprocess.run([sys.executable, str(ROOT / "scripts/bench_shards.py"), "--binary", fake_bench(tmp_path),
                           "--record", str(tmp_path / "record.json"), "--interval", "0.2", *extra],
                          capture_output=True, text=True, env=dict(os.environ, **(env or {})))


def test_every_op_once_on_one_gpu_merged_with_each_gpus_uuid(tmp_path):
    r = run(tmp_path, "--gpus", "0,1,2")
    assert r.returncode == 0, r.stderr
    rec = json.loads((tmp_path / "record.json").read_text())
    names = [b["run_name"] for b in rec["benchmarks"] if b.get("aggregate_name") == "median"]
    assert sorted(n.split("/")[0] for n in names) == sorted(OPS)  # each op once, the unknown one too
    merged_from = rec["context"]["detops"]["merged_from"]
    assert {m["gpu_uuid"] for m in merged_from} == {"GPU-fake-0", "GPU-fake-1", "GPU-fake-2"}
    assert rec["context"]["detops"]["complete"] is True
    log0 = (tmp_path / "bench.gpu-0.log").read_text()
    assert "calibration/" in log0 and "calibration/" not in (tmp_path / "bench.gpu-1.log").read_text()
    assert "brand_new_op/" in (tmp_path / "bench.gpu-2.log").read_text()  # the last GPU takes what no table names
    assert "[bench_shards] " in r.stdout and "benchmarks from 3 of 3 GPUs" in r.stdout


def test_progress_reads_the_last_progress_line(tmp_path):
    log = tmp_path / "bench.log"
    assert bench_shards.progress(log) == (0, 0)
    log.write_text("detops_bench: starting\n[3/40] roi_align/... 0.1 ms; 2s, about 20s left\n[4/40] nms/...\nother\n")
    assert bench_shards.progress(log) == (4, 40)
    # As an H200 run's log had it: the progress line (stderr) right after the console table's colour reset.
    log.write_text("[0;32mroi_align/box_head_1000/fp64/fwd/iterations:1/manual_time [m 0.383 ms\n"
                   "\x1b[m[2/217] roi_align/box_head_1000/fp64/bwd 1.078 ms; 2s, about 3m33s left\n"
                   "\x1b[0;32mroi_align/box_head_1000/fp64/bwd/iterations:1/manual_time\n")
    assert bench_shards.progress(log) == (2, 217)


def test_a_failing_gpu_is_reported_and_the_others_merged(tmp_path):
    r = run(tmp_path, "--gpus", "0,1", env={"FAKE_FAIL_GPU": "1"})
    assert r.returncode == 1
    assert "GPU 1 failed (exit 3, no record)" in r.stderr
    rec = json.loads((tmp_path / "record.json").read_text())
    assert rec["context"]["detops"]["complete"] is False
    assert "GPU 1" in rec["context"]["detops"]["incomplete_reason"]
    ops = {b["run_name"].split("/")[0] for b in rec["benchmarks"]}
    assert "calibration" in ops and 0 < len(ops) < len(OPS)


def test_partition_balances_the_expected_time_and_filters_cover_everything():
    ops = ["a", "b", "c", "d", "e"]
    groups, load = bench_shards.partition(ops, {"a": 10, "b": 9, "c": 1, "d": 8}, 2)  # e: the median
    assert sorted(sum(groups, [])) == ops and all(g == sorted(g, key=ops.index) for g in groups)
    assert max(load) <= 19 and sum(load) == pytest.approx(10 + 9 + 1 + 8 + 9)
    f = bench_shards.filters([["a", "b"], ["c"], ["d", "e"]])
    assert f == ["^(calibration|a|b)/", "^(c)/", "-^(calibration|a|b|c)/"]
    assert bench_shards.filters([["a"], []]) == ["^(calibration|a)/", "-^(calibration|a)/"]
    assert bench_shards.filters([["a"], [], ["c"]], closed=True) == ["^(calibration|a)/", None, "^(c)/"]


def test_a_scope_runs_its_ops_only(tmp_path):
    r = run(tmp_path, "--gpus", "0,1", "--ops", "roi_align,nms,roi_pool")
    assert r.returncode == 0, r.stderr
    rec = json.loads((tmp_path / "record.json").read_text())
    assert sorted({b["run_name"].split("/")[0] for b in rec["benchmarks"]}) == ["calibration", "nms", "roi_align",
                                                                               "roi_pool"]


@pytest.mark.parametrize("args,words", [(["--gpus", ","], "--gpus: expected"),
                                        (["--gpus", "0", "--", "--benchmark_filter=x"], "set per GPU here")])
def test_bad_usage_is_one_line_and_exit_2(tmp_path, args, words):
    r = run(tmp_path, *args)
    assert r.returncode == 2 and words in r.stderr
