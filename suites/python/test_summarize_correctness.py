"""scripts/summarize_correctness.py reads a GoogleTest JSON report and refuses anything else in one line (exit 2):
a DetOps run record, a truncated file, hand edits of the fields it reads. No GPU, no torch."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_detops_library

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "summarize_correctness.py"

VALID = {"tests": 3, "testsuites": [
    {"name": "roi_align.forward", "testsuite": [
        {"name": "tiny.fp32.cpu", "time": "0.5s", "max_abs_error": "1e-07", "dtype": "fp32"},
        {"name": "tiny.fp32.cuda", "time": "0.25s", "result": "SKIPPED"},
        {"name": "tiny.fp16.cuda", "time": "0.25s", "failures": [{"failure": "output 0: too far"}]}]}]}


def summarize(tmp_path, content):
    path = tmp_path / "c.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    r = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True)
    return r, str(path)


def test_valid_report_counts(tmp_path):
    r, _ = summarize(tmp_path, VALID)
    assert r.returncode == 0, r.stderr
    assert "**1 passed, 1 failed, 1 skipped**" in r.stdout
    assert "roi_align.forward.tiny.fp16.cuda`: output 0: too far" in r.stdout


def edited(fn):
    rec = json.loads(json.dumps(VALID))
    fn(rec)
    return rec


@pytest.mark.parametrize("content,expected", [
    ({"context": {}, "benchmarks": [], "correctness": {}},
     "not a GoogleTest JSON report: no testsuites array (top-level keys: context, benchmarks, correctness)"),
    ({}, "no testsuites array (top-level keys: none (an empty object))"),
    ([], "expected an object at the top level, got array"),
    ({"testsuites": {}}, "testsuites: expected an array, got object"),
    (edited(lambda r: r["testsuites"].append("x")), "testsuites[1]: expected an object, got string"),
    (edited(lambda r: r["testsuites"][0].pop("name")), "testsuites[0].name: expected a string, got nothing"),
    (edited(lambda r: r["testsuites"][0].update(testsuite={})), "testsuites[0].testsuite: expected an array, got object"),
    (edited(lambda r: r["testsuites"][0]["testsuite"][1].update(name=7)),
     "testsuites[0].testsuite[1].name: expected a string, got number"),
    (edited(lambda r: r["testsuites"][0]["testsuite"][0].update(time=0.5)),
     "testsuites[0].testsuite[0].time: expected a string, got number"),
    (edited(lambda r: r["testsuites"][0]["testsuite"][0].update(max_abs_error=None)),
     "testsuites[0].testsuite[0].max_abs_error: expected a string, got null"),
    (edited(lambda r: r["testsuites"][0]["testsuite"][2].update(failures="boom")),
     "testsuites[0].testsuite[2].failures: expected an array, got string"),
    (edited(lambda r: r["testsuites"][0]["testsuite"][2].update(failures=[{"failure": 3}])),
     "testsuites[0].testsuite[2].failures[0]: expected an object with a string failure, got failure number"),
    ({"tests": 12, "testsuites": []}, "tests says 12, the suites hold 0"),
    ({"tests": "3", "testsuites": []}, "tests: expected a non-negative integer, got string '3'"),
])
def test_anything_else_is_one_line_naming_file_path_and_expectation(tmp_path, content, expected):
    r, path = summarize(tmp_path, content)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"summarize_correctness: error: {path}: "), r.stderr
    assert expected in lines[0]


@pytest.mark.parametrize("content,expected", [('{"testsuites": [{"name": "x", "tests', "cannot read: Unterminated string"),
                                              (b"\xff\xfe{}", "cannot read")])
def test_unreadable_files_are_one_line_and_exit_2(tmp_path, content, expected):
    path = tmp_path / "c.json"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    r = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True)
    assert r.returncode == 2 and expected in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("facts", ['{"gpu": [1]}', "[1, 2]", 5, '{"kernels": [3]}', "not json"])
def test_malformed_device_facts_only_lose_the_heading(tmp_path, facts):
    r, _ = summarize(tmp_path, dict(VALID, detops_device_facts=facts))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("## Correctness (no GPU: CUDA unavailable)")
    assert "**1 passed, 1 failed, 1 skipped**" in r.stdout


def test_a_crashed_shard_is_said_in_the_summary(tmp_path):
    """shard_suite's merged report of a run where one process was killed: the counts are the others' tests, and the
    summary says, next to them, that the run is incomplete and which shard on which GPU died."""
    rec = edited(lambda r: r.update(detops_shards={"shards": 3, "serial": None, "gpus": ["0", "1"], "failed_or_crashed": [
        {"shard": 1, "exit": "-9 (no JSON written)", "log": "shard-1.log", "gpu": "1"}]}))
    r, _ = summarize(tmp_path, rec)
    assert r.returncode == 0, r.stderr
    assert "**INCOMPLETE: 1 process(es)" in r.stdout and "shard 1 on GPU 1: exit -9" in r.stdout
    r, _ = summarize(tmp_path, VALID)
    assert "INCOMPLETE" not in r.stdout
