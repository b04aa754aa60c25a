"""scripts/merge_records.py: one record from the parts of a split run, on synthetic records
(suites/python/synthetic_records.py). No GPU, no torch."""
import json
import pathlib
import sys

import pytest

import synthetic_records as sr

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import compare  # noqa: E402
import merge_records  # noqa: E402

pytestmark = pytest.mark.no_detops_library

PART1 = [("roi_align", "box_head", "fp32", "fwd", 0.33), ("roi_align", "box_head", "fp32", "bwd", 1.3)]
PART2 = [("nms", "boxes_5k", "fp32", "fwd", 2.0), ("box_iou", "boxes_4000", "fp64", "fwd", 0.09)]
T1 = [sr.correctness_test("roi_align.forward.tiny.fp32.cuda")]
T2 = [sr.correctness_test("nms.forward.tiny.fp32.cuda", "mismatch", 1e-3, 1e-3)]


def parts(tmp_path, *records):
    return [str(sr.write(tmp_path / f"part{i}" / "record.json", r)) for i, r in enumerate(records)]


def merge(tmp_path, paths, *extra):
    out = tmp_path / "merged.json"
    code = merge_records.main([str(out), *paths, *extra])
    return code, (json.loads(out.read_text()) if out.exists() else None)


def run_names(rec):
    return sorted({b["run_name"] for b in rec["benchmarks"]})


def test_disjoint_parts_merge_into_one_valid_record(tmp_path):
    p = parts(tmp_path, sr.make_record(PART1, T1, seed=1, run_id="part-a"),
              sr.make_record(PART2, T2, seed=2, run_id="part-b"))
    code, rec = merge(tmp_path, p)
    assert code == 0
    assert compare.validate_record(rec) == ("valid", [])
    assert run_names(rec) == sorted(f"{o}/{c}/{d}/{r}" for o, c, d, r, _ in PART1 + PART2)
    assert [m["run_id"] for m in rec["context"]["detops"]["merged_from"]] == ["part-a", "part-b"]
    assert [m["benchmarks"] for m in rec["context"]["detops"]["merged_from"]] == [2, 2]
    assert rec["correctness"]["summary"] == {"passed": 1, "failed": 1, "skipped": 0, "errors": 0}
    assert {t["name"] for t in rec["correctness"]["tests"]} == {T1[0]["name"], T2[0]["name"]}


def test_merged_record_compares_as_the_whole_run(tmp_path):
    """The same timings split into two parts and merged: compare finds every benchmark SAME, none missing."""
    whole = sr.make_record(PART1 + PART2, T1, seed=3)
    first = dict(whole, benchmarks=[b for b in whole["benchmarks"] if b["run_name"].startswith("roi_align")])
    second = dict(whole, benchmarks=[b for b in whole["benchmarks"] if not b["run_name"].startswith("roi_align")])
    code, _ = merge(tmp_path, parts(tmp_path, first, second))
    assert code == 0
    result = compare.compare_records(str(sr.write(tmp_path / "whole.json", whole)), str(tmp_path / "merged.json"))
    rows = result["benchmarks"]["rows"]
    assert len(rows) == len(PART1 + PART2) and {r["verdict"] for r in rows} == {"SAME"}
    assert result["exit_code"] == 0


def test_a_benchmark_in_two_parts_needs_replace_and_then_the_later_wins(tmp_path):
    old = sr.make_record(PART1 + PART2, T1, seed=4)
    rerun = sr.make_record(PART2, T1, seed=5, scale={"*": 0.5})
    p = parts(tmp_path, old, rerun)
    code, rec = merge(tmp_path, p)
    assert code == 2 and rec is None
    code, rec = merge(tmp_path, p, "--replace")
    assert code == 0
    kept = [b["real_time"] for b in rec["benchmarks"] if b["run_name"] == "nms/boxes_5k/fp32/fwd"]
    assert kept == [b["real_time"] for b in rerun["benchmarks"] if b["run_name"] == "nms/boxes_5k/fp32/fwd"]
    assert len(rec["benchmarks"]) == len(old["benchmarks"])
    assert [m["benchmarks"] for m in rec["context"]["detops"]["merged_from"]] == [2, 2]


@pytest.mark.parametrize("change, field", [
    ({"gpu": dict(sr.provenance()["gpu"], name="NVIDIA H100 80GB HBM3")}, "GPU"),
    ({"git": {"sha": "f" * 40, "dirty": False}}, "git commit"),
    ({"git": {"sha": sr.provenance()["git"]["sha"], "dirty": True}}, "git dirty flag"),
    ({"cuda_runtime_version": 12080}, "CUDA runtime"),
    ({"timer": "events"}, "timer"),
])
def test_parts_of_different_builds_or_gpus_are_refused(tmp_path, capsys, change, field):
    a = sr.make_record(PART1, T1, seed=6)
    b = sr.with_changes(sr.make_record(PART2, T1, seed=7), **change)
    p = parts(tmp_path, a, b)
    code, rec = merge(tmp_path, p)
    err = capsys.readouterr().err
    assert code == 2 and rec is None
    assert p[1] in err and field in err and len(err.strip().splitlines()) == 1


def test_an_invalid_part_is_one_line_naming_file_and_field_and_out_is_untouched(tmp_path, capsys):
    bad = sr.make_record(PART2, T1, seed=8)
    del bad["benchmarks"][0]["real_time"]
    p = parts(tmp_path, sr.make_record(PART1, T1, seed=9), bad)
    out = tmp_path / "merged.json"
    out.write_text("user's file")
    code = merge_records.main([str(out), *p])
    err = capsys.readouterr().err
    assert code == 2 and out.read_text() == "user's file"
    assert p[1] in err and "benchmarks/0" in err and len(err.strip().splitlines()) == 1


def test_conflicting_correctness_results_need_replace(tmp_path):
    passed = sr.make_record(PART1, [sr.correctness_test("nms.forward.tiny.fp32.cuda")], seed=10)
    failed = sr.make_record(PART2, T2, seed=11)
    p = parts(tmp_path, passed, failed)
    assert merge(tmp_path, p)[0] == 2
    code, rec = merge(tmp_path, p, "--replace")
    assert code == 0 and rec["correctness"]["summary"]["failed"] == 1 and rec["correctness"]["summary"]["passed"] == 0


def test_an_incomplete_part_makes_the_merged_record_incomplete(tmp_path):
    p = parts(tmp_path, sr.make_record(PART1, T1, seed=12), sr.with_changes(sr.make_record(PART2, T1, seed=13), complete=False))
    code, rec = merge(tmp_path, p)
    assert code == 0 and rec["context"]["detops"]["complete"] is False


def test_peers_merge_by_key_later_part_wins(tmp_path):
    a = sr.make_record(PART1, T1, seed=14)
    a["peers"] = sr.demo_peers(1.0)
    b = sr.make_record(PART2, T1, seed=15)
    b["peers"] = sr.demo_peers(2.0)[:1]
    code, rec = merge(tmp_path, parts(tmp_path, a, b))
    assert code == 0 and len(rec["peers"]) == len(a["peers"])
    first = [e for e in rec["peers"] if compare.peer_key(e) == compare.peer_key(b["peers"][0])]
    assert first == b["peers"]


def test_out_may_not_be_a_part_and_parts_with_output_dumps_are_refused(tmp_path, capsys):
    p = parts(tmp_path, sr.make_record(PART1, T1, seed=16))
    assert merge_records.main([p[0], p[0]]) == 2
    dumped = sr.make_record(PART2, T1, seed=17)
    dumped["outputs"] = {"dir": "outputs", "index": "outputs/index.json"}
    q = parts(tmp_path, dumped)
    assert merge(tmp_path, q)[0] == 2
    assert "outputs" in capsys.readouterr().err
