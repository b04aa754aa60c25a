"""scripts/compare.py: the Mann-Whitney U test, the regression rule, correctness changes, cross-build
checks and output movement, on synthetic records (suites/python/synthetic_records.py). No GPU, no torch."""
import copy
import itertools
import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import synthetic_records as sr

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import compare  # noqa: E402

pytestmark = pytest.mark.no_detops_library

BENCH = [("roi_align", "box_head", "fp32", "fwd", 0.33), ("roi_align", "box_head", "fp32", "bwd", 1.3),
         ("nms", "boxes_5k", "fp32", "fwd", 2.0)]


def write_pair(tmp_path, base, cand):
    return sr.write(tmp_path / "b" / "record.json", base), sr.write(tmp_path / "c" / "record.json", cand)


def run(tmp_path, base, cand, *extra):
    b, c = write_pair(tmp_path, base, cand)
    out = tmp_path / "result.json"
    code = compare.main([str(b), str(c), "--json-out", str(out), *extra])
    return code, json.loads(out.read_text()) if out.exists() else None


def verdicts(result):
    return {r["benchmark"]: r["verdict"] for r in result["benchmarks"]["rows"]}


# ---------------------------------------------------------------------------------------------------
# Mann-Whitney U


def brute_force_u_counts(n1, n2):
    """Histogram of U over every choice of which n1 of the ranks 1..n1+n2 belong to the first sample."""
    counts = [0] * (n1 * n2 + 1)
    for pos in itertools.combinations(range(1, n1 + n2 + 1), n1):
        counts[sum(pos) - n1 * (n1 + 1) // 2] += 1
    return counts


def test_u_distribution_matches_hand_enumeration():
    # n1 = n2 = 2: the 6 orderings xxyy, xyxy, xyyx, yxxy, yxyx, yyxx give U_x = 0, 1, 2, 2, 3, 4.
    assert compare.u_distribution(2, 2) == [1, 1, 2, 1, 1]
    # n1 = 2, n2 = 3: U = i + j over the positions 0 <= i <= j <= 3 of the two x among the y: 10 pairs.
    assert compare.u_distribution(2, 3) == [1, 1, 2, 2, 2, 1, 1]
    assert compare.u_distribution(1, 1) == [1, 1]
    assert compare.u_distribution(3, 0) == [1]


@pytest.mark.parametrize("n1,n2", [(1, 5), (3, 4), (4, 7), (5, 5), (6, 3), (9, 9)])
def test_u_distribution_matches_brute_force(n1, n2):
    counts = compare.u_distribution(n1, n2)
    assert counts == brute_force_u_counts(n1, n2)
    assert sum(counts) == math.comb(n1 + n2, n1)


def test_u_distribution_large_is_symmetric_and_complete():
    counts = compare.u_distribution(50, 50)
    assert sum(counts) == math.comb(100, 50)
    assert counts == counts[::-1]


def samples_with_u(n1, n2, u):
    """x, y without ties such that exactly u pairs have x > y: y = 0..n2-1, x_i just above k_i of the y."""
    y = np.arange(n2, dtype=float)
    ks, left = [], u
    for _ in range(n1):
        k = min(left, n2)
        ks.append(k)
        left -= k
    assert left == 0
    x = np.array([k - 0.5 + 1e-3 * i for i, k in enumerate(ks)])
    return x, y


def test_complete_separation_n9_gives_two_over_binomial():
    lo = np.arange(9, dtype=float)
    hi = lo + 100.0
    for x, y in ((lo, hi), (hi, lo)):
        res = compare.mann_whitney_u(x, y)
        assert res.method == "exact"
        assert res.p_value == pytest.approx(2 / math.comb(18, 9), rel=1e-12)  # 4.11e-5
    assert compare.mann_whitney_u(lo, hi).u == 0
    assert compare.mann_whitney_u(hi, lo).u == 81


# Published two-sided critical values of U (the largest U still significant), e.g. the tables in
# Siegel & Castellan, Nonparametric Statistics (1988), Table J: alpha 0.05: n=5,5 -> 2; 9,9 -> 17;
# 10,10 -> 23; 20,20 -> 127. alpha 0.01: 5,5 -> 0; 9,9 -> 11; 10,10 -> 16; 20,20 -> 105.
@pytest.mark.parametrize("n,alpha,critical", [(5, 0.05, 2), (9, 0.05, 17), (10, 0.05, 23), (20, 0.05, 127),
                                              (5, 0.01, 0), (9, 0.01, 11), (10, 0.01, 16), (20, 0.01, 105)])
def test_exact_p_matches_published_critical_values(n, alpha, critical):
    x, y = samples_with_u(n, n, critical)
    assert compare.mann_whitney_u(x, y).u == critical
    assert compare.mann_whitney_u(x, y).p_value <= alpha
    x, y = samples_with_u(n, n, critical + 1)
    assert compare.mann_whitney_u(x, y).p_value > alpha


def test_r_documentation_example():
    # R's ?wilcox.test: permeability constants, x (10 values) vs y (5): W = 35, one-sided p = 0.1272.
    x = [0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46]
    y = [1.15, 0.88, 0.90, 0.74, 1.21]
    res = compare.mann_whitney_u(x, y)
    assert res.u == 35
    assert res.method == "exact"
    assert res.p_value == pytest.approx(2 * 0.1272, abs=2e-4)


def test_scipy_documentation_example_exact_and_normal():
    # SciPy's mannwhitneyu example (ages): U = 17, exact two-sided p = 14/126 = 0.1111 (P(U >= 17) = 7/126);
    # the normal approximation with continuity correction gives 0.11134688653314041.
    males, females = [19, 22, 16, 29, 24], [20, 11, 17, 12]
    exact = compare.mann_whitney_u(males, females)
    assert exact.u == 17 and exact.method == "exact"
    assert exact.p_value == pytest.approx(14 / 126, rel=1e-12)
    normal = compare.mann_whitney_u(males, females, method="normal")
    assert normal.p_value == pytest.approx(0.11134688653314041, rel=1e-9)


def test_normal_approximation_with_ties_by_hand():
    # x = 1,2,2,3; y = 2,3,3,4. Ranks: 1 -> 1, the three 2s -> 3, the three 3s -> 6, 4 -> 8.
    # R_x = 1+3+3+6 = 13, U_x = 13 - 10 = 3. Ties: two groups of 3, sum(t^3 - t) = 48.
    # var = 4*4/12 * (9 - 48/(8*7)) = 10.857142857; z = (|3 - 8| - 0.5) / sqrt(var) = 1.365698.
    res = compare.mann_whitney_u([1, 2, 2, 3], [2, 3, 3, 4])
    assert res.method == "normal"  # ties: never exact
    assert res.u == 3
    z = 4.5 / math.sqrt(16 / 12 * (9 - 48 / 56))
    assert z == pytest.approx(1.365698, rel=1e-6)
    assert res.p_value == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-12)
    assert res.p_value == pytest.approx(0.17203, abs=1e-4)
    with pytest.raises(ValueError, match="ties"):
        compare.mann_whitney_u([1, 2, 2, 3], [2, 3, 3, 4], method="exact")


def test_all_tied_gives_p_one():
    assert compare.mann_whitney_u([1.0] * 9, [1.0] * 9).p_value == 1.0


def test_exact_and_normal_agree_at_n50():
    rng = np.random.default_rng(3)
    x = rng.normal(0.0, 1.0, 50)
    y = rng.normal(0.4, 1.0, 50)
    exact = compare.mann_whitney_u(x, y)
    normal = compare.mann_whitney_u(x, y, method="normal")
    assert exact.method == "exact"
    assert 1e-3 < exact.p_value < 0.5
    assert normal.p_value == pytest.approx(exact.p_value, rel=0.03)
    assert compare.mann_whitney_u(np.append(x, 9.0), y).method == "normal"  # 51 values: normal


def test_mann_whitney_rejects_empty_and_nan():
    with pytest.raises(ValueError, match="both sides"):
        compare.mann_whitney_u([], [1.0])
    with pytest.raises(ValueError, match="NaN"):
        compare.mann_whitney_u([1.0, float("nan")], [1.0])


# ---------------------------------------------------------------------------------------------------
# The decision rule on constructed repetition medians


BASE = 1.0 + 0.001 * np.arange(9)  # 1.000 .. 1.008


def test_decide_all_conditions_slower_and_faster():
    d = compare.decide(BASE, BASE * 1.10)
    assert d["conditions"] == {"ratio": True, "p_value": True, "separated": True}
    assert d["verdict"] == "SLOWER" and d["gating"]
    assert d["ratio"] == pytest.approx(1.10)
    d = compare.decide(BASE, BASE * 0.90)
    assert d["verdict"] == "FASTER" and d["gating"]


def test_decide_overlapping_intervals_make_unsure():
    cand = BASE * 1.10
    cand[0] = 1.0005  # candidate's min below the baseline's q3 (1.006) by more than 0.5% of 1.004
    d = compare.decide(BASE, cand)
    assert d["conditions"]["ratio"] and d["conditions"]["p_value"]
    assert not d["conditions"]["separated"]
    assert d["verdict"] == "UNSURE"


def test_decide_overlap_allowance_is_half_a_percent_of_the_median():
    # Candidate min just inside the allowance (q3_b - min_c = 0.004 < 0.005 * 1.004) vs just outside.
    cand = BASE * 1.10
    cand[0] = 1.002
    assert compare.decide(BASE, cand)["conditions"]["separated"]
    cand[0] = 1.000
    assert not compare.decide(BASE, cand)["conditions"]["separated"]


def test_decide_small_significant_change_is_same():
    d = compare.decide(BASE, BASE * 1.03)
    assert d["conditions"] == {"ratio": False, "p_value": True, "separated": True}
    assert d["verdict"] == "SAME"
    d = compare.decide(BASE, BASE[::-1].copy())
    assert d["verdict"] == "SAME" and d["ratio"] == 1.0


def test_decide_fewer_than_nine_repetitions_does_not_gate():
    d = compare.decide(BASE[:5], BASE[:5] * 1.10)
    assert d["verdict"] == "SLOWER"  # 2/C(10,5) = 0.0079 < 0.01
    assert not d["gating"]
    assert not compare.decide(BASE, BASE[:8] * 1.2)["gating"]


def test_threshold_file_patterns(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"nms/boxes_5k/fp32/fwd": 1.2, "roi_align/*": 1.15, "*": 1.07}))
    t = compare.load_thresholds(path)
    assert compare.threshold_for("nms/boxes_5k/fp32/fwd", t) == 1.2
    assert compare.threshold_for("roi_align/x/fp16/bwd", t) == 1.15
    assert compare.threshold_for("box_iou/a/fp32/fwd", t) == 1.07
    assert compare.threshold_for("box_iou/a/fp32/fwd", None) == compare.DEFAULT_THRESHOLD
    path.write_text(json.dumps({"roi_align/*": 0.9}))
    with pytest.raises(compare.RecordError, match="ratio > 1"):
        compare.load_thresholds(path)


# ---------------------------------------------------------------------------------------------------
# Whole records through the command


def test_same_distribution_is_same_and_exits_0(tmp_path, capsys):
    code, res = run(tmp_path, sr.make_record(BENCH, seed=1), sr.make_record(BENCH, seed=2))
    assert code == compare.EXIT_OK
    assert set(verdicts(res).values()) == {"SAME"}
    assert len(res["benchmarks"]["rows"]) == 3
    out = capsys.readouterr().out
    assert "| op | case | dtype | direction | baseline median (ms) | candidate median (ms) | ratio | p-value | verdict |" in out
    assert "no regression; exit 0" in out


def test_same_distribution_never_confirms_a_change_over_many_seeds():
    for seed in range(40):
        b = compare.extract_benchmarks(sr.make_record(BENCH, seed=100 + seed))
        c = compare.extract_benchmarks(sr.make_record(BENCH, seed=200 + seed))
        for row in compare.compare_benchmarks(b, c)["rows"]:
            assert row["verdict"] in ("SAME", "UNSURE"), (seed, row)


def test_ten_percent_slower_is_slower_and_exits_1(tmp_path, capsys):
    code, res = run(tmp_path, sr.make_record(BENCH, seed=1),
                    sr.make_record(BENCH, seed=2, scale={"roi_align/box_head/fp32/bwd": 1.10}))
    assert code == compare.EXIT_REGRESSION
    v = verdicts(res)
    assert v["roi_align/box_head/fp32/bwd"] == "SLOWER"
    assert v["roi_align/box_head/fp32/fwd"] == "SAME" and v["nms/boxes_5k/fp32/fwd"] == "SAME"
    assert res["confirmed_slower"] == ["roi_align/box_head/fp32/bwd"]
    row = next(r for r in res["benchmarks"]["rows"] if r["verdict"] == "SLOWER")
    assert row["p_value"] == pytest.approx(2 / math.comb(18, 9))
    out = capsys.readouterr().out
    assert "**SLOWER**" in out and "exit 1" in out


def test_ten_percent_faster_is_faster_exits_0_with_refresh_hint(tmp_path, capsys):
    code, res = run(tmp_path, sr.make_record(BENCH, seed=1), sr.make_record(BENCH, seed=2, scale={"*": 0.9}))
    assert code == compare.EXIT_OK
    assert set(verdicts(res).values()) == {"FASTER"}
    assert "refresh the baseline" in capsys.readouterr().out


def test_five_repetitions_do_not_gate(tmp_path, capsys):
    code, res = run(tmp_path, sr.make_record(BENCH, seed=1, repetitions=5),
                    sr.make_record(BENCH, seed=2, repetitions=5, scale={"*": 1.10}))
    assert code == compare.EXIT_OK
    assert all(not r["gating"] for r in res["benchmarks"]["rows"])
    assert res["confirmed_slower"] == []
    out = capsys.readouterr().out
    assert "not gating: 5/5 reps" in out
    assert "fewer than 9 repetitions" in out


def test_per_benchmark_threshold_file(tmp_path):
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(json.dumps({"roi_align/*/fp32/bwd": 1.15}))
    code, res = run(tmp_path, sr.make_record(BENCH, seed=1), sr.make_record(BENCH, seed=2, scale={"*": 1.10}),
                    "--thresholds", str(thresholds))
    assert code == compare.EXIT_REGRESSION
    v = verdicts(res)
    assert v["roi_align/box_head/fp32/bwd"] == "SAME"  # 10% is under its 15% threshold
    assert v["roi_align/box_head/fp32/fwd"] == "SLOWER"


def test_plain_google_benchmark_records_use_iteration_entries(tmp_path):
    base, cand = sr.make_record(BENCH, seed=1), sr.make_record(BENCH, seed=2, scale={"nms/boxes_5k/fp32/fwd": 1.1})
    with_detops = compare.compare_benchmarks(compare.extract_benchmarks(base), compare.extract_benchmarks(cand))
    for rec in (base, cand):
        del rec["context"]["detops_schema_version"], rec["context"]["detops"], rec["correctness"]
        rec["benchmarks"] = [e for e in rec["benchmarks"] if e["run_type"] == "iteration"]
        for e in rec["benchmarks"]:
            e.pop("detops", None)
    for e in cand["benchmarks"]:  # another time unit on one side
        e["real_time"] *= 1000.0
        e["time_unit"] = "us"
    code, res = run(tmp_path, base, cand)
    assert code == compare.EXIT_REGRESSION
    assert verdicts(res) == {r["benchmark"]: r["verdict"] for r in with_detops["rows"]}
    assert all(r["source"] == {"baseline": "iterations", "candidate": "iterations"} for r in res["benchmarks"]["rows"])
    for a, b in zip(res["benchmarks"]["rows"], with_detops["rows"]):
        assert a["candidate_median_ms"] == pytest.approx(b["candidate_median_ms"], rel=1e-12)
    assert any("names no GPU" in w for w in res["warnings"])
    assert "the baseline record has no correctness results" in res["correctness"]["notes"]


def plain(rec):
    """The record as plain Google Benchmark JSON: no DetOps context, iteration entries only."""
    del rec["context"]["detops_schema_version"], rec["context"]["detops"], rec["correctness"]
    rec["benchmarks"] = [e for e in rec["benchmarks"] if e["run_type"] == "iteration"]
    for e in rec["benchmarks"]:
        e.pop("detops", None)
    return rec


@pytest.mark.parametrize("breakage,words", [
    (lambda r: r["benchmarks"][0].pop("real_time"), "benchmarks/0/real_time: expected a finite number >= 0"),
    (lambda r: r["benchmarks"][0].__setitem__("real_time", "fast"), "benchmarks/0/real_time"),
    (lambda r: r["benchmarks"][0].__setitem__("real_time", -1.0), "benchmarks/0/real_time"),
    (lambda r: r["benchmarks"][0].__setitem__("time_unit", "fortnight"), "benchmarks/0/time_unit"),
    (lambda r: r["benchmarks"].__setitem__(0, 7), "benchmarks/0: expected an object"),
    (lambda r: [e.pop("run_name") and e.__setitem__("name", 3) for e in r["benchmarks"][:1]], "benchmarks/0: expected a string"),
])
def test_a_broken_plain_record_is_refused_in_words_not_a_traceback(tmp_path, capsys, breakage, words):
    """Found by suites/fuzz/fuzz_records.py: a plain Google Benchmark record (no schema) whose entry lacks
    real_time made compare die with a KeyError. The fields compare reads of such a record are now checked."""
    cand = plain(sr.make_record(BENCH, seed=2))
    breakage(cand)
    b, c = write_pair(tmp_path, plain(sr.make_record(BENCH, seed=1)), cand)
    assert compare.main([str(b), str(c)]) == compare.EXIT_USAGE
    err = capsys.readouterr().err
    assert str(c) in err and words in err and "Traceback" not in err


def test_a_record_that_is_not_utf8_is_refused_in_one_line(tmp_path, capsys):
    """Found by suites/fuzz/fuzz_records.py: bytes that are not UTF-8 raised UnicodeDecodeError."""
    b, c = write_pair(tmp_path, sr.make_record(BENCH, seed=1), sr.make_record(BENCH, seed=2))
    c.write_bytes(c.read_bytes()[:100] + b"\xc9\xff" + c.read_bytes()[100:])
    assert compare.main([str(b), str(c)]) == compare.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("compare: error:") and str(c) in err and "not UTF-8" in err and len(err.splitlines()) == 1


def test_benchmarks_missing_from_one_side_are_listed(tmp_path, capsys):
    code, res = run(tmp_path, sr.make_record(BENCH, seed=1), sr.make_record(BENCH[:2], seed=2))
    assert code == compare.EXIT_OK
    assert res["benchmarks"]["only_in_baseline"] == ["nms/boxes_5k/fp32/fwd"]
    assert "Only in the baseline (1): nms/boxes_5k/fp32/fwd" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------------
# Provenance checks


def test_different_gpu_models_are_refused(tmp_path, capsys):
    code, res = run(tmp_path, sr.make_record(BENCH, seed=1), sr.make_record(BENCH, seed=2, gpu_name="NVIDIA A100-SXM4-80GB"))
    assert code == compare.EXIT_USAGE and res is None
    err = capsys.readouterr().err
    assert "different GPU models" in err and "NVIDIA A100-SXM4-80GB" in err


def test_different_toolkit_needs_cross_build(tmp_path, capsys):
    base = sr.make_record(BENCH, seed=1)
    cand = sr.make_record(BENCH, seed=2, cuda=13010, driver="590.10", torch_version="2.12.0", nvcc="13.1.20")
    code, _ = run(tmp_path, base, cand)
    assert code == compare.EXIT_USAGE
    err = capsys.readouterr().err
    assert "different builds" in err and "--cross-build" in err and "CUDA runtime 13000 vs 13010" in err

    code, res = run(tmp_path, base, cand, "--cross-build")
    assert code == compare.EXIT_OK
    out = capsys.readouterr().out
    assert "CUDA 13.0 / driver 580.65.06 / torch 2.11.0 vs CUDA 13.1 / driver 590.10 / torch 2.12.0" in out
    assert res["baseline"]["build"] == "CUDA 13.0 / driver 580.65.06 / torch 2.11.0"
    assert res["candidate"]["build"] == "CUDA 13.1 / driver 590.10 / torch 2.12.0"
    assert "- compiled by: nvcc " in out and " vs nvcc " in out
    # No dumps in either record: said plainly.
    assert "output dumps missing: baseline: the record names no output dumps" in out
    assert "output dumps missing: candidate" in out


def test_setting_and_timer_differences_are_warnings(tmp_path):
    base = sr.make_record(BENCH, seed=1)
    cand = sr.make_record(BENCH, seed=2, timer="cuda_events")
    cand["context"]["detops"]["settings"]["cold_l2"] = False
    cand["context"]["detops"]["complete"] = False
    code, res = run(tmp_path, base, cand)
    assert code == compare.EXIT_OK
    text = " | ".join(res["warnings"])
    assert "different timers" in text and "cold_l2 differs" in text and "candidate record is incomplete" in text


def write_dumps(record_dir, values_by_test, dtype="fp32"):
    out = record_dir / "outputs"
    out.mkdir(parents=True, exist_ok=True)
    index = {}
    for i, (name, values) in enumerate(values_by_test.items()):
        v = np.asarray(values, dtype="<f8")
        (out / f"{i}.f64").write_bytes(v.tobytes())
        index[name] = {"file": f"{i}.f64", "shape": [len(v)], "dtype": dtype, "elements_saved": len(v), "subsampled": False}
    (out / "index.json").write_text(json.dumps(index))


def test_cross_build_reports_how_far_outputs_moved(tmp_path, capsys):
    t_align, t_pool = "roi_align.forward.tiny.fp32.cuda", "roi_pool.forward.tiny.fp32.cuda"
    tests = [sr.correctness_test(t_align, atol=1e-5, rtol=1e-5), sr.correctness_test(t_pool, atol=1e-5, rtol=1e-5)]
    base = sr.make_record(BENCH, tests=tests, seed=1)
    cand = sr.make_record(BENCH, tests=copy.deepcopy(tests), seed=2, cuda=13010, nvcc="13.1.20")
    for rec in (base, cand):
        rec["outputs"] = {"dir": "outputs", "index": "outputs/index.json"}
    b, c = write_pair(tmp_path, base, cand)
    align = np.array([0.0, 1.0, -2.0, np.nan, np.inf])
    pool = np.array([3.0, 4.0, 5.0])
    write_dumps(b.parent, {t_align: align, t_pool: pool})
    moved = align.copy()
    moved[2] += 4e-6  # |diff| 4e-6 against a tolerance of 1e-5 + 1e-5 * 2 = 3e-5
    write_dumps(c.parent, {t_align: moved, t_pool: pool})
    out_json = tmp_path / "r.json"
    code = compare.main([str(b), str(c), "--cross-build", "--json-out", str(out_json)])
    assert code == compare.EXIT_OK
    rows = {r["op"]: r for r in json.loads(out_json.read_text())["outputs"]["rows"]}
    assert rows["roi_align"]["compared"] == 1 and rows["roi_align"]["identical"] == 0
    assert rows["roi_align"]["max_abs_diff"] == pytest.approx(4e-6, rel=1e-6)
    assert rows["roi_align"]["max_diff_over_tolerance"] == pytest.approx(4e-6 / 3e-5, rel=1e-6)
    assert rows["roi_align"]["nonfinite_mismatches"] == 0
    assert rows["roi_pool"]["identical"] == 1 and rows["roi_pool"]["max_abs_diff"] == 0.0
    assert "| roi_align | cuda | fp32 | 1 | 0 | 4e-06 | 0.133 | 0 |" in capsys.readouterr().out

    # A NaN that became a number is counted apart; a dump only on one side is named.
    moved[3] = 1.0
    write_dumps(c.parent, {t_align: moved, "box_iou.forward.tiny.fp32.cuda": pool})
    res = compare.compare_records(b, c, cross_build=True)
    rows = {r["op"]: r for r in res["outputs"]["rows"]}
    assert rows["roi_align"]["nonfinite_mismatches"] == 1
    assert any("only in the baseline" in u for u in res["outputs"]["unmatched"])
    assert any("only in the candidate" in u for u in res["outputs"]["unmatched"])


# ---------------------------------------------------------------------------------------------------
# Correctness changes


def outcome_tests(**outcomes):
    names = ["roi_align.forward.tiny.fp32.cuda", "roi_align.backward.tiny.fp32.cuda", "roi_pool.forward.tiny.fp16.cuda"]
    return [sr.correctness_test(n, outcomes.get(n.split(".")[1] + "_" + n.split(".")[3], "passed")) for n in names]


def test_newly_failing_test_exits_1(tmp_path, capsys):
    base = sr.make_record(BENCH, tests=outcome_tests(), seed=1)
    cand = sr.make_record(BENCH, tests=outcome_tests(backward_fp32="error"), seed=2)
    code, res = run(tmp_path, base, cand)
    assert code == compare.EXIT_REGRESSION
    assert res["gating_correctness_changes"] == ["roi_align.backward.tiny.fp32.cuda"]
    assert set(verdicts(res).values()) == {"SAME"}
    out = capsys.readouterr().out
    assert "| roi_align.backward.tiny.fp32.cuda | now fails | passed | error | yes |" in out
    assert "1 newly failing test" in out


def test_fixed_and_no_longer_running_tests_do_not_gate(tmp_path):
    base = sr.make_record(BENCH, tests=outcome_tests(forward_fp32="mismatch"), seed=1)
    cand = sr.make_record(BENCH, tests=outcome_tests(forward_fp16="skipped"), seed=2)
    code, res = run(tmp_path, base, cand)
    assert code == compare.EXIT_OK
    kinds = {c["test"]: c["kind"] for c in res["correctness"]["changes"]}
    assert kinds == {"roi_align.forward.tiny.fp32.cuda": "fixed", "roi_pool.forward.tiny.fp16.cuda": "no_longer_runs"}


def test_missing_and_new_tests_are_reported(tmp_path, capsys):
    base = sr.make_record(BENCH, tests=outcome_tests(), seed=1)
    cand_tests = outcome_tests()[1:] + [sr.correctness_test("nms.forward.tiny.fp32.cuda", "mismatch"),
                                     sr.correctness_test("nms.forward.big.fp32.cuda")]
    code, res = run(tmp_path, base, sr.make_record(BENCH, tests=cand_tests, seed=2))
    assert code == compare.EXIT_OK
    kinds = {c["test"]: c["kind"] for c in res["correctness"]["changes"]}
    assert kinds == {"roi_align.forward.tiny.fp32.cuda": "missing_in_candidate",
                     "nms.forward.tiny.fp32.cuda": "new_failing", "nms.forward.big.fp32.cuda": "new_in_candidate"}
    out = capsys.readouterr().out
    assert "Tests missing in the candidate (1): roi_align.forward.tiny.fp32.cuda" in out
    assert "new test, fails" in out


def test_error_growth_rule():
    t = sr.correctness_test("roi_align.forward.tiny.fp32.cuda", max_abs_error=4e-6, max_rel_error=9e-4, atol=1e-5, rtol=1e-5)
    assert compare.correctness_tolerance_use(t) == pytest.approx(0.4)  # min(4e-6/1e-5, 9e-4/1e-5)
    base = [sr.correctness_test("a.forward.c.fp32.cuda", max_abs_error=2e-6, max_rel_error=2e-6),
            sr.correctness_test("b.forward.c.fp32.cuda", max_abs_error=4e-6, max_rel_error=4e-6),
            sr.correctness_test("c.forward.c.fp32.cuda", max_abs_error=6e-6, max_rel_error=6e-6)]
    cand = [sr.correctness_test("a.forward.c.fp32.cuda", max_abs_error=8e-6, max_rel_error=8e-6),   # 0.2 -> 0.8: grew
            sr.correctness_test("b.forward.c.fp32.cuda", max_abs_error=6e-6, max_rel_error=6e-6),   # 0.4 -> 0.6: < 2x
            sr.correctness_test("c.forward.c.fp32.cuda", max_abs_error=9e-6, max_rel_error=9e-6)]   # was > 0.5 already
    res = compare.compare_correctness({"correctness": {"tests": base, "summary": {}}},
                                      {"correctness": {"tests": cand, "summary": {}}})
    assert [(c["test"], c["kind"], c["gating"]) for c in res["changes"]] == [("a.forward.c.fp32.cuda", "error_grew", False)]


# ---------------------------------------------------------------------------------------------------
# Usage errors, JSON output, the real command line


def test_unreadable_inputs_exit_2(tmp_path, capsys):
    good = sr.write(tmp_path / "g.json", sr.make_record(BENCH))
    assert compare.main([str(tmp_path / "nope.json"), str(good)]) == compare.EXIT_USAGE
    (tmp_path / "bad.json").write_text("{not json")
    assert compare.main([str(good), str(tmp_path / "bad.json")]) == compare.EXIT_USAGE
    (tmp_path / "list.json").write_text("[]")
    assert compare.main([str(good), str(tmp_path / "list.json")]) == compare.EXIT_USAGE
    err = capsys.readouterr().err
    assert "cannot read" in err and "is not JSON" in err and "not a benchmark record" in err


def test_compressed_records_read_as_plain_ones(tmp_path):
    # Committed records are stored gzip-compressed (record.json.gz); xz works too. Told by content, not name.
    import gzip
    import lzma
    b, c = write_pair(tmp_path, sr.make_record(BENCH, seed=1), sr.make_record(BENCH, seed=2, scale={"*": 1.2}))
    plain = compare.compare_records(b, c)
    gz = tmp_path / "b.record.json.gz"
    gz.write_bytes(gzip.compress(b.read_bytes()))
    xz = tmp_path / "c.bin"
    xz.write_bytes(lzma.compress(c.read_bytes()))
    packed = compare.compare_records(gz, xz)
    assert verdicts(packed) == verdicts(plain) == {k: "SLOWER" for k in verdicts(plain)}
    assert packed["exit_code"] == plain["exit_code"] == compare.EXIT_REGRESSION


def test_truncated_compressed_record_is_one_clear_line(tmp_path, capsys):
    import gzip
    b, _ = write_pair(tmp_path, sr.make_record(BENCH, seed=1), sr.make_record(BENCH, seed=2))
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(b.read_bytes())[:2000])
    assert compare.main([str(b), str(cut)]) == compare.EXIT_USAGE
    err = capsys.readouterr().err
    assert str(cut) in err and "cannot be decompressed (truncated or corrupt)" in err and "Traceback" not in err


def test_compressed_record_that_inflates_past_the_bound_is_refused(tmp_path, capsys, monkeypatch):
    import gzip
    monkeypatch.setattr(compare, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    b, _ = write_pair(tmp_path, sr.make_record(BENCH, seed=1), sr.make_record(BENCH, seed=2))
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (3 << 20)))  # 3 MiB of blanks in a few KB
    assert bomb.stat().st_size < 20000
    assert compare.main([str(b), str(bomb)]) == compare.EXIT_USAGE
    err = capsys.readouterr().err
    assert str(bomb) in err and "decompresses to more than 1 MiB" in err


def test_command_line_exit_codes(tmp_path):
    b, c = write_pair(tmp_path, sr.make_record(BENCH, seed=1), sr.make_record(BENCH, seed=2, scale={"*": 1.2}))
    script = ROOT / "scripts" / "compare.py"
    p = subprocess.run([sys.executable, str(script), str(b), str(c)], capture_output=True, text=True)
    assert p.returncode == 1, p.stderr
    assert "confirmed SLOWER" in p.stdout
    p = subprocess.run([sys.executable, str(script), str(b)], capture_output=True, text=True)
    assert p.returncode == 2 and "usage" in p.stderr


# ---------------------------------------------------------------------------------------------------
# Schema


def test_schema_is_valid_json_schema():
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema not installed: schema validation skipped")
    jsonschema.Draft202012Validator.check_schema(json.loads(compare.SCHEMA_PATH.read_text()))


@pytest.fixture(params=["jsonschema", "builtin"])
def validator(request, monkeypatch):
    """Each schema test runs with the jsonschema package (skipped where it is not installed) and with the
    built-in validator compare falls back to without it."""
    if request.param == "jsonschema":
        pytest.importorskip("jsonschema", reason="jsonschema not installed: its half of the schema tests skipped")
    else:
        monkeypatch.setitem(sys.modules, "jsonschema", None)  # import jsonschema now raises ImportError
    return request.param


def test_generated_record_validates(validator):
    assert compare.validate_record(sr.make_record(BENCH)) == ("valid", [])
    demo = sr.make_record(sr.demo_benchmarks(), sr.demo_tests())
    demo["outputs"] = {"dir": "outputs", "index": "outputs/index.json"}
    assert compare.validate_record(demo) == ("valid", [])


@pytest.mark.parametrize("breakage,path_fragment", [
    (lambda r: r["context"]["detops"]["gpu"].pop("name"), "context/detops/gpu"),
    (lambda r: r["context"].__setitem__("detops_schema_version", 2), "context/detops_schema_version"),
    (lambda r: r["benchmarks"][10]["detops"].__setitem__("stop_reason", "bored"), "benchmarks/10/detops/stop_reason"),
    (lambda r: r["benchmarks"][10].pop("detops"), "benchmarks/10"),
    (lambda r: r["benchmarks"][10]["detops"]["stats_ms"].pop("q3"), "benchmarks/10/detops/stats_ms"),
    (lambda r: r["correctness"]["tests"][0].__setitem__("outcome", "fine"), "correctness/tests/0/outcome"),
    (lambda r: r["context"]["detops"].__setitem__("timer", "wall_clock"), "context/detops/timer"),
    (lambda r: r["benchmarks"][0].pop("real_time"), "benchmarks/0"),
    (lambda r: r["benchmarks"][0].__setitem__("real_time", "fast"), "benchmarks/0/real_time"),
    (lambda r: r["benchmarks"].__setitem__(3, 7), "benchmarks/3"),
])
def test_broken_record_is_invalid_and_refused(tmp_path, capsys, validator, breakage, path_fragment):
    rec = sr.make_record(BENCH)
    assert rec["benchmarks"][10]["aggregate_name"] == "median"
    breakage(rec)
    status, errors = compare.validate_record(rec)
    assert status == "invalid"
    assert any(e.startswith(path_fragment) for e in errors), errors
    b, c = write_pair(tmp_path, sr.make_record(BENCH), rec)
    assert compare.main([str(b), str(c)]) == compare.EXIT_USAGE
    assert "does not match docs/record.schema.json" in capsys.readouterr().err


def test_without_jsonschema_a_record_is_still_validated(tmp_path, capsys, monkeypatch):
    """No jsonschema: the built-in validator checks the record, so a benchmark entry without real_time is one
    clear error (file, field) and exit 2, not a traceback."""
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    assert compare.validate_record(sr.make_record(BENCH)) == ("valid", [])
    code, _ = run(tmp_path, sr.make_record(BENCH, seed=1), sr.make_record(BENCH, seed=2))
    assert code == compare.EXIT_OK
    assert "schema validation" not in capsys.readouterr().out
    rec = sr.make_record(BENCH, seed=2)
    del rec["benchmarks"][0]["real_time"]
    b, c = write_pair(tmp_path, sr.make_record(BENCH, seed=1), rec)
    assert compare.main([str(b), str(c)]) == compare.EXIT_USAGE
    err = capsys.readouterr().err
    assert str(c) in err and "benchmarks/0: 'real_time' is a required property" in err and "Traceback" not in err


@pytest.mark.parametrize("breakage,words", [
    (None, None),
    (lambda r: r["context"]["detops"]["gpu"].pop("name"), "'name' is a required property"),
    (lambda r: r.pop("context"), "not a benchmark record"),
])
def test_baseline_key_validates_the_record(tmp_path, breakage, words):
    """scripts/baseline_key.py (scripts/run.sh's reader): the key of a valid record; a broken one is one line
    naming the file and the field, exit 2, never a KeyError traceback."""
    rec = sr.make_record(BENCH)
    if breakage:
        breakage(rec)
    path = sr.write(tmp_path / "record.json", rec)
    r = subprocess.run([sys.executable, str(pathlib.Path(compare.__file__).parent / "baseline_key.py"), str(path)],
                       capture_output=True, text=True)
    if breakage is None:
        assert r.returncode == 0 and r.stdout.strip().endswith("_cuda13.0"), r
    else:
        assert r.returncode == compare.EXIT_USAGE and words in r.stderr and str(path) in r.stderr, r
        assert "Traceback" not in r.stderr


@pytest.mark.parametrize("seed", range(12))
def test_builtin_validator_finds_what_jsonschema_finds(seed):
    """Random corruptions of a valid record (fields removed, retyped, set out of range): the built-in validator
    reports errors at the same JSON paths as jsonschema."""
    pytest.importorskip("jsonschema", reason="jsonschema not installed: nothing to cross-check against")
    import random
    rng = random.Random(seed)
    rec = sr.make_record(sr.demo_benchmarks(), sr.demo_tests())
    rec["peers"] = sr.demo_peers()

    def nodes(value, path):
        yield path, value
        children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
        for k, v in children:
            yield from nodes(v, path + [k])

    every = [(p, v) for p, v in nodes(rec, []) if p]
    for path, _ in rng.sample(every, 6):
        parent = rec
        for k in path[:-1]:
            parent = parent[k]
        if not isinstance(parent, (dict, list)) or (isinstance(parent, list) and path[-1] >= len(parent)):
            continue
        action = rng.choice(["drop", "string", "negative", "null"])
        if action == "drop" and isinstance(parent, dict):
            parent.pop(path[-1], None)
        elif action == "drop":
            continue
        else:
            parent[path[-1]] = {"string": "x", "negative": -1, "null": None}[action]
    ours = compare.validate_record(rec, use_jsonschema=False)
    theirs = compare.validate_record(rec)
    assert ours[0] == theirs[0]
    assert sorted({e.split(": ")[0] for e in ours[1]}) == sorted({e.split(": ")[0] for e in theirs[1]})


# ---------------------------------------------------------------------------------------------------
# The torchvision peer table (docs/peers.md)

def test_peer_table_with_baseline_speedup(tmp_path, capsys):
    base = sr.make_record(BENCH, seed=1)
    base["peers"] = sr.demo_peers(factor=1.0)
    cand = sr.make_record(BENCH, seed=2)
    cand["peers"] = sr.demo_peers(factor=0.5)  # DetOps twice as fast as in the baseline
    code, res = run(tmp_path, base, cand)
    assert code == compare.EXIT_OK, "peer timings never gate"
    rows = {r["key"]: r for r in res["peers"]["rows"]}
    assert rows["roi_align/box_head_1000/fp32/fwd"]["speedup"] == pytest.approx(6.0)
    assert rows["roi_align/box_head_1000/fp32/fwd"]["baseline_speedup"] == pytest.approx(3.0)
    assert rows["roi_align/box_head_1000/bf16/fwd"]["speedup"] is None
    out = capsys.readouterr().out
    assert "### Against torchvision (candidate)" in out
    assert ("| op | case | dtype | direction | torchvision ms | DetOps ms | speed-up | baseline speed-up | max error |"
            in out)
    assert "| roi_align | box_head_1000 | fp32 | fwd | 0.9000 | 0.1500 | 6.00x | 3.00x | 1e-06 |" in out
    assert "| roi_align | box_head_1000 | bf16 | fwd | none | 0.1000 | none | none | 0.002 |" in out
    assert "| nms | boxes_20000 | fp32 | fwd | 4.000 | 0.2500 | 16.00x | 8.00x | valid (not margin-clean" in out


def test_peer_table_without_baseline_peers_and_errors(tmp_path, capsys):
    cand = sr.make_record(BENCH, seed=2)
    cand["peers"] = sr.demo_peers() + [sr.peer_entry("nms", "boxes_1000", "fp16", "fwd", None, None, None,
                                                     error="RuntimeError: boom | bad")]
    code, res = run(tmp_path, sr.make_record(BENCH, seed=1), cand)
    assert code == compare.EXIT_OK
    assert not res["peers"]["baseline_has_peers"]
    out = capsys.readouterr().out
    assert "baseline speed-up" not in out
    assert "| roi_align | box_head_1000 | fp32 | fwd | 0.9000 | 0.3000 | 3.00x | 1e-06 |" in out
    assert "| nms | boxes_1000 | fp16 | fwd | none | none | none | error: RuntimeError: boom / bad |" in out


def test_no_peers_no_peer_section(tmp_path, capsys):
    run(tmp_path, sr.make_record(BENCH, seed=1), sr.make_record(BENCH, seed=2))
    assert "Against torchvision" not in capsys.readouterr().out


def test_peer_entries_are_schema_checked(tmp_path, validator):
    rec = sr.make_record(BENCH, seed=1)
    rec["peers"] = sr.demo_peers()
    assert compare.validate_record(rec)[0] == "valid"
    rec["peers"][0]["dtype"] = "float32"
    status, errors = compare.validate_record(rec)
    assert status == "invalid" and any("peers" in e for e in errors)
    rec["peers"][0]["dtype"] = "fp32"
    del rec["peers"][0]["torchvision_ms"]
    assert compare.validate_record(rec)[0] == "invalid"
