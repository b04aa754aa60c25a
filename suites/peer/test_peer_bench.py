"""scripts/peer_bench.py off the GPU: every pair's entry built on the CPU with a wall-clock stand-in for the
profiler timer (the CUDA timing itself needs a GPU), checked against the record schema; the no-GPU exit."""
import importlib.util
import json
import math
import pathlib
import statistics
import sys
import time

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed in this Python")
pytest.importorskip("torchvision", reason="torchvision is not installed: no peer to compare against")

from peer import nms_checks, pairs  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "suites" / "python"))
import compare  # noqa: E402
import synthetic_records as sr  # noqa: E402

_spec = importlib.util.spec_from_file_location("peer_bench", ROOT / "scripts" / "peer_bench.py")
peer_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peer_bench)


class Args:
    samples, warmup, budget_s = 3, 1, 0.0


def wall_timer(torch_, fn, n, warmup, flush):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), times


def cpu_entries():
    out = []
    for pair in pairs.PAIRS:
        case = next(c for c in pair.cases if c.kind == "random")
        base = pair.make(case.cpu_params, case.seed)
        for dtype in pairs.ALL_DTYPES:
            for direction in ["fwd"] + (["bwd"] if pair.grad_keys else []):
                e = peer_bench.run_one(torch, pairs, nms_checks, pair, case, base, dtype, direction, Args, None,
                                       device="cpu", timer=wall_timer)
                out.append((pair, dtype, e))
    return out


def test_entries_on_the_cpu_are_complete_and_schema_valid():
    entries = cpu_entries()
    for pair, dtype, e in entries:
        where = f"{e['op']}/{e['case']}/{e['dtype']}/{e['direction']}"
        assert "error" not in e, f"{where}: {e.get('error')}"
        assert e["detops_ms"] > 0 and e["samples"]["detops"] >= Args.samples, where
        missing = pairs.torchvision_kernel_missing(pair, dtype, "cpu")
        if missing:
            assert e["torchvision_ms"] is None and e["speedup"] is None and e["torchvision_note"] == missing, where
        else:
            assert e["torchvision_ms"] > 0 and e["speedup"] == pytest.approx(e["torchvision_ms"] / e["detops_ms"]), where
        if pair.kind == "nms":
            assert e["check"] == "same keep list as torchvision fp64", where  # the random cases are margin-clean
        else:
            atol, rtol = pair.tol[dtype]
            assert e["tolerance"] == {"atol": atol, "rtol": rtol}
            assert math.isfinite(e["max_abs_error"]), where
            # The tests hold ours within atol + rtol * |truth| with |truth| of a few units (sums of 49 bins for
            # the RoI gradients, at most ~100 for the loss gradients): a loose bound that still catches a wrong op.
            assert e["max_abs_error"] <= atol + rtol * 100, where
            # torchvision's own error is measured where its truth is in another dtype (and it has a kernel).
            if missing or pair.truth_dtype(dtype) == dtype:
                assert e["torchvision_max_abs_error"] is None, where
            else:
                assert math.isfinite(e["torchvision_max_abs_error"]), where
    rec = sr.make_record(sr.demo_benchmarks(), sr.demo_tests(), seed=1)
    rec["peers"] = [e for _, _, e in entries]
    json.dumps(rec, allow_nan=False)
    table = peer_bench.markdown_table(rec["peers"])
    assert table.splitlines()[0] == ("| op | case | dtype | direction | torchvision ms | DetOps ms | speed-up | max error | "
                                     "torchvision's max error |")
    assert len(table.splitlines()) == 2 + len(entries)
    assert_schema_valid(rec)


def assert_schema_valid(rec):
    """The record against docs/record.schema.json; a skip (last, after every other assertion of the test) where
    jsonschema is missing, as on GPU machines that cannot install packages (setup installs it everywhere else)."""
    status, errors = compare.validate_record(rec)
    if status.startswith("skipped"):
        pytest.skip(f"schema validation {status}")
    assert status == "valid", errors[:5]


def test_a_failing_entry_keeps_its_error():
    pair = next(p for p in pairs.PAIRS if p.op == "roi_align")
    case = next(c for c in pair.cases if c.kind == "random")
    base = pair.make(case.cpu_params, case.seed)
    base["rois"] = base["rois"][:, :4]  # DetOps refuses: rois must be [K, 5]
    e = peer_bench.run_one(torch, pairs, nms_checks, pair, case, base, torch.float32, "fwd", Args, None,
                           device="cpu", timer=wall_timer)
    assert "rois" in e["error"] and e["detops_ms"] is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given without a GPU")
def test_without_cuda_exits_0_and_says_why(capsys, tmp_path):
    rec = tmp_path / "record.json"
    text = json.dumps(sr.make_record([("roi_align", "tiny", "fp32", "fwd", 0.1)]))
    rec.write_text(text)
    assert peer_bench.main(["--record", str(rec)]) == 0
    assert "needs a GPU" in capsys.readouterr().out
    assert rec.read_text() == text


@pytest.mark.parametrize("breakage,words", [
    (lambda r: "{}", "not a benchmark record"),
    (lambda r: "{\"context\": ", "is not JSON"),
    (lambda r: json.dumps({**r, "benchmarks": [{k: v for k, v in b.items() if k != "real_time"} for b in r["benchmarks"]]}),
     "'real_time' is a required property"),
])
def test_merge_target_is_validated_before_anything_runs(capsys, tmp_path, breakage, words):
    """--record names the record the peer entries are merged into: a truncated, foreign or invalid one is one
    line naming the file and the field, exit 2, and the file is left as it was (on any machine, GPU or not)."""
    rec = tmp_path / "record.json"
    text = breakage(sr.make_record([("roi_align", "tiny", "fp32", "fwd", 0.1)]))
    rec.write_text(text)
    assert peer_bench.main(["--record", str(rec)]) == compare.EXIT_USAGE
    err = capsys.readouterr().err
    assert words in err and str(rec) in err and "Traceback" not in err
    assert rec.read_text() == text


def test_write_atomic_replaces_the_file(tmp_path):
    path = tmp_path / "record.json"
    path.write_text('{"old": 1}')
    peer_bench.write_atomic(path, {"peers": []})
    assert json.loads(path.read_text()) == {"peers": []}
    assert not (tmp_path / "record.json.tmp").exists()


def test_entries_past_the_time_budget_are_marked_not_run():
    pair = pairs.PAIRS[0]
    e = peer_bench.not_run_entry(pair, pair.cases[0], torch.bfloat16, "bwd", 210)
    assert e["error"].startswith("not run") and e["detops_ms"] is None and e["dtype"] == "bf16"
    rec = sr.make_record(sr.demo_benchmarks(), sr.demo_tests(), seed=1)
    rec["peers"] = [e]
    assert "error: not run" in peer_bench.markdown_table([e])
    assert_schema_valid(rec)


def test_non_finite_error_is_reported_not_written_as_nan():
    pair = next(p for p in pairs.PAIRS if p.op == "roi_align")
    case = next(c for c in pair.cases if c.kind == "random")
    base = pair.make(case.cpu_params, case.seed)
    base["x"][0, 0, 0, :] = float("nan")  # both sides propagate NaN where a sample touches it
    base["rois"][0] = torch.tensor([0.0, 0.0, 0.0, 30.0, 30.0], dtype=torch.float64)  # an roi over that row
    e = peer_bench.run_one(torch, pairs, nms_checks, pair, case, base, torch.float32, "fwd", Args, None,
                           device="cpu", timer=wall_timer)
    assert e["max_abs_error"] is None and "non-finite" in e["check"], e
    json.dumps(e, allow_nan=False)
