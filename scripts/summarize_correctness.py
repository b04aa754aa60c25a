#!/usr/bin/env python3
"""Summarizes a correctness record (GoogleTest JSON from detops_correctness) as markdown.

Prints: the device, counts per op / check / dtype / device (passed, failed, skipped), the gradient
checks, bitwise reproducibility per op / direction / device / dtype, the largest errors per dtype, the
failures with their messages, the wall time when given, and where the tests' time went: per check and device,
the longest tests, the phases (DETOPS_PHASE_TIMES=1 runs), references reused between a case's CPU and CUDA
checks, and how the CUDA finite differences were evaluated. It reports, it does not judge: exit 0 once the summary
is printed, whatever the tests did. A file that cannot be read or is not a GoogleTest JSON report (checked first,
as the C++ digest checks it: validate_gtest) is one line on stderr naming the file, the JSON path and what was
expected, and exit 2.
"""
import argparse
import collections
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


# The string properties the summary reads from a test, when present (GoogleTest writes RecordProperty values as
# strings).
STRING_FIELDS = ("name", "result", "dtype", "time", "reference_reused", "reference_cache", "fd_evaluation",
                 "bitwise_reproducible", "max_abs_error", "max_rel_error")


def _type(v):
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), "number" if isinstance(v, (int, float)) else type(v).__name__)


def validate_gtest(rec):
    """None when rec is a GoogleTest JSON report as this summary reads it, else '<JSON path>: expected ..., got ...'
    (the first problem): an object with a "testsuites" array; each suite an object with a string "name" and a
    "testsuite" array; each test an object with a string "name", the other fields read strings when present,
    "failures" when present an array of objects with a string "failure"; a "tests" count above zero while the
    suites hold no test is a truncated report."""
    if not isinstance(rec, dict):
        return f"not a GoogleTest JSON report: expected an object at the top level, got {_type(rec)}"
    if "testsuites" not in rec:
        keys = ", ".join(list(rec)[:5]) or "none (an empty object)"
        return f"not a GoogleTest JSON report: no testsuites array (top-level keys: {keys})"
    suites = rec["testsuites"]
    if not isinstance(suites, list):
        return f"testsuites: expected an array, got {_type(suites)}"
    held = 0
    for i, suite in enumerate(suites):
        path = f"testsuites[{i}]"
        if not isinstance(suite, dict):
            return f"{path}: expected an object, got {_type(suite)}"
        if not isinstance(suite.get("name"), str):
            return f"{path}.name: expected a string, got {_type(suite.get('name')) if 'name' in suite else 'nothing'}"
        tests = suite.get("testsuite")
        if not isinstance(tests, list):
            return f"{path}.testsuite: expected an array, got {_type(tests) if 'testsuite' in suite else 'nothing'}"
        held += len(tests)
        for j, t in enumerate(tests):
            tp = f"{path}.testsuite[{j}]"
            if not isinstance(t, dict):
                return f"{tp}: expected an object, got {_type(t)}"
            if "name" not in t:
                return f"{tp}.name: expected a string, got nothing"
            for key in STRING_FIELDS:
                if key in t and not isinstance(t[key], str):
                    return f"{tp}.{key}: expected a string, got {_type(t[key])}"
            if "failures" in t:
                if not isinstance(t["failures"], list):
                    return f"{tp}.failures: expected an array, got {_type(t['failures'])}"
                for k, f in enumerate(t["failures"]):
                    if not isinstance(f, dict) or not isinstance(f.get("failure", ""), str):
                        what = _type(f) if not isinstance(f, dict) else f"failure {_type(f.get('failure'))}"
                        return f"{tp}.failures[{k}]: expected an object with a string failure, got {what}"
    count = rec.get("tests")
    if count is not None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            return f"tests: expected a non-negative integer, got {_type(count)} {count!r}"
        if count > 0 and held == 0:
            return f"tests says {count}, the suites hold 0: a truncated or hand-edited GoogleTest JSON report"
    return None


def device_facts(rec):
    """The report's detops_device_facts (a JSON object in a string), or {} when absent or not of that shape: the
    summary then says no GPU was described, rather than failing on a field it only decorates the heading with."""
    try:
        facts = json.loads(rec.get("detops_device_facts", "{}"))
    except (TypeError, ValueError):
        return {}
    if not isinstance(facts, dict):
        return {}
    if not isinstance(facts.get("gpu", {}), dict) or not isinstance(facts.get("build", {}), dict):
        return {}
    if not isinstance(facts.get("kernels", []), list) or not all(isinstance(k, dict) for k in facts.get("kernels", [])):
        return {}
    return facts


def test_status(t):
    if t.get("result") == "SKIPPED":
        return "skipped"
    if t.get("failures"):
        return "failed"
    return "passed"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("record")
    ap.add_argument("--wall-seconds", type=float, default=None)
    args = ap.parse_args(argv)
    try:
        rec = load(args.record)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        print(f"summarize_correctness: error: {args.record}: cannot read: {e}", file=sys.stderr)
        return 2
    problem = validate_gtest(rec)
    if problem:
        print(f"summarize_correctness: error: {args.record}: {problem}", file=sys.stderr)
        return 2

    facts = device_facts(rec)
    out = []
    gpu = facts.get("gpu", {})
    if gpu:
        out.append(f"## Correctness on {gpu.get('name')} (sm_{gpu.get('compute_capability')}, {gpu.get('sm_count')} SMs)")
        kernels = facts.get("kernels", [])
        sources = collections.Counter(k.get("runs_from") for k in kernels)
        out.append(f"driver API {facts.get('cuda_driver_api_version')}, runtime {facts.get('cuda_runtime_version')}, "
                   f"build archs {facts.get('build', {}).get('cuda_architectures')}; kernels: "
                   + ", ".join(f"{n} from {s}" for s, n in sorted(sources.items())))
    else:
        out.append("## Correctness (no GPU: " + str(facts.get("reason", "CUDA unavailable")) + ")")
    out.append("")

    counts = collections.defaultdict(collections.Counter)  # (op, check, dtype, device) -> status counts
    repro = collections.defaultdict(collections.Counter)   # (op, direction, device, dtype) -> true/false
    max_err = collections.defaultdict(lambda: [0.0, 0.0, ""])  # (op, check, dtype) -> abs, rel, test
    failures = []
    total = collections.Counter()
    seconds = collections.Counter()  # (check, device) -> test seconds
    phases = collections.defaultdict(collections.Counter)  # (check, device) -> phase -> seconds
    longest = []
    reused = collections.Counter()
    cache = collections.Counter()  # DETOPS_REFERENCE_CACHE: hit / hit verified / stored / miss
    fd_evaluation = collections.Counter()
    for suite in rec.get("testsuites", []):
        op, _, check = suite["name"].partition(".")
        for t in suite.get("testsuite", []):
            status = test_status(t)
            total[status] += 1
            parts = t["name"].split(".")
            device = parts[-1]
            dtype = t.get("dtype", parts[-2] if len(parts) >= 3 else "-")
            if check == "bad_input":
                dtype = "-"
            counts[(op, check, dtype, device)][status] += 1
            try:
                sec = float(str(t.get("time", "0")).rstrip("s"))
            except ValueError:
                sec = 0.0
            seconds[(check, device)] += sec
            longest.append((sec, f"{suite['name']}.{t['name']}"))
            for key, value in t.items():
                if key.startswith("time_") and key.endswith("_ms"):
                    try:
                        phases[(check, device)][key[5:-3]] += float(value) / 1e3
                    except ValueError:
                        pass
            if "reference_reused" in t:
                reused[t["reference_reused"]] += 1
            if "reference_cache" in t:
                cache[t["reference_cache"]] += 1
            if "fd_evaluation" in t and device == "cuda":
                how = t["fd_evaluation"]
                fd_evaluation[(op, "eager (no graph)" if how.startswith("eager (no graph") else how)] += 1
            if "bitwise_reproducible" in t and status != "skipped":
                direction = "backward" if check == "backward" else "forward"
                repro[(op, direction, device, dtype)][t["bitwise_reproducible"]] += 1
            if status != "skipped":
                for key, idx in (("max_abs_error", 0), ("max_rel_error", 1)):
                    try:
                        v = float(t.get(key, "0"))
                    except ValueError:
                        continue
                    cell = max_err[(op, check, dtype)]
                    if v > cell[idx]:
                        cell[idx] = v
                        if idx == 0:
                            cell[2] = t["name"]
            if status == "failed":
                msg = " ".join(f.get("failure", "") for f in t["failures"]).replace("\n", " ")
                failures.append(f"- `{suite['name']}.{t['name']}`: {msg[:400]}")

    out.append(f"**{total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped**"
               + (f" in {args.wall_seconds:.0f} s" if args.wall_seconds is not None else ""))
    broken = (rec.get("detops_shards") or {}).get("failed_or_crashed") or []
    if broken:  # scripts/shard_suite.py: a process that crashed or was killed; its tests are not in these counts
        where = "; ".join(f"shard {b.get('shard')}" + (f" on GPU {b['gpu']}" if b.get("gpu") is not None else "")
                          + f": exit {b.get('exit')}" for b in broken)
        out.append(f"**INCOMPLETE: {len(broken)} process(es) of the sharded run crashed or failed ({where}); the tests "
                   "they had not reported are missing from these counts (their logs say where they stopped)**")
    out.append("")
    def table(title, columns, rows):
        if title:
            out.extend([title, ""])
        out.append("| " + " | ".join(columns) + " |")
        out.append("|" + "---|" * len(columns))
        out.extend("| " + " | ".join(str(v) for v in row) + " |" for row in rows)
        out.append("")

    table(None, ["op", "check", "dtype", "device", "passed", "failed", "skipped"],
          [(*key, c["passed"], c["failed"], c["skipped"]) for key, c in sorted(counts.items())])
    if repro:
        table("Bitwise reproducibility (two runs on the same inputs):",
              ["op", "direction", "device", "dtype", "reproducible", "not reproducible"],
              [(*key, c["true"], c["false"]) for key, c in sorted(repro.items())])
    if max_err:
        table("Largest errors against the reference (or finite differences):",
              ["op", "check", "dtype", "max abs error", "max rel error", "worst test"],
              [(*key, f"{a:.3g}", f"{r:.3g}", name) for key, (a, r, name) in sorted(max_err.items())])
    if seconds:
        names = sorted({p for c in phases.values() for p in c})
        small = [k for k, v in seconds.items() if v < 1.0]  # the many one-off checks, as one row
        if len(small) > 1:
            seconds[("(checks under 1 s in all)", "-")] = sum(seconds.pop(k) for k in small)
        table(f"Where the time went ({sum(seconds.values()):.0f} s of test time"
              + (f"; references reused by {reused['true']} of {sum(reused.values())} checks" if reused else "")
              + ("; reference cache: " + ", ".join(f"{n} {k}" for k, n in sorted(cache.items())) if cache else "")
              + "):",
              ["check", "device", "seconds", *[f"{p} s" for p in names]],
              [(c, d, f"{v:.1f}", *[f"{phases[(c, d)][p]:.1f}" for p in names])
               for (c, d), v in sorted(seconds.items(), key=lambda kv: -kv[1])])
        table("Longest tests:", ["seconds", "test"], [(f"{v:.2f}", n) for v, n in sorted(longest, reverse=True)[:10]])
    if fd_evaluation:
        table("CUDA finite differences evaluated as:", ["op", "evaluation", "checks"],
              [(*k, n) for k, n in sorted(fd_evaluation.items())])
    if failures:
        out.append("Failures:")
        out.extend(failures[:50])
        if len(failures) > 50:
            out.append(f"- ... and {len(failures) - 50} more")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
