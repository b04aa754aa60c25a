#!/usr/bin/env python3
"""Checks that no source file includes across a layer it may not see (docs/architecture.md, "Layers").

The layers, from the bottom:
  ops/core     the dtype enum, the CUDA error macros, the kernel-facts types: plain headers both the ops
               and the harness may use. Sees nothing else of ours.
  ops          the product: kernels, CPU code, launchers, torch bindings. Sees ops/ and ops/core only.
               libtorch headers (<torch/...>, <ATen/...>, <c10/...>) only in the bindings: files named
               *_torch.cpp / *_torch.h, and ops/common/torch_*.h.
  reference    the Eigen fp64 references. Sees its own headers and, of the ops, only the parameter
               structs (ops/<op>/<op>_params.h). No libtorch, no CUDA.
  harness      comparison, tolerances, registry, checks, timing, records. Sees its own headers and
               ops/core. Never an op or a reference.
  suites       the op specs (suites/specs), the case kits and the executables: the one layer that binds
               ops, references and harness. Sees everything.

A quoted include is resolved the way the compiler would (the including file's folder, then the layer's
include roots); an include that resolves only through a root the layer may not see, or nowhere, is a
violation, and so is any quoted include that climbs with "..". Exit status: 0 clean, 1 violations
(one line each: file:line: what and why), 2 usage.

  check_layers.py --root DIR        check the tree at DIR
  check_layers.py --self-test       copy the tree to a temporary folder, plant one forbidden include per
                                    rule, one at a time, and check that each is reported
"""
import argparse
import os
import re
import shutil
import sys
import tempfile

SOURCE_SUFFIXES = (".h", ".hpp", ".cuh", ".cpp", ".cc", ".cu")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
LIBTORCH_RE = re.compile(r"^(torch|ATen|c10)/")
CUDA_RE = re.compile(r"^(cuda|cuda_runtime|cuda_runtime_api|cuda_fp16|cuda_bf16|cupti)(\.h|_[a-z_]+\.h)$")
PARAMS_RE = re.compile(r"^ops/([a-z0-9_]+)/([a-z0-9_]+)_params\.h$")

# Include roots each layer may resolve quoted includes through (relative to the tree's root).
ROOTS = {
    "ops/core": ["ops/core/include"],
    "ops": ["ops", "ops/core/include"],
    "reference": ["reference/include", "ops"],  # ops/ only for <op>/<op>_params.h (checked below)
    "harness": ["harness/include", "ops/core/include"],
    "suites": ["suites", "suites/specs", "ops", "ops/core/include", "reference/include", "harness/include"],
}
# What a layer's include may land in (paths relative to the root); anything else is a crossing.
ALLOWED_TARGETS = {
    "ops/core": ["ops/core/"],
    "ops": ["ops/"],
    "reference": ["reference/"],  # plus the params headers
    "harness": ["harness/", "ops/core/"],
    "suites": ["suites/", "ops/", "reference/", "harness/"],
}


def layer_of(rel):
    if rel.startswith("ops/core/"):
        return "ops/core"
    for layer in ("ops", "reference", "harness", "suites"):
        if rel.startswith(layer + "/"):
            return layer
    return None


def torch_allowed(rel):
    name = os.path.basename(rel)
    stem = os.path.splitext(name)[0]
    return stem.endswith("_torch") or (rel.startswith("ops/common/") and name.startswith("torch_"))


def resolve(root, rel, target, layer):
    """The include's file, relative to root, as the compiler would find it; None if nowhere."""
    here = os.path.dirname(rel)
    for base in [here] + ROOTS[layer]:
        candidate = os.path.normpath(os.path.join(base, target))
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate
    return None


def check_file(root, rel):
    layer = layer_of(rel)
    problems = []
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    for number, line in enumerate(lines, start=1):
        m = INCLUDE_RE.match(line)
        if not m:
            continue
        kind, target = m.groups()
        where = f"{rel}:{number}"
        if kind == "<":
            if LIBTORCH_RE.match(target):
                if layer in ("ops/core", "reference"):
                    problems.append(f"{where}: <{target}>: {layer} must not include libtorch")
                elif layer == "ops" and not torch_allowed(rel):
                    problems.append(f"{where}: <{target}>: libtorch headers belong in the bindings only "
                                    "(*_torch.cpp, *_torch.h, ops/common/torch_*.h), not in kernels, "
                                    "launchers or CPU code")
            elif layer == "reference" and CUDA_RE.match(target):
                problems.append(f"{where}: <{target}>: the references are plain C++ (no CUDA)")
            elif layer in ("ops", "ops/core", "harness") and target.startswith(("Eigen/", "unsupported/Eigen")):
                problems.append(f"{where}: <{target}>: Eigen is the references' (the product and the harness "
                                "do not use it)")
            continue
        if ".." in target.split("/"):
            problems.append(f'{where}: "{target}": climbs out with "..": include through the layer\'s roots')
            continue
        found = resolve(root, rel, target, layer)
        if found is None:
            problems.append(f'{where}: "{target}": not found from {layer} (its include roots: '
                            f'{", ".join(ROOTS[layer])}); a header of another layer it may not see?')
            continue
        if layer == "reference" and found.startswith("ops/"):
            p = PARAMS_RE.match(found)
            if not (p and p.group(1) == p.group(2)):
                problems.append(f'{where}: "{target}" -> {found}: the references see only the ops\' '
                                "parameter structs (ops/<op>/<op>_params.h)")
            continue
        if not any(found.startswith(prefix) for prefix in ALLOWED_TARGETS[layer]):
            problems.append(f'{where}: "{target}" -> {found}: {layer} may not include {layer_of(found) or found}')
    return problems


def source_files(root):
    for layer in ("ops", "reference", "harness", "suites"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, layer)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def check_tree(root):
    problems = []
    count = 0
    for rel in source_files(root):
        count += 1
        problems.extend(check_file(root, rel))
    return count, problems


# One planted include per rule: (file to plant in, line to add, words the report must contain).
PLANTS = [
    ("ops/roi_align/roi_align_cuda.cu", '#include "detops/harness/op_spec.h"', "not found from ops"),
    ("ops/roi_align/roi_align_cpu.cpp", '#include "../../harness/include/detops/harness/compare.h"', "climbs out"),
    ("ops/roi_align/roi_align_kernel.cuh", "#include <ATen/core/Tensor.h>", "bindings only"),
    ("ops/core/include/detops/core/dtype.h", '#include "common/macros.h"', "not found from ops/core"),
    ("reference/src/roi_align_reference.cpp", '#include "common/dispatch.h"', "parameter structs"),
    ("reference/src/roi_align_reference.cpp", '#include "roi_align/roi_align.h"', "parameter structs"),
    ("reference/src/roi_align_reference.cpp", "#include <ATen/ATen.h>", "must not include libtorch"),
    ("harness/src/compare.cpp", '#include "common/kernel_registry.h"', "not found from harness"),
    ("harness/src/checks.cpp", '#include "detops/reference/tensor.h"', "not found from harness"),
]


def self_test(root):
    failures = []
    with tempfile.TemporaryDirectory(prefix="detops_layers_") as tmp:
        copy = os.path.join(tmp, "tree")
        for layer in ("ops", "reference", "harness", "suites"):
            shutil.copytree(os.path.join(root, layer), os.path.join(copy, layer),
                            ignore=shutil.ignore_patterns(".*", "__pycache__"))
        count, baseline = check_tree(copy)  # whether the tree itself is clean is the `layering` test's
        for path, line, words in PLANTS:
            target = os.path.join(copy, path)
            if not os.path.isfile(target):
                failures.append(f"cannot plant in {path}: no such file")
                continue
            with open(target, encoding="utf-8") as f:
                original = f.read()
            with open(target, "w", encoding="utf-8") as f:
                f.write(line + "\n" + original)
            _, planted = check_tree(copy)
            new = [p for p in planted if p not in baseline]
            caught = [p for p in new if p.startswith(path + ":1:") and words in p]
            if not caught:
                failures.append(f"planted {line!r} in {path}: not reported (expected a line with {words!r}); "
                                f"got: {planted}")
            else:
                print(f"caught: {caught[0]}")
            with open(target, "w", encoding="utf-8") as f:
                f.write(original)
    for failure in failures:
        print(f"self-test FAILED: {failure}")
    if not failures:
        print(f"self-test passed: each of {len(PLANTS)} planted forbidden includes caught, in a copy of "
              f"{count} files")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    for layer in ("ops", "reference", "harness", "suites"):
        if not os.path.isdir(os.path.join(root, layer)):
            print(f"check_layers: {root} has no {layer}/ folder: not a DetOps tree", file=sys.stderr)
            return 2
    if args.self_test:
        return self_test(root)
    count, problems = check_tree(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) cross a layer, in {count} files (docs/architecture.md, \"Layers\")")
        return 1
    print(f"layers clean: {count} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
