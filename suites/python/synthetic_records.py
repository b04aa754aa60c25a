"""Synthetic DetOps run records (docs/record.schema.json) for the compare and report tests.

Timings are seeded lognormal draws: each repetition median is base_ms * exp(N(0, sigma)), each
repetition's samples scatter around it the same way. Run as a script to write a demo baseline and
candidate (used by scripts/screenshot_report.sh):  python synthetic_records.py OUT_DIR
"""
import copy
import json
import pathlib
import sys

import numpy as np

# (op, case, shape, fwd ms, bytes moved per call, with bwd?) loosely after the H200 anchors in MEASURE.md.
DEMO_BENCHMARKS = [
    ("roi_align", "faster_rcnn_box_head_1000", "x[2,256,200,336] rois[1000,5] 7x7 sr2 aligned", 0.328, 1.6e8, True),
    ("roi_align", "mask_head_512_14x14", "x[2,256,200,336] rois[512,5] 14x14 sr2 aligned", 0.600, 2.1e8, False),
    ("roi_pool", "box_head_1000", "x[2,256,200,336] rois[1000,5] 7x7", 0.351, 1.5e8, True),
    ("ps_roi_align", "rfcn_1000", "x[2,490,200,336] rois[1000,5] 7x7", 0.094, 6.0e7, False),
    ("box_iou", "pairwise_4000", "boxes1[4000,4] boxes2[4000,4]", 0.540, 6.4e7, False),
]
DTYPE_FACTOR = {"fp32": 1.0, "fp16": 1.3, "bf16": 1.35, "fp64": 2.2}
COPY_BANDWIDTH = 4.25e12


def provenance(gpu_name="NVIDIA H200", cuda=13000, driver="580.65.06", torch_version="2.11.0", nvcc="13.0.88",
               sha="0123456789abcdef0123456789abcdef01234567", run_id="20250101T000000Z_NVIDIA-H200", timer="cupti",
               repetitions=9):
    return {
        "run_id": run_id, "complete": True, "git": {"sha": sha, "dirty": False},
        "host": "gpu-host-1", "date": "2025-01-01T00:00:00Z",
        "gpu": {"name": gpu_name, "uuid": "GPU-00000000-0000-0000-0000-000000000000", "compute_capability": "9.0",
                "sm_count": 132, "l2_cache_bytes": 52428800, "memory_bytes": 150754820096, "ecc_enabled": True,
                "power_limit_w": 700.0, "default_sm_clock_mhz": 1755, "max_sm_clock_mhz": 1980, "memory_clock_mhz": 3201},
        "driver_version": driver, "cuda_driver_api_version": cuda, "cuda_runtime_version": cuda, "cupti_version": 26,
        "nvcc_version": nvcc, "nvcc_flags": "--expt-relaxed-constexpr -lineinfo", "cuda_archs": "90", "sass_archs": "90",
        "kernel_images": {"sass": 88, "ptx_jit": 0, "kernels": [
            {"name": "roi_align_forward_kernel<float>", "binary_version": 90, "ptx_version": 90, "runs_from": "sass"}]},
        "libtorch_version": torch_version, "libtorch_cuda_version": cuda_text(cuda),
        "timer": timer, "device_copy_bandwidth_bytes_per_second": COPY_BANDWIDTH,
        "settings": {"cold_l2": True, "min_samples": 10, "min_gpu_time_s": 0.5, "max_rel_stdev": 0.005,
                     "timeout_s": 15.0, "repetitions": repetitions, "throttle_fraction": 0.75,
                     "warmup": "one call, then until 10 ms of GPU time"},
    }


def cuda_text(v):
    return f"{v // 1000}.{(v % 1000) // 10}"


def benchmark_entries(op, case, dtype, direction, shape, base_ms, rng, repetitions=9, sigma=0.01,
                      samples_per_repetition=12, bytes_moved=1e8):
    """Google Benchmark's repetition layout for one benchmark: iterations, then mean/median/stddev/cv."""
    run_name = f"{op}/{case}/{dtype}/{direction}"
    rep_medians = base_ms * np.exp(rng.normal(0.0, sigma, repetitions))
    samples = np.concatenate([m * np.exp(rng.normal(0.0, sigma, samples_per_repetition)) for m in rep_medians])
    common = {"run_name": run_name, "family_index": 0, "per_family_instance_index": 0, "repetitions": repetitions,
              "threads": 1, "time_unit": "ms", "label": shape}
    entries = []
    for i, m in enumerate(rep_medians):
        entries.append(dict(common, name=run_name, run_type="iteration", repetition_index=i,
                            iterations=samples_per_repetition, real_time=float(m), cpu_time=float(m),
                            bytes_per_second=bytes_moved / (m * 1e-3)))
    q = np.percentile(samples, [0, 25, 50, 75, 100])
    med = float(np.median(rep_medians))
    achieved = bytes_moved / (q[2] * 1e-3)
    detops = {
        "op": op, "case": case, "dtype": dtype, "direction": direction, "shape": shape, "timer": "cupti",
        "samples_ms": [float(s) for s in samples],
        "span_samples_ms": [float(s) * 1.01 for s in samples],
        "repetition_medians_ms": [float(m) for m in rep_medians],
        "stats_ms": {"min": float(q[0]), "q1": float(q[1]), "median": float(q[2]), "q3": float(q[3]), "max": float(q[4]),
                     "mean": float(samples.mean()), "stdev": float(samples.std(ddof=1)),
                     "rel_stdev": float(samples.std(ddof=1) / samples.mean()), "count": int(len(samples))},
        "stop_reason": "converged", "gpu_time_s": float(samples.sum() * 1e-3), "wall_time_s": float(samples.sum() * 3e-3),
        "kernels_per_call": 1, "kernel_names": [f"{op}_{direction}_kernel"],
        "bytes_moved": bytes_moved, "achieved_bandwidth_bytes_per_second": achieved,
        "bandwidth_fraction": achieved / COPY_BANDWIDTH,
        "sm_clock_mhz": {"min": 1740, "median": 1755, "max": 1980}, "discarded_throttled": 0, "discarded_dropped_records": 0,
        "hardware_metrics": {"status": "skipped", "reason": "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"},
    }
    for agg, value in (("mean", float(rep_medians.mean())), ("median", med), ("stddev", float(rep_medians.std(ddof=1))),
                       ("cv", float(rep_medians.std(ddof=1) / rep_medians.mean()))):
        e = dict(common, name=f"{run_name}_{agg}", run_type="aggregate", aggregate_name=agg, iterations=repetitions,
                 real_time=value, cpu_time=value)
        if agg == "median":
            e["bytes_per_second"] = achieved
            e["detops"] = detops
        if agg == "cv":
            e["aggregate_unit"] = "percentage"
        entries.append(e)
    return entries


def measured_hardware_metrics(read, written, duration_ns, median_ms, pct_of_peak=None, l2_bytes=None, passes=3,
                              l2="cold"):
    """A "measured" hardware_metrics object as detops_bench writes it (harness/src/bench/hw_metrics_record.cpp)."""
    total = read + written
    metrics = {"dram__bytes_read.sum": float(read), "dram__bytes_write.sum": float(written),
               "gpu__time_duration.sum": float(duration_ns)}
    if pct_of_peak is not None:
        metrics["dram__throughput.avg.pct_of_peak_sustained_elapsed"] = pct_of_peak
    if l2_bytes is not None:
        metrics["lts__t_bytes.sum"] = float(l2_bytes)
    return {"status": "measured", "dram_bytes_read": int(read), "dram_bytes_write": int(written),
            "duration_ns": float(duration_ns),
            "dram_throughput_bytes_per_second": total / (duration_ns * 1e-9) if duration_ns > 0 else None,
            "dram_throughput_at_median_bytes_per_second": total / (median_ms * 1e-3) if median_ms > 0 else None,
            "dram_pct_of_peak": pct_of_peak, "l2_bytes": l2_bytes, "passes": passes, "l2": l2, "metrics": metrics}


def set_hardware_metrics(record, key, hardware_metrics):
    """Puts hardware_metrics into the median entry of benchmark `key` ("op/case/dtype/dir") of `record`."""
    for e in record["benchmarks"]:
        if e.get("run_name") == key and e.get("aggregate_name") == "median":
            e["detops"]["hardware_metrics"] = hardware_metrics
            return record
    raise KeyError(key)


def correctness_test(name, outcome="passed", max_abs_error=1e-7, max_rel_error=1e-7, atol=1e-5, rtol=1e-5, message=""):
    op, check, case, dtype, device = name.split(".")
    return {"name": name, "op": op, "check": check, "case": case, "dtype": dtype, "device": device, "outcome": outcome,
            "message": message, "max_abs_error": max_abs_error, "max_rel_error": max_rel_error, "atol": atol, "rtol": rtol}


def make_record(benchmarks, tests=None, seed=0, sigma=0.01, repetitions=9, scale=None, **prov):
    """benchmarks: [(op, case, dtype, direction, base_ms)]; scale: {key or '*': factor} on the candidate time."""
    rng = np.random.default_rng(seed)
    entries = []
    for op, case, dtype, direction, base_ms in benchmarks:
        key = f"{op}/{case}/{dtype}/{direction}"
        factor = (scale or {}).get(key, (scale or {}).get("*", 1.0))
        entries.extend(benchmark_entries(op, case, dtype, direction, f"shape of {case}", base_ms * factor, rng,
                                         repetitions=repetitions, sigma=sigma))
    tests = tests if tests is not None else [correctness_test("roi_align.forward.tiny.fp32.cuda")]
    summary = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    for t in tests:
        summary[{"passed": "passed", "mismatch": "failed", "error": "errors"}.get(t["outcome"], "skipped")] += 1
    return {
        "context": {"date": "2025-01-01T00:00:00+00:00", "host_name": "gpu-host-1", "executable": "detops_bench",
                    "num_cpus": 16, "mhz_per_cpu": 2000, "cpu_scaling_enabled": False, "caches": [],
                    "library_build_type": "release", "library_version": "v1.8.3",
                    "detops_schema_version": 1, "detops": provenance(repetitions=repetitions, **prov)},
        "benchmarks": entries,
        "correctness": {"summary": summary, "tests": tests},
        "peers": [],
    }


def demo_benchmarks():
    out = []
    for op, case, _shape, ms, _bytes, bwd in DEMO_BENCHMARKS:
        for dtype in ("fp32", "fp16", "bf16"):
            out.append((op, case, dtype, "fwd", ms * DTYPE_FACTOR[dtype]))
            if bwd:
                out.append((op, case, dtype, "bwd", 4 * ms * DTYPE_FACTOR[dtype]))
    return out


def demo_tests(fail=()):
    tests = []
    for op, case, *_ in DEMO_BENCHMARKS:
        for dtype, (atol, rtol) in (("fp32", (1e-5, 1e-5)), ("fp16", (1e-3, 2e-3)), ("bf16", (8e-3, 1.6e-2))):
            for device in ("cpu", "cuda"):
                name = f"{op}.forward.{case}.{dtype}.{device}"
                if name in fail:
                    tests.append(correctness_test(name, "mismatch", 3 * atol, 3 * rtol, atol, rtol,
                                                  message=f"mismatch: {dtype} max_abs_error={3 * atol:g} past atol {atol:g}"))
                else:
                    tests.append(correctness_test(name, "passed", 0.1 * atol, 0.1 * rtol, atol, rtol))
    tests.append(correctness_test("nms.forward.tiny.fp32.cuda", "skipped", None, None, None, None,
                                  message="CUDA unavailable"))
    return tests


def peer_entry(op, case, dtype, direction, tv_ms, detops_ms, max_abs_error=1e-6, **extra):
    """One "peers" entry as scripts/peer_bench.py writes it (tv_ms None: torchvision has no kernel)."""
    e = {"op": op, "case": case, "shape": f"{case} shape", "dtype": dtype, "direction": direction,
         "detops_ms": detops_ms, "torchvision_ms": tv_ms,
         "speedup": (tv_ms / detops_ms) if tv_ms is not None and detops_ms else None,
         "max_abs_error": max_abs_error, "tolerance": {"atol": 1e-4, "rtol": 1e-5},
         "samples": {"detops": 30, "torchvision": 30 if tv_ms is not None else 0},
         "timer": "torch.profiler (Kineto/CUPTI)", "truth": "torchvision in fp64 on our rounded inputs"}
    e.update(extra)
    return e


def demo_peers(factor=1.0):
    return [peer_entry("roi_align", "box_head_1000", "fp32", "fwd", 0.90, 0.30 * factor),
            peer_entry("roi_align", "box_head_1000", "bf16", "fwd", None, 0.20 * factor, 2e-3,
                       torchvision_note="torchvision has no bf16 kernel for roi_align on cuda"),
            peer_entry("nms", "boxes_20000", "fp32", "fwd", 4.0, 0.5 * factor, None, tolerance=None,
                       check="valid (not margin-clean: checked for validity, not against torchvision's list)")]


def write(path, record):
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))
    return path


def write_demo(out_dir):
    out_dir = pathlib.Path(out_dir)
    base = make_record(demo_benchmarks(), demo_tests(), seed=1, run_id="20250101T000000Z_NVIDIA-H200")
    scale = {"roi_align/faster_rcnn_box_head_1000/fp16/fwd": 1.12, "box_iou/pairwise_4000/fp32/fwd": 0.85,
             "roi_pool/box_head_1000/bf16/bwd": 1.03}
    cand = make_record(demo_benchmarks(), demo_tests(fail={"roi_pool.forward.box_head_1000.bf16.cuda"}), seed=2,
                       scale=scale, run_id="20250102T000000Z_NVIDIA-H200", sha="fedcba9876543210fedcba9876543210fedcba98")
    return write(out_dir / "baseline" / "record.json", base), write(out_dir / "candidate" / "record.json", cand)


def with_changes(record, **changes):
    r = copy.deepcopy(record)
    r["context"]["detops"].update(changes)
    return r


if __name__ == "__main__":
    b, c = write_demo(sys.argv[1] if len(sys.argv) > 1 else "demo-records")
    print(b)
    print(c)
