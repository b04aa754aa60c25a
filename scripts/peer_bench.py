#!/usr/bin/env python3
"""Times each DetOps op and its peer (suites/peer/pairs.py: torchvision's op, or for mmcv's ops the plain-PyTorch
form a user would write) on the same CUDA inputs in the same process, and writes the "peers" array of a run
record. See docs/peers.md.

Floors: deform_conv2d's row also times the dense cuDNN convolution of the same shape ("floor": DetOps ms / floor
ms); the memory-bound rows (pairs.Pair.dram_reads: the focal losses, carafe, masked_conv2d) get a DRAM floor, the
bytes a call must move over the peak DRAM bandwidth ("dram": floor ms / DetOps ms, the fraction of the floor
reached). The peak comes from the device properties (memory clock x bus width x 2), else from a table by name.

Timer: torch.profiler (Kineto, on CUPTI). Per sample: a flush kernel over a buffer of twice the L2 size (outside
any measured range), then one call inside torch.profiler.record_function; the sample is the sum of the device
durations of the kernels launched inside that range (by any thread: backward runs on autograd's device
thread). Warm-up calls first; the median over the samples is reported. Warm cases (a case's "l2" param "warm",
names ending in _warm) replace the flush by a touch, before each warm-up call and each sample, outside the range
and the same for both sides: the forward's main input (the RoI ops' feature map) or the backward's grad_output
rewritten in place with mul_(1), value-exact, as a model's previous layer has just written it.

Usage: peer_bench.py [--record run/record.json] [--samples 30] [--ops roi_align,nms] [--cases '^rpn_']
                     [--json-out peers.json] [--shard I/N]
       peer_bench.py --merge peers-0.json peers-1.json ... [--record run/record.json]

Several GPUs (scripts/run.sh): one process per GPU, each with its own CUDA_VISIBLE_DEVICES and --shard I/N (the
I-th of N near-equal parts of the (op, case) list, dealt by the previous run's times when --times names a record
with a "peers" array, else round-robin) writing --json-out; then --merge puts the parts' entries back in the table's
order, each tagged with the GPU that timed it (gpu_uuid), prints the table and writes --record. A part that is
missing or unreadable (its process crashed or was killed) is reported and the others kept; exit 1 then.
Without CUDA (or torchvision) it says so and exits 0. Pairs whose DetOps op is missing (being written) are skipped
and listed.
"""
import argparse
import json
import math
import os
import pathlib
import re
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "suites"))

TIMER = "torch.profiler (Kineto/CUPTI)"
# Where the step's wall time goes (said at the end of a run): the cases' base inputs, each entry's casts, truths
# and errors, and the timing of its sides: choosing the sample count, the warm-up calls, the profiler's start and stop
# (one session per side), the profiled samples themselves and their attribution.
PHASE_S = {"base inputs": 0.0, "casts, truths and errors": 0.0, "sample counts": 0.0, "warm-ups": 0.0,
           "profiler start and stop": 0.0, "profiled samples": 0.0, "attribution": 0.0}
RANGE = "detops_peer_sample"

# Peak DRAM bandwidth (bytes/s) by GPU name, where the device properties give no memory clock or bus width: the
# vendors' figures; the first key the name contains wins (so "H100 PCIe" before "H100").
PEAK_BY_NAME = [("H200", 4.8e12), ("H100 PCIe", 2.0e12), ("H100 NVL", 3.9e12), ("H100", 3.35e12),
                ("A100-SXM4-80GB", 2.039e12), ("A100 80GB PCIe", 1.935e12), ("A100", 1.555e12)]


def peak_bandwidth(name, memory_clock_khz, bus_width_bits):
    """(bytes/s, how it was found): memory clock x bus width x 2 (double data rate) when the device reports both,
    else PEAK_BY_NAME, else (None, why)."""
    if memory_clock_khz and bus_width_bits:
        bw = 2.0 * memory_clock_khz * 1e3 * bus_width_bits / 8
        return bw, (f"device properties: {memory_clock_khz / 1e3:.0f} MHz memory clock x {bus_width_bits}-bit bus x 2 "
                    f"= {bw / 1e12:.3g} TB/s")
    for key, bw in PEAK_BY_NAME:
        if key in name:
            return bw, f"table by GPU name ({name}: {bw / 1e12:g} TB/s; the device reports no memory clock/bus width)"
    return None, f"unknown: {name} reports no memory clock/bus width and is not in peer_bench.PEAK_BY_NAME"


def device_peak(torch):
    props = torch.cuda.get_device_properties(0)
    return peak_bandwidth(props.name, int(getattr(props, "memory_clock_rate", 0) or 0),
                          int(getattr(props, "memory_bus_width", 0) or 0))


def kernel_sample_times(prof, n):
    """Per-sample kernel time (ms) and kernel count: the durations of the device activities (kernels, memsets,
    copies) whose launching CPU op started inside the i-th RANGE (any thread), summed; each device activity is
    linked to exactly one CPU op (Kineto's linked correlation id).

    Read from the profiler's raw Kineto events: the same attribution as torch's FunctionEvent tree
    (kernel_sample_times_from_function_events, kept as its reference and compared with it on CUDA in
    suites/peer/test_peer_bench.py), without building that tree, which took 0.3-1 s per timed side (most of the
    peer step's time: 300 samples make thousands of events)."""
    from torch.autograd import DeviceType

    try:
        raw = prof.profiler.kineto_results.events()
    except AttributeError:  # a torch without the raw results: the tree
        return kernel_sample_times_from_function_events(prof, n)
    from torch.autograd.profiler import _filter_name  # the events the tree leaves out

    ranges, op_start, device = [], {}, []
    for e in raw:
        if _filter_name(e.name()) or getattr(e, "is_hidden_event", lambda: False)():
            continue
        kind, linked = e.device_type(), e.linked_correlation_id()
        if kind == DeviceType.CPU and linked == 0:  # a frontend op (or the range), as the tree's parents
            if e.is_async() or e.start_thread_id() != e.end_thread_id():
                continue
            if e.name() == RANGE:
                ranges.append((e.start_ns(), e.end_ns()))
            else:  # the tree gives a device activity to every frontend op of its linked id
                op_start.setdefault(e.correlation_id(), []).append(e.start_ns())
        elif kind == DeviceType.CUDA and linked > 0:
            device.append((linked, e.end_ns() - e.start_ns()))
    ranges.sort()
    if len(ranges) != n:
        raise RuntimeError(f"expected {n} profiler ranges named {RANGE}, found {len(ranges)}")
    import bisect

    starts = [r[0] for r in ranges]
    totals, counts = [0] * n, [0] * n
    for linked, duration_ns in device:
        # No start: launched by no recorded op, or by the range itself (the tree path does not count it either).
        for t in op_start.get(linked, ()):
            i = bisect.bisect_right(starts, t) - 1
            if i >= 0 and t <= ranges[i][1]:
                totals[i] += duration_ns
                counts[i] += 1
    return [t / 1e6 for t in totals], counts  # ns -> ms


# How samples are attributed in this run: the raw events, checked once against the tree on the run's first
# measurement (attributed_sample_times); "tree" from then on if the two ever disagreed.
ATTRIBUTION = {"method": "raw Kineto events", "checked": False, "note": None}


def attributed_sample_times(prof, n):
    """kernel_sample_times, checked on the first call of the run against the FunctionEvent tree (same counts, times
    equal to 1e-9 relative): on a disagreement the run says so on stderr and uses the tree from then on."""
    if ATTRIBUTION["method"] == "tree":
        return kernel_sample_times_from_function_events(prof, n)
    times, counts = kernel_sample_times(prof, n)
    if not ATTRIBUTION["checked"]:
        ATTRIBUTION["checked"] = True
        tree_times, tree_counts = kernel_sample_times_from_function_events(prof, n)
        differ = [i for i in range(n) if counts[i] != tree_counts[i]
                  or abs(times[i] - tree_times[i]) > 1e-9 * max(abs(tree_times[i]), 1e-12)]
        if differ:
            diff = differ[0]
            ATTRIBUTION.update(method="tree", note=(
                f"raw Kineto attribution disagreed with the FunctionEvent tree at sample {diff} ({counts[diff]} "
                f"kernels, {times[diff]:.6g} ms vs {tree_counts[diff]}, {tree_times[diff]:.6g} ms): the tree is used"))
            print(f"peer_bench: {ATTRIBUTION['note']}", file=sys.stderr, flush=True)
            return tree_times, tree_counts
    return times, counts


def kernel_sample_times_from_function_events(prof, n):
    """kernel_sample_times through torch's FunctionEvent tree (prof.events()): the reference the raw path is
    checked against; slow on thousands of events."""
    from torch.autograd import DeviceType

    events = [e for e in prof.events() if e.device_type == DeviceType.CPU]
    ranges = sorted((e.time_range.start, e.time_range.end) for e in events if e.name == RANGE)
    if len(ranges) != n:
        raise RuntimeError(f"expected {n} profiler ranges named {RANGE}, found {len(ranges)}")
    totals = [0.0] * n
    counts = [0] * n
    starts = [r[0] for r in ranges]
    import bisect

    for e in events:
        if not e.kernels or e.name == RANGE:
            continue
        t = e.time_range.start
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and t <= ranges[i][1]:
            totals[i] += sum(k.duration for k in e.kernels)
            counts[i] += len(e.kernels)
    return [t / 1000.0 for t in totals], counts  # us -> ms


def measure(torch, fn, samples, warmup, flush, touch=None):
    """(median ms, samples ms) of fn. Cold (touch None): flush.zero_() before each sample; warm: touch() before each
    warm-up call and each sample instead. Either runs outside the profiled range, so its kernel is in no sample."""
    from torch.profiler import ProfilerActivity, profile, record_function

    t0 = time.perf_counter()
    for _ in range(warmup):
        if touch:
            touch()
        fn()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t2 = time.perf_counter()
        for _ in range(samples):
            if touch:
                touch()  # warm L2: the input just rewritten, outside the measured range
            else:
                flush.zero_()  # cold L2: outside the measured range
            with record_function(RANGE):
                fn()
        torch.cuda.synchronize()
        t3 = time.perf_counter()
    t4 = time.perf_counter()
    times, counts = attributed_sample_times(prof, samples)
    PHASE_S["warm-ups"] += t1 - t0
    PHASE_S["profiler start and stop"] += (t2 - t1) + (t4 - t3)
    PHASE_S["profiled samples"] += t3 - t2
    PHASE_S["attribution"] += time.perf_counter() - t4
    if min(counts) == 0:
        raise RuntimeError("a sample recorded no kernel: the profiler did not attribute the kernels to the range")
    return statistics.median(times), times


def sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def choose_samples(torch, fn, base, budget_s, device="cuda"):
    """base samples, more (up to 10x) for fast calls, within about budget_s of wall time."""
    sync(torch, device)
    t = time.perf_counter()
    fn()
    sync(torch, device)
    per_call = max(time.perf_counter() - t, 1e-6)
    return int(max(base, min(10 * base, budget_s / per_call)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", help="run record.json: its \"peers\" array is replaced (temp file + rename)")
    ap.add_argument("--json-out", help="also write the peers entries here")
    ap.add_argument("--samples", type=int, default=30, help="minimum samples per side (default 30)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=0.25, help="wall time per side that sets the sample count")
    ap.add_argument("--ops", help="comma-separated op names (default: all pairs)")
    ap.add_argument("--cases", help="regular expression searched in the model cases' names (default: all), e.g. "
                                    "'^rpn_' for issue 13's proposal cases or '_warm$' for the warm ones")
    ap.add_argument("--max-total-s", type=float, default=480.0,
                    help="time budget: entries not started by then are recorded as not run (default 480 s: the whole table took about 400 s on an H200, torchvision's 100k-box NMS alone ~350 ms per call)")
    ap.add_argument("--library", help="libdetops_torch.so (default: $DETOPS_TORCH_LIBRARY or build/*/ops)")
    ap.add_argument("--shard", help="I/N: time only the I-th of N parts of the (op, case) list (one process per GPU)")
    ap.add_argument("--times", help="a run record whose peers entries give each (op, case)'s time, for --shard's split")
    ap.add_argument("--merge", nargs="+", metavar="PART", help="merge the --json-out files of --shard processes "
                    "(nothing is timed): the table on stdout, the entries into --record")
    args = ap.parse_args(argv)
    shard = None
    if args.shard:
        from shard_suite import parse_shard

        try:
            shard = parse_shard(args.shard)
        except ValueError as e:
            print(f"peer_bench: error: --shard {e}", file=sys.stderr)
            return 2
    try:
        case_filter = re.compile(args.cases) if args.cases else None
    except re.error as e:
        print(f"peer_bench: error: --cases {args.cases!r} is not a regular expression: {e}", file=sys.stderr)
        return 2
    if args.record:
        # The record the entries are merged into is validated first, before anything runs or is written.
        sys.path.insert(0, str(ROOT / "scripts"))
        import compare
        try:
            status, errors = compare.validate_record(compare.load_record(args.record))
        except compare.RecordError as e:
            print(f"peer_bench: error: --record: {e}", file=sys.stderr)
            return compare.EXIT_USAGE
        if status == "invalid":
            print(f"peer_bench: error: --record {args.record} does not match docs/record.schema.json (nothing "
                  f"merged): {errors[0]}" + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""),
                  file=sys.stderr)
            return compare.EXIT_USAGE
    if args.merge:
        return merge_parts(args.merge, args.record)

    try:
        import torch
    except ImportError:
        print("peer_bench: torch is not installed: peer timing skipped")
        return 0
    try:
        import torchvision  # noqa: F401
    except ImportError:
        print("peer_bench: torchvision not installed: peer suite skipped")
        return 0
    if not torch.cuda.is_available():
        print("peer_bench: no CUDA device: the speed half of the peer suite needs a GPU (nothing timed; "
              "correctness runs on the CPU in suites/peer)")
        return 0

    from peer import nms_checks, pairs

    pairs.load_library(args.library)
    wanted = set(args.ops.split(",")) if args.ops else None
    peak = device_peak(torch)
    print(f"peer_bench: peak DRAM bandwidth: {peak[1]}", file=sys.stderr)
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0) or 64 << 20
    flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
    t_start = time.time()
    entries, skipped, plan = [], [], []
    for pair in pairs.PAIRS:
        if wanted and pair.op not in wanted:
            continue
        missing = pairs.pair_missing(pair)
        if missing:
            skipped.append(f"{pair.op} ({missing})")
            print(f"peer_bench: {pair.op}: {missing}", file=sys.stderr)
            continue
        for case in (c for c in pair.cases if c.kind == "model" and (not case_filter or case_filter.search(c.name))):
            plan.append((pair, case))
    if shard:
        plan = shard_plan(plan, shard, load_case_times(args.times) if args.times else {})
        print(f"peer_bench: shard {shard[0]}/{shard[1]}: {len(plan)} (op, case) pairs", file=sys.stderr)
    total = sum(len(pairs.ALL_DTYPES) * (2 if pair.grad_keys else 1) for pair, _ in plan)
    for pair, case in plan:
        t_base = time.perf_counter()
        base = pair.make(case.params, case.seed)
        PHASE_S["base inputs"] += time.perf_counter() - t_base
        for dtype in pairs.ALL_DTYPES:
            directions = ["fwd"] + (["bwd"] if pair.grad_keys else [])
            for direction in directions:
                if time.time() - t_start > args.max_total_s:
                    entries.append(not_run_entry(pair, case, dtype, direction, args.max_total_s))
                    continue
                entries.append(run_one(torch, pairs, nms_checks, pair, case, base, dtype, direction, args, flush,
                                       peak=peak))
                e = entries[-1]
                print(f"peer_bench: [{len(entries)}/{total}] {e['op']}/{e['case']}/{e['dtype']}/{e['direction']}: "
                      f"peer {fmt(e['torchvision_ms'])} ms, DetOps {fmt(e['detops_ms'])} ms; "
                      f"{time_left(time.time() - t_start, len(entries), total)}", file=sys.stderr, flush=True)
        del base
        torch.cuda.empty_cache()
    wall = time.time() - t_start
    print("peer_bench: where the time went: " + ", ".join(f"{k} {v:.1f} s" for k, v in PHASE_S.items()) +
          f", the rest {max(wall - sum(PHASE_S.values()), 0.0):.1f} s, of {wall:.1f} s", file=sys.stderr, flush=True)
    print(markdown_table(entries))
    footer = (f"timer: {TIMER} (samples attributed from "
              f"{ATTRIBUTION['method']}{'; ' + ATTRIBUTION['note'] if ATTRIBUTION['note'] else ''}), cold L2 "
              f"({2 * l2 >> 20} MiB flush; warm cases: the input rewritten in place instead), median of >= "
              f"{args.samples} samples per side; peak DRAM bandwidth: {peak[1]}")
    print(f"\n{len(entries)} entries in {time.time() - t_start:.0f} s; {footer}")
    if skipped:
        print("skipped: " + "; ".join(skipped))
    if args.json_out:
        write_atomic(args.json_out, {"peers": entries, "shard": args.shard, "gpu_uuid": gpu_uuid(torch),
                                     "elapsed_s": round(time.time() - t_start, 1), "attribution": dict(ATTRIBUTION),
                                     "skipped": skipped, "footer": footer})
    if args.record:
        rec = json.loads(pathlib.Path(args.record).read_text())
        rec["peers"] = entries
        write_atomic(args.record, rec)
    return 0


def gpu_uuid(torch):
    """The timing GPU's uuid (as nvidia-smi prints it), or its name where torch gives no uuid."""
    props = torch.cuda.get_device_properties(0)
    uuid = getattr(props, "uuid", None)
    return f"GPU-{uuid}" if uuid is not None else props.name


def load_case_times(path):
    """{(op, case): seconds} from a run record's peers entries: the milliseconds timed per (op, case), the
    samples counted (what a part of --shard costs, roughly); {} when the record has none or is unreadable."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import compare

    try:
        peers = compare.load_record(path).get("peers") or []
    except (compare.RecordError, AttributeError):
        return {}
    times = {}
    for e in peers if isinstance(peers, list) else []:
        if not isinstance(e, dict):
            continue
        key = (e.get("op"), e.get("case"))
        ms = sum((e.get(f"{side}_ms") or 0) * ((e.get("samples") or {}).get(side) or 0)
                 for side in ("detops", "torchvision"))
        times[key] = times.get(key, 0.0) + ms / 1e3
    return times


def shard_plan(plan, shard, times):
    """The I-th of N parts of plan ([(pair, case)], in table order): with times ({(op, case): s}), the correctness
    shards' split (shard_suite.balanced_partition: longest first onto the least loaded part, an unknown (op, case)
    counting the median); without, round-robin. Table order within the part."""
    from shard_suite import balanced_partition

    index, n = shard
    if not times:
        return plan[index::n]
    names = [f"{p.op}/{c.name}" for p, c in plan]  # no dots: each its own unit for balanced_partition
    lists, _ = balanced_partition(names, {f"{op}/{case}": t for (op, case), t in times.items()}, n)
    mine = set(lists[index])
    return [item for name, item in zip(names, plan) if name in mine]


def table_order_key():
    """Sort key of a peers entry in the table's order (pairs.PAIRS, each pair's cases, dtypes, fwd before bwd);
    unknown ops and cases last, in name order."""
    from peer import pairs

    rank = {}
    for i, pair in enumerate(pairs.PAIRS):
        for j, case in enumerate(pair.cases):
            rank.setdefault((pair.op, case.name), (i, j))
    dtypes = {pairs.DTYPE_NAME[d]: k for k, d in enumerate(pairs.ALL_DTYPES)}
    return lambda e: (rank.get((e.get("op"), e.get("case")), (len(rank), 0)), e.get("op", ""), e.get("case", ""),
                      dtypes.get(e.get("dtype"), 9), 0 if e.get("direction") == "fwd" else 1)


def merge_parts(paths, record):
    """--merge: the parts' entries (each tagged with its part's gpu_uuid) in table order; the table, then one line
    per part (GPU, entries, seconds) and one per part that is missing or unreadable; exit 1 when one is."""
    entries, lines, bad, footers = [], [], [], set()
    for path in paths:
        try:
            part = json.loads(pathlib.Path(path).read_text())
            if not isinstance(part, dict) or not isinstance(part.get("peers"), list):
                raise ValueError('expected an object with a "peers" list (peer_bench --json-out)')
        except (OSError, ValueError) as e:
            bad.append(f"{path}: {e}")
            continue
        for e in part["peers"]:
            if isinstance(e, dict):
                entries.append(dict(e, gpu_uuid=part.get("gpu_uuid") or "unknown"))
        if part.get("footer"):
            footers.add(part["footer"])
        lines.append(f"part {part.get('shard') or path}: {len(part['peers'])} entries on {part.get('gpu_uuid')} in "
                     f"{part.get('elapsed_s')} s" + (f"; skipped: {'; '.join(part['skipped'])}" if part.get("skipped") else ""))
    entries.sort(key=table_order_key())
    print(markdown_table(entries))
    print(f"\n{len(entries)} entries from {len(paths) - len(bad)} of {len(paths)} parts; " + "; ".join(sorted(footers)))
    for line in lines:
        print(f"- {line}")
    for b in bad:
        print(f"- MISSING part (its process crashed or was killed; the other parts are kept): {b}")
    if record:
        rec = json.loads(pathlib.Path(record).read_text())
        rec["peers"] = entries
        write_atomic(record, rec)
    return 1 if bad else 0


def run_one(torch, pairs, nms_checks, pair, case, base, dtype, direction, args, flush, device="cuda", timer=None,
            peak=(None, "not measured")):
    """One peers entry. device and timer exist for the CPU test of this function (suites/peer/test_peer_bench.py);
    the runner always uses CUDA and measure(). peak: (bytes/s or None, its source), for the DRAM floor.
    The torchvision_* fields hold the peer's values whatever the peer is ("peer" names it)."""
    timer = timer or measure
    name = pairs.DTYPE_NAME[dtype]
    l2 = case.params.get("l2", "cold")
    entry = {"op": pair.op, "case": case.name, "shape": case.params.get("shape", ""), "dtype": name,
             "direction": direction, "peer": pair.torchvision, "peer_kind": pair.peer_kind, "detops_ms": None,
             "torchvision_ms": None, "speedup": None,
             "max_abs_error": None, "torchvision_max_abs_error": None, "tolerance": None,
             "samples": {"detops": 0, "torchvision": 0}, "timer": TIMER, "truth": pair.truth_note,
             "l2": l2, "l2_note": l2_note(pair, l2, direction)}
    if pair.floor:
        entry["floor"] = {"name": pair.floor_name, "ms": None, "samples": 0, "detops_over_floor": None}
    t_entry = time.perf_counter()
    try:
        if l2 not in ("cold", "warm"):
            raise ValueError(f"case {case.name}: l2 must be 'cold' or 'warm', not {l2!r}")
        inp = pairs.cast_inputs(pair, base, dtype, device)
        tin = pairs.as_truth_inputs(pair, inp, pair.truth_dtype(dtype))
        touches = {}  # side -> the warm case's touch (none: cold)
        missing = pairs.torchvision_kernel_missing(pair, dtype, device)
        if missing:
            entry["torchvision_note"] = missing
        atol, rtol = pair.tol[dtype]
        entry["tolerance"] = {"atol": atol, "rtol": rtol}
        if direction == "fwd":
            ours = pair.detops(inp)
            truth = pair.tv(tin)
            if pair.kind == "nms":
                entry["tolerance"] = None
                entry.update(nms_check(torch, nms_checks, pair, inp, ours, truth, dtype))
            else:
                entry["max_abs_error"] = pairs.max_abs_error(ours, truth)
                if not missing and pair.truth_dtype(dtype) != dtype:
                    entry["torchvision_max_abs_error"] = pairs.max_abs_error(pair.tv(inp), truth)
            fns = {"detops": lambda: pair.detops(inp)}
            if not missing:
                fns["torchvision"] = lambda: pair.tv(inp)
            if pair.floor:
                fns["floor"] = lambda: pair.floor(inp)
            if l2 == "warm":  # every side reads the same inp: the same tensor rewritten before each call
                if not torch.is_tensor(inp.get(pair.main_input)):
                    raise ValueError(f"warm case {case.name}: {pair.op} has no tensor input {pair.main_input!r} "
                                     f"to touch")
                touches = {side: touch_fn(torch, inp[pair.main_input]) for side in fns}
        else:
            # Drawn where it is used: a CPU draw of a box head's grad_output (12.5M fp64 normals) took ~0.2 s.
            g = torch.Generator(device=device).manual_seed(case.seed + 7)
            keys = pairs.grad_keys(pair, inp)
            ins = {side: dict(inp) for side in ("detops", "torchvision") + (("floor",) if pair.floor else ())}
            for side in ins:
                for k in keys:
                    ins[side][k] = inp[k].detach().clone().requires_grad_()
            for k in keys:
                tin[k] = tin[k].detach().requires_grad_()
            ours = pair.detops(ins["detops"])
            grad_out = torch.randn(ours.shape, generator=g, dtype=torch.float64, device=device)
            truth_out = pair.tv(tin)
            # The error: gradients of out.sum() (a grad_output of ones, exact in every dtype), as suites/peer
            # checks them, so the pair's tolerance applies. The timing: a seeded normal grad_output.
            g_truth = torch.autograd.grad(truth_out.sum(), [tin[k] for k in keys])
            g_ours = torch.autograd.grad(ours.sum(), [ins["detops"][k] for k in keys], retain_graph=True)
            entry["max_abs_error"] = max(pairs.max_abs_error(a, b) for a, b in zip(g_ours, g_truth))
            entry["grad_output"] = "timed with a seeded normal grad_output; error from the gradients of out.sum()"
            fns, grad_outputs = {}, {}
            fns["detops"], grad_outputs["detops"] = backward_call(torch, keys, ins["detops"], ours, grad_out)
            if not missing:
                theirs = pair.tv(ins["torchvision"])
                if pair.truth_dtype(dtype) != dtype:
                    g_theirs = torch.autograd.grad(theirs.sum(), [ins["torchvision"][k] for k in keys],
                                                   retain_graph=True)
                    entry["torchvision_max_abs_error"] = max(pairs.max_abs_error(a, b) for a, b in zip(g_theirs, g_truth))
                fns["torchvision"], grad_outputs["torchvision"] = backward_call(torch, keys, ins["torchvision"], theirs,
                                                                               grad_out)
            if pair.floor:
                floor_out = pair.floor(ins["floor"])
                fns["floor"], grad_outputs["floor"] = backward_call(torch, pair.floor_grad_keys, ins["floor"],
                                                                    floor_out, grad_out.reshape(floor_out.shape))
            if l2 == "warm":  # each side's own grad_output (equal values), rewritten before each of its calls
                touches = {side: touch_fn(torch, go) for side, go in grad_outputs.items()}
        if pair.dram_reads:
            entry["dram"] = dram_floor(torch, pair, inp, ours, direction, peak)
        PHASE_S["casts, truths and errors"] += time.perf_counter() - t_entry
        for side, fn in fns.items():
            t_count = time.perf_counter()
            n = choose_samples(torch, fn, args.samples, args.budget_s, device)
            PHASE_S["sample counts"] += time.perf_counter() - t_count
            med, _ = timer(torch, fn, n, args.warmup, flush, touch=touches.get(side))
            if side == "floor":
                entry["floor"].update(ms=med, samples=n)
            else:
                entry[f"{side}_ms"] = med
                entry["samples"][side] = n
        if entry["torchvision_ms"] is not None and entry["detops_ms"]:
            entry["speedup"] = entry["torchvision_ms"] / entry["detops_ms"]
        if pair.floor and entry["floor"]["ms"] and entry["detops_ms"]:
            entry["floor"]["detops_over_floor"] = entry["detops_ms"] / entry["floor"]["ms"]
        if "dram" in entry and entry["dram"]["floor_ms"] is not None and entry["detops_ms"]:
            entry["dram"]["fraction_of_floor"] = entry["dram"]["floor_ms"] / entry["detops_ms"]
    except Exception as e:  # one failing pair must not lose the others
        entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    err = entry["max_abs_error"]
    if err is not None and not math.isfinite(err):
        entry["max_abs_error"] = None  # JSON has no NaN/inf
        entry["check"] = f"DetOps differs from the truth by a non-finite amount ({err})"
    tv_err = entry["torchvision_max_abs_error"]
    if tv_err is not None and not math.isfinite(tv_err):
        entry["torchvision_max_abs_error"] = None
        entry["torchvision_check"] = f"torchvision differs from the truth by a non-finite amount ({tv_err})"
    return entry


def time_left(elapsed_s, done, total):
    """The progress tail of a line: elapsed time and, from the mean time per entry so far, the time left (the
    shard runner's time format)."""
    from shard_suite import fmt_s

    if done <= 0 or done >= total:
        return fmt_s(elapsed_s)
    return f"{fmt_s(elapsed_s)}, about {fmt_s(elapsed_s / done * (total - done))} left"


def not_run_entry(pair, case, dtype, direction, budget):
    from peer import pairs

    l2 = case.params.get("l2", "cold")
    return {"op": pair.op, "case": case.name, "shape": case.params.get("shape", ""), "dtype": pairs.DTYPE_NAME[dtype],
            "direction": direction, "peer": pair.torchvision, "peer_kind": pair.peer_kind, "detops_ms": None,
            "torchvision_ms": None, "speedup": None, "max_abs_error": None,
            "torchvision_max_abs_error": None, "tolerance": None, "samples": {"detops": 0, "torchvision": 0}, "timer": TIMER,
            "l2": l2, "l2_note": l2_note(pair, l2, direction),
            "error": f"not run: the runner's time budget (--max-total-s {budget:g}) was spent"}


def l2_note(pair, l2, direction):
    """What ran before each sample, outside the timed range (the entry's l2_note)."""
    if l2 != "warm":
        return "flush: a buffer of twice the L2 size zeroed before each sample"
    what = pair.main_input if direction == "fwd" else "grad_output"
    return (f"touch: {what}.mul_(1) (rewritten in place, values unchanged) before each warm-up call and sample, "
            f"for DetOps and the peer alike")


def touch_fn(torch, t):
    """A warm case's touch: t rewritten in place with its own values (t * 1 is exact in every float dtype) on the
    current stream, so t stands in L2 as a tensor the previous layer has just written (what of it fits)."""
    def touch():
        with torch.no_grad():
            t.mul_(1)
    return touch


def backward_call(torch, keys, inp, out, grad_out):
    """(the timed backward call, the grad_output tensor it passes: grad_out on out's device and dtype)."""
    inputs = [inp[k] for k in keys]
    go = grad_out.to(out.device, out.dtype)
    return (lambda: torch.autograd.grad(out, inputs, go, retain_graph=True)), go


def dram_floor(torch, pair, inp, out, direction, peak):
    """The DRAM floor of one call: every input of pair.dram_reads read once and the output written once (forward);
    backward: those inputs and grad_output read once, each gradient of grad_keys written once. Over the peak
    bandwidth; fraction_of_floor (floor ms / DetOps ms) is filled in once DetOps is timed."""
    from peer import pairs

    def nbytes(t):
        return t.numel() * t.element_size()

    total = sum(nbytes(inp[k]) for k in pair.dram_reads if torch.is_tensor(inp.get(k))) + nbytes(out)
    if direction == "bwd":
        total += sum(nbytes(inp[k]) for k in pairs.grad_keys(pair, inp))
    bw, source = peak
    return {"bytes": int(total), "peak_bytes_per_second": bw, "peak_source": source,
            "floor_ms": total / bw * 1e3 if bw else None, "fraction_of_floor": None}


def nms_check(torch, nms_checks, pair, inp, ours, truth, dtype):
    idxs = inp["idxs"] if pair.op == "batched_nms" else None
    distinct = inp["scores"].unique().numel() == inp["scores"].numel()
    if distinct and nms_checks.margin_clean(inp["boxes"], inp["iou"], idxs=idxs):
        same = ours.cpu().tolist() == truth.cpu().tolist()
        return {"check": "same keep list as torchvision fp64" if same else "keep list DIFFERS from torchvision fp64",
                "max_abs_error": 0.0 if same else None}
    try:
        nms_checks.check_validity(inp["boxes"], inp["scores"], ours, inp["iou"],
                                  1e-12 if dtype == torch.float64 else 2e-6, idxs)
        return {"check": "valid (not margin-clean: checked for validity, not against torchvision's list)"}
    except AssertionError as e:
        return {"check": f"INVALID: {e}"}


def fmt(v, digits=4):
    if v is None:
        return "none"
    if v == 0:
        return "0"
    return f"{v:.{digits}g}"


def floor_cell(e):
    """deform_conv2d: DetOps ms over the dense convolution's; memory-bound rows: the fraction of the DRAM floor."""
    fl, dram = e.get("floor"), e.get("dram")
    if fl and fl.get("detops_over_floor"):
        return f"{fl['detops_over_floor']:.2f}x {fl['name']} ({fmt(fl['ms'])} ms)"
    if dram and dram.get("fraction_of_floor"):
        return f"{dram['fraction_of_floor']:.0%} of DRAM floor ({fmt(dram['floor_ms'])} ms)"
    return "-"


def markdown_table(entries):
    lines = ["| op | peer | case | dtype | direction | L2 | peer ms | DetOps ms | speed-up | floor | max error | "
             "peer's max error |",
             "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for e in entries:
        err = fmt(e.get("max_abs_error"), 3) if e.get("max_abs_error") is not None else (e.get("check") or "-")
        if e.get("error"):
            err = f"error: {e['error']}"
        tv_err = (fmt(e["torchvision_max_abs_error"], 3) if e.get("torchvision_max_abs_error") is not None
                  else e.get("torchvision_check") or "-")
        sp = f"{e['speedup']:.2f}x" if e.get("speedup") else "-"
        lines.append(f"| {e['op']} | {e.get('peer', 'torchvision')} | {e['case']} | {e['dtype']} | {e['direction']} | "
                     f"{e.get('l2', 'cold')} | {fmt(e['torchvision_ms'])} | {fmt(e['detops_ms'])} | {sp} | "
                     f"{floor_cell(e)} | {err} | {tv_err} |")
    return "\n".join(lines)


def write_atomic(path, obj):
    path = pathlib.Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
