"""The quick gate (docs/compare.md, "The quick gate"): scripts/gate_scope.py's verdicts on real files of this tree
and on a small git repository, and compare.py --scope deciding a scoped comparison by the full gate's rule."""
import gzip
import json
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.no_detops_library

import synthetic_records as sr

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import compare  # noqa: E402
import gate_scope  # noqa: E402

ROI_FAMILY_NHWC = "ops/common/roi_bins_nhwc.cuh"


def judge(path):
    return gate_scope.judge(str(ROOT), path, gate_scope.closures(str(ROOT)))


def test_the_op_table_names_every_op_of_the_suite_and_the_baseline():
    """A new op left out of OPS_BY_DIR would never be in a quick gate's scope: the table must hold exactly the
    ops the correctness suite tests and the baseline times."""
    tests = json.loads(gzip.open(ROOT / "results/suite-times/NVIDIA-H200.json.gz").read())
    tested = {name.split(".")[0] for name in tests}
    baseline = json.loads(gzip.open(ROOT / "results/baselines/NVIDIA-H200_cuda13.0/record.json.gz").read())
    timed = {b["name"].split("/")[0] for b in baseline["benchmarks"]} - set(gate_scope.SMOKE_BENCHMARKS)
    assert tested == set(gate_scope.ALL_OPS)
    assert timed == set(gate_scope.ALL_OPS)
    op_dirs = {p.name for p in (ROOT / "ops").iterdir() if p.is_dir() and list(p.glob("*.cu"))}
    assert op_dirs == set(gate_scope.OPS_BY_DIR)


def test_an_op_file_reaches_its_own_ops_only():
    assert judge("ops/roi_pool/roi_pool_cuda.cu") == ("op", ["roi_pool"])
    assert judge("ops/nms/nms_kernel.cuh") == ("op", ["batched_nms", "nms"])
    assert judge("reference/src/ps_roi_reference.cpp") == ("op", ["ps_roi_align", "ps_roi_pool"])
    assert judge("suites/specs/carafe.cpp") == ("op", ["carafe"])


def test_a_shared_header_reaches_the_ops_that_include_it():
    verdict, ops = judge(ROI_FAMILY_NHWC)
    assert verdict == "op"
    assert "roi_align" in ops and "roi_pool" not in ops and "nms" not in ops
    # Every op whose files include it (directly or through another header) is named.
    for d, files in gate_scope.closures(str(ROOT)).items():
        if ROI_FAMILY_NHWC in files:
            assert set(gate_scope.OPS_BY_DIR[d]) <= set(ops), d


def test_a_source_file_without_includers_counts_as_its_header():
    verdict, ops = judge("suites/specs/kit/box_cases.cpp")
    assert verdict == "op" and "box_iou" in ops and "deform_conv2d" not in ops


@pytest.mark.parametrize("path", ["harness/src/checks.cpp", "CMakeLists.txt", "suites/bench/bench_main.cpp",
                                  "scripts/bench_shards.py", "scripts/shard_suite.py",
                                  "scripts/run.sh", "scripts/compare.py", "ops/python/detops/ops/_roi.py",
                                  "suites/peer/pairs.py", "something/new.txt"])
def test_shared_or_unknown_files_run_the_full_gate(path):
    assert judge(path) == ("all", [])


@pytest.mark.parametrize("path", ["docs/compare.md", "README.md", "results/baselines/README.md",
                                  "suites/python/test_compare.py", "suites/unit/compare_test.cpp",
                                  "scripts/doctor.py", "ops/roi_align/NOTES.md", "scripts/slurm/node.sbatch"])
def test_prose_results_and_ci_only_tests_reach_no_op(path):
    assert judge(path) == ("none", [])


def test_a_header_no_op_includes_runs_the_full_gate(tmp_path):
    (tmp_path / "ops/common").mkdir(parents=True)
    (tmp_path / "ops/roi_align").mkdir(parents=True)
    (tmp_path / "ops/common/used.h").write_text("#pragma once\n")
    (tmp_path / "ops/common/orphan.h").write_text("#pragma once\n")
    (tmp_path / "ops/roi_align/roi_align_cuda.cu").write_text('#include "common/used.h"\n#include <vector>\n')
    closure = gate_scope.closures(str(tmp_path))
    assert gate_scope.judge(str(tmp_path), "ops/common/used.h", closure) == ("op", ["roi_align"])
    assert gate_scope.judge(str(tmp_path), "ops/common/orphan.h", closure) == ("all", [])


def git(cwd, *args):
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def test_scope_from_git_holds_commits_edits_untracked_files_and_the_smoke_set(tmp_path):
    repo = tmp_path / "repo"
    for rel in ("ops/roi_pool/roi_pool_cuda.cu", "ops/carafe/carafe_cuda.cu", "ops/deform_conv2d/deform_conv2d_cuda.cu",
                "docs/x.md"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("// v1\n")
    git(repo.parent, "init", "-q", str(repo))
    git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "add", "-A")
    git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "base")
    (repo / "ops/roi_pool/roi_pool_cuda.cu").write_text("// v2\n")  # committed after the base
    git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qam", "change")
    (repo / "ops/carafe/carafe_cuda.cu").write_text("// edited, not committed\n")
    (repo / "ops/deform_conv2d/new_kernel.cuh").write_text("// untracked\n")
    (repo / "docs/x.md").write_text("prose\n")
    files = gate_scope.changed_files(str(repo), "HEAD~1")
    assert files == ["docs/x.md", "ops/carafe/carafe_cuda.cu", "ops/deform_conv2d/new_kernel.cuh",
                     "ops/roi_pool/roi_pool_cuda.cu"]
    scope, judged = gate_scope.scope_of(str(repo), files)
    assert scope == sorted(["carafe", "deform_conv2d", "roi_pool"] + gate_scope.SMOKE_OPS)
    assert {j["path"]: j["verdict"] for j in judged}["docs/x.md"] == "none"


def test_git_failure_is_one_line_and_exit_2(tmp_path, capsys):
    assert gate_scope.main(["--root", str(tmp_path), "--base", "HEAD~1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gate_scope: error: git diff")


# compare.py --scope: records with two ops, one slower.
BENCH = [("roi_align", "box_head", "fp32", "fwd", 0.30), ("roi_pool", "box_head", "fp32", "fwd", 0.35),
         ("calibration", "chain", "fp32", "fwd", 1.0)]
TESTS = [sr.correctness_test("roi_align.forward.tiny.fp32.cuda"), sr.correctness_test("roi_pool.forward.tiny.fp32.cuda")]


def write_pair(tmp_path, cand_tests=None, scale=None):
    b = sr.write(tmp_path / "b.json", sr.make_record(BENCH, TESTS, seed=1))
    c = sr.write(tmp_path / "c.json", sr.make_record(BENCH, cand_tests or TESTS, seed=2, scale=scale or {}))
    return str(b), str(c)


def test_scope_leaves_out_other_ops_and_decides_in_scope_by_the_same_rule(tmp_path, capsys):
    b, c = write_pair(tmp_path, scale={"roi_pool/box_head/fp32/fwd": 1.10})
    assert compare.main([b, c]) == compare.EXIT_REGRESSION  # the full gate sees roi_pool's slowdown
    full = {r["benchmark"]: r for r in compare.compare_records(b, c)["benchmarks"]["rows"]}
    capsys.readouterr()
    assert compare.main([b, c, "--scope", "calibration,roi_align"]) == compare.EXIT_OK
    res = compare.compare_records(b, c, scope=["calibration", "roi_align"])
    keys = {r["benchmark"] for r in res["benchmarks"]["rows"]}
    assert keys == {"roi_align/box_head/fp32/fwd", "calibration/chain/fp32/fwd"}
    assert res["benchmarks"]["only_in_baseline"] == []
    # In scope, the verdict and its figures are the full comparison's.
    row = next(r for r in res["benchmarks"]["rows"] if r["benchmark"] == "roi_align/box_head/fp32/fwd")
    assert row == full["roi_align/box_head/fp32/fwd"]
    assert [t["name"] for t in res["correctness"]["changes"]] == []
    assert any("quick gate: scope calibration, roi_align" in n for n in res["notes"])
    assert compare.main([b, c, "--scope", "roi_pool"]) == compare.EXIT_REGRESSION


def test_scope_gates_a_failing_test_of_an_op_in_scope_only(tmp_path):
    failing = [sr.correctness_test("roi_align.forward.tiny.fp32.cuda"),
               sr.correctness_test("roi_pool.forward.tiny.fp32.cuda", "mismatch", message="too far")]
    b, c = write_pair(tmp_path, cand_tests=failing)
    assert compare.main([b, c, "--scope", "roi_align"]) == compare.EXIT_OK
    res = compare.compare_records(b, c, scope=["roi_pool"])
    assert res["gating_correctness_changes"] == ["roi_pool.forward.tiny.fp32.cuda"]
    assert res["exit_code"] == compare.EXIT_REGRESSION


def test_a_misspelt_op_in_scope_is_refused_not_passed(tmp_path, capsys):
    b, c = write_pair(tmp_path)
    assert compare.main([b, c, "--scope", "roi_algn"]) == compare.EXIT_USAGE
    err = capsys.readouterr().err
    assert "roi_algn" in err and "no benchmark or correctness test" in err
    assert compare.main([b, c, "--scope", ","]) == compare.EXIT_USAGE


def test_quick_gate_script_refuses_bad_arguments():
    r = subprocess.run(["bash", str(ROOT / "scripts/quick_gate.sh"), "--files"], capture_output=True, text=True)
    assert r.returncode == 2 and "--files needs at least one path" in r.stderr
