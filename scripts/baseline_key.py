#!/usr/bin/env python3
"""Prints the baseline key of a run record: <gpu-slug>_cuda<major.minor> (e.g. NVIDIA-H200_cuda13.0), the
folder under results/baselines/ that holds the stored baseline for that GPU model and CUDA runtime."""
import json
import re
import sys


def key(record):
    d = record["context"]["detops"]
    gpu = re.sub(r"[^A-Za-z0-9]+", "-", d["gpu"]["name"]).strip("-")
    v = int(d.get("cuda_runtime_version") or 0)
    return f"{gpu}_cuda{v // 1000}.{(v % 1000) // 10}"


if __name__ == "__main__":
    print(key(json.load(open(sys.argv[1]))))
