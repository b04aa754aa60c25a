#!/usr/bin/env python3
"""Where an op's time goes: the CUDA kernels (and memsets / copies) one forward or one backward call of a DetOps op,
or of its peer, launches on the peer suite's model cases (suites/peer/pairs.py), with each one's mean device time per
call, from torch.profiler (Kineto / CUPTI).

    scripts/kernel_profile.py --ops roi_pool,ps_roi_align --cases '^rpn_' --dtypes fp32,fp16 [--peer]

This is a diagnostic, not a measurement to compare: no L2 flush, no repetition statistics (scripts/peer_bench.py and
the benchmark suite take the timings the gate and the peer table use). It answers "which kernel" and "is cuBLAS
running the kernel I expect" (it found masked_conv2d's GEMMs in an unaligned sm75 kernel).
"""
import argparse
import collections
import pathlib
import re
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "suites" / "peer"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import pairs  # noqa: E402
import peer_bench  # noqa: E402  (the backward call it times, so both profile the same call)

DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def device_events(prof):
    """(name, total device microseconds) of every device-side event (kernels, memsets, copies) the profile holds."""
    from torch.autograd import DeviceType
    out = []
    for e in prof.events():
        if e.device_type != DeviceType.CUDA:
            continue
        us = getattr(e, "device_time_total", None)
        if us is None:
            us = getattr(e, "cuda_time_total", 0.0)
        out.append((e.name, float(us)))
    return out


def profile(fn, reps):
    """Mean device microseconds per call of fn, per kernel name, over reps calls after 3 warm-up calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    per = collections.defaultdict(float)
    for name, us in device_events(prof):
        per[name] += us / reps
    return per


def short(name, width):
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= width else name[: width - 3] + "..."


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", required=True, help="comma-separated pair ops (suites/peer/pairs.py)")
    ap.add_argument("--cases", default=".", help="regular expression searched in the model cases' names")
    ap.add_argument("--dtypes", default="fp32,fp16", help="comma-separated, of " + ",".join(DTYPES))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--peer", action="store_true", help="profile the peer too")
    ap.add_argument("--width", type=int, default=110, help="kernel name column width")
    args = ap.parse_args(argv)
    ops = args.ops.split(",")
    unknown = sorted(set(ops) - {p.op for p in pairs.PAIRS})
    if unknown:
        print(f"kernel_profile: unknown ops {unknown} (known: {', '.join(sorted({p.op for p in pairs.PAIRS}))})",
              file=sys.stderr)
        return 2
    bad_dtypes = sorted(set(args.dtypes.split(",")) - set(DTYPES))
    if bad_dtypes:
        print(f"kernel_profile: unknown dtypes {bad_dtypes} (known: {', '.join(DTYPES)})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("kernel_profile: no CUDA device", file=sys.stderr)
        return 2
    pairs.load_library()
    for pair in [p for p in pairs.PAIRS if p.op in ops]:
        for case in [c for c in pair.cases if c.kind == "model" and re.search(args.cases, c.name)]:
            base = pair.make(case.params, case.seed)
            for dname in args.dtypes.split(","):
                dtype = DTYPES[dname]
                sides = [("detops", pair.detops)] + ([("peer", pair.tv)] if args.peer else [])
                for side, fn in sides:
                    inp = pairs.cast_inputs(pair, base, dtype, "cuda")
                    keys = pairs.grad_keys(pair, inp)
                    try:
                        table = {"fwd": profile(lambda: fn(inp), args.reps)}
                        if keys:
                            for k in keys:
                                inp[k] = inp[k].detach().requires_grad_()
                            out = fn(inp)
                            backward, _ = peer_bench.backward_call(torch, keys, inp, out, torch.randn_like(out))
                            table["bwd"] = profile(backward, args.reps)
                    except Exception as e:  # noqa: BLE001 (a peer without the dtype: say so, go on)
                        print(f"\n## {pair.op} {case.name} {dname} {side}: {type(e).__name__}: {e}"[:300])
                        continue
                    for direction, per in table.items():
                        total = sum(per.values())
                        print(f"\n## {pair.op} {case.name} {dname} {side} {direction}: {total:.1f} us per call")
                        for name, us in sorted(per.items(), key=lambda kv: -kv[1]):
                            print(f"  {us:9.1f} us  {100 * us / total if total else 0:5.1f}%  {short(name, args.width)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
