#!/usr/bin/env python3
"""Runs a GoogleTest suite (the correctness suite) in N processes at once and merges what they wrote.

  scripts/shard_suite.py --binary build/ci/suites/detops_correctness --shards 4 --filter '*.cuda' \
      --out correctness.json [--outputs DIR] [--serial '*.large_index_*:*.large_output_*'] [-- extra gtest arguments]
  scripts/shard_suite.py --list-gpus      the GPUs this process may use, comma-separated (CUDA_VISIBLE_DEVICES when
                                          set, empty meaning none, else nvidia-smi's indices): scripts/lib.sh asks this

Process i runs with GTEST_TOTAL_SHARDS=N and GTEST_SHARD_INDEX=i (GoogleTest splits the selected tests
between them), writes its own GoogleTest JSON and, with --outputs, its own output dumps
(DETOPS_SAVE_OUTPUTS=DIR/shard-i). When all have ended: the JSON files are merged into --out (one
"testsuites" list, counts recomputed) and the dumps into DIR (files moved, index.json the union).
With --timings (a previous run's GoogleTest JSON, or several such files separated by os.pathsep: merged in order, a
later file's time of a test replacing an earlier one's), the shards are instead lists of tests of near-equal
expected time (longest first, each to the least loaded shard), so one shard holding several slow tests does not
set the wall time; the CPU and CUDA forward (backward) checks of one case and dtype stay together, since the
process computes their fp64 reference once for both (share_key). Each process gets an equal share of the CPUs for its thread pools (OMP_NUM_THREADS /
MKL_NUM_THREADS, unless the caller set them). A progress line every 30 s (--interval) gives the tests finished (from the
processes' DETOPS_PROGRESS lines) and an estimate of the time left; with DETOPS_PROGRESS_FILE set
(scripts/test.sh's watcher) the same counts are appended there as '[shard_suite <done>/<total> <elapsed>s]', and the
processes themselves do not write there.

--serial PATTERNS (GoogleTest globs, ':'-separated, e.g. '*.large_index_*') names tests that must not share the GPU
with each other (the large-index cases allocate tens of GB each; eight at once run out of memory on a 141 GB
H200): they are left out of the shards and run afterwards in one process. (Run beside the shards instead, on an
H200, their kernels of 2^31 elements held the GPU's time slices: the shards' tests took 1472 s together instead of
1162 s, and the suite ended no sooner.)

--serial-after FILE: the serial tests start only once FILE exists (and without serial tests the run waits for it
before it ends). The main job (scripts/run.sh) runs the
torchvision peer suite beside the shards (correctness only, so sharing the GPU costs nothing but time) and has
it write FILE when it ends, so its GPU memory is given back before the large-index checks need it. While
waiting, the progress line says so, with pytest's percentage and the time left from --serial-after-log (given once
per process of that job: the line follows the process furthest from its end).

--gpus 0,1,... (or auto: every visible GPU): for a machine with several GPUs. Shard i runs with CUDA_VISIBLE_DEVICES set to the (i mod N)-th
GPU, the serial tests are dealt round-robin to one process per GPU (so still no two of them share a GPU), every test
in the merged report carries the GPU it ran on ("detops_gpu"), the report keeps each GPU's device facts
("detops_device_facts_by_gpu") and "detops_shards" says which shard ran where.

A shard that fails or crashes is reported with its exit status and the tail of its log
(--out's folder/shard-i.log), and the other shards' results are kept: --out then has every test that a
shard reported, and the merged file says which shards did not finish ("detops_shards").

The test command's CUDA entry (CTest correctness_cuda) runs --gpus auto --shards 0 --skip-code 77: one process per
visible GPU, each running its tests one after another (so the large-index checks never share a GPU), 77 when
there is no GPU and every test skipped.

Exit 0: every shard passed (or skipped everything; --skip-code N: N when every shard skipped everything). 1: a test failed or a shard crashed or wrote no JSON.
2: usage errors (no binary, bad shard count).
"""
import argparse
import fnmatch
import heapq
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

PROGRESS = re.compile(r"\[correctness (\d+)/(\d+)\]")  # correctness_main.cpp's DETOPS_PROGRESS lines


def merge_gtest(parts):
    """The union of GoogleTest JSON reports, with counts recomputed."""
    top = None
    suites = {}
    order = []
    for d in parts:
        if top is None:
            top = {k: v for k, v in d.items() if k != "testsuites"}
        for s in d.get("testsuites", []):
            if s["name"] not in suites:
                suites[s["name"]] = dict(s, testsuite=[])
                order.append(s["name"])
            suites[s["name"]]["testsuite"].extend(s.get("testsuite", []))
    top = top or {"name": "AllTests"}
    out_suites = []
    for name in order:
        s = suites[name]
        tests = s["testsuite"]
        s["tests"] = len(tests)
        s["failures"] = sum(1 for t in tests if t.get("failures"))
        s["disabled"] = sum(1 for t in tests if t.get("result") == "SUPPRESSED")
        s["errors"] = 0
        out_suites.append(s)
    top["testsuites"] = out_suites
    top["tests"] = sum(s["tests"] for s in out_suites)
    top["failures"] = sum(s["failures"] for s in out_suites)
    top["disabled"] = sum(s["disabled"] for s in out_suites)
    top["errors"] = 0
    return top


def merge_outputs(shard_dirs, dest):
    """Moves each shard's dump files into dest and writes the union of their index.json."""
    index = {}
    dest.mkdir(parents=True, exist_ok=True)
    for d in shard_dirs:
        idx_path = d / "index.json"
        if not idx_path.is_file():
            continue
        part = json.loads(idx_path.read_text())
        for name, entry in part.items():
            src = d / entry["file"]
            if src.is_file():
                os.replace(src, dest / entry["file"])
                index[name] = entry
        shutil.rmtree(d, ignore_errors=True)
    if index:
        tmp = dest / "index.json.tmp"
        tmp.write_text(json.dumps(index, indent=1) + "\n")
        os.replace(tmp, dest / "index.json")
    return len(index)


def list_tests(binary, gtest_filter):
    """Full names of the tests the filter selects (--gtest_list_tests)."""
    out = subprocess.run([str(binary), "--gtest_list_tests", f"--gtest_filter={gtest_filter}"],
                         capture_output=True, text=True, check=False).stdout
    names, suite = [], None
    for line in out.splitlines():
        if not line.strip() or line.startswith("DetOps:"):
            continue
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()
        elif suite:
            names.append(suite + line.split("#")[0].strip())
    return names


def load_timings(path):
    """{test name: seconds} from a GoogleTest JSON report (a previous run's correctness.json, merged or not) or
    a plain {name: seconds} object, gzip-compressed or not. An unreadable file gives {} and a warning: the
    shards are then GoogleTest's own round-robin split."""
    try:
        # compare.read_record_text: plain, gzip or xz, decompressed within a bound. Imported here: compare needs
        # numpy, which the sharding itself does not.
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
        import compare
        d = json.loads(compare.read_record_text(path))
        if isinstance(d, dict) and isinstance(d.get("testsuites"), list):
            return {f"{s['name']}.{t['name']}": float(str(t.get("time", "0")).rstrip("s"))
                    for s in d["testsuites"] for t in s.get("testsuite", [])}
        if isinstance(d, dict) and all(isinstance(v, (int, float)) for v in d.values()):
            return {str(k): float(v) for k, v in d.items()}
        raise ValueError("neither a GoogleTest JSON report nor a {test: seconds} object")
    except Exception as e:  # ImportError, OSError, ValueError, compare.RecordError, a malformed report's KeyError
        print(f"[shard_suite] --timings {path}: not used ({e}); GoogleTest's round-robin shards instead",
              file=sys.stderr)
        return {}


def load_timing_files(spec):
    """load_timings of each file in spec (os.pathsep-separated), merged in order: a later file's time of a test
    replaces an earlier one's. scripts/run.sh passes the committed times of the GPU model first and the newest
    earlier run's after them, so a test that run did not hold (a quick gate before a full run: only the scoped ops'
    tests) keeps its committed time instead of counting as the median of the few recorded."""
    times = {}
    for path in filter(None, str(spec).split(os.pathsep)):
        times.update(load_timings(path))
    return times


# <op>.forward.<case>.<dtype>.<device> and <op>.backward...: the CPU and CUDA checks of one case, dtype and
# direction compare with the same fp64 reference, which the suite's process computes once for both when they run
# in it (checks.cpp's case memo), so they go to one shard.
SHARED_REFERENCE = re.compile(r"^([^.]+\.(?:forward|backward)\.[^.]+\.[^.]+)\.(?:cpu|cuda)$")


def share_key(name):
    m = SHARED_REFERENCE.match(name)
    return m.group(1) if m else name


def balanced_partition(names, times, shards):
    """names split into `shards` lists of near-equal expected time: longest first, each to the least loaded
    shard (a test without a recorded time counts as the median recorded one); tests that share a reference
    (share_key) count as one. Each list keeps the suite's order; returns (lists, expected seconds per list)."""
    known = sorted(times[n] for n in names if n in times)
    default = known[len(known) // 2] if known else 1.0
    cost = {n: times.get(n, default) for n in names}
    units = {}
    for n in names:
        units.setdefault(share_key(n), []).append(n)
    unit_cost = {k: sum(cost[n] for n in members) for k, members in units.items()}
    heap = [(0.0, i) for i in range(shards)]
    assigned = {}
    for k in sorted(units, key=lambda k: (-unit_cost[k], k)):
        load, i = heapq.heappop(heap)
        for n in units[k]:
            assigned[n] = i
        heapq.heappush(heap, (load + unit_cost[k], i))
    lists = [[n for n in names if assigned[n] == i] for i in range(shards)]
    return lists, [sum(cost[n] for n in lst) for lst in lists]


def with_negatives(gtest_filter, patterns):
    """gtest_filter with patterns added to its negative part."""
    if not patterns:
        return gtest_filter
    return gtest_filter + (":" if "-" in gtest_filter else "-") + ":".join(patterns)


# The CPU thread pools of a shard's process (ATen's intra-op OpenMP pool, MKL): without a limit each of N
# processes starts one thread per core, N * cores threads contending for the same cores.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def thread_budget(shards):
    """Threads per shard process: the CPUs this process may use, divided among the shards (at least 1)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // max(1, shards))


def fmt_s(s):
    s = int(s)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if list(argv) == ["--list-gpus"]:  # scripts/lib.sh's detops_gpu_list: the one rule, stated once (visible_gpus)
        print(",".join(visible_gpus()))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", required=True, help="the GoogleTest executable")
    ap.add_argument("--shards", type=int, default=4, help="processes (default 4; 0: one per GPU of --gpus)")
    ap.add_argument("--filter", default="*", help="--gtest_filter (default '*')")
    ap.add_argument("--out", required=True, help="merged GoogleTest JSON")
    ap.add_argument("--outputs", help="save and merge output dumps (DETOPS_SAVE_OUTPUTS) into this folder")
    ap.add_argument("--serial", default="", help="globs (':'-separated) of tests run afterwards in one process")
    ap.add_argument("--interval", type=float, default=30.0, help="seconds between progress lines")
    ap.add_argument("--timings", help="a previous run's GoogleTest JSON (or {test: seconds}), or several separated "
                    "by os.pathsep (merged in order, later files winning): shards of equal expected time instead of "
                    "GoogleTest's round-robin split")
    ap.add_argument("--serial-after", help="start the serial tests (or end) only once this file exists (a job beside "
                                           "the shards writes it when it ends)")
    ap.add_argument("--serial-after-log", action="append", default=[],
                    help="that job's log (pytest -q), for its progress while waiting; repeat it for a job of several "
                         "processes (the progress line follows the one furthest from its end)")
    ap.add_argument("--gpus", default="", help="comma-separated GPUs (as CUDA_VISIBLE_DEVICES names them): shard i "
                    "runs on the (i mod N)-th, each test is tagged with its GPU (detops_gpu), and the serial tests run "
                    "one process per GPU. 'auto': CUDA_VISIBLE_DEVICES when set, else every GPU nvidia-smi lists (none: "
                    "no GPU pinning)")
    ap.add_argument("--skip-code", type=int, default=None, help="exit with this status (CTest's SKIP_RETURN_CODE) "
                    "when every process skipped every test it ran (no GPU), instead of 0")
    ap.add_argument("extra", nargs="*", help="more gtest arguments (after --)")
    args = ap.parse_args(argv)
    binary = pathlib.Path(args.binary)
    if not os.access(binary, os.X_OK):
        print(f"shard_suite: --binary {binary}: not an executable file", file=sys.stderr)
        return 2
    if args.gpus == "auto":
        args.gpus = ",".join(visible_gpus())
    if args.shards == 0:  # one process per GPU (one without a GPU): the test command's CUDA entry
        args.shards = max(1, len([g for g in args.gpus.split(",") if g.strip()]))
    if not 1 <= args.shards <= 256:
        print(f"shard_suite: --shards {args.shards}: expected 1..256 (0: one per GPU)", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    outputs = pathlib.Path(args.outputs) if args.outputs else None

    serial_patterns = [p for p in args.serial.split(":") if p]
    serial_tests = []
    if serial_patterns:
        serial_tests = [n for n in list_tests(binary, args.filter) if any(fnmatch.fnmatchcase(n, p) for p in serial_patterns)]
    shard_filter = with_negatives(args.filter, serial_patterns)

    threads = thread_budget(args.shards)
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]

    def launch(i, gtest_filter, env_extra, threads=threads, gpu=None):
        env = dict(os.environ, DETOPS_PROGRESS="1", **env_extra)
        env.pop("DETOPS_PROGRESS_FILE", None)  # the processes' progress goes there merged (wait_and_report)
        if gpu is None and gpus:
            gpu = gpus[i % len(gpus)]
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        for var in THREAD_VARS:  # the caller's setting wins
            env.setdefault(var, str(threads))
        if outputs is not None:
            env["DETOPS_SAVE_OUTPUTS"] = str(outputs / f"shard-{i}")
        part = out.parent / f"{out.stem}.shard-{i}.json"
        if part.exists():
            part.unlink()
        log = out.parent / f"shard-{i}.log"
        f = open(log, "w")
        # The filter goes through a flag file: a list of test names can pass the kernel's 128 KiB limit on
        # one argument.
        flags = out.parent / f"shard-{i}.flags"
        flags.write_text(f"--gtest_filter={gtest_filter}\n")
        cmd = [str(binary), f"--gtest_flagfile={flags}", "--gtest_brief=1", f"--gtest_output=json:{part}", *args.extra]
        return {"i": i, "proc": subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT),
                "log": log, "file": f, "part": part, "gpu": gpu}

    procs = []
    times = load_timing_files(args.timings) if args.timings else {}
    timing_files = [p for p in str(args.timings or "").split(os.pathsep) if p]
    names = list_tests(binary, shard_filter) if times else []
    if times and not names:  # nothing listed (or the listing failed): GoogleTest's own split still runs the filter
        print("[shard_suite] --timings: the binary listed no test for the filter; GoogleTest's round-robin shards "
              "instead", file=sys.stderr)
    if names:
        lists, expected = balanced_partition(names, times, args.shards)
        print(f"[shard_suite] shards balanced by the test times in {' over '.join(reversed(timing_files))}: expected "
              f"{min(expected):.0f}-{max(expected):.0f} s of test time each", flush=True)
        for i, group in enumerate(lists):
            if group:
                procs.append(launch(i, ":".join(group), {}))
    else:
        for i in range(args.shards):
            procs.append(launch(i, shard_filter,
                                {"GTEST_TOTAL_SHARDS": str(args.shards), "GTEST_SHARD_INDEX": str(i)}))

    start = time.time()
    wait_and_report(procs, args, start)
    if args.serial_after:  # also without serial tests: the run ends when the job beside it has
        wait_for_file(pathlib.Path(args.serial_after), args.serial_after_log, args.interval, start)
    if serial_tests:
        # One process per GPU (one alone without --gpus): no two of these tests share a GPU.
        groups = [serial_tests[k::max(len(gpus), 1)] for k in range(max(len(gpus), 1))]
        groups = [g for g in groups if g]
        where = "one process" if len(groups) == 1 else f"{len(groups)} processes, one per GPU"
        print(f"[shard_suite] {len(serial_tests)} tests matching {args.serial} in {where}", flush=True)
        for k, group in enumerate(groups):
            procs.append(launch(args.shards + k, ":".join(group), {}, threads=thread_budget(len(groups)),
                                gpu=gpus[k] if gpus else None))
        wait_and_report(procs[-len(groups):], args, start)
    return finish(procs, args, out, outputs, start)


PYTEST_PERCENT = re.compile(r"\[\s*(\d+)%\]")


def pytest_percent(log):
    """The last percentage a pytest -q log shows (None without one yet, or when it cannot be read)."""
    pct = None
    try:
        with open(log, "rb") as lf:
            lf.seek(max(0, os.path.getsize(log) - 4096))
            for m in PYTEST_PERCENT.finditer(lf.read().decode(errors="replace")):
                pct = int(m.group(1))
    except OSError:
        pass
    return pct


def wait_progress(logs, elapsed):
    """The job's progress for the waiting line: ' (peer suite P%, about T left)' from the process furthest from
    its end (the lowest percentage among logs; a log without one yet counts as 0%: no estimate), with the time
    left at that process's rate so far (the job began with the shards, elapsed seconds ago); '' without logs."""
    if not logs:
        return ""
    pcts = [pytest_percent(log) or 0 for log in logs]
    pct = min(pcts)
    which = f" (the slowest of {len(logs)} processes)" if len(logs) > 1 else ""
    if pct == 0:
        return f" (peer suite{which}: no progress shown yet)" if len(logs) > 1 else ""
    return f" (peer suite {pct}%{which}, about {fmt_s(elapsed * (100 - pct) / pct)} left)"


def wait_for_file(path, logs, interval, start):
    """Blocks until path exists, with a progress line every interval seconds (wait_progress over the job's
    pytest logs; the job began with the shards, at start)."""
    last = time.time()
    while not path.exists():
        time.sleep(0.5)
        now = time.time()
        if now - last < interval:
            continue
        last = now
        what = f"waiting for {path.name} before the serial tests" + wait_progress(logs, now - start)
        print(f"[shard_suite] {fmt_s(now - start)}: {what}", flush=True)


def parse_shard(spec):
    """(I, N) from 'I/N' with 0 <= I < N (the one-process-per-GPU splits: peer_bench.py --shard, DETOPS_PYTEST_SHARD);
    ValueError naming what was expected otherwise."""
    m = re.fullmatch(r"(\d+)/(\d+)", spec or "")
    if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
        raise ValueError(f"{spec!r}: expected I/N with 0 <= I < N, e.g. 0/2")
    return int(m.group(1)), int(m.group(2))


def visible_gpus():
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them: that variable's entries when it is set
    (empty: none), else the indices nvidia-smi lists; [] without nvidia-smi or a GPU."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip().isdigit()] if out.returncode == 0 else []


def wait_and_report(procs, args, start):
    last = stage_start = time.time()
    while any(p["proc"].poll() is None for p in procs):
        time.sleep(1.0)
        now = time.time()
        if now - last >= args.interval:
            last = now
            done = total = 0
            for p in procs:
                m = None
                try:
                    with open(p["log"], "rb") as lf:
                        lf.seek(max(0, os.path.getsize(p["log"]) - 4096))
                        for m in PROGRESS.finditer(lf.read().decode(errors="replace")):
                            pass
                except OSError:
                    pass
                if m:
                    done += int(m.group(1))
                    total += int(m.group(2))
            running = sum(1 for p in procs if p["proc"].poll() is None)
            if total and os.environ.get("DETOPS_PROGRESS_FILE"):  # scripts/test.sh's watcher (lib.sh)
                try:
                    with open(os.environ["DETOPS_PROGRESS_FILE"], "a") as pf:
                        pf.write(f"[shard_suite {done}/{total} {int(now - stage_start)}s]\n")
                except OSError:
                    pass
            if total and done:
                eta = (now - stage_start) * (total - done) / done  # this stage's rate (shards, then serial)
                print(f"[shard_suite] {fmt_s(now - start)}: {done}/{total} tests, {running} of {len(procs)} "
                      f"processes running, about {fmt_s(eta)} left", flush=True)
            else:
                print(f"[shard_suite] {fmt_s(now - start)}: {running} of {len(procs)} processes running", flush=True)


def finish(procs, args, out, outputs, start):
    status = 0
    parts = []
    broken = []
    facts_by_gpu = {}
    for p in procs:
        p["file"].close()
        p["log"].with_suffix(".flags").unlink(missing_ok=True)
        rc = p["proc"].returncode
        ok = rc in (0, 77)  # 77: every selected test skipped
        if p["part"].is_file():
            try:
                part = json.loads(p["part"].read_text())
                if p["gpu"] is not None:  # per-GPU provenance: every test says where it ran
                    for suite in part.get("testsuites", []):
                        for t in suite.get("testsuite", []):
                            t["detops_gpu"] = p["gpu"]
                    if "detops_device_facts" in part:
                        facts_by_gpu[p["gpu"]] = part["detops_device_facts"]
                parts.append(part)
                p["part"].unlink()
            except (OSError, ValueError) as e:
                ok = False
                rc = f"{rc} (unreadable JSON: {e})"
        else:
            ok = False
            rc = f"{rc} (no JSON written)"
        if not ok:
            status = 1
            broken.append({"shard": p["i"], "exit": str(rc), "log": str(p["log"]), "gpu": p["gpu"]})
            tail = p["log"].read_text(errors="replace").splitlines()[-15:]
            print(f"[shard_suite] shard {p['i']} failed (exit {rc}); last lines of {p['log']}:", file=sys.stderr)
            for line in tail:
                print("    " + line, file=sys.stderr)
    merged = merge_gtest(parts)
    merged["detops_shards"] = {"shards": args.shards, "serial": args.serial or None, "failed_or_crashed": broken,
                               "gpus": [g for g in args.gpus.split(",") if g.strip()] or None,
                               "shard_gpus": {str(p["i"]): p["gpu"] for p in procs if p["gpu"] is not None} or None}
    if facts_by_gpu:
        merged["detops_device_facts_by_gpu"] = facts_by_gpu
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(merged, indent=1))
    os.replace(tmp, out)
    saved = merge_outputs([outputs / f"shard-{p['i']}" for p in procs], outputs) if outputs else 0
    skipped = sum(1 for s in merged["testsuites"] for t in s["testsuite"] if t.get("result") == "SKIPPED")
    print(f"[shard_suite] {merged['tests']} tests: {merged['tests'] - merged['failures'] - skipped} passed, "
          f"{merged['failures']} failed, {skipped} skipped; {len(broken)} of {len(procs)} processes failed or crashed; "
          f"{fmt_s(time.time() - start)}" + (f"; {saved} outputs saved in {outputs}" if outputs else ""))
    if status == 0 and args.skip_code is not None and procs and all(p["proc"].returncode == 77 for p in procs):
        return args.skip_code  # every process skipped every test (77 is correctness_main.cpp's "all skipped")
    return status


if __name__ == "__main__":
    sys.exit(main())
