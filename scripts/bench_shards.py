#!/usr/bin/env python3
"""The benchmarks of one build over several GPUs of one machine, merged into one record.

  bench_shards.py --binary build/dev/suites/detops_bench --gpus 0,1,2,3 --record run/record.json
                  [--times BASELINE_RECORD] [--logs DIR] [-- more detops_bench flags]

The ops are dealt to the GPUs in groups of near-equal expected time (each op's sampling-loop wall time in --times, a
record of an earlier run, else equal shares by count), one detops_bench process per GPU (CUDA_VISIBLE_DEVICES set to
that GPU, so no two measurements ever share a GPU), all at once. The last group's filter is the negation of the
others' (`-^(...)/`), so an op missing from the table (a new one) is still measured somewhere; the calibration
benchmark runs on the first GPU. With --ops (the quick gate's scope) only those ops run, each group's filter naming
its own. Each process writes a part; scripts/merge_records.py's merge joins them (it refuses
parts of different GPU models, builds or measurement settings) and records each part's GPU uuid in
detops.merged_from. A part that fails or crashes is reported with the tail of its log, the other parts are still
merged (the record's complete flag is then false) and the exit status is 1. A progress line every --interval seconds
says how far each GPU is.

Exit: 0 every part measured and merged; 1 a part failed (the others merged); 2 bad usage or nothing to merge.

  bench_shards.py group K INDEX [--times RECORD]   prints the ops of group INDEX of K (the Slurm template's split)
"""
import argparse
import gzip
import json
import os
import pathlib
import re
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import gate_scope  # noqa: E402  (the op table)
import merge_records  # noqa: E402
import shard_suite  # noqa: E402  (the partition the correctness shards use)

# A progress line; detops_bench writes it to stderr, so in the shared log it can follow the console reporter's
# colour codes on the same line (Google Benchmark colours its table even into a file unless told not to).
PROGRESS = re.compile(r"^(?:\x1b\[[0-9;]*m)*\[(\d+)/(\d+)\]")


def op_times(path):
    """op -> seconds of sampling-loop wall time in a record (gz or plain), {} when it cannot be read."""
    try:
        raw = pathlib.Path(path).read_bytes()
        rec = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        out = {}
        for b in rec.get("benchmarks", []):
            if b.get("aggregate_name") == "median" and isinstance(b.get("detops"), dict):
                op = str(b.get("run_name", b.get("name", ""))).split("/")[0]
                out[op] = out.get(op, 0.0) + float(b["detops"].get("wall_time_s", 0.0))
        return out
    except (OSError, ValueError, TypeError, AttributeError) as e:
        print(f"bench_shards: --times {path}: not used ({e}); equal shares by op count", file=sys.stderr)
        return {}


def partition(ops, times, n):
    """n groups of ops of near-equal expected time (shard_suite.balanced_partition: longest first onto the least
    loaded group, an op without a time counting the median); the groups keep the table's order."""
    return shard_suite.balanced_partition(ops, times, n)


def filters(groups, closed=False):
    """The --benchmark_filter of each group (None: nothing to run), calibration with the first: ^(a|b)/ for all but
    the last, which takes everything the others do not (a leading '-' negates Google Benchmark's filter), or, closed
    (a given list of ops), ^(...)/ of its own ops like the others."""
    out = []
    named = []
    for k, g in enumerate(groups if closed else groups[:-1]):
        names = (["calibration"] if k == 0 else []) + g
        named += names
        out.append("^(" + "|".join(names) + ")/" if names else None)
    if not closed:
        out.append("-^(" + "|".join(named) + ")/" if named else ".")
    return out


def print_group(argv):
    """bench_shards.py group K INDEX [--times RECORD]: the ops of group INDEX of K (comma-separated), as the GPUs of
    one machine would get them; the Slurm template (scripts/slurm/) gives each node of a job array one group."""
    ap = argparse.ArgumentParser(prog="bench_shards.py group")
    ap.add_argument("count", type=int)
    ap.add_argument("index", type=int)
    ap.add_argument("--times")
    a = ap.parse_args(argv)
    if not 0 <= a.index < a.count:
        print(f"bench_shards: error: group {a.index} of {a.count}: expected 0 <= INDEX < COUNT", file=sys.stderr)
        return 2
    groups, _ = partition(list(gate_scope.ALL_OPS), op_times(a.times) if a.times else {}, a.count)
    print(",".join(groups[a.index]))
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["group"]:
        return print_group(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--gpus", required=True, help="comma-separated GPUs, as CUDA_VISIBLE_DEVICES names them")
    ap.add_argument("--record", required=True, help="the merged record to write")
    ap.add_argument("--times", help="an earlier record of this GPU model: per-op times for the split")
    ap.add_argument("--logs", help="folder for each GPU's log (default: the record's folder)")
    ap.add_argument("--ops", help="comma-separated ops (the quick gate's scope): only these, every filter positive")
    ap.add_argument("--interval", type=float, default=20.0)
    ap.add_argument("extra", nargs="*", help="more detops_bench flags (after --)")
    args = ap.parse_args(argv)
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    if not gpus:
        print("bench_shards: error: --gpus: expected comma-separated GPU names, got none", file=sys.stderr)
        return 2
    if not os.access(args.binary, os.X_OK):
        print(f"bench_shards: error: --binary {args.binary}: not an executable file", file=sys.stderr)
        return 2
    if any(a.startswith("--benchmark_filter") or a.startswith("--detops_record") for a in args.extra):
        print("bench_shards: error: --benchmark_filter and --detops_record are set per GPU here", file=sys.stderr)
        return 2
    record = pathlib.Path(args.record)
    logs = pathlib.Path(args.logs) if args.logs else record.parent
    logs.mkdir(parents=True, exist_ok=True)
    ops = [o for o in args.ops.split(",") if o] if args.ops else list(gate_scope.ALL_OPS)
    groups, expected = partition(ops, op_times(args.times) if args.times else {}, len(gpus))
    procs = []
    for gpu, flt, exp in zip(gpus, filters(groups, closed=bool(args.ops)), expected):
        if flt is None:
            continue
        part = logs / f"record.gpu-{gpu}.json"
        part.unlink(missing_ok=True)
        log = logs / f"bench.gpu-{gpu}.log"
        f = open(log, "w")
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu)
        cmd = [args.binary, f"--benchmark_filter={flt}", f"--detops_record={part}", "--benchmark_color=false",
               *args.extra]
        procs.append({"gpu": gpu, "part": part, "log": log, "file": f, "filter": flt,
                      "proc": subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)})
        print(f"[bench_shards] GPU {gpu}: {flt} (expected {exp:.0f} s of sampling)", flush=True)
    start = last = time.time()
    while any(p["proc"].poll() is None for p in procs):
        time.sleep(0.5)
        if time.time() - last >= args.interval:
            last = time.time()
            elapsed = time.time() - start
            states = [(p, progress(p["log"])) for p in procs]
            left = [elapsed * (n - i) / i for p, (i, n) in states if i and p_running(p)]
            print(f"[bench_shards] {elapsed:.0f}s: " + ", ".join(
                f"GPU {p['gpu']} " + (f"{i}/{n}" if n else "starting") for p, (i, n) in states)
                + (f"; about {max(left):.0f}s left" if left else ""), flush=True)
    done, failed = [], []
    for p in procs:
        p["file"].close()
        rc = p["proc"].returncode
        if rc == 0 and p["part"].is_file():
            done.append(p)
        else:
            failed.append(p)
            tail = p["log"].read_text(errors="replace").splitlines()[-12:]
            print(f"[bench_shards] GPU {p['gpu']} failed (exit {rc}{'' if p['part'].is_file() else ', no record'}); "
                  f"last lines of {p['log']}:", file=sys.stderr)
            for line in tail:
                print("    " + line, file=sys.stderr)
    if not done:
        print("bench_shards: error: no GPU's part was written: nothing to merge", file=sys.stderr)
        return 2 if not procs else 1
    try:
        rec = merge_records.merge([str(p["part"]) for p in done])
    except merge_records.compare.RecordError as e:
        print(f"bench_shards: error: the parts cannot be merged: {e}", file=sys.stderr)
        return 2
    if failed:
        rec["context"]["detops"]["complete"] = False
        rec["context"]["detops"]["incomplete_reason"] = "bench_shards: " + "; ".join(
            f"GPU {p['gpu']} ({p['filter']}) exited {p['proc'].returncode}" for p in failed)
    merge_records.write_atomically(str(record), rec)
    n = sum(1 for b in rec["benchmarks"] if b.get("aggregate_name") == "median")
    print(f"[bench_shards] {record}: {n} benchmarks from {len(done)} of {len(procs)} GPUs in {time.time() - start:.0f} s",
          flush=True)
    return 1 if failed else 0


def p_running(p):
    return p["proc"].poll() is None


def progress(log):
    """(i, n) of the last progress line ('[i/n] ...') in a detops_bench log, else (0, 0)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.path.getsize(log) - 4096))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return 0, 0
    for line in reversed(lines):
        m = PROGRESS.match(line)
        if m:
            return int(m.group(1)), int(m.group(2))
    return 0, 0


if __name__ == "__main__":
    sys.exit(main())
