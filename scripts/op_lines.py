#!/usr/bin/env python3
"""Lines of math, plumbing and tests per op: what adding an op costs.

Counts code lines (not blank, not comment-only) of each op's files and sorts them:
  math      the op's definition: ops/<op>/*_kernel.cuh (per-element math shared by CUDA and CPU), the
            bodies of the __global__ kernels in ops/<op>/*.cu, and the fp64 reference
            (reference/src/<op>_reference.cpp).
  plumbing  the rest of ops/<op>/: parameter structs, launchers, CPU loops, torch bindings, headers,
            plus the reference's header.
  spec      the op's spec (suites/specs/<op>.cpp; ops/<op>/<op>_spec.cpp in trees before the move).
Shared code (ops/common, the kits) is listed once, not charged to any op.

  op_lines.py [DIR]
"""
import argparse
import glob
import os
import re
import sys

BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)


def code_lines(text):
    text = BLOCK_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return [ln for ln in text.split("\n") if ln.strip() and not ln.strip().startswith("//")]


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def global_kernel_lines(text):
    """Code lines inside __global__ function bodies (signature included)."""
    text = BLOCK_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    inside = 0
    for m in re.finditer(r"__global__", text):
        brace = text.find("{", m.end())
        if brace < 0:
            continue
        depth, i = 0, brace
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        start = text.rfind("\n", 0, m.start()) + 1
        inside += len(code_lines(text[start:i + 1]))
    return inside


def ops_of(root):
    cmake = read(os.path.join(root, "CMakeLists.txt"))
    m = re.search(r"set\(DETOPS_OPS\s+([^)]*)\)", cmake)
    if m:
        return m.group(1).split()
    return sorted(d for d in os.listdir(os.path.join(root, "ops"))
                  if os.path.isdir(os.path.join(root, "ops", d)) and d not in ("common", "core"))


def count_op(root, op):
    math = plumbing = spec = 0
    files = sorted(glob.glob(os.path.join(root, "ops", op, "*")))
    for path in files:
        name = os.path.basename(path)
        n = len(code_lines(read(path)))
        if name.endswith("_spec.cpp"):
            spec += n
        elif name.endswith("_kernel.cuh"):
            math += n
        elif name.endswith(".cu"):
            k = global_kernel_lines(read(path))
            math += k
            plumbing += n - k
        else:
            plumbing += n
    ref = os.path.join(root, "reference", "src", f"{op}_reference.cpp")
    if os.path.exists(ref):
        math += len(code_lines(read(ref)))
    ref_h = os.path.join(root, "reference", "include", "detops", "reference", f"{op}_reference.h")
    if os.path.exists(ref_h):
        plumbing += len(code_lines(read(ref_h)))
    spec_new = os.path.join(root, "suites", "specs", f"{op}.cpp")
    if os.path.exists(spec_new):
        spec += len(code_lines(read(spec_new)))
    return {"op": op, "files": len(files), "math": math, "plumbing": plumbing, "spec": spec}


def shared(root):
    out = {}
    for label, pattern in [("ops/common", "ops/common/*"), ("ops/core", "ops/core/include/detops/core/*"),
                           ("suites/specs/kit", "suites/specs/kit/*")]:
        paths = glob.glob(os.path.join(root, pattern))
        if paths:
            out[label] = sum(len(code_lines(read(p))) for p in paths if os.path.isfile(p))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", nargs="?", help="the tree (default: this script's checkout)")
    root = os.path.abspath(parser.parse_args().root or os.path.join(os.path.dirname(__file__), ".."))
    rows = [count_op(root, op) for op in ops_of(root)]
    print("| op | files in ops/<op> | math | plumbing | spec | plumbing / all | plumbing / (math + plumbing) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        mp = r["math"] + r["plumbing"]
        total = mp + r["spec"]
        print(f"| {r['op']} | {r['files']} | {r['math']} | {r['plumbing']} | {r['spec']} | "
              f"{100.0 * r['plumbing'] / total if total else 0:.0f}% | {100.0 * r['plumbing'] / mp if mp else 0:.0f}% |")
    for label, n in shared(root).items():
        print(f"| shared: {label} | | | {n} | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
