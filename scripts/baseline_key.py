#!/usr/bin/env python3
"""Prints the baseline key of a run record: <gpu-slug>_cuda<major.minor> (e.g. NVIDIA-H200_cuda13.0), the
folder under results/baselines/ that holds the stored baseline for that GPU model and CUDA runtime."""
import os
import re
import sys


def key(record):
    d = record["context"]["detops"]
    gpu = re.sub(r"[^A-Za-z0-9]+", "-", d["gpu"]["name"]).strip("-")
    v = int(d.get("cuda_runtime_version") or 0)
    return f"{gpu}_cuda{v // 1000}.{(v % 1000) // 10}"


def main(argv):
    """Validates the record first (compare's validation): a missing, foreign or invalid record is one line on
    stderr naming the file and the field, exit 2."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import compare
    try:
        rec = compare.load_record(argv[0])
        status, errors = compare.validate_record(rec)
        if status != "valid":
            raise compare.RecordError(f"{argv[0]}: {errors[0] if errors else status}: a DetOps run record is needed")
    except compare.RecordError as e:
        print(f"baseline_key: error: {e}", file=sys.stderr)
        return compare.EXIT_USAGE
    print(key(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
