#!/usr/bin/env python3
"""Compares two DetOps run records, baseline vs candidate, and decides regressions.

Per benchmark (op/case/dtype/direction) the verdict is SAME, FASTER, SLOWER or UNSURE, from the
per-repetition medians of both sides (docs/compare.md has the rule). Correctness changes (a test that
passed and now fails, tests missing from one side, errors that grew towards their tolerance) are listed,
and with --cross-build the records may come from different toolkits, drivers and libtorch versions; the
op output dumps of both runs are then compared too.

Prints a markdown report; --json-out writes the same as JSON.
Exit codes: 0 no regression, 1 a confirmed gating SLOWER or a gating correctness change,
2 usage error, unreadable or invalid record, or records that cannot be compared (different GPU models;
different builds without --cross-build).

Standard library and numpy only.
"""
import argparse
import collections
import fnmatch
import gzip
import json
import lzma
import math
import pathlib
import re
import sys
import zlib
from fractions import Fraction

import numpy as np

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2

DEFAULT_THRESHOLD = 1.05         # candidate/baseline median ratio that counts as a change
ALPHA = 0.01                     # two-sided Mann-Whitney U significance level
OVERLAP_FRACTION = 0.005         # [min, q3] intervals may overlap by at most this fraction of the baseline median
MIN_GATING_REPETITIONS = 9       # per side; fewer and the verdict is reported but does not gate
EXACT_MAX_N = 50                 # exact Mann-Whitney p-value up to this many values per side (no ties)
TOLERANCE_USE_LIMIT = 0.5        # error-growth rule: see correctness_tolerance_use
ERROR_GROWTH_FACTOR = 2.0

SCHEMA_PATH = pathlib.Path(__file__).resolve().parent.parent / "docs" / "record.schema.json"

# The harness-wide tolerance table (harness/include/detops/harness/tolerance.h), used for output dumps
# whose test carries no atol/rtol of its own.
DEFAULT_TOLERANCE = {"fp64": (1e-10, 1e-10), "fp32": (1e-5, 1e-5), "fp16": (1e-3, 2e-3), "bf16": (8e-3, 1.6e-2)}

FAILING_OUTCOMES = ("mismatch", "error")
NOT_RUN_OUTCOMES = ("skipped", "not_supported")
TIME_UNIT_TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


class RecordError(Exception):
    """A record that cannot be read or compared; the command exits with EXIT_USAGE."""


# ---------------------------------------------------------------------------------------------------
# Mann-Whitney U


def rank_with_ties(values):
    """1-based ranks of values; tied values share the average of their ranks."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=np.float64)
    i = 0
    n = len(values)
    while i < n:
        j = i
        while j + 1 < n and values[order[j + 1]] == values[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def u_distribution(n1, n2):
    """Number of orderings of n1 + n2 distinct values that give each U in 0..n1*n2 (exact integers).

    These are the coefficients of the Gaussian binomial [n1+n2 choose n1]_q = prod_{i=1..n1}
    (1 - q^(n2+i)) / (1 - q^i), built factor by factor: multiply by (1 - q^(n2+i)), then divide by
    (1 - q^i) as a power series (a running sum). Truncating at degree n1*n2 is exact because every
    partial product [n2+i choose i]_q has degree i*n2 <= n1*n2 and series division only looks back.
    """
    if n1 < 0 or n2 < 0:
        raise ValueError("sample sizes must be >= 0")
    size = n1 * n2 + 1
    c = [0] * size
    c[0] = 1
    for i in range(1, n1 + 1):
        k = n2 + i
        for u in range(size - 1, k - 1, -1):
            c[u] -= c[u - k]
        for u in range(i, size):
            c[u] += c[u - i]
    return c


class MannWhitneyResult(collections.namedtuple("MannWhitneyResult", "u p_value method")):
    """u: the U statistic of the first sample (count of pairs x > y, ties 1/2); method: exact | normal."""


def mann_whitney_u(x, y, method="auto"):
    """Two-sided Mann-Whitney U test of x against y.

    method "exact": the exact null distribution (u_distribution), p = 2 * P(U >= max(U_x, U_y)), capped
    at 1; allowed only without ties. "normal": the normal approximation with tie correction and
    continuity correction, z = (|U_x - n1 n2 / 2| - 1/2) / sigma. "auto": exact when there are no ties and
    both samples have at most EXACT_MAX_N values, else normal.
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError(f"mann_whitney_u needs values on both sides, got {n1} and {n2}")
    if np.isnan(x).any() or np.isnan(y).any():
        raise ValueError("mann_whitney_u: NaN among the values")
    combined = np.concatenate([x, y])
    ranks = rank_with_ties(combined)
    u_x = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    u_y = n1 * n2 - u_x
    ties = len(np.unique(combined)) < len(combined)
    if method == "auto":
        method = "exact" if not ties and n1 <= EXACT_MAX_N and n2 <= EXACT_MAX_N else "normal"
    if method == "exact":
        if ties:
            raise ValueError("mann_whitney_u: the exact p-value needs values without ties")
        counts = u_distribution(n1, n2)
        u_big = int(round(max(u_x, u_y)))
        tail = sum(counts[u_big:])
        p = min(Fraction(1), Fraction(2 * tail, math.comb(n1 + n2, n1)))
        return MannWhitneyResult(u_x, float(p), "exact")
    if method != "normal":
        raise ValueError(f"mann_whitney_u: method must be auto, exact or normal, got {method!r}")
    n = n1 + n2
    _, tie_sizes = np.unique(combined, return_counts=True)
    tie_term = float(np.sum(tie_sizes.astype(np.float64) ** 3 - tie_sizes)) / (n * (n - 1)) if n > 1 else 0.0
    variance = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    if variance <= 0:
        return MannWhitneyResult(u_x, 1.0, "normal")  # every value tied: no evidence of a difference
    z = (abs(u_x - n1 * n2 / 2.0) - 0.5) / math.sqrt(variance)
    p = math.erfc(max(z, 0.0) / math.sqrt(2.0))
    return MannWhitneyResult(u_x, min(1.0, p), "normal")


# ---------------------------------------------------------------------------------------------------
# Records


MAX_DECOMPRESSED_BYTES = 1 << 30  # a full record is ~40 MB uncompressed


def read_record_text(path):
    """The text of a record file: plain JSON, or gzip- or xz-compressed JSON (told by its first bytes, not its
    name: committed records are stored as .json.gz to keep the repository small)."""
    with open(path, "rb") as f:
        head = f.read(6)
        f.seek(0)
        if head[:2] == b"\x1f\x8b":
            opener = lambda: gzip.GzipFile(fileobj=f)
        elif head == b"\xfd7zXZ\x00":
            opener = lambda: lzma.LZMAFile(f)
        else:
            return f.read().decode("utf-8")
        # Decompressed in chunks, up to a bound: a small corrupt or hostile file must not exhaust memory.
        chunks, size = [], 0
        try:
            with opener() as z:
                while True:
                    chunk = z.read(1 << 20)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > MAX_DECOMPRESSED_BYTES:
                        raise RecordError(f"{path}: decompresses to more than {MAX_DECOMPRESSED_BYTES >> 20} MiB; "
                                          "expected a run record (tens of MB)")
                    chunks.append(chunk)
        except (OSError, EOFError, lzma.LZMAError, zlib.error) as e:
            raise RecordError(f"{path}: compressed record cannot be decompressed (truncated or corrupt): {e}") from None
    return b"".join(chunks).decode("utf-8")


def attach_output_dumps(record_path):
    """Points a run's record at the output dumps beside it (outputs/index.json, written by the correctness
    suite with DETOPS_SAVE_OUTPUTS), for compare --cross-build. Returns whether there were any."""
    record_path = pathlib.Path(record_path)
    if not (record_path.parent / "outputs" / "index.json").is_file():
        return False
    rec = json.loads(record_path.read_text())
    rec["outputs"] = {"dir": "outputs", "index": "outputs/index.json"}
    tmp = record_path.with_name(record_path.name + ".tmp")
    tmp.write_text(json.dumps(rec, indent=1))
    tmp.replace(record_path)
    return True


def load_record(path):
    try:
        rec = json.loads(read_record_text(path))
    except OSError as e:
        raise RecordError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise RecordError(f"{path} is not JSON: {e}") from None
    except UnicodeDecodeError as e:
        raise RecordError(f"{path} is not JSON: not UTF-8 text (byte {e.start})") from None
    except RecursionError:
        raise RecordError(f"{path}: JSON nested too deeply to read") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("benchmarks"), list) or not isinstance(rec.get("context"), dict):
        raise RecordError(f"{path} is not a benchmark record: expected an object with 'context' and 'benchmarks'")
    return rec


def is_detops_record(rec):
    return "detops_schema_version" in rec.get("context", {})


def _json_type_ok(value, t):
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    if t == "string":
        return isinstance(value, str)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "null":
        return value is None
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or (isinstance(value, float) and value.is_integer())
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    raise ValueError(f"record.schema.json uses type {t!r}, which the built-in validator does not know")


# The keywords of docs/record.schema.json that the built-in validator implements (annotations need nothing);
# a schema using any other keyword makes it fail loudly rather than pass a record it did not check.
_SCHEMA_KEYWORDS = {"type", "$ref", "properties", "required", "minLength", "minimum", "maximum", "enum", "items",
                    "const", "pattern", "if", "then", "allOf", "minItems"}
_SCHEMA_ANNOTATIONS = {"description", "title", "$schema", "$id", "$defs", "$comment", "default", "examples"}


def _builtin_errors(schema, node, value, path, errors):
    """Draft 2020-12 validation of `value` against `node` for the keywords record.schema.json uses; appends
    (path, message) pairs with messages in jsonschema's words."""
    unknown = set(node) - _SCHEMA_KEYWORDS - _SCHEMA_ANNOTATIONS
    if unknown:
        raise ValueError(f"record.schema.json uses {sorted(unknown)}, which the built-in validator does not implement")
    if "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"record.schema.json: unsupported $ref {ref!r}")
        _builtin_errors(schema, schema["$defs"][ref[len("#/$defs/"):]], value, path, errors)
    if "type" in node:
        types = node["type"] if isinstance(node["type"], list) else [node["type"]]
        if not any(_json_type_ok(value, t) for t in types):
            errors.append((path, f"{value!r} is not of type {', '.join(repr(t) for t in types)}"))
            return
    if "const" in node and value != node["const"]:
        errors.append((path, f"{node['const']!r} was expected"))
    if "enum" in node and value not in node["enum"]:
        errors.append((path, f"{value!r} is not one of {node['enum']!r}"))
    if isinstance(value, str):
        if "minLength" in node and len(value) < node["minLength"]:
            errors.append((path, f"{value!r} should be non-empty" if node["minLength"] == 1 else f"{value!r} is too short"))
        if "pattern" in node and not re.search(node["pattern"], value):
            errors.append((path, f"{value!r} does not match {node['pattern']!r}"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in node and not value >= node["minimum"]:
            errors.append((path, f"{value!r} is less than the minimum of {node['minimum']!r}"))
        if "maximum" in node and not value <= node["maximum"]:
            errors.append((path, f"{value!r} is greater than the maximum of {node['maximum']!r}"))
    if isinstance(value, dict):
        for key in node.get("required", []):
            if key not in value:
                errors.append((path, f"{key!r} is a required property"))
        for key, sub in node.get("properties", {}).items():
            if key in value:
                _builtin_errors(schema, sub, value[key], path + [key], errors)
    if isinstance(value, list):
        if "minItems" in node and len(value) < node["minItems"]:
            errors.append((path, f"{value!r} should be non-empty" if node["minItems"] == 1 else f"{value!r} is too short"))
        if "items" in node:
            for i, item in enumerate(value):
                _builtin_errors(schema, node["items"], item, path + [i], errors)
    for sub in node.get("allOf", []):
        _builtin_errors(schema, sub, value, path, errors)
    if "if" in node:
        probe = []
        _builtin_errors(schema, node["if"], value, path, probe)
        if not probe and "then" in node:
            _builtin_errors(schema, node["then"], value, path, errors)


def _plain_record_errors(rec):
    """What compare and report read of a plain Google Benchmark record, checked: its entries are objects with a
    string name, and an iteration entry has a known time_unit and a finite, non-negative real_time."""
    errors = []
    for i, e in enumerate(rec["benchmarks"]):
        if not isinstance(e, dict):
            errors.append(f"benchmarks/{i}: expected an object")
            continue
        name = e.get("run_name") or e.get("name")
        if not isinstance(name, str):
            errors.append(f"benchmarks/{i}: expected a string run_name or name")
        for k in ("run_type", "aggregate_name", "time_unit", "error_message"):
            if k in e and not isinstance(e[k], str):
                errors.append(f"benchmarks/{i}/{k}: expected a string")
        if e.get("run_type", "iteration") == "iteration" and not e.get("error_occurred"):
            v = e.get("real_time")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                errors.append(f"benchmarks/{i}/real_time: expected a finite number >= 0, got {v!r}")
            if e.get("time_unit", "ns") not in TIME_UNIT_TO_MS:
                errors.append(f"benchmarks/{i}/time_unit: expected one of {sorted(TIME_UNIT_TO_MS)}")
    return errors


def validate_record(rec, schema_path=SCHEMA_PATH, use_jsonschema=True):
    """Validates a DetOps record against docs/record.schema.json.

    Returns (status, errors): status is "valid", "invalid" or "not a DetOps record" (plain Google Benchmark
    JSON: no schema, but the fields compare reads are checked, and a plain record without them is "invalid");
    errors lists "<json path>: <message>" for an invalid record. The jsonschema package validates when it is
    installed (and use_jsonschema); otherwise the built-in validator of the schema's keywords does, so a record
    is never read unvalidated.
    """
    if not is_detops_record(rec):
        errors = _plain_record_errors(rec)
        return ("invalid" if errors else "not a DetOps record"), errors
    with open(schema_path) as f:
        schema = json.load(f)
    try:
        if not use_jsonschema:
            raise ImportError
        import jsonschema
    except ImportError:
        found = []
        _builtin_errors(schema, schema, rec, [], found)
        pairs = sorted(((list(map(str, p)), m) for p, m in found), key=lambda pm: pm[0])
    else:
        validator = jsonschema.Draft202012Validator(schema)
        pairs = [(list(map(str, e.absolute_path)), e.message)
                 for e in sorted(validator.iter_errors(rec), key=lambda e: list(map(str, e.absolute_path)))]
    errors = [f"{'/'.join(p) or '(record)'}: {m}" for p, m in pairs]
    return ("invalid" if errors else "valid"), errors


def cuda_version_text(v):
    """13000 -> '13.0' (CUDA's 1000*major + 10*minor encoding)."""
    if isinstance(v, int) and v > 0:
        return f"{v // 1000}.{(v % 1000) // 10}"
    return str(v) if v is not None else "?"


def provenance(rec):
    """The facts compare needs about a run, from the DetOps context (None where a record lacks them)."""
    ctx = rec.get("context", {})
    d = ctx.get("detops", {}) if is_detops_record(rec) else {}
    gpu = d.get("gpu", {})
    git = d.get("git", {})
    return {
        "detops": is_detops_record(rec),
        "run_id": d.get("run_id") or ctx.get("executable") or "?",
        "complete": d.get("complete"),
        "date": d.get("date") or ctx.get("date"),
        "host": d.get("host") or ctx.get("host_name"),
        "gpu_name": gpu.get("name"),
        "gpu": gpu,
        "driver_version": d.get("driver_version"),
        "cuda_runtime_version": d.get("cuda_runtime_version"),
        "cuda_driver_api_version": d.get("cuda_driver_api_version"),
        "cupti_version": d.get("cupti_version"),
        "nvcc_version": d.get("nvcc_version"),
        "nvcc_flags": d.get("nvcc_flags"),
        "cuda_archs": d.get("cuda_archs"),
        "sass_archs": d.get("sass_archs"),
        "kernel_images": d.get("kernel_images", {}),
        "libtorch_version": d.get("libtorch_version"),
        "libtorch_cuda_version": d.get("libtorch_cuda_version"),
        "git_sha": git.get("sha"),
        "git_dirty": git.get("dirty"),
        "timer": d.get("timer"),
        "timer_note": d.get("timer_note"),
        "copy_bandwidth": d.get("device_copy_bandwidth_bytes_per_second"),
        "settings": d.get("settings", {}),
    }


def build_label(p):
    """'CUDA 13.0 / driver 580.65 / torch 2.11.0': the build facts --cross-build lets differ."""
    if not p["detops"]:
        return "build unknown (plain Google Benchmark record)"
    return (f"CUDA {cuda_version_text(p['cuda_runtime_version'])} / driver {p['driver_version'] or '?'} / "
            f"torch {p['libtorch_version'] or '?'}")


def run_label(p):
    sha = (p["git_sha"] or "?")[:10] + ("+dirty" if p["git_dirty"] else "")
    return f"{p['run_id']} on {p['gpu_name'] or 'unknown GPU'}: {build_label(p)}, git {sha}, timer {p['timer'] or '?'}"


# The facts that make two runs different builds: without --cross-build they must match.
BUILD_FIELDS = (("cuda_runtime_version", "CUDA runtime"), ("nvcc_version", "nvcc"), ("driver_version", "driver"),
                ("libtorch_version", "libtorch"), ("libtorch_cuda_version", "libtorch's CUDA"))


def check_compatible(pb, pc, cross_build):
    """Returns (errors, warnings). Any error means the records cannot be compared."""
    errors, warnings = [], []
    if pb["gpu_name"] and pc["gpu_name"]:
        if pb["gpu_name"] != pc["gpu_name"]:
            errors.append(f"records from different GPU models: baseline {pb['gpu_name']!r}, candidate "
                          f"{pc['gpu_name']!r}; timings are only comparable on the same GPU model")
        elif pb["gpu"].get("compute_capability") != pc["gpu"].get("compute_capability"):
            errors.append(f"same GPU name but different compute capability: {pb['gpu'].get('compute_capability')} "
                          f"vs {pc['gpu'].get('compute_capability')}")
    else:
        for side, p in (("baseline", pb), ("candidate", pc)):
            if not p["gpu_name"]:
                warnings.append(f"the {side} record names no GPU (not a DetOps record): the same-GPU check was not possible")
    if pb["detops"] and pc["detops"]:
        diffs = [f"{label} {pb[k]} vs {pc[k]}" for k, label in BUILD_FIELDS if pb[k] != pc[k]]
        if diffs and not cross_build:
            errors.append("records from different builds (" + "; ".join(diffs) + "): pass --cross-build to compare "
                          "across toolkit, driver and libtorch versions")
        for k, label in (("cuda_archs", "CUDA archs"), ("sass_archs", "SASS archs")):
            if pb[k] != pc[k]:
                warnings.append(f"{label} differ: {pb[k]} vs {pc[k]}")
        if pb["timer"] != pc["timer"]:
            warnings.append(f"different timers: baseline {pb['timer']}, candidate {pc['timer']} "
                            "(CUDA events include launch gaps that CUPTI kernel time does not)")
        for key in sorted(set(pb["settings"]) | set(pc["settings"])):
            if pb["settings"].get(key) != pc["settings"].get(key):
                warnings.append(f"measurement setting {key} differs: {pb['settings'].get(key)} vs {pc['settings'].get(key)}")
        jit_b = pb["kernel_images"].get("ptx_jit")
        jit_c = pc["kernel_images"].get("ptx_jit")
        if jit_c and not jit_b:
            warnings.append(f"candidate runs {jit_c} kernels from JIT-compiled PTX (baseline: none)")
    for side, p in (("baseline", pb), ("candidate", pc)):
        if p["complete"] is False:
            warnings.append(f"the {side} record is incomplete (the run died or is still going): missing entries are expected")
    return errors, warnings


class Benchmark:
    """One benchmark of one record: its identity and the per-repetition medians compare decides on."""

    def __init__(self, key, op, case, dtype, direction, repetition_medians_ms, source, detops=None, error=None):
        self.key = key
        self.op, self.case, self.dtype, self.direction = op, case, dtype, direction
        self.repetition_medians_ms = np.asarray(repetition_medians_ms, dtype=np.float64)
        self.source = source      # "detops" (repetition_medians_ms) | "iterations" (GB repetition entries)
        self.detops = detops or {}
        self.error = error        # Google Benchmark's error_message when the benchmark did not run


def _split_name(run_name):
    parts = run_name.split("/")
    if len(parts) >= 4:
        return "/".join(parts[:4]), parts[0], parts[1], parts[2], parts[3]
    return run_name, parts[0], "/".join(parts[1:]) or "-", "-", "-"


def extract_benchmarks(rec):
    """Maps benchmark key ('op/case/dtype/direction') to Benchmark.

    Uses the DetOps measurement of the aggregate 'median' entry when present, else Google Benchmark's
    per-repetition 'iteration' entries (real_time converted to ms).
    """
    groups = collections.OrderedDict()
    for e in rec.get("benchmarks", []):
        run_name = e.get("run_name") or e.get("name", "?")
        groups.setdefault(run_name, []).append(e)
    out = collections.OrderedDict()
    for run_name, entries in groups.items():
        median = next((e for e in entries if e.get("run_type") == "aggregate" and e.get("aggregate_name") == "median"
                       and isinstance(e.get("detops"), dict)), None)
        if median is not None:
            d = median["detops"]
            key = f"{d['op']}/{d['case']}/{d['dtype']}/{d['direction']}"
            out[key] = Benchmark(key, d["op"], d["case"], d["dtype"], d["direction"],
                                 d.get("repetition_medians_ms", []), "detops", detops=d)
            continue
        key, op, case, dtype, direction = _split_name(run_name)
        errored = next((e for e in entries if e.get("error_occurred")), None)
        iterations = [e for e in entries if e.get("run_type", "iteration") == "iteration" and not e.get("error_occurred")]
        reps = []
        for e in iterations:
            unit = TIME_UNIT_TO_MS.get(e.get("time_unit", "ns"))
            if unit is None:
                raise RecordError(f"benchmark {e.get('name')}: unknown time_unit {e.get('time_unit')!r}")
            reps.append(float(e["real_time"]) * unit)
        error = errored.get("error_message", "error_occurred") if errored is not None and not reps else None
        out[key] = Benchmark(key, op, case, dtype, direction, reps, "iterations", error=error)
    return out


# ---------------------------------------------------------------------------------------------------
# The timing decision


def load_thresholds(path):
    """Thresholds file: a JSON object mapping a benchmark key or fnmatch pattern to a ratio > 1, e.g.
    {"nms/100k/fp32/fwd": 1.10, "roi_align/*/fp16/*": 1.08}. An exact key wins, else the first pattern
    in file order that matches, else DEFAULT_THRESHOLD."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise RecordError(f"cannot read the thresholds file {path}: {e}") from None
    if not isinstance(data, dict):
        raise RecordError(f"thresholds file {path}: expected an object mapping benchmark patterns to ratios")
    for k, v in data.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 1:
            raise RecordError(f"thresholds file {path}: {k!r} must map to a ratio > 1, got {v!r}")
    return data


def threshold_for(key, thresholds):
    if not thresholds:
        return DEFAULT_THRESHOLD
    if key in thresholds:
        return float(thresholds[key])
    for pattern, v in thresholds.items():
        if fnmatch.fnmatchcase(key, pattern):
            return float(v)
    return DEFAULT_THRESHOLD


def decide(baseline_ms, candidate_ms, threshold=DEFAULT_THRESHOLD):
    """The verdict for one benchmark from its per-repetition medians (see docs/compare.md).

    A change in the direction of the median ratio r = median(candidate) / median(baseline) is confirmed
    when all three conditions hold: r >= threshold (slower) or r <= 1/threshold (faster); two-sided
    Mann-Whitney U p < ALPHA; and the [min, q3] intervals of the two sides overlap by at most
    OVERLAP_FRACTION of the baseline median (the slower side's min against the faster side's q3).
    Size below the threshold: SAME (whatever the test says: a real but small change does not matter).
    Size and both others: SLOWER or FASTER. Size without both others: UNSURE. Gating needs
    MIN_GATING_REPETITIONS per side.
    """
    b = np.asarray(baseline_ms, dtype=np.float64)
    c = np.asarray(candidate_ms, dtype=np.float64)
    med_b, med_c = float(np.median(b)), float(np.median(c))
    ratio = med_c / med_b if med_b > 0 else math.inf
    mw = mann_whitney_u(c, b)
    q3_b, q3_c = float(np.percentile(b, 75)), float(np.percentile(c, 75))
    min_b, min_c = float(b.min()), float(c.min())
    slower_direction = ratio >= 1.0
    # Overlap of [min, q3] of the faster side with [min, q3] of the slower side, in ms (<= 0: disjoint).
    overlap = (q3_b - min_c) if slower_direction else (q3_c - min_b)
    conditions = {
        "ratio": ratio >= threshold if slower_direction else ratio <= 1.0 / threshold,
        "p_value": mw.p_value < ALPHA,
        "separated": overlap <= OVERLAP_FRACTION * med_b,
    }
    if not conditions["ratio"]:
        verdict = "SAME"  # any change is smaller than the threshold that matters
    elif conditions["p_value"] and conditions["separated"]:
        verdict = "SLOWER" if slower_direction else "FASTER"
    else:
        verdict = "UNSURE"  # as large as the threshold, but not statistically confirmed
    gating = len(b) >= MIN_GATING_REPETITIONS and len(c) >= MIN_GATING_REPETITIONS
    return {
        "baseline_repetitions": len(b), "candidate_repetitions": len(c),
        "baseline_median_ms": med_b, "candidate_median_ms": med_c, "ratio": ratio, "threshold": threshold,
        "p_value": mw.p_value, "p_method": mw.method,
        "baseline_interval_ms": [min_b, q3_b], "candidate_interval_ms": [min_c, q3_c], "overlap_ms": overlap,
        "conditions": conditions, "verdict": verdict, "gating": gating,
    }


def compare_benchmarks(bb, bc, thresholds=None):
    rows, only_baseline, only_candidate, not_run = [], [], [], []
    for key in sorted(set(bb) | set(bc)):
        b, c = bb.get(key), bc.get(key)
        if b is None:
            only_candidate.append(key)
            continue
        if c is None:
            only_baseline.append(key)
            continue
        empty = [(side, x) for side, x in (("baseline", b), ("candidate", c)) if len(x.repetition_medians_ms) == 0]
        if empty:
            not_run.append({"benchmark": key, "why": "; ".join(
                f"{side}: {x.error or 'no repetitions recorded'}" for side, x in empty)})
            continue
        row = {"benchmark": key, "op": c.op, "case": c.case, "dtype": c.dtype, "direction": c.direction,
               "source": {"baseline": b.source, "candidate": c.source}}
        row.update(decide(b.repetition_medians_ms, c.repetition_medians_ms, threshold_for(key, thresholds)))
        rows.append(row)
    return {"rows": rows, "only_in_baseline": only_baseline, "only_in_candidate": only_candidate, "not_run": not_run}


# ---------------------------------------------------------------------------------------------------
# Correctness


def correctness_tolerance_use(t):
    """An upper bound on the fraction of its tolerance a passed test used: min(max_abs/atol, max_rel/rtol).

    Every element passed |a - e| <= atol + rtol*|e|, so |a - e| / (atol + rtol*|e|) <= |a - e| / atol
    <= max_abs/atol, and <= |a - e| / (rtol*|e|) <= max_rel/rtol (elements with e != 0). None when the
    test lacks the figures.
    """
    try:
        a, r = float(t["max_abs_error"]), float(t["max_rel_error"])
        atol, rtol = float(t["atol"]), float(t["rtol"])
    except (KeyError, TypeError, ValueError):
        return None
    bounds = []
    if atol > 0:
        bounds.append(a / atol)
    if rtol > 0:
        bounds.append(r / rtol)
    return min(bounds) if bounds else None


def compare_correctness(rb, rc):
    """Lists correctness changes. Each change: test, kind, baseline, candidate, gating, detail.

    kinds: newly_failing (passed -> mismatch/error; gates), new_failing (a test only the candidate has,
    failing; reported), fixed, no_longer_runs (passed -> skipped/not_supported), error_grew (both passed;
    the tolerance-use bound went from <= 0.5 to > 0.5 and at least doubled), missing_in_candidate,
    new_in_candidate.
    """
    notes = []
    cb, cc = rb.get("correctness"), rc.get("correctness")
    for side, c in (("baseline", cb), ("candidate", cc)):
        if not isinstance(c, dict):
            notes.append(f"the {side} record has no correctness results")
    summary = {side: (c.get("summary") if isinstance(c, dict) else None) for side, c in (("baseline", cb), ("candidate", cc))}
    if notes:
        return {"changes": [], "notes": notes, "summary": summary}
    tb = {t["name"]: t for t in cb.get("tests", [])}
    tc = {t["name"]: t for t in cc.get("tests", [])}
    changes = []

    def add(name, kind, gating, detail=""):
        changes.append({"test": name, "kind": kind, "gating": gating,
                        "baseline": tb[name]["outcome"] if name in tb else None,
                        "candidate": tc[name]["outcome"] if name in tc else None, "detail": detail})

    for name in sorted(set(tb) | set(tc)):
        b, c = tb.get(name), tc.get(name)
        if b is None:
            if c["outcome"] in FAILING_OUTCOMES:
                add(name, "new_failing", False, c.get("message", ""))
            else:
                add(name, "new_in_candidate", False)
            continue
        if c is None:
            add(name, "missing_in_candidate", False)
            continue
        ob, oc = b["outcome"], c["outcome"]
        if ob == "passed" and oc in FAILING_OUTCOMES:
            add(name, "newly_failing", True, c.get("message", ""))
        elif ob in FAILING_OUTCOMES and oc == "passed":
            add(name, "fixed", False)
        elif ob == "passed" and oc in NOT_RUN_OUTCOMES:
            add(name, "no_longer_runs", False, c.get("message", ""))
        elif ob == "passed" and oc == "passed":
            ub, uc = correctness_tolerance_use(b), correctness_tolerance_use(c)
            if ub is not None and uc is not None and ub <= TOLERANCE_USE_LIMIT < uc and uc >= ERROR_GROWTH_FACTOR * ub:
                add(name, "error_grew", False,
                    f"tolerance use <= {ub:.3g} -> <= {uc:.3g} (max abs error {float(b['max_abs_error']):.3g} -> "
                    f"{float(c['max_abs_error']):.3g}, atol {float(c['atol']):.3g}, rtol {float(c['rtol']):.3g})")
    return {"changes": changes, "notes": notes, "summary": summary}


# ---------------------------------------------------------------------------------------------------
# Output dumps (cross-build numerics)


def load_output_index(rec, record_path):
    """Returns (index, folder holding the dump files, None) or (None, None, why there are none)."""
    outputs = rec.get("outputs")
    if not isinstance(outputs, dict) or not outputs.get("index"):
        return None, None, "the record names no output dumps (no 'outputs' entry; run the correctness suite with DETOPS_SAVE_OUTPUTS)"
    base = pathlib.Path(record_path).resolve().parent
    index_path = base / outputs["index"]
    try:
        with open(index_path) as f:
            index = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        return None, None, f"output index {index_path} unreadable: {e}"
    return index, index_path.parent, None


def _tolerance_for(name, dtype, tests):
    t = tests.get(name, {})
    try:
        return float(t["atol"]), float(t["rtol"])
    except (KeyError, TypeError, ValueError):
        return DEFAULT_TOLERANCE.get(dtype, (0.0, 0.0))


def compare_outputs(rb, path_b, rc, path_c):
    """Per op, device and dtype: how far the candidate's outputs moved from the baseline's.

    For each test in both indexes, with the same shape, element count and subsampling: max |c - b| and
    max |c - b| / (atol + rtol*|b|) with that test's tolerance (else the dtype's default). NaN matches NaN,
    +-inf must match exactly; other non-finite disagreements are counted apart.
    """
    ib, dir_b, why_b = load_output_index(rb, path_b)
    ic, dir_c, why_c = load_output_index(rc, path_c)
    result = {"available": ib is not None and ic is not None, "missing": [], "rows": [], "unmatched": []}
    if why_b:
        result["missing"].append(f"baseline: {why_b}")
    if why_c:
        result["missing"].append(f"candidate: {why_c}")
    if not result["available"]:
        return result
    tests = {t["name"]: t for t in (rc.get("correctness") or {}).get("tests", [])}
    for t in (rb.get("correctness") or {}).get("tests", []):
        tests.setdefault(t["name"], t)
    groups = collections.OrderedDict()
    only_b = sorted(set(ib) - set(ic))
    only_c = sorted(set(ic) - set(ib))
    if only_b:
        result["unmatched"].append(f"{len(only_b)} dumps only in the baseline (e.g. {only_b[0]})")
    if only_c:
        result["unmatched"].append(f"{len(only_c)} dumps only in the candidate (e.g. {only_c[0]})")
    for name in sorted(set(ib) & set(ic)):
        eb, ec = ib[name], ic[name]
        parts = name.split(".")
        op, device = parts[0], parts[-1] if len(parts) > 1 else "-"
        dtype = ec.get("dtype", "-")
        g = groups.setdefault((op, device, dtype), {"op": op, "device": device, "dtype": dtype, "compared": 0,
                                                    "identical": 0, "max_abs_diff": 0.0, "max_diff_over_tolerance": 0.0,
                                                    "worst_test": None, "nonfinite_mismatches": 0, "elements": 0,
                                                    "not_comparable": 0, "subsampled": 0})
        if (eb.get("shape") != ec.get("shape") or eb.get("elements_saved") != ec.get("elements_saved")
                or bool(eb.get("subsampled")) != bool(ec.get("subsampled"))):
            g["not_comparable"] += 1
            result["unmatched"].append(f"{name}: shape/elements/subsampling differ between the dumps")
            continue
        try:
            vb = np.fromfile(dir_b / eb["file"], dtype="<f8")
            vc = np.fromfile(dir_c / ec["file"], dtype="<f8")
        except (OSError, KeyError) as e:
            g["not_comparable"] += 1
            result["unmatched"].append(f"{name}: dump file unreadable ({e})")
            continue
        if len(vb) != len(vc) or len(vb) != int(eb.get("elements_saved", len(vb))):
            g["not_comparable"] += 1
            result["unmatched"].append(f"{name}: dump files hold {len(vb)} and {len(vc)} values, index says {eb.get('elements_saved')}")
            continue
        atol, rtol = _tolerance_for(name, dtype, tests)
        finite = np.isfinite(vb) & np.isfinite(vc)
        same_nonfinite = (~finite) & ((np.isnan(vb) & np.isnan(vc)) | (vb == vc))
        g["nonfinite_mismatches"] += int(np.count_nonzero(~finite & ~same_nonfinite))
        diff = np.abs(vc[finite] - vb[finite])
        g["compared"] += 1
        g["elements"] += len(vb)
        g["subsampled"] += int(bool(ec.get("subsampled")))
        identical = np.array_equal(vb.view(np.uint64)[finite], vc.view(np.uint64)[finite]) and bool(np.all(same_nonfinite | finite))
        g["identical"] += int(identical)
        if diff.size:
            g["max_abs_diff"] = max(g["max_abs_diff"], float(diff.max()))
            bound = atol + rtol * np.abs(vb[finite])
            with np.errstate(divide="ignore", invalid="ignore"):
                over = np.where(bound > 0, diff / bound, np.where(diff > 0, np.inf, 0.0))
            worst = float(over.max())
            if worst > g["max_diff_over_tolerance"]:
                g["max_diff_over_tolerance"] = worst
                g["worst_test"] = name
    result["rows"] = list(groups.values())
    return result


# ---------------------------------------------------------------------------------------------------
# The whole comparison and its rendering


def peer_key(e):
    return f"{e.get('op')}/{e.get('case')}/{e.get('dtype')}/{e.get('direction')}"


def compare_peers(rb, rc):
    """The candidate's torchvision peer entries (docs/peers.md), each with the baseline's speed-up for the same
    op/case/dtype/direction when the baseline has one. Informational: never gates."""
    base = {peer_key(e): e for e in rb.get("peers") or []}
    rows = []
    for e in rc.get("peers") or []:
        b = base.get(peer_key(e))
        rows.append({**e, "key": peer_key(e), "baseline_speedup": b.get("speedup") if b else None})
    return {"rows": rows, "baseline_has_peers": bool(base)}


# A correctness outcome -> the summary count it adds to (as the C++ digest counts; merge_records recounts with it).
SUMMARY_KEY = {"passed": "passed", "mismatch": "failed", "error": "errors"}


def restrict_to_ops(rec, ops):
    """A shallow copy of rec holding only the benchmarks, correctness tests and peer entries of these ops (the first
    component of a benchmark's or test's name; the quick gate's scope, scripts/gate_scope.py)."""
    ops = set(ops)
    out = dict(rec)
    out["benchmarks"] = [b for b in rec.get("benchmarks", []) if str(b.get("name", "")).split("/")[0] in ops]
    corr = rec.get("correctness")
    if isinstance(corr, dict) and isinstance(corr.get("tests"), list):
        tests = [t for t in corr["tests"] if isinstance(t, dict) and str(t.get("name", "")).split(".")[0] in ops]
        summary = collections.Counter(SUMMARY_KEY.get(t.get("outcome"), "skipped") for t in tests)
        out["correctness"] = dict(corr, tests=tests,
                                  summary={k: summary[k] for k in ("passed", "failed", "skipped", "errors")})
    if isinstance(rec.get("peers"), list):
        out["peers"] = [e for e in rec["peers"] if isinstance(e, dict) and e.get("op") in ops]
    return out


def compare_records(path_b, path_c, thresholds_path=None, cross_build=False, scope=None):
    """Loads, validates and compares two records. Raises RecordError when they cannot be compared. scope: op names
    (the quick gate): only their benchmarks, tests and peer entries are compared, on both sides, by the same rule."""
    rb, rc = load_record(path_b), load_record(path_c)
    notes = []
    for side, path, rec in (("baseline", path_b, rb), ("candidate", path_c, rc)):
        status, errors = validate_record(rec)
        if status == "invalid":
            shown = "\n  ".join(errors[:10]) + (f"\n  ... and {len(errors) - 10} more" if len(errors) > 10 else "")
            raise RecordError(f"the {side} record {path} does not match docs/record.schema.json:\n  {shown}")
        if status != "valid":
            notes.append(f"{side} schema validation {status}")
    pb, pc = provenance(rb), provenance(rc)
    errors, warnings = check_compatible(pb, pc, cross_build)
    if errors:
        raise RecordError("cannot compare these records: " + "; ".join(errors))
    thresholds = load_thresholds(thresholds_path) if thresholds_path else None
    if scope is not None:
        full = {side: len(extract_benchmarks(r)) for side, r in (("baseline", rb), ("candidate", rc))}
        rb, rc = restrict_to_ops(rb, scope), restrict_to_ops(rc, scope)
        present = {b.op for b in extract_benchmarks(rb).values()} | {
            str(t.get("name", "")).split(".")[0] for t in (rb.get("correctness") or {}).get("tests", [])}
        unknown = sorted(set(scope) - present)
        if unknown:  # a misspelt op would otherwise compare nothing and pass
            raise RecordError(f"--scope: {', '.join(unknown)}: no benchmark or correctness test of that op in the "
                              f"baseline {path_b}")
        notes.append(f"quick gate: scope {', '.join(sorted(scope))}; {full['baseline'] - len(extract_benchmarks(rb))} "
                     f"baseline benchmarks of other ops not compared (the full gate compares every op)")
    bench = compare_benchmarks(extract_benchmarks(rb), extract_benchmarks(rc), thresholds)
    corr = compare_correctness(rb, rc)
    outputs = compare_outputs(rb, path_b, rc, path_c)
    confirmed_slower = [r["benchmark"] for r in bench["rows"] if r["verdict"] == "SLOWER" and r["gating"]]
    gating_correctness = [c["test"] for c in corr["changes"] if c["gating"]]
    exit_code = EXIT_REGRESSION if confirmed_slower or gating_correctness else EXIT_OK
    return {
        "format": "detops-compare/1",
        "baseline": {"path": str(path_b), "label": run_label(pb), "build": build_label(pb), **_public(pb)},
        "candidate": {"path": str(path_c), "label": run_label(pc), "build": build_label(pc), **_public(pc)},
        "cross_build": cross_build,
        "scope": sorted(scope) if scope is not None else None,
        "rule": {"threshold": DEFAULT_THRESHOLD, "thresholds_file": str(thresholds_path) if thresholds_path else None,
                 "alpha": ALPHA, "overlap_fraction": OVERLAP_FRACTION, "min_gating_repetitions": MIN_GATING_REPETITIONS},
        "notes": notes, "warnings": warnings,
        "benchmarks": bench, "correctness": corr, "outputs": outputs, "peers": compare_peers(rb, rc),
        "confirmed_slower": confirmed_slower, "gating_correctness_changes": gating_correctness,
        "faster": [r["benchmark"] for r in bench["rows"] if r["verdict"] == "FASTER"],
        "exit_code": exit_code,
    }


def _public(p):
    return {k: p[k] for k in ("run_id", "gpu_name", "driver_version", "cuda_runtime_version", "nvcc_version",
                              "cuda_archs", "sass_archs", "libtorch_version", "git_sha", "git_dirty", "timer",
                              "complete", "date")}


def fmt_ms(v):
    return f"{v:#.4g}"


def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


def fmt_p(p):
    return f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def verdict_text(row, markdown=True):
    v = row["verdict"]
    if not row["gating"]:
        return f"{v} (not gating: {row['baseline_repetitions']}/{row['candidate_repetitions']} reps)"
    if markdown and v == "SLOWER":
        return "**SLOWER**"
    return v


CHANGE_TEXT = {
    "newly_failing": "now fails", "new_failing": "new test, fails", "fixed": "fixed",
    "no_longer_runs": "no longer runs", "error_grew": "error grew", "missing_in_candidate": "missing in candidate",
    "new_in_candidate": "new in candidate",
}


def render_markdown(result, max_listed=25):
    out = ["## DetOps compare", ""]
    out.append(f"- baseline: {result['baseline']['label']}")
    out.append(f"- candidate: {result['candidate']['label']}")
    if result["cross_build"]:
        out.append(f"- cross-build: {result['baseline']['build']} vs {result['candidate']['build']}")
        code = lambda side: (f"nvcc {side.get('nvcc_version') or '?'}, CUDA architectures {side.get('cuda_archs') or '?'}"
                             f" (SASS: {side.get('sass_archs') or 'none'})")
        out.append(f"- compiled by: {code(result['baseline'])} vs {code(result['candidate'])}")
    rule = result["rule"]
    out.append(f"- rule: per-repetition medians; SLOWER/FASTER when ratio >= {rule['threshold']} (or its inverse"
               f"{', or per-benchmark thresholds' if rule['thresholds_file'] else ''}), Mann-Whitney p < {rule['alpha']} and "
               f"[min, q3] overlap <= {rule['overlap_fraction'] * 100:g}% of the median; gating needs >= "
               f"{rule['min_gating_repetitions']} repetitions per side")
    for n in result["notes"]:
        out.append(f"- note: {n}")
    for w in result["warnings"]:
        out.append(f"- warning: {w}")
    out.append("")

    bench = result["benchmarks"]
    rows = bench["rows"]
    counts = collections.Counter(r["verdict"] for r in rows)
    out.append(f"### Benchmarks: {len(rows)} compared (" + ", ".join(
        f"{counts[v]} {v}" for v in ("SAME", "FASTER", "SLOWER", "UNSURE") if counts[v]) + ")" if rows else
        "### Benchmarks: none in common")
    out.append("")
    if rows:
        out.append("| op | case | dtype | direction | baseline median (ms) | candidate median (ms) | ratio | p-value | verdict |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            out.append(f"| {r['op']} | {r['case']} | {r['dtype']} | {r['direction']} | {fmt_ms(r['baseline_median_ms'])} | "
                       f"{fmt_ms(r['candidate_median_ms'])} | {r['ratio']:.3f} | {fmt_p(r['p_value'])} | {verdict_text(r)} |")
        out.append("")
    non_gating = [r for r in rows if not r["gating"]]
    if non_gating:
        out.append(f"{plural(len(non_gating), 'verdict')} not gating: fewer than {rule['min_gating_repetitions']} repetitions on a side.")
        out.append("")
    for label, keys in (("Only in the baseline", bench["only_in_baseline"]), ("Only in the candidate", bench["only_in_candidate"])):
        if keys:
            out.append(f"{label} ({len(keys)}): " + ", ".join(keys[:max_listed]) + (" ..." if len(keys) > max_listed else ""))
            out.append("")
    for nr in bench["not_run"]:
        out.append(f"Not compared: {nr['benchmark']} ({nr['why']})")
    if bench["not_run"]:
        out.append("")

    corr = result["correctness"]
    out.append("### Correctness changes")
    out.append("")
    for n in corr["notes"]:
        out.append(f"- {n}")
    listed = [c for c in corr["changes"] if c["kind"] not in ("missing_in_candidate", "new_in_candidate")]
    missing = [c["test"] for c in corr["changes"] if c["kind"] == "missing_in_candidate"]
    new = [c["test"] for c in corr["changes"] if c["kind"] == "new_in_candidate"]
    if not listed and not missing and not new and not corr["notes"]:
        out.append("none")
    if listed:
        out.append("| test | change | baseline | candidate | gates | detail |")
        out.append("|---|---|---|---|---|---|")
        for c in listed:
            detail = (c["detail"] or "").replace("|", "/").replace("\n", " ")[:200]
            out.append(f"| {c['test']} | {CHANGE_TEXT[c['kind']]} | {c['baseline'] or '-'} | {c['candidate'] or '-'} | "
                       f"{'yes' if c['gating'] else 'no'} | {detail} |")
    for label, names in (("Tests missing in the candidate", missing), ("Tests new in the candidate", new)):
        if names:
            out.append("")
            out.append(f"{label} ({len(names)}): " + ", ".join(names[:max_listed]) + (" ..." if len(names) > max_listed else ""))
    out.append("")

    outputs = result["outputs"]
    if result["cross_build"] or outputs["available"]:
        out.append("### Outputs between the builds")
        out.append("")
        for m in outputs["missing"]:
            out.append(f"- output dumps missing: {m}")
        if outputs["rows"]:
            out.append("| op | device | dtype | outputs compared | bitwise identical | max abs diff | max diff / tolerance | non-finite mismatches |")
            out.append("|---|---|---|---|---|---|---|---|")
            for g in outputs["rows"]:
                out.append(f"| {g['op']} | {g['device']} | {g['dtype']} | {g['compared']} | {g['identical']} | "
                           f"{g['max_abs_diff']:.3g} | {g['max_diff_over_tolerance']:.3g} | {g['nonfinite_mismatches']} |")
        for u in outputs["unmatched"][:max_listed]:
            out.append(f"- {u}")
        out.append("")

    peers = result.get("peers") or {"rows": []}
    if peers["rows"]:
        out.extend(render_peers(peers))

    if result["exit_code"] == EXIT_REGRESSION:
        parts = []
        if result["confirmed_slower"]:
            parts.append(f"{len(result['confirmed_slower'])} confirmed SLOWER")
        if result["gating_correctness_changes"]:
            parts.append(plural(len(result["gating_correctness_changes"]), "newly failing test"))
        out.append(f"**Result: regression ({', '.join(parts)}); exit {EXIT_REGRESSION}**")
    else:
        out.append(f"**Result: no regression; exit {EXIT_OK}**")
    if result["faster"]:
        out.append("")
        out.append(f"Hint: {plural(len(result['faster']), 'benchmark')} confirmed FASTER: refresh the baseline with this candidate "
                   f"record ({result['candidate']['path']}) so later regressions are measured from the new level.")
    return "\n".join(out) + "\n"


def _fmt_opt(v, spec):
    return "none" if v is None else format(v, spec)


def render_peers(peers):
    """The candidate's table against torchvision (speed-up = torchvision ms / DetOps ms), with the baseline's
    speed-up beside it when the baseline record has peer entries."""
    with_base = peers["baseline_has_peers"]
    out = ["### Against torchvision (candidate)", ""]
    head = "| op | case | dtype | direction | torchvision ms | DetOps ms | speed-up |"
    rule = "|---|---|---|---|---:|---:|---:|"
    if with_base:
        head += " baseline speed-up |"
        rule += "---:|"
    out += [head + " max error | torchvision's max error |", rule + "---:|---:|"]
    for r in peers["rows"]:
        if r.get("error"):
            err = "error: " + str(r["error"]).replace("|", "/")[:120]
        elif r.get("max_abs_error") is not None:
            err = format(r["max_abs_error"], ".3g")
        else:
            err = r.get("check") or "-"
        op = r["op"] + (f" (vs {r['peer']})" if r.get("peer_kind") == "plain PyTorch" else "")  # mmcv's ops
        line = (f"| {op} | {r['case']} | {r['dtype']} | {r['direction']} | {_fmt_opt(r.get('torchvision_ms'), '#.4g')} | "
                f"{_fmt_opt(r.get('detops_ms'), '#.4g')} | {_fmt_opt(r.get('speedup'), '.2f')}{'x' if r.get('speedup') is not None else ''} |")
        if with_base:
            b = r.get("baseline_speedup")
            line += f" {_fmt_opt(b, '.2f')}{'x' if b is not None else ''} |"
        tv_err = (format(r["torchvision_max_abs_error"], ".3g") if r.get("torchvision_max_abs_error") is not None
                  else r.get("torchvision_check") or "-")
        out.append(line + f" {err} | {tv_err} |")
    out.append("")
    out.append("torchvision none: torchvision has no kernel for that dtype on CUDA. An op marked (vs plain PyTorch: ...) is "
               "compared with that plain-PyTorch form, in the torchvision columns. Informational: peer timings never gate.")
    out.append("")
    return out


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Compare two DetOps run records (baseline vs candidate). Exit codes: 0 no regression, "
                    "1 confirmed SLOWER or newly failing test, 2 usage error or records that cannot be compared.")
    ap.add_argument("baseline", help="baseline record.json")
    ap.add_argument("candidate", help="candidate record.json")
    ap.add_argument("--thresholds", help="JSON object: benchmark key or fnmatch pattern -> ratio (> 1)")
    ap.add_argument("--cross-build", action="store_true",
                    help="allow different CUDA toolkit, driver and libtorch versions; compare the output dumps too")
    ap.add_argument("--json-out", help="also write the result as JSON here")
    ap.add_argument("--scope", help="comma-separated op names (the quick gate, scripts/gate_scope.py): compare only "
                                    "their benchmarks, tests and peer entries, by the same rule")
    args = ap.parse_args(argv)
    scope = None
    if args.scope is not None:
        scope = [op for op in args.scope.split(",") if op.strip()]
        if not scope:
            print("compare: error: --scope: expected comma-separated op names, got an empty list", file=sys.stderr)
            return EXIT_USAGE
    try:
        result = compare_records(args.baseline, args.candidate, args.thresholds, args.cross_build, scope=scope)
    except RecordError as e:
        print(f"compare: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(render_markdown(result))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(_jsonable(result), f, indent=1)
            f.write("\n")
    return result["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
