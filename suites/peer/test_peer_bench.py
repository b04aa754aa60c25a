"""scripts/peer_bench.py off the GPU: every pair's entry built on the CPU with a wall-clock stand-in for the
profiler timer (the CUDA timing itself needs a GPU), checked against the record schema; the floors (dense
convolution, DRAM); the no-GPU exit."""
import dataclasses
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
import report  # noqa: E402
import synthetic_records as sr  # noqa: E402

_spec = importlib.util.spec_from_file_location("peer_bench", ROOT / "scripts" / "peer_bench.py")
peer_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peer_bench)


class Args:
    samples, warmup, budget_s = 3, 1, 0.0


PEAK = (1e11, "test: 100 GB/s")


def wall_timer(torch_, fn, n, warmup, flush, touch=None):
    """measure()'s loop with the wall clock: the touch (warm cases) before each warm-up call and sample, untimed."""
    for _ in range(warmup):
        if touch:
            touch()
        fn()
    times = []
    for _ in range(n):
        if touch:
            touch()
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), times


def cpu_entries():
    out = []
    for pair in pairs.PAIRS:
        if pairs.pair_missing(pair):
            continue  # an op being written (test_peer.py reports the skip)
        case = next(c for c in pair.cases if c.kind == "random")
        base = pair.make(case.cpu_params, case.seed)
        for dtype in pairs.ALL_DTYPES:
            for direction in ["fwd"] + (["bwd"] if pair.grad_keys else []):
                e = peer_bench.run_one(torch, pairs, nms_checks, pair, case, base, dtype, direction, Args, None,
                                       device="cpu", timer=wall_timer, peak=PEAK)
                out.append((pair, dtype, e))
    return out


def test_entries_on_the_cpu_are_complete_and_schema_valid():
    entries = cpu_entries()
    for pair, dtype, e in entries:
        where = f"{e['op']}/{e['case']}/{e['dtype']}/{e['direction']}"
        assert "error" not in e, f"{where}: {e.get('error')}"
        assert e["detops_ms"] > 0 and e["samples"]["detops"] >= Args.samples, where
        assert e["peer"] == pair.torchvision and e["peer_kind"] == pair.peer_kind, where
        assert_dram_floor(pair, e, where)
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
    assert table.splitlines()[0] == ("| op | peer | case | dtype | direction | L2 | peer ms | DetOps ms | speed-up | "
                                     "floor | max error | peer's max error |")
    assert all(e["l2"] == "cold" and e["l2_note"].startswith("flush") for _, _, e in entries)  # random cases
    assert len(table.splitlines()) == 2 + len(entries)
    assert "| masked_conv2d | plain PyTorch: conv2d then mask |" in table
    assert "of DRAM floor" in table
    # compare's and report's peer tables name a plain peer beside the op (torchvision's rows stay as they were).
    shown = "\n".join(compare.render_peers(compare.compare_peers({}, rec)))
    assert "| masked_conv2d (vs plain PyTorch: conv2d then mask) |" in shown and "| roi_align | " in shown
    html = report.peers_section(rec)
    assert "vs plain PyTorch: conv2d then mask" in html and "vs torchvision" not in html
    assert_schema_valid(rec)


def assert_dram_floor(pair, e, where):
    """Memory-bound rows: the bytes of pair.dram_reads read once, the output (forward) or grad_output and the
    gradients (backward) once, over the peak; the fraction of that floor DetOps reached."""
    if not pair.dram_reads:
        assert "dram" not in e, where
        return
    case = next(c for c in pair.cases if c.kind == "random")
    dtype = {name: d for d, name in pairs.DTYPE_NAME.items()}[e["dtype"]]
    inp = pairs.cast_inputs(pair, pair.make(case.cpu_params, case.seed), dtype, "cpu")
    size = torch.empty(0, dtype=dtype).element_size()
    out = pair.detops(inp)
    expect = sum(inp[k].numel() * inp[k].element_size() for k in pair.dram_reads if torch.is_tensor(inp.get(k)))
    expect += out.numel() * size
    if e["direction"] == "bwd":
        expect += sum(inp[k].numel() * size for k in pairs.grad_keys(pair, inp))
    d = e["dram"]
    assert d["bytes"] == expect and d["peak_bytes_per_second"] == PEAK[0] and d["peak_source"] == PEAK[1], where
    assert d["floor_ms"] == pytest.approx(expect / PEAK[0] * 1e3), where
    assert d["fraction_of_floor"] == pytest.approx(d["floor_ms"] / e["detops_ms"]), where


def test_dense_floor_is_timed_beside_both_sides():
    """deform_conv2d's floor (the dense convolution of the same shape) timed in both directions, DetOps / floor
    reported; checked with torchvision standing in for DetOps, so it runs while DetOps's op is being written."""
    pair = next(p for p in pairs.PAIRS if p.op == "deform_conv2d")
    stand_in = dataclasses.replace(pair, detops=pair.tv, requires=("torch.ops.detops.roi_align",))
    case = next(c for c in pair.cases if c.kind == "random" and c.params["mask"])
    base = pair.make(case.cpu_params, case.seed)
    entries = []
    for direction in ("fwd", "bwd"):
        e = peer_bench.run_one(torch, pairs, nms_checks, stand_in, case, base, torch.float32, direction, Args, None,
                               device="cpu", timer=wall_timer, peak=PEAK)
        assert "error" not in e, e.get("error")
        fl = e["floor"]
        assert fl["name"] == "dense conv2d (cuDNN)" and fl["ms"] > 0 and fl["samples"] >= Args.samples, e
        assert fl["detops_over_floor"] == pytest.approx(e["detops_ms"] / fl["ms"]) and "dram" not in e
        assert e["max_abs_error"] <= 1e-4, e  # torchvision against its own fp64 truth
        entries.append(e)
    assert "x dense conv2d (cuDNN) (" in peer_bench.markdown_table(entries)
    rec = sr.make_record(sr.demo_benchmarks(), sr.demo_tests(), seed=1)
    rec["peers"] = entries
    broken = json.loads(json.dumps(rec))
    broken["peers"][0]["floor"]["detops_over_floor"] = -1.0
    status, errors = compare.validate_record(broken)
    assert status == "invalid" or status.startswith("skipped"), status
    if status == "invalid":
        assert any("detops_over_floor" in e for e in errors), errors
    assert_schema_valid(rec)


@pytest.mark.parametrize("name,clock,bus,bw,source", [
    ("NVIDIA H100 80GB HBM3", 2619000, 5120, 3.352e12, "device properties"),  # the SXM part's 3.35 TB/s
    ("NVIDIA H200", 0, 0, 4.8e12, "table by GPU name"),
    ("NVIDIA H100 PCIe", 0, 0, 2.0e12, "table by GPU name"),
    ("NVIDIA H100 80GB HBM3", 0, 6144, 3.35e12, "table by GPU name"),
    ("Some GPU", 0, 0, None, "unknown"),
])
def test_peak_bandwidth_from_properties_else_by_name(name, clock, bus, bw, source):
    got, why = peer_bench.peak_bandwidth(name, clock, bus)
    assert why.startswith(source) and (got == pytest.approx(bw, rel=1e-3) if bw else got is None), (got, why)


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


def test_bad_cases_filter_is_refused_before_anything_runs(capsys):
    assert peer_bench.main(["--cases", "rpn_(box"]) == 2
    err = capsys.readouterr().err
    assert "--cases 'rpn_(box' is not a regular expression" in err and "Traceback" not in err


def test_write_atomic_replaces_the_file(tmp_path):
    path = tmp_path / "record.json"
    path.write_text('{"old": 1}')
    peer_bench.write_atomic(path, {"peers": []})
    assert json.loads(path.read_text()) == {"peers": []}
    assert not (tmp_path / "record.json.tmp").exists()


def warm_cases():
    return [(pair, case) for pair in pairs.PAIRS for case in pair.cases if case.params.get("l2") == "warm"]


def test_warm_cases_are_twins_of_cold_model_cases():
    """Issue 13: every RoI op has its proposal cases cold and warm, as the C++ benchmarks name them; a warm case is
    its cold twin's inputs (same seed and sizes) with l2 'warm' and ' warm L2' after the shape."""
    names = {(pair.op, case.name) for pair, case in warm_cases()}
    assert names == {("roi_align", "rpn_box_sr2_warm"), ("roi_align", "rpn_box_sr0_aligned_warm"),
                     ("roi_align", "rpn_box_sr0_warm"), ("roi_align", "rpn_mask_sr0_aligned_warm"),
                     ("roi_pool", "rpn_box_warm"), ("ps_roi_align", "rpn_rfcn_warm"), ("ps_roi_pool", "rpn_rfcn_warm")}
    for pair, case in warm_cases():
        cold = next(c for c in pair.cases if c.name == case.name[:-len("_warm")])
        assert case.kind == cold.kind == "model" and case.seed == cold.seed and cold.params["l2"] == "cold"
        for p, q in ((case.params, cold.params), (case.cpu_params, cold.cpu_params)):
            assert p["shape"] == q["shape"] + " warm L2"
            assert {k: v for k, v in p.items() if k not in ("l2", "shape")} == \
                   {k: v for k, v in q.items() if k not in ("l2", "shape")}
    full = next(c for p, c in warm_cases() if c.name == "rpn_box_sr0_aligned_warm").params
    assert full["shape"] == "x[2,256,200,336] proposals[2000,5] 7x7 scale 1/4 sr0 (adaptive) aligned warm L2"


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_warm_entry_touches_the_input_both_sides_read(monkeypatch, direction):
    """A warm entry hands each side's timer a touch instead of relying on the flush: forward, the feature map both
    sides read; backward, each side's own grad_output. The touch rewrites it in place (its version moves) with the
    same values, and the entry says so."""
    touched = []
    real_touch_fn = peer_bench.touch_fn

    def recording_touch_fn(torch_, t):
        touched.append(t)
        return real_touch_fn(torch_, t)

    monkeypatch.setattr(peer_bench, "touch_fn", recording_touch_fn)
    given = []

    def timer(torch_, fn, n, warmup, flush, touch=None):
        given.append(touch)
        return wall_timer(torch_, fn, n, warmup, flush, touch)

    pair = next(p for p in pairs.PAIRS if p.op == "roi_align")
    case = next(c for c in pair.cases if c.name == "rpn_box_sr2_warm")
    base = pair.make(case.cpu_params, case.seed)
    e = peer_bench.run_one(torch, pairs, nms_checks, pair, case, base, torch.float32, direction, Args, None,
                           device="cpu", timer=timer, peak=PEAK)
    assert "error" not in e, e.get("error")
    assert e["l2"] == "warm" and e["case"] == "rpn_box_sr2_warm"
    assert ("x.mul_(1)" if direction == "fwd" else "grad_output.mul_(1)") in e["l2_note"]
    assert len(given) == 2 and all(callable(t) for t in given)  # DetOps and torchvision, each with its touch
    x = pairs.cast_inputs(pair, base, torch.float32, "cpu")["x"]
    k, c = case.cpu_params["k"], case.cpu_params["x"][1]
    if direction == "fwd":
        assert len(touched) == 2 and touched[0] is touched[1] and torch.equal(touched[0], x)
    else:
        assert len(touched) == 2 and touched[0] is not touched[1] and torch.equal(touched[0], touched[1])
        assert touched[0].shape == (k, c, 7, 7)
    for t, touch in zip(touched, given):
        before, version = t.clone(), t._version
        touch()
        assert t._version > version and torch.equal(t, before)
    assert "| rpn_box_sr2_warm | fp32 | " + direction + " | warm |" in peer_bench.markdown_table([e])
    rec = sr.make_record(sr.demo_benchmarks(), sr.demo_tests(), seed=1)
    rec["peers"] = [e]
    assert_schema_valid(rec)


def test_warm_entries_on_the_cpu_are_complete():
    """Every warm case at its CPU size, fp32, both directions, with the wall-clock timer: no error, within the
    tolerance of the truth (the guarded proposals keep samples off the jumps), l2 recorded."""
    entries = []
    for pair, case in warm_cases():
        base = pair.make(case.cpu_params, case.seed)
        for direction in ("fwd", "bwd"):
            e = peer_bench.run_one(torch, pairs, nms_checks, pair, case, base, torch.float32, direction, Args, None,
                                   device="cpu", timer=wall_timer, peak=PEAK)
            where = f"{e['op']}/{e['case']}/{direction}"
            assert "error" not in e, f"{where}: {e.get('error')}"
            assert e["l2"] == "warm" and e["detops_ms"] > 0 and e["torchvision_ms"] > 0, where
            assert e["max_abs_error"] <= e["tolerance"]["atol"] + e["tolerance"]["rtol"] * 100, where
            entries.append(e)
    rec = sr.make_record(sr.demo_benchmarks(), sr.demo_tests(), seed=1)
    rec["peers"] = entries
    assert_schema_valid(rec)


def test_measure_touches_outside_the_profiled_range(monkeypatch):
    """peer_bench.measure on the CPU (the profiler's CPU events; a stand-in for torch.cuda.synchronize): warm, the
    touch runs before each warm-up call and each sample, and its op (aten::mul_) starts and ends outside every
    sample's range, just before it; cold, the flush (aten::zero_) does, and no touch."""
    shim = type("TorchShim", (), {"cuda": type("Cuda", (), {"synchronize": staticmethod(lambda: None)})})()
    x, flush = torch.ones(4096), torch.empty(1 << 16, dtype=torch.uint8)
    seen = {}

    def fake_kernel_sample_times(prof, n):
        events = [e for e in prof.events() if e.device_type.name == "CPU"]
        ranges = sorted((e.time_range.start, e.time_range.end) for e in events if e.name == peer_bench.RANGE)
        prep = sorted((e.time_range.start, e.time_range.end) for e in events if e.name in ("aten::mul_", "aten::zero_"))
        seen.update(ranges=ranges, prep=prep, names={e.name for e in events})
        return [1.0] * n, [1] * n

    monkeypatch.setattr(peer_bench, "attributed_sample_times", fake_kernel_sample_times)
    calls = []

    def touch():
        calls.append("touch")
        with torch.no_grad():
            x.mul_(1)

    def fn():
        calls.append("call")
        return (x + 1).sum()

    before = dict(peer_bench.PHASE_S)
    med, times = peer_bench.measure(shim, fn, 5, 2, flush, touch=touch)
    assert med == 1.0 and len(times) == 5
    # Where the time went: each of measure's phases counted (the step's closing line adds them up).
    for phase in ("warm-ups", "profiler start and stop", "profiled samples", "attribution"):
        assert peer_bench.PHASE_S[phase] > before[phase], phase
    assert calls == ["touch", "call"] * 7  # 2 warm-up calls, 5 samples
    assert len(seen["ranges"]) == 5 and len(seen["prep"]) == 5 and "aten::zero_" not in seen["names"]
    for (p0, p1), (r0, r1) in zip(seen["prep"], seen["ranges"]):
        assert p1 <= r0, "the touch must end before the sample's range starts"
    assert all(not (r0 <= p0 <= r1) for p0, _ in seen["prep"] for r0, r1 in seen["ranges"])
    calls.clear()
    peer_bench.measure(shim, fn, 3, 1, flush)
    assert calls == ["call"] * 4 and "aten::mul_" not in seen["names"] and len(seen["prep"]) == 3


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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the profiler's kernel records need a CUDA GPU")
@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_raw_kineto_attribution_equals_the_function_event_tree(direction):
    """kernel_sample_times reads the raw Kineto events; the FunctionEvent tree is the reference: the same kernels in
    the same samples (counts equal, times equal to rounding), forward and a backward whose kernels autograd's device
    thread launches; a flush kernel and a touch before each range are in no sample."""
    from torch.profiler import ProfilerActivity, profile, record_function
    from torchvision.ops import roi_align

    x = torch.randn(2, 64, 50, 84, device="cuda", requires_grad=direction == "bwd")
    rois = torch.tensor([[0, 1, 1, 40, 30], [1, 10, 5, 80, 45]], dtype=torch.float32, device="cuda")
    flush = torch.empty(1 << 22, dtype=torch.uint8, device="cuda")
    if direction == "fwd":
        fn = lambda: roi_align(x, rois, 7, 0.5, 2, True)  # noqa: E731
    else:
        out = roi_align(x, rois, 7, 0.5, 2, True)
        go = torch.randn_like(out)
        fn = lambda: torch.autograd.grad(out, [x], go, retain_graph=True)  # noqa: E731
    n = 12
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            flush.zero_()
            with record_function(peer_bench.RANGE):
                fn()
        torch.cuda.synchronize()
    fast_t, fast_c = peer_bench.kernel_sample_times(prof, n)
    tree_t, tree_c = peer_bench.kernel_sample_times_from_function_events(prof, n)
    assert fast_c == tree_c and min(fast_c) >= 1
    assert fast_t == pytest.approx(tree_t, rel=1e-9, abs=1e-9)
    # The flush is a kernel of its own (fill): were it attributed, every sample would hold one more kernel.
    assert max(fast_c) == min(fast_c)


def test_attribution_falls_back_to_the_tree_when_the_raw_events_disagree(monkeypatch, capsys):
    """The run's first measurement compares the raw-event attribution with the FunctionEvent tree; a disagreement
    is said on stderr, that measurement and every later one use the tree, and agreement keeps the raw path."""
    monkeypatch.setattr(peer_bench, "ATTRIBUTION", {"method": "raw Kineto events", "checked": False, "note": None})
    tree = ([0.5, 0.5], [2, 2])
    monkeypatch.setattr(peer_bench, "kernel_sample_times_from_function_events", lambda prof, n: tree)
    monkeypatch.setattr(peer_bench, "kernel_sample_times", lambda prof, n: ([0.25, 0.5], [1, 2]))
    assert peer_bench.attributed_sample_times(None, 2) == tree
    assert peer_bench.ATTRIBUTION["method"] == "tree"
    assert "disagreed with the FunctionEvent tree at sample 0 (1 kernels" in capsys.readouterr().err
    monkeypatch.setattr(peer_bench, "kernel_sample_times", lambda prof, n: pytest.fail("the raw path after a disagreement"))
    assert peer_bench.attributed_sample_times(None, 2) == tree

    monkeypatch.setattr(peer_bench, "ATTRIBUTION", {"method": "raw Kineto events", "checked": False, "note": None})
    calls = []
    monkeypatch.setattr(peer_bench, "kernel_sample_times", lambda prof, n: ([0.5, 0.5], [2, 2]))
    monkeypatch.setattr(peer_bench, "kernel_sample_times_from_function_events", lambda prof, n: calls.append(1) or tree)
    assert peer_bench.attributed_sample_times(None, 2) == tree
    assert peer_bench.attributed_sample_times(None, 2) == tree
    assert calls == [1] and peer_bench.ATTRIBUTION["method"] == "raw Kineto events"  # the tree built once only


def test_progress_tail_gives_the_time_left_at_the_mean_rate():
    assert peer_bench.time_left(90, 3, 6) == "1m30s, about 1m30s left"
    assert peer_bench.time_left(10, 1, 5) == "10s, about 40s left"
    assert peer_bench.time_left(5, 0, 6) == "5s" and peer_bench.time_left(70, 6, 6) == "1m10s"


def model_plan():
    return [(pair, case) for pair in pairs.PAIRS for case in pair.cases if case.kind == "model"]


@pytest.mark.parametrize("n", [2, 3])
def test_shard_plan_gives_every_case_to_exactly_one_process(n):
    plan = model_plan()
    parts = [peer_bench.shard_plan(plan, (i, n), {}) for i in range(n)]
    flat = [item for part in parts for item in part]
    assert sorted(map(id, flat)) == sorted(map(id, plan)) and len(flat) == len(plan)
    for part in parts:  # the table's order within each part
        assert part == sorted(part, key=plan.index)
    # With the previous run's times: longest first to the least loaded part; no part past the mean plus the
    # longest case (a round-robin deal of these times would put both 100 s cases in part 0 of 2).
    times = {(p.op, c.name): 1.0 for p, c in plan}
    heavy = [(p.op, c.name) for p, c in plan[0::2][:2]]
    for key in heavy:
        times[key] = 100.0
    parts = [peer_bench.shard_plan(plan, (i, n), times) for i in range(n)]
    assert sorted(map(id, (x for part in parts for x in part))) == sorted(map(id, plan))
    loads = [sum(times[(p.op, c.name)] for p, c in part) for part in parts]
    assert max(loads) <= sum(loads) / n + 100.0
    assert [sum((p.op, c.name) in heavy for p, c in part) for part in parts].count(2) == 0, \
        "the two longest cases went to one process"


def test_case_times_come_from_a_records_peer_entries(tmp_path):
    rec = sr.make_record([("roi_align", "tiny", "fp32", "fwd", 0.1)])
    rec["peers"] = [{"op": "nms", "case": "c", "detops_ms": 2.0, "torchvision_ms": 8.0,
                     "samples": {"detops": 10, "torchvision": 5}},
                    {"op": "nms", "case": "c", "detops_ms": None, "torchvision_ms": 1.0, "samples": {"torchvision": 4}}]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rec))
    assert peer_bench.load_case_times(str(path)) == {("nms", "c"): pytest.approx((20 + 40 + 4) / 1e3)}
    (tmp_path / "bad.json").write_text("{")
    assert peer_bench.load_case_times(str(tmp_path / "bad.json")) == {}


def test_merge_puts_the_parts_back_in_table_order_with_their_gpu(tmp_path, capsys):
    """--merge of one --json-out per GPU: every entry once, in the table's order, tagged with the GPU that timed it,
    merged into a record that validates; a part that is missing (its process was killed) is reported, the others'
    entries kept, exit 1."""
    plan = model_plan()[:6]
    entries = {k: [peer_bench.not_run_entry(p, c, dt, d, 1.0) for p, c in plan[k::2] for dt in pairs.ALL_DTYPES
                   for d in ("fwd", "bwd")] for k in (0, 1)}
    for k in (0, 1):
        entries[k].reverse()  # a part's own order must not matter
        (tmp_path / f"peers-{k}.json").write_text(json.dumps(
            {"peers": entries[k], "shard": f"{k}/2", "gpu_uuid": f"GPU-{k}", "elapsed_s": 1.0, "footer": "timer: x"}))
    rec = tmp_path / "record.json"
    rec.write_text(json.dumps(sr.make_record([("roi_align", "tiny", "fp32", "fwd", 0.1)])))
    parts = [str(tmp_path / "peers-0.json"), str(tmp_path / "peers-1.json")]
    assert peer_bench.merge_parts(parts, str(rec)) == 0
    merged = json.loads(rec.read_text())
    assert compare.validate_record(merged)[0] != "invalid", compare.validate_record(merged)[1][:1]
    got = [(e["op"], e["case"], e["dtype"], e["direction"]) for e in merged["peers"]]
    want = [(p.op, c.name, pairs.DTYPE_NAME[dt], d) for p, c in plan for dt in pairs.ALL_DTYPES for d in ("fwd", "bwd")]
    assert got == want
    owner = {(p.op, c.name): f"GPU-{k % 2}" for k, (p, c) in enumerate(plan)}
    assert all(e["gpu_uuid"] == owner[(e["op"], e["case"])] for e in merged["peers"])
    out = capsys.readouterr().out
    assert f"{len(want)} entries from 2 of 2 parts" in out and "part 1/2" in out

    parts.append(str(tmp_path / "peers-2.json"))  # a third GPU's process killed before it wrote its part
    assert peer_bench.merge_parts(parts, str(rec)) == 1
    out = capsys.readouterr().out
    assert "MISSING part" in out and "peers-2.json" in out
    assert len(json.loads(rec.read_text())["peers"]) == len(want), "the two parts that ran are kept"


def test_bad_shard_is_refused(capsys):
    assert peer_bench.main(["--shard", "2/2"]) == 2
    assert "--shard '2/2'" in capsys.readouterr().err


# The module the split tests collect: 24 ids like the suite's, no torch import (split_probe.py says why).
SPLIT_PROBE = ROOT / "suites" / "peer" / "split_probe.py"


def test_pytest_shards_split_the_peer_suite(tmp_path):
    """DETOPS_PYTEST_SHARD=I/N (suites/peer/conftest.py, one pytest per GPU in the main job): the N processes'
    tests are disjoint and together every test of the suite."""
    whole, _ = _collect_split(tmp_path, None)
    a, _ = _collect_split(tmp_path, "0/2")
    b, _ = _collect_split(tmp_path, "1/2")
    assert len(whole) > 4 and sorted(a + b) == sorted(whole) and not set(a) & set(b)
    _, r = _collect_split(tmp_path, "2/2")
    assert r.returncode != 0 and "DETOPS_PYTEST_SHARD='2/2'" in (r.stdout + r.stderr)


def _collect_split(tmp_path, shard, times_spec=None):
    """The ids `pytest --collect-only` keeps from split_probe.py under DETOPS_PYTEST_SHARD=shard (not the caller's
    shard, times or times file: these tests run inside such a process in the main job)."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("DETOPS_PYTEST_SHARD", "DETOPS_PYTEST_TIMES",
                                                             "DETOPS_PYTEST_TIMES_OUT")}
    if shard:
        env["DETOPS_PYTEST_SHARD"] = shard
    if times_spec is not None:
        env["DETOPS_PYTEST_TIMES"] = times_spec
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        str(SPLIT_PROBE)],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    return [line for line in r.stdout.splitlines() if "::" in line], r


def test_pytest_shards_split_by_earlier_test_times(tmp_path):
    """With an earlier run's test times (DETOPS_PYTEST_TIMES, pytest_split.py) the processes' parts are still
    disjoint and together the whole suite, and now of near-equal time: one test recorded as far longer than the rest
    puts its process's load within that test's time of the other's (a split that ignored the times, or read them
    in one process and not the other, would not be)."""
    whole, _ = _collect_split(tmp_path, None)
    assert len(whole) > 6
    heavy = whole[len(whole) // 2]
    times = {i: 1.0 for i in whole}
    times[heavy] = float(len(whole))  # as long as all the others together, and more
    a_file, b_file = tmp_path / "peer_times-0.json", tmp_path / "peer_times-1.json"
    ids = sorted(times)
    a_file.write_text(json.dumps({i: times[i] for i in ids[::2]}))  # each process wrote its own tests' times
    b_file.write_text(json.dumps({i: times[i] for i in ids[1::2]}))
    spec = f"{a_file}{__import__('os').pathsep}{b_file}"
    a, _ = _collect_split(tmp_path, "0/2", spec)
    b, _ = _collect_split(tmp_path, "1/2", spec)
    assert sorted(a + b) == sorted(whole) and not set(a) & set(b)
    with_heavy, other = (a, b) if heavy in a else (b, a)
    assert with_heavy == [heavy], "the long test's process gets nothing else: the others add up to less"
    assert len(other) == len(whole) - 1
    # A missing file and a damaged one: left out with a warning, the split by the rest (here: nothing -> hash).
    (tmp_path / "bad.json").write_text("{not json")
    h0, r0 = _collect_split(tmp_path, "0/2", f"{tmp_path / 'absent.json'}:{tmp_path / 'bad.json'}")
    h1, _ = _collect_split(tmp_path, "1/2", f"{tmp_path / 'absent.json'}:{tmp_path / 'bad.json'}")
    assert sorted(h0 + h1) == sorted(whole) and not set(h0) & set(h1)
    assert "absent.json" in r0.stderr and "bad.json" in r0.stderr


def test_pytest_split_functions():
    """pytest_split.split and recorded_times directly: the time split is longest-first greedy (its loads differ by at
    most the longest test), unknown tests count as the median, ids with no times at all fall back to the hash, and
    only non-negative numbers are read as times."""
    from peer import pytest_split

    ids = [f"t.py::test_{k}" for k in range(40)]
    times = {i: float(1 + (k * 7) % 13) for k, i in enumerate(ids[:30])}  # the last 10 unrecorded
    parts = [pytest_split.split(ids, i, 3, times) for i in range(3)]
    assert all(how == "times" for _, how in parts)
    kept = [p for p, _ in parts]
    assert sorted(sum(kept, [])) == sorted(ids) and sum(len(p) for p in kept) == len(ids)
    median = sorted(times.values())[len(times) // 2]
    loads = [sum(times.get(i, median) for i in p) for p in kept]
    assert max(loads) - min(loads) <= max(times.values())
    for p in kept:  # each part keeps the collection order
        assert p == [i for i in ids if i in set(p)]
    other = pytest_split.split(ids, 0, 3, {"elsewhere.py::x": 5.0})
    assert other[1] == "hash"
    hashed = [pytest_split.split(ids, i, 3, {})[0] for i in range(3)]
    assert sorted(sum(hashed, [])) == sorted(ids)


def test_pytest_split_reads_and_writes_times(tmp_path):
    from peer import pytest_split

    good = tmp_path / "a.json"
    good.write_text(json.dumps({"x::a": 1.5, "x::b": 0, "x::neg": -1, "x::str": "2", "x::bool": True}))
    listed = tmp_path / "b.json"
    listed.write_text("[1, 2]")
    times, bad = pytest_split.recorded_times(f"{good}:{listed}:{tmp_path / 'none.json'}")
    assert times == {"x::a": 1.5, "x::b": 0.0}
    assert len(bad) == 2 and "b.json" in bad[0] and "none.json" in bad[1]
    assert pytest_split.recorded_times("") == ({}, [])

    class Report:
        def __init__(self, nodeid, duration):
            self.nodeid, self.duration = nodeid, duration

    out = tmp_path / "times.json"
    rec = pytest_split.TimesRecorder(str(out))
    for phase in (0.25, 1.0, 0.5):  # setup, call, teardown
        rec.pytest_runtest_logreport(Report("x::a", phase))
    rec.pytest_runtest_logreport(Report("x::b", 0.125))
    rec.pytest_sessionfinish(None, 0)
    assert json.loads(out.read_text()) == {"x::a": 1.75, "x::b": 0.125}
    assert not list(tmp_path.glob("times.json.tmp.*"))
    # A folder that does not exist: a warning, no exception (the times only balance the next run).
    pytest_split.TimesRecorder(str(tmp_path / "no" / "t.json")).pytest_sessionfinish(None, 0)


def test_pytest_split_merges_and_reads_committed_times(tmp_path, capsys):
    """The committed form (results/suite-times/<gpu>.peer.json.gz): the processes' files merged into one gzip file
    that recorded_times reads back; unreadable inputs refuse the merge (exit 2) rather than commit part of it."""
    from peer import pytest_split

    a, b = tmp_path / "peer_times-0.json", tmp_path / "peer_times-1.json"
    a.write_text(json.dumps({"t.py::a": 1.5, "t.py::b": 0.25}))
    b.write_text(json.dumps({"t.py::c": 3.0}))
    out = tmp_path / "NVIDIA-H200.peer.json.gz"
    assert pytest_split.main([str(out), str(a), str(b)]) == 0
    assert pytest_split.recorded_times(str(out)) == ({"t.py::a": 1.5, "t.py::b": 0.25, "t.py::c": 3.0}, [])
    assert "3 test times" in capsys.readouterr().out
    (tmp_path / "bad.json").write_text("[")
    assert pytest_split.main([str(tmp_path / "x.json.gz"), str(a), str(tmp_path / "bad.json")]) == 2
    assert not (tmp_path / "x.json.gz").exists()
    assert pytest_split.main([str(tmp_path / "x.json"), str(a)]) == 2
    # A truncated gzip file is left out with a reason, not a traceback.
    (tmp_path / "cut.json.gz").write_bytes(out.read_bytes()[:20])
    times, bad = pytest_split.recorded_times(str(tmp_path / "cut.json.gz"))
    assert times == {} and len(bad) == 1 and "cut.json.gz" in bad[0]
