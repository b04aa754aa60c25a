#!/usr/bin/env python3
"""Summarizes a correctness record (GoogleTest JSON from detops_correctness) as markdown.

Prints: the device, counts per op / check / dtype / device (passed, failed, skipped), the gradient
checks, bitwise reproducibility per op / direction / device / dtype, the largest errors per dtype, the
failures with their messages, and the wall time when given. Exits 0; it reports, it does not judge.
"""
import argparse
import collections
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def test_status(t):
    if t.get("result") == "SKIPPED":
        return "skipped"
    if t.get("failures"):
        return "failed"
    return "passed"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("record")
    ap.add_argument("--wall-seconds", type=float, default=None)
    args = ap.parse_args()
    try:
        rec = load(args.record)
    except (OSError, json.JSONDecodeError) as e:
        print(f"cannot read {args.record}: {e}")
        return 0

    facts = {}
    if "detops_device_facts" in rec:
        try:
            facts = json.loads(rec["detops_device_facts"])
        except json.JSONDecodeError:
            pass
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
    if failures:
        out.append("Failures:")
        out.extend(failures[:50])
        if len(failures) > 50:
            out.append(f"- ... and {len(failures) - 50} more")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
