#!/usr/bin/env python3
"""Which ops a change touches: the scope of the quick gate (scripts/quick_gate.sh, docs/compare.md).

  gate_scope.py [--base REF] [--files F ...] [--json OUT] [--root DIR]

The changed files are those of `git diff --name-only REF` (the working tree against REF: commits since REF and
uncommitted edits) plus untracked files git does not ignore; --files gives them instead. Each file is judged:

  op       it is compiled into one or more ops: a file of ops/<dir>/, that op's fp64 reference or spec, or a
           shared header (ops/common, ops/core, reference/include, suites/specs/kit) that the op's own files
           include, directly or through other headers; a .cpp/.cu without includers counts as its header
           (kit/roi_cases.cpp is what includes kit/roi_cases.h reach). The op's benchmarks and correctness
           tests run.
  none     it cannot change what the GPU job measures: prose and results (docs/, *.md, results/), tests that
           CI runs (suites/python, suites/fuzz, suites/unit: the unit tests run in every job anyway), tools
           outside the gate (doctor, build facts, cross builds, line counts, the Slurm template, the lent-machine
           wrappers).
  all      anything else: the harness, the build (CMake files, presets), the benchmark and correctness mains,
           the gate's own scripts, the Python package and the peer suite, a header no op includes, a file this
           tool does not know. The full gate runs: the scope is every op.

Every scope also holds the smoke set (SMOKE_OPS and the calibration benchmark), so a change that touches no
op still builds, checks and times something end to end.

Output: one line per op (sorted), or the single line 'all'; --json writes {"scope": [...] | "all", "files":
[{"path", "verdict", "ops"}], "smoke": [...], "base": REF}. Exit 0, or 2 (with one line) when git fails.
"""
import argparse
import json
import os
import re
import subprocess
import sys

# The test and benchmark names' first component, per folder of ops/ (suites/python/test_gate_scope.py checks this
# table against the correctness suite's test names and the baseline's benchmark names).
OPS_BY_DIR = {
    "box_iou": ["box_iou", "generalized_box_iou", "distance_box_iou", "complete_box_iou", "iou_loss",
                "generalized_box_iou_loss", "distance_box_iou_loss", "complete_box_iou_loss"],
    "carafe": ["carafe"],
    "deform_conv2d": ["deform_conv2d"],
    "deform_roi_pool": ["deform_roi_pool"],
    "masked_conv2d": ["masked_conv2d"],
    "nms": ["nms", "batched_nms"],
    "prroi_pool": ["prroi_pool"],
    "ps_roi": ["ps_roi_align", "ps_roi_pool"],
    "roi_align": ["roi_align"],
    "roi_pool": ["roi_pool"],
    "sigmoid_focal_loss": ["sigmoid_focal_loss", "sigmoid_focal_loss_mmcv"],
    "softmax_focal_loss": ["softmax_focal_loss"],
}
ALL_OPS = sorted(op for ops in OPS_BY_DIR.values() for op in ops)
# Always in the quick gate: NMS (one op built, checked, timed, peer-checked and compared end to end) and the
# calibration benchmark (benchmark names "calibration/..."). Shared code needs no smoke op: a shared header reaches
# every op that includes it through the include graph, and the harness, build and gate scripts run the full gate.
# roi_align was also in the set until 2026-11-29; with its 96 benchmarks and 96 peer timings it made about two
# thirds of a one-op quick gate's benchmark step (roi_pool: ~220 s of it, ~65 s without roi_align, by the one-H200
# run's per-benchmark times).
SMOKE_OPS = ["nms"]
SMOKE_BENCHMARKS = ["calibration"]

# Folders whose headers are shared between ops, and the include roots of the build (CMake target include dirs).
INCLUDE_ROOTS = ["ops", "ops/core/include", "reference/include", "suites/specs", "harness/include"]
SOURCE_EXT = (".h", ".hpp", ".cuh", ".cpp", ".cc", ".cu")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)

NONE_PREFIXES = ("docs/", "results/", "suites/python/", "suites/fuzz/", "suites/unit/", ".ci/", ".github/",
                 "scripts/slurm/")
NONE_FILES = {"scripts/doctor.py", "scripts/build_facts.py", "scripts/cross_build.sh", "scripts/op_lines.py",
              "scripts/check_layers.py", "scripts/screenshot_report.sh", "scripts/device_session.sh",
              "scripts/device_main_job.sh", ".gitignore"}


def op_dir_roots(root, d):
    """The files that belong to op folder d: ops/d/*, its reference and its spec."""
    out = []
    base = os.path.join(root, "ops", d)
    for dirpath, _, names in os.walk(base):
        out += [os.path.relpath(os.path.join(dirpath, n), root) for n in names if n.endswith(SOURCE_EXT)]
    for rel in (f"reference/src/{d}_reference.cpp", f"reference/include/detops/reference/{d}_reference.h",
                f"suites/specs/{d}.cpp"):
        if os.path.isfile(os.path.join(root, rel)):
            out.append(rel)
    return sorted(out)


def resolve(root, including, name):
    """The repository path an #include "name" in file `including` refers to, or None (a system header)."""
    for base in [os.path.dirname(including)] + INCLUDE_ROOTS:
        rel = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, rel)):
            return rel
    return None


def includes_of(root, rel, cache):
    if rel not in cache:
        try:
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            text = ""
        cache[rel] = [p for p in (resolve(root, rel, n) for n in INCLUDE.findall(text)) if p]
    return cache[rel]


def closures(root):
    """op folder -> every repository file its own files include, transitively (its own files too)."""
    cache, out = {}, {}
    for d in OPS_BY_DIR:
        seen, todo = set(), op_dir_roots(root, d)
        while todo:
            f = todo.pop()
            if f in seen:
                continue
            seen.add(f)
            todo += includes_of(root, f, cache)
        out[d] = seen
    return out


def judge(root, path, closure):
    """(verdict, ops) for one changed file: ('op', [...]), ('none', []) or ('all', [])."""
    path = path.replace(os.sep, "/")
    if path.startswith(NONE_PREFIXES) or path in NONE_FILES or (path.endswith(".md") and "/" not in path):
        return "none", []
    if path.endswith(".md") and path.startswith(("ops/", "suites/", "scripts/", "reference/", "harness/")):
        return "none", []
    if not path.endswith(SOURCE_EXT):
        return "all", []
    candidates = [path]
    if path.endswith((".cpp", ".cc", ".cu")):  # a source file: what includes its header reach
        stem = os.path.splitext(path)[0]
        candidates += [stem + ext for ext in (".h", ".hpp", ".cuh")]
    dirs = sorted(d for d, files in closure.items() if any(c in files for c in candidates))
    if path.startswith("ops/"):
        own = path.split("/")[1]
        if own in OPS_BY_DIR and own not in dirs:
            dirs.append(own)
    if not dirs:
        return "all", []
    return "op", sorted(op for d in dirs for op in OPS_BY_DIR[d])


def changed_files(root, base):
    def git(*args):
        r = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True)
        if r.returncode != 0:
            first = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[0]
            raise RuntimeError(f"git {' '.join(args)}: {first}")
        return [ln for ln in r.stdout.splitlines() if ln.strip()]

    return sorted(set(git("diff", "--name-only", base, "--")) | set(git("ls-files", "--others", "--exclude-standard")))


def scope_of(root, files):
    closure = closures(root)
    judged = [{"path": f, **dict(zip(("verdict", "ops"), judge(root, f, closure)))} for f in files]
    if any(j["verdict"] == "all" for j in judged):
        scope = "all"
    else:
        scope = sorted({op for j in judged for op in j["ops"]} | set(SMOKE_OPS))
    return scope, judged


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default=None, help="git revision the change is measured from (default: HEAD~1)")
    ap.add_argument("--files", nargs="*", help="the changed files (instead of asking git)")
    ap.add_argument("--json", help="write the verdicts here")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = ap.parse_args(argv)
    base = args.base or "HEAD~1"
    try:
        files = args.files if args.files is not None else changed_files(args.root, base)
    except RuntimeError as e:
        print(f"gate_scope: error: {e}", file=sys.stderr)
        return 2
    scope, judged = scope_of(args.root, files)
    for j in judged:
        what = ", ".join(j["ops"]) if j["verdict"] == "op" else ("every op (full gate)" if j["verdict"] == "all"
                                                                 else "nothing the GPU job measures")
        print(f"gate_scope: {j['path']}: {what}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"scope": scope, "files": judged, "smoke": SMOKE_OPS + SMOKE_BENCHMARKS,
                       "base": None if args.files is not None else base}, f, indent=1)
    print("all" if scope == "all" else "\n".join(scope))
    return 0


if __name__ == "__main__":
    sys.exit(main())
