"""The pieces of scripts/cross_build.sh that run without a GPU: the sharded suite runner's merge
(scripts/shard_suite.py) and the build facts (scripts/build_facts.py) from real nvcc/ptxas output."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import build_facts  # noqa: E402

BIN = os.environ.get("DETOPS_CORRECTNESS_BIN")
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
pytestmark = pytest.mark.no_detops_library

FILTER = "roi_pool.forward.*.cpu:nms.forward.*.cpu:nms.bad_input.*.cpu"


def gtest_names(report):
    return sorted(f"{s['name']}.{t['name']}" for s in report["testsuites"] for t in s["testsuite"])


@pytest.mark.skipif(not BIN, reason="DETOPS_CORRECTNESS_BIN is not set (CTest sets it to the correctness suite)")
def test_shards_merge_to_the_unsharded_run(tmp_path):
    whole = tmp_path / "whole.json"
    env = dict(os.environ, DETOPS_SAVE_OUTPUTS=str(tmp_path / "whole_out"), DETOPS_SAVE_OUTPUTS_MAX_ELEMENTS="64")
    subprocess.run([BIN, f"--gtest_filter={FILTER}", "--gtest_brief=1", f"--gtest_output=json:{whole}"],
                   env=env, check=True, capture_output=True)
    env = dict(os.environ, DETOPS_SAVE_OUTPUTS_MAX_ELEMENTS="64")
    r = subprocess.run([sys.executable, str(ROOT / "scripts/shard_suite.py"), "--binary", BIN, "--shards", "3",
                        "--filter", FILTER, "--out", str(tmp_path / "merged.json"), "--outputs", str(tmp_path / "out")],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    a = json.loads(whole.read_text())
    b = json.loads((tmp_path / "merged.json").read_text())
    assert gtest_names(b) == gtest_names(a) and b["tests"] == a["tests"] > 100
    assert b["failures"] == 0 and b["detops_shards"] == {"shards": 3, "serial": None, "failed_or_crashed": [],
                                                         "gpus": None, "shard_gpus": None}
    assert not any("detops_gpu" in t for s in b["testsuites"] for t in s["testsuite"])
    assert "detops_device_facts" in b, "the top-level properties (device facts) survive the merge"
    ia = json.loads((tmp_path / "whole_out" / "index.json").read_text())
    ib = json.loads((tmp_path / "out" / "index.json").read_text())
    assert set(ia) == set(ib) and len(ib) > 50
    for name, e in ib.items():  # every dump moved next to the merged index, byte for byte the unsharded one
        assert (tmp_path / "out" / e["file"]).read_bytes() == (tmp_path / "whole_out" / ia[name]["file"]).read_bytes()
    assert not any(p.name.startswith("shard-") and p.is_dir() for p in (tmp_path / "out").iterdir())
    assert f"{a['tests']} tests:" in r.stdout


@pytest.mark.skipif(not BIN, reason="DETOPS_CORRECTNESS_BIN is not set (CTest sets it to the correctness suite)")
def test_serial_tests_run_alone_after_the_shards(tmp_path):
    # The large-index cases must not share the GPU: --serial takes them out of the shards into one process.
    r = subprocess.run([sys.executable, str(ROOT / "scripts/shard_suite.py"), "--binary", BIN, "--shards", "2",
                        "--filter", FILTER, "--serial", "nms.*", "--out", str(tmp_path / "merged.json")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    whole = tmp_path / "whole.json"
    subprocess.run([BIN, f"--gtest_filter={FILTER}", "--gtest_brief=1", f"--gtest_output=json:{whole}"],
                   check=True, capture_output=True)
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert gtest_names(merged) == gtest_names(json.loads(whole.read_text()))
    for i in (0, 1):  # the shards ran no nms test ...
        assert "nms" not in (tmp_path / f"shard-{i}.log").read_text()
    serial_log = (tmp_path / "shard-2.log").read_text()  # ... the serial process ran them all, and only them
    assert "nms" in serial_log and "roi_pool" not in serial_log
    n_nms = sum(1 for n in gtest_names(merged) if n.startswith("nms."))
    assert f"{n_nms} tests matching nms.* in one process" in r.stdout


@pytest.mark.skipif(not BIN, reason="DETOPS_CORRECTNESS_BIN is not set (CTest sets it to the correctness suite)")
def test_a_crashing_shard_is_reported_and_the_others_kept(tmp_path):
    # A wrapper that kills shard 1 as soon as it starts; shards 0 and 2 run the real suite.
    wrapper = tmp_path / "wrap.sh"
    wrapper.write_text(f'#!/bin/sh\n[ "$GTEST_SHARD_INDEX" = 1 ] && kill -SEGV $$\nexec "{BIN}" "$@"\n')
    wrapper.chmod(0o755)
    r = subprocess.run([sys.executable, str(ROOT / "scripts/shard_suite.py"), "--binary", str(wrapper), "--shards", "3",
                        "--filter", FILTER, "--out", str(tmp_path / "merged.json")], capture_output=True, text=True)
    assert r.returncode == 1
    assert "shard 1 failed" in r.stderr
    b = json.loads((tmp_path / "merged.json").read_text())
    assert [x["shard"] for x in b["detops_shards"]["failed_or_crashed"]] == [1]
    assert b["tests"] > 50, "shards 0 and 2 kept their results"


@pytest.mark.skipif(not BIN, reason="DETOPS_CORRECTNESS_BIN is not set (CTest sets it to the correctness suite)")
def test_shards_and_serial_tests_spread_over_the_gpus_with_provenance(tmp_path):
    """--gpus: shard i sees only GPU (i mod N) (CUDA_VISIBLE_DEVICES, recorded by a wrapper), every test carries the GPU
    it ran on, the serial tests run one process per GPU, and a crashing shard on one GPU keeps the others' results."""
    seen = tmp_path / "seen"
    seen.mkdir()
    wrapper = tmp_path / "wrap.sh"
    wrapper.write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in --gtest_output=json:*) part=${a#*json:};; esac; done\n'
                       f'echo "$CUDA_VISIBLE_DEVICES" > "{seen}/$(basename "$part")"\n'
                       '[ "$CUDA_VISIBLE_DEVICES" = 7 ] && [ "$(basename "$part")" = merged.shard-2.json ] && kill -SEGV $$\n'
                       f'exec "{BIN}" "$@"\n')
    wrapper.chmod(0o755)
    r = subprocess.run([sys.executable, str(ROOT / "scripts/shard_suite.py"), "--binary", str(wrapper), "--shards", "3",
                        "--filter", FILTER, "--serial", "nms.bad_input.*", "--gpus", "3,7",
                        "--out", str(tmp_path / "merged.json")], capture_output=True, text=True)
    gpu_of = {p.name: p.read_text().strip() for p in seen.iterdir()}
    # Shards 0, 1, 2 on GPUs 3, 7, 3; the serial tests in two processes (shard-3 on GPU 3, shard-4 on GPU 7).
    assert gpu_of == {"merged.shard-0.json": "3", "merged.shard-1.json": "7", "merged.shard-2.json": "3",
                      "merged.shard-3.json": "3", "merged.shard-4.json": "7"}, gpu_of
    assert r.returncode == 0, r.stderr
    assert "in 2 processes, one per GPU" in r.stdout
    b = json.loads((tmp_path / "merged.json").read_text())
    assert b["detops_shards"]["gpus"] == ["3", "7"]
    assert b["detops_shards"]["shard_gpus"] == {"0": "3", "1": "7", "2": "3", "3": "3", "4": "7"}
    tags = {t.get("detops_gpu") for s in b["testsuites"] for t in s["testsuite"]}
    assert tags == {"3", "7"}
    assert set(b["detops_device_facts_by_gpu"]) == {"3", "7"}
    serial = [t for s in b["testsuites"] if s["name"] == "nms.bad_input" for t in s["testsuite"]]
    assert {t["detops_gpu"] for t in serial} == {"3", "7"}, "the serial tests were spread over both GPUs"

    # A shard that dies on GPU 7 (the wrapper kills shard 2 when it is given GPU 7): reported with its GPU, the rest
    # kept.
    r = subprocess.run([sys.executable, str(ROOT / "scripts/shard_suite.py"), "--binary", str(wrapper), "--shards", "3",
                        "--filter", FILTER, "--gpus", "7", "--out", str(tmp_path / "merged.json")],
                       capture_output=True, text=True)
    assert r.returncode == 1
    b = json.loads((tmp_path / "merged.json").read_text())
    assert b["detops_shards"]["failed_or_crashed"][0]["shard"] == 2
    assert b["detops_shards"]["failed_or_crashed"][0]["gpu"] == "7"
    assert b["tests"] > 50


def test_balanced_partition_evens_out_the_expected_time():
    import shard_suite
    names = [f"t{i}" for i in range(8)]
    times = {"t0": 10.0, "t1": 9.0, "t2": 1.0, "t3": 1.0, "t4": 8.0, "t5": 1.0, "t6": 2.0}  # t7: no time
    lists, expected = shard_suite.balanced_partition(names, times, 3)
    assert sorted(n for lst in lists for n in lst) == sorted(names)  # every test once
    assert all(lst == sorted(lst, key=names.index) for lst in lists)  # the suite's order kept
    # GoogleTest's round-robin split would give 13 / 19 / 2 s; longest-first gives 12 / 11 / 11.
    assert max(expected) <= 12.0 and sum(expected) == pytest.approx(34.0)  # t7 counts the median, 2 s
    assert [lst for lst in lists if "t0" in lst][0] != [lst for lst in lists if "t1" in lst][0]
    lists, expected = shard_suite.balanced_partition(names[:2], times, 4)  # more shards than tests
    assert sorted(len(lst) for lst in lists) == [0, 0, 1, 1]



def test_cpu_and_cuda_checks_sharing_a_reference_go_to_one_shard():
    import shard_suite
    names = ["nms.forward.a.fp32.cpu", "nms.forward.a.fp16.cpu", "nms.backward.a.fp32.cpu",
             "nms.gradcheck_fd.a.fp64.cpu", "nms.forward.a.fp32.cuda", "nms.forward.a.fp16.cuda",
             "nms.backward.a.fp32.cuda", "nms.gradcheck_fd.a.fp64.cuda", "nms.bad_input.x.cuda"]
    times = {n: 1.0 for n in names}
    assert shard_suite.share_key("nms.forward.a.fp32.cuda") == shard_suite.share_key("nms.forward.a.fp32.cpu")
    assert shard_suite.share_key("nms.forward.a.fp32.cuda") != shard_suite.share_key("nms.forward.a.fp16.cuda")
    assert shard_suite.share_key("nms.forward.a.fp32.cuda") != shard_suite.share_key("nms.backward.a.fp32.cuda")
    # finite differences on the CUDA op share nothing with the CPU op's: no pair
    assert shard_suite.share_key("nms.gradcheck_fd.a.fp64.cuda") == "nms.gradcheck_fd.a.fp64.cuda"
    lists, expected = shard_suite.balanced_partition(names, times, 4)
    where = {n: i for i, lst in enumerate(lists) for n in lst}
    for dtype, check in (("fp32", "forward"), ("fp16", "forward"), ("fp32", "backward")):
        assert where[f"nms.{check}.a.{dtype}.cpu"] == where[f"nms.{check}.a.{dtype}.cuda"]
    assert sorted(n for lst in lists for n in lst) == sorted(names)
    assert max(expected) == 3.0 and sum(expected) == 9.0  # pairs of 2 s and singles of 1 s over 4 shards

def test_timings_are_read_from_reports_and_bad_files_are_not_used(tmp_path, capsys):
    import gzip as gz
    import shard_suite
    report = {"testsuites": [{"name": "op.forward", "testsuite": [{"name": "a.fp32.cuda", "time": "1.5s"},
                                                                   {"name": "b.fp32.cuda", "time": "0.25s"}]}]}
    (tmp_path / "r.json").write_text(json.dumps(report))
    (tmp_path / "r.json.gz").write_bytes(gz.compress(json.dumps(report).encode()))
    (tmp_path / "m.json").write_text(json.dumps({"op.forward.a.fp32.cuda": 3}))
    want = {"op.forward.a.fp32.cuda": 1.5, "op.forward.b.fp32.cuda": 0.25}
    assert shard_suite.load_timings(tmp_path / "r.json") == want
    assert shard_suite.load_timings(tmp_path / "r.json.gz") == want
    import lzma
    (tmp_path / "r.json.xz").write_bytes(lzma.compress(json.dumps(report).encode()))
    assert shard_suite.load_timings(tmp_path / "r.json.xz") == want
    assert shard_suite.load_timings(tmp_path / "m.json") == {"op.forward.a.fp32.cuda": 3.0}
    (tmp_path / "bad.json").write_text('{"testsuites": 7')
    (tmp_path / "trunc.json.gz").write_bytes(gz.compress(b'{"a": 1}')[:-6])
    for bad in ("bad.json", "trunc.json.gz", "missing.json"):
        assert shard_suite.load_timings(tmp_path / bad) == {}
        assert "not used" in capsys.readouterr().err


@pytest.mark.skipif(not BIN, reason="DETOPS_CORRECTNESS_BIN is not set (CTest sets it to the correctness suite)")
def test_shards_balanced_by_timings_run_every_test_once_with_their_share_of_threads(tmp_path):
    whole = tmp_path / "whole.json"
    subprocess.run([BIN, f"--gtest_filter={FILTER}", "--gtest_brief=1", f"--gtest_output=json:{whole}"],
                   check=True, capture_output=True)
    # Each process records the thread count it was given, then runs the suite.
    wrapper = tmp_path / "wrap.sh"
    wrapper.write_text(f'#!/bin/sh\necho "$OMP_NUM_THREADS" >> "{tmp_path}/threads"\nexec "{BIN}" "$@"\n')
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    r = subprocess.run([sys.executable, str(ROOT / "scripts/shard_suite.py"), "--binary", str(wrapper), "--shards", "3",
                        "--filter", FILTER, "--timings", str(whole), "--out", str(tmp_path / "merged.json")],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "shards balanced by the test times" in r.stdout
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert gtest_names(merged) == gtest_names(json.loads(whole.read_text()))
    cpus = len(os.sched_getaffinity(0))
    assert (tmp_path / "threads").read_text().split() == [str(max(1, cpus // 3))] * 3
    assert not list(tmp_path.glob("shard-*.flags")), "the flag files are removed"
    # A binary that lists nothing (a broken --gtest_list_tests) still runs through GoogleTest's own shards.
    lister = tmp_path / "nolist.sh"
    lister.write_text(f'#!/bin/sh\ncase "$*" in *--gtest_list_tests*) exit 0;; esac\nexec "{BIN}" "$@"\n')
    lister.chmod(0o755)
    r = subprocess.run([sys.executable, str(ROOT / "scripts/shard_suite.py"), "--binary", str(lister), "--shards", "2",
                        "--filter", FILTER, "--timings", str(whole), "--out", str(tmp_path / "m2.json")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "listed no test" in r.stderr
    assert gtest_names(json.loads((tmp_path / "m2.json").read_text())) == gtest_names(json.loads(whole.read_text()))


def test_shard_suite_refuses_a_missing_binary(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "scripts/shard_suite.py"), "--binary", str(tmp_path / "nope"),
                        "--out", str(tmp_path / "o.json")], capture_output=True, text=True)
    assert r.returncode == 2 and "not an executable file" in r.stderr


KERNELS = r"""
__global__ void small(float* x) { x[threadIdx.x] += 1.f; }
// Enough live values that ptxas must spill under a 32-register cap.
__global__ void __launch_bounds__(1024, 2) heavy(const float* in, float* out) {
  float v[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) v[i] = in[threadIdx.x * 64 + i];
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 64; ++i) s += v[i] * v[63 - i] + v[(i * 7) % 64];
  out[threadIdx.x] = s;
}
__global__ void shared(float* x) { __shared__ float t[256]; t[threadIdx.x] = x[threadIdx.x]; __syncthreads(); x[threadIdx.x] = t[255 - threadIdx.x]; }
"""


@pytest.mark.skipif(not NVCC, reason="no nvcc on PATH to produce real ptxas output")
def test_ptxas_report_is_parsed_per_kernel(tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text(KERNELS)
    r = subprocess.run([NVCC, "-c", "-arch=sm_90", "-Xptxas=-v", "-maxrregcount=32", str(cu), "-o", str(tmp_path / "k.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    k = build_facts.parse_ptxas_log(r.stdout + r.stderr)
    names = {name: v for (name, arch), v in k.items() if arch == "sm_90"}
    assert set(names) == {"_Z5smallPf", "_Z5heavyPKfPf", "_Z6sharedPf"}
    assert names["_Z6sharedPf"]["smem_bytes"] == 1024
    assert names["_Z5smallPf"]["spill_stores"] == 0 and names["_Z5smallPf"]["smem_bytes"] == 0
    assert names["_Z5heavyPKfPf"]["registers"] <= 32
    assert names["_Z5heavyPKfPf"]["spill_stores"] > 0 and names["_Z5heavyPKfPf"]["stack_bytes"] > 0
    # The log is appended to by rebuilds: the last report of a kernel wins.
    rebuilt = ("ptxas info    : Compiling entry function '_Z5smallPf' for 'sm_90'\n"
               "ptxas info    : Function properties for _Z5smallPf\n"
               "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
               "ptxas info    : Used 99 registers, used 0 barriers\n")
    again = build_facts.parse_ptxas_log(r.stdout + r.stderr + rebuilt)
    assert again[("_Z5smallPf", "sm_90")]["registers"] == 99
    assert again[("_Z6sharedPf", "sm_90")] == k[("_Z6sharedPf", "sm_90")]


def facts(label, kernels, archs="90"):
    return {"label": label, "nvcc_version": "13.0.88", "ptxas_version": "13.0.88", "toolkit_note": "t",
            "cuda_architectures": archs, "gencode": ["arch=compute_90,code=[sm_90]"], "sass_digest_note": "d",
            "sass_architectures": ["90"] if archs == "90" else [], "kernels": kernels}


def test_diff_counts_identical_sass_and_register_changes(tmp_path, capsys):
    k = lambda n, r, sp, d: {"name": n, "arch": "sm_90", "demangled": n, "registers": r, "spill_stores": sp,
                             "spill_loads": sp, "stack_bytes": sp, "smem_bytes": 0, "sass_sha256_16": d}
    a = facts("a", [k("k1", 32, 0, "x"), k("k2", 40, 0, "y"), k("k3", 64, 0, "z")])
    b = facts("b", [k("k1", 32, 0, "x"), k("k2", 48, 0, "w"), k("k3", 64, 8, "v"), k("k4", 10, 0, "q")])
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    assert build_facts.main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "Kernel images in both builds: 3 (only in a: 0, only in b: 1). Identical SASS: 1 of 3" in out
    assert "Registers changed in 1 (1 more, 0 fewer); kernels that spill: 0 -> 1." in out
    rows = [line for line in out.splitlines() if line.startswith("| `")]
    assert rows[0].startswith("| `k3`") and "0 -> 8" in rows[0], "spill changes are listed first"
    assert rows[1].startswith("| `k2`") and "40 -> 48" in rows[1]


def doctor_json(path, verdict, status):
    path.write_text(json.dumps({"exit": 0, "findings": [
        {"section": "Library x.so", "check": "on sm_90", "status": status, "found": f"{verdict}: detail", "action": ""}]}))


@pytest.mark.parametrize("archs,verdict,status,ok", [
    ("90", "native SASS", "ok", True),
    ("90", "compatible SASS", "ok", False),       # built SASS that this GPU would not run as built
    ("90", "JIT from PTX", "warn", False),
    ("80-virtual", "JIT from PTX", "warn", True),  # a PTX-only build is meant to be JIT-compiled
    ("80-virtual", "none", "fail", False),
])
def test_check_image(tmp_path, archs, verdict, status, ok):
    doctor_json(tmp_path / "d.json", verdict, status)
    (tmp_path / "f.json").write_text(json.dumps(facts("x", [], archs)))
    assert (build_facts.main(["check-image", str(tmp_path / "d.json"), str(tmp_path / "f.json")]) == 0) == ok


LIB = os.environ.get("DETOPS_TORCH_LIBRARY")


def find_cuobjdump():
    try:
        import triton
        cands = [os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")]
    except ImportError:
        cands = []
    for c in [shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump", *cands]:
        if c and os.access(c, os.X_OK):
            return c
    return None


@pytest.mark.skipif(not LIB, reason="DETOPS_TORCH_LIBRARY is not set (CTest sets it to the built library)")
@pytest.mark.skipif(not find_cuobjdump(), reason="no cuobjdump (CUDA toolkit or triton's) to list the embedded code")
def test_kernel_image_check_catches_missing_and_extra_sass_and_ptx():
    tool = find_cuobjdump()
    listing = lambda flag: sorted(set(re.findall(r"sm_(\d+[af]?)", subprocess.run(
        [tool, flag, LIB], capture_output=True, text=True).stdout)))
    sass, ptx = listing("--list-elf"), listing("--list-ptx")
    assert sass, "the built library carries SASS"

    def check(sass_archs, ptx_archs):
        r = subprocess.run(["cmake", f"-DLIB={LIB}", f"-DCUOBJDUMP={tool}", f"-DSASS_ARCHS={','.join(sass_archs)}",
                            f"-DPTX_ARCHS={','.join(ptx_archs)}", "-P", str(ROOT / "cmake" / "CheckKernelImages.cmake")],
                           capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr

    assert check(sass, ptx)[0] == 0
    rc, out = check(sass, ptx + ["999"])
    assert rc != 0 and "expected PTX for sm_999" in out
    rc, out = check(sass + ["998"], ptx)
    assert rc != 0 and "expected SASS for sm_998" in out
    rc, out = check(sass[1:], ptx)
    assert rc != 0 and f"carries SASS for sm_{sass[0]}" in out
    if ptx:
        rc, out = check(sass, ptx[1:])
        assert rc != 0 and f"carries PTX for sm_{ptx[0]}" in out


def test_records_point_at_the_output_dumps_beside_them(tmp_path):
    # scripts/run.sh and build_facts.py finish both use compare.attach_output_dumps.
    import compare
    import synthetic_records as sr
    rec = sr.write(tmp_path / "record.json", sr.make_record([("nms", "b", "fp32", "fwd", 1.0)], seed=1))
    before = rec.read_bytes()
    assert compare.attach_output_dumps(rec) is False and rec.read_bytes() == before
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "index.json").write_text("{}")
    sh = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import compare; "
                         "compare.attach_output_dumps(sys.argv[2])", str(ROOT / "scripts"), str(rec)], check=True)
    assert json.loads(rec.read_text())["outputs"] == {"dir": "outputs", "index": "outputs/index.json"}
    assert compare.load_record(rec)["benchmarks"] == json.loads(before)["benchmarks"]


def test_correctness_summary_says_where_the_time_went(tmp_path):
    rec = {"testsuites": [
        {"name": "roi_align.forward", "testsuite": [
            {"name": "a.fp32.cpu", "time": "2.5s", "reference_reused": "false", "time_reference_ms": "2000"},
            {"name": "a.fp32.cuda", "time": "0.5s", "reference_reused": "true", "time_reference_ms": "0"}]},
        {"name": "roi_align.gradcheck_fd", "testsuite": [
            {"name": "a.fp64.cuda", "time": "1.25s", "fd_evaluation": "cuda_graph"},
            {"name": "b.fp64.cuda", "time": "4s", "fd_evaluation": "eager (no graph: CUDA error: operation not permitted)"}]},
        {"name": "roi_align.bad_input", "testsuite": [{"name": "x.cuda", "time": "0.25s"}, {"name": "y.cuda", "time": "0.5s"}]}]}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(rec))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "summarize_correctness.py"), str(path)],
                         capture_output=True, text=True, check=True).stdout
    assert "Where the time went (9 s of test time; references reused by 1 of 2 checks)" in out
    assert "| gradcheck_fd | cuda | 5.2 |" in out and "| forward | cpu | 2.5 | 2.0 |" in out
    assert "| (checks under 1 s in all) | - | 1.2 |" in out  # forward.cuda 0.5 + bad_input 0.75
    assert "| roi_align | cuda_graph | 1 |" in out and "| roi_align | eager (no graph) | 1 |" in out
    assert out.index("4.00 | roi_align.gradcheck_fd.b.fp64.cuda") < out.index("2.50 | roi_align.forward.a.fp32.cpu")


@pytest.mark.skipif(not BIN, reason="DETOPS_CORRECTNESS_BIN is not set (CTest sets it to the correctness suite)")
def test_the_run_ends_only_after_the_job_beside_it_without_serial_tests(tmp_path):
    """--serial-after without serial tests: shard_suite still waits for the file (scripts/run.sh relies on it to
    show the peer suite's progress and to end the suite step after it), with its progress line while waiting."""
    import threading
    import time

    flag = tmp_path / "peer.rc"
    fast, slow = tmp_path / "peer_pytest.log", tmp_path / "peer_pytest-1.log"
    fast.write_text("." * 80 + " [100%]\n")
    slow.write_text("." * 80 + " [ 40%]\n")
    timer = threading.Timer(4.0, lambda: flag.write_text("0\n"))
    timer.start()
    t0 = time.time()
    r = subprocess.run([sys.executable, str(ROOT / "scripts/shard_suite.py"), "--binary", BIN, "--shards", "2",
                        "--filter", "nms.bad_input.*.cpu", "--serial-after", str(flag), "--interval", "1",
                        "--serial-after-log", str(fast), "--serial-after-log", str(slow),
                        "--out", str(tmp_path / "merged.json")], capture_output=True, text=True)
    timer.join()
    assert r.returncode == 0, r.stderr
    assert time.time() - t0 >= 4.0 and flag.exists()
    assert "waiting for peer.rc" in r.stdout
    # Two processes' logs: the line follows the one at 40%, not the finished one.
    assert "peer suite 40% (the slowest of 2 processes)" in r.stdout and "peer suite 100%" not in r.stdout


def test_the_waiting_line_follows_the_slowest_peer_process(tmp_path):
    """With the peer suite in several pytest processes, the waiting line's percentage and time left are the
    slowest process's: a run on one H200 showed 'peer suite 100%, about 0s left' for two minutes while the second
    process (whose log it did not read) was still at work."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import shard_suite

    fast, slow, empty = tmp_path / "peer_pytest.log", tmp_path / "peer_pytest-1.log", tmp_path / "peer_pytest-2.log"
    fast.write_text("." * 70 + " [ 90%]\n" + "." * 10 + " [100%]\n")
    slow.write_text("." * 70 + " [ 25%]\n" + "." * 70 + " [ 50%]\n")
    empty.write_text("")
    assert shard_suite.wait_progress([fast], 100) == " (peer suite 100%, about 0s left)"
    assert shard_suite.wait_progress([fast, slow], 100) == " (peer suite 50% (the slowest of 2 processes), about 1m40s left)"
    assert shard_suite.wait_progress([slow, fast], 100) == shard_suite.wait_progress([fast, slow], 100)
    assert shard_suite.wait_progress([fast, empty], 100) == " (peer suite (the slowest of 2 processes): no progress shown yet)"
    assert shard_suite.wait_progress([tmp_path / "missing.log"], 100) == ""
    assert shard_suite.wait_progress([], 100) == ""


def _earlier_times(tmp_path, function, gpu, run_id):
    r = subprocess.run(["bash", "-c", f'source "{ROOT}/scripts/lib.sh"; DETOPS_ROOT="{tmp_path}"; '
                                      f'{function} "{gpu}" "{run_id}"'], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _run_folder(tmp_path, name, files, age):
    d = tmp_path / "results" / "runs" / name
    d.mkdir(parents=True)
    for f in files:
        (d / f).write_text("{}")
        os.utime(d / f, (1e9 - age, 1e9 - age))
    return d


def test_the_peer_suite_splits_by_the_newest_earlier_times_over_the_committed_ones(tmp_path):
    """scripts/lib.sh's detops_peer_times (run.sh's split of the peer suite): the committed
    results/suite-times/<gpu>.peer.json.gz first, then every peer_times-*.json of the newest earlier run of this GPU
    model (not the run's own folder, not another model's), merged in that order by the split, so a test the earlier
    run did not hold (a quick gate's) keeps its committed time; either alone; nothing (a split by hash)."""
    def peer_times(gpu, run_id):
        return _earlier_times(tmp_path, "detops_peer_times", gpu, run_id)

    assert peer_times("NVIDIA-H200", "now_NVIDIA-H200") == ""
    older = _run_folder(tmp_path, "20261101T000000Z_NVIDIA-H200", ["peer_times-0.json", "peer_times-1.json"], 300)
    newer = _run_folder(tmp_path, "20261102T000000Z_NVIDIA-H200",
                        ["peer_times-0.json", "peer_times-1.json", "peer_times-2.json"], 200)
    _run_folder(tmp_path, "20261103T000000Z_NVIDIA-H100-80GB-HBM3", ["peer_times-0.json"], 100)  # another model, newer
    _run_folder(tmp_path, "now_NVIDIA-H200", ["peer_times-0.json"], 0)  # the run itself, newest
    _run_folder(tmp_path, "20261104T000000Z_NVIDIA-H200", ["correctness.json"], 50)  # no peer times
    newest = [str(newer / f"peer_times-{i}.json") for i in range(3)]
    assert peer_times("NVIDIA-H200", "now_NVIDIA-H200").split(":") == newest
    committed = tmp_path / "results" / "suite-times" / "NVIDIA-H200.peer.json.gz"
    committed.parent.mkdir(parents=True)
    committed.write_bytes(b"")
    got = peer_times("NVIDIA-H200", "now_NVIDIA-H200").split(":")
    assert got == [str(committed)] + newest, got
    assert str(older) not in ":".join(got)
    assert peer_times("NVIDIA-H100-80GB-HBM3", "x") == str(tmp_path / "results" / "runs" /
                                                           "20261103T000000Z_NVIDIA-H100-80GB-HBM3" / "peer_times-0.json")
    # The split merges them in order: the earlier run's time of a test wins, the committed one fills the rest.
    sys.path.insert(0, str(ROOT / "suites" / "peer"))
    import gzip as gz
    import pytest_split
    committed.write_bytes(gz.compress(json.dumps({"t::a": 5.0, "t::b": 7.0}).encode()))
    (newer / "peer_times-0.json").write_text(json.dumps({"t::a": 1.0}))
    times, bad = pytest_split.recorded_times(":".join(got))
    assert times == {"t::a": 1.0, "t::b": 7.0} and bad == []


def test_the_correctness_shards_split_by_the_newest_earlier_times_over_the_committed_ones(tmp_path, capsys):
    """scripts/lib.sh's detops_suite_times (run.sh's --timings for shard_suite): the committed
    results/suite-times/<gpu>.json.gz, then the newest earlier run's correctness.json of this GPU model, and
    shard_suite.load_timing_files merges them in that order. Before, a quick gate's correctness.json (one op's tests)
    alone split the next full run: its other 24,000 tests counted as the median of one op's, and the shards ended at
    1 min 40 s instead of 1 min 30 s (H200, 2026-11-29)."""
    import shard_suite

    def suite_times(gpu, run_id):
        return _earlier_times(tmp_path, "detops_suite_times", gpu, run_id)

    assert suite_times("NVIDIA-H200", "now_NVIDIA-H200") == ""
    committed = tmp_path / "results" / "suite-times" / "NVIDIA-H200.json.gz"
    committed.parent.mkdir(parents=True)
    import gzip as gz
    committed.write_bytes(gz.compress(json.dumps({"op.forward.a.fp32.cuda": 5.0, "op.forward.b.fp32.cuda": 7.0}).encode()))
    assert suite_times("NVIDIA-H200", "now_NVIDIA-H200") == str(committed)
    _run_folder(tmp_path, "20261101T000000Z_NVIDIA-H200", ["correctness.json"], 300)
    newer = _run_folder(tmp_path, "20261102T000000Z_NVIDIA-H200", ["correctness.json"], 200)
    _run_folder(tmp_path, "20261103T000000Z_NVIDIA-H100-80GB-HBM3", ["correctness.json"], 100)
    _run_folder(tmp_path, "now_NVIDIA-H200", ["correctness.json"], 0)
    spec = suite_times("NVIDIA-H200", "now_NVIDIA-H200")
    assert spec.split(":") == [str(committed), str(newer / "correctness.json")], spec
    report = {"testsuites": [{"name": "op.forward", "testsuite": [{"name": "a.fp32.cuda", "time": "1.5s"}]}]}
    (newer / "correctness.json").write_text(json.dumps(report))
    assert shard_suite.load_timing_files(spec) == {"op.forward.a.fp32.cuda": 1.5, "op.forward.b.fp32.cuda": 7.0}
    # An unreadable file is left out with its warning; the others still count.
    (newer / "correctness.json").write_text('{"testsuites": 7')
    assert shard_suite.load_timing_files(spec) == {"op.forward.a.fp32.cuda": 5.0, "op.forward.b.fp32.cuda": 7.0}
    assert "not used" in capsys.readouterr().err
    assert shard_suite.load_timing_files("") == {}


def test_the_suite_step_waits_for_every_peer_process():
    """scripts/lib.sh's detops_peer_wait_args (run.sh, with a GPU): shard_suite waits for peer_pytest.rc and follows
    each peer process's log, and the function survives set -euo pipefail (its inline predecessor ended run.sh with
    status 1 right after starting the peer suite: an array assignment took a failing test's status)."""
    def args(n):
        r = subprocess.run(["bash", "-c", f'set -euo pipefail; source "{ROOT}/scripts/lib.sh" >/dev/null; '
                                          f'mapfile -t a < <(detops_peer_wait_args /o {n}); printf "%s|" "${{a[@]}}"; '
                                          'echo end'], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    assert args(1) == "--serial-after|/o/peer_pytest.rc|--serial-after-log|/o/peer_pytest.log|end"
    assert args(3) == ("--serial-after|/o/peer_pytest.rc|--serial-after-log|/o/peer_pytest.log|"
                       "--serial-after-log|/o/peer_pytest-1.log|--serial-after-log|/o/peer_pytest-2.log|end")


def test_peer_processes_scale_with_the_cpus(tmp_path):
    """scripts/lib.sh's detops_peer_processes (run.sh, one GPU): DETOPS_PEER_PROCESSES when set, else one pytest
    process per four CPUs, at least 2 and at most 8; a value that is not a positive number stops the job naming it."""
    fake = tmp_path / "bin"
    fake.mkdir()

    def procs(cpus, value=None):
        (fake / "nproc").write_text(f"#!/bin/sh\necho {cpus}\n")
        (fake / "nproc").chmod(0o755)
        env = {k: v for k, v in os.environ.items() if k != "DETOPS_PEER_PROCESSES"}
        env["PATH"] = f"{fake}{os.pathsep}{env.get('PATH', '')}"
        if value is not None:
            env["DETOPS_PEER_PROCESSES"] = value
        r = subprocess.run(["bash", "-c", f'set -euo pipefail; source "{ROOT}/scripts/lib.sh" >/dev/null; '
                                          'n=$(detops_peer_processes); echo "n=$n"'],
                           capture_output=True, text=True, env=env)
        return r.returncode, r.stdout.strip(), r.stderr

    assert procs(2)[:2] == (0, "n=2")
    assert procs(8)[:2] == (0, "n=2")
    assert procs(16)[:2] == (0, "n=4")
    assert procs(20)[:2] == (0, "n=5")
    assert procs(128)[:2] == (0, "n=8")
    assert procs(16, "3")[:2] == (0, "n=3")
    for bad in ("0", "two", "-1", "2x"):
        rc, out, err = procs(16, bad)
        assert rc != 0 and "n=" not in out, (bad, out)
        assert f"DETOPS_PEER_PROCESSES: '{bad}'" in err and "positive number" in err, err


def test_run_sh_and_the_shards_see_the_same_gpus(tmp_path):
    """scripts/lib.sh's detops_gpu_list (run.sh: one GPU or several?) asks shard_suite.py --list-gpus, so both follow
    one rule: CUDA_VISIBLE_DEVICES when set (an empty value: no GPU, not every GPU nvidia-smi lists), else
    nvidia-smi's indices, else none."""
    fake = tmp_path / "bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '0\\n1\\n2\\n'\n")
    smi.chmod(0o755)

    def gpu_list(**env):
        base = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        base["PATH"] = f"{fake}{os.pathsep}{base.get('PATH', '')}"
        base["DETOPS_PYTHON"] = sys.executable
        r = subprocess.run(["bash", "-c", f'source "{ROOT}/scripts/lib.sh"; detops_gpu_list'],
                           env=dict(base, **env), capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    assert gpu_list() == "0,1,2"
    assert gpu_list(CUDA_VISIBLE_DEVICES="4,6") == "4,6"
    assert gpu_list(CUDA_VISIBLE_DEVICES=" 3 , 5 ") == "3,5"
    assert gpu_list(CUDA_VISIBLE_DEVICES="") == ""
    smi.write_text("#!/bin/sh\nexit 9\n")  # a driver that does not answer: no GPU
    assert gpu_list() == ""


@pytest.mark.skipif(not BIN, reason="DETOPS_CORRECTNESS_BIN is not set (CTest sets it to the correctness suite)")
def test_the_test_commands_cuda_entry_uses_one_process_per_visible_gpu(tmp_path):
    """CTest's correctness_cuda: --gpus auto --shards 0 runs one process per GPU of CUDA_VISIBLE_DEVICES (each test
    once, tagged with its GPU); with none visible, one process, and --skip-code 77 when it skipped everything."""
    seen = tmp_path / "seen"
    seen.mkdir()
    wrapper = tmp_path / "wrap.sh"
    wrapper.write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in --gtest_output=json:*) part=${a#*json:};; esac; done\n'
                       '[ -n "$part" ] && echo "$CUDA_VISIBLE_DEVICES" > "' + str(seen) + '/$(basename "$part")"\n'
                       f'exec "{BIN}" "$@"\n')
    wrapper.chmod(0o755)
    common = [sys.executable, str(ROOT / "scripts/shard_suite.py"), "--binary", str(wrapper), "--gpus", "auto",
              "--shards", "0", "--skip-code", "77"]
    r = subprocess.run(common + ["--filter", FILTER, "--out", str(tmp_path / "a.json")],
                       env=dict(os.environ, CUDA_VISIBLE_DEVICES="4,6"), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert {p.name: p.read_text().strip() for p in seen.iterdir()} == {"a.shard-0.json": "4", "a.shard-1.json": "6"}
    a = json.loads((tmp_path / "a.json").read_text())
    assert a["detops_shards"]["shards"] == 2 and a["tests"] > 100
    assert {t["detops_gpu"] for s in a["testsuites"] for t in s["testsuite"]} == {"4", "6"}
    # Nothing visible (CUDA_VISIBLE_DEVICES empty, as on a machine without a GPU): one process without pinning; its
    # CUDA tests all skip, with the reason, and the exit status is 77.
    for p in seen.iterdir():
        p.unlink()
    r = subprocess.run(common + ["--filter", "nms.forward.*.cuda", "--out", str(tmp_path / "b.json")],
                       env=dict(os.environ, CUDA_VISIBLE_DEVICES=""), capture_output=True, text=True)
    assert [p.name for p in seen.iterdir()] == ["b.shard-0.json"]
    b = json.loads((tmp_path / "b.json").read_text())
    skipped = [t for s in b["testsuites"] for t in s["testsuite"] if t.get("result") == "SKIPPED"]
    assert r.returncode == 77, r.stderr
    assert len(skipped) == b["tests"] > 10 and all("CUDA" in t.get("message", "") for t in skipped), \
        "every CUDA test skipped, each with its reason"
    # Without --skip-code, the same skips are a pass (the main job's use).
    r = subprocess.run(common[:-2] + ["--filter", "nms.forward.*.cuda", "--out", str(tmp_path / "c.json")],
                       env=dict(os.environ, CUDA_VISIBLE_DEVICES=""), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


CACHE_FILTER = "roi_pool.forward.grid_*.fp32.cpu:roi_pool.backward.grid_*.fp32.cpu:nms.forward.*.fp32.cpu"


def cached_run(tmp_path, name, cache, **env):
    out = tmp_path / f"{name}.json"
    r = subprocess.run([BIN, f"--gtest_filter={CACHE_FILTER}", "--gtest_brief=1", f"--gtest_output=json:{out}"],
                       env=dict(os.environ, DETOPS_REFERENCE_CACHE=str(cache), DETOPS_REFERENCE_CACHE_MIN_MS="0", **env),
                       capture_output=True, text=True)
    tests = {f"{s['name']}.{t['name']}": t for s in json.loads(out.read_text())["testsuites"] for t in s["testsuite"]}
    return r, tests


@pytest.mark.skipif(not BIN, reason="DETOPS_CORRECTNESS_BIN is not set (CTest sets it to the correctness suite)")
def test_reference_cache_gives_the_same_verdicts_and_never_a_damaged_entry(tmp_path):
    """DETOPS_REFERENCE_CACHE: the first run stores each reference, the second finds every one and reaches the same
    verdicts and errors to the bit; a stored file damaged on disk is recomputed (and stored again); under
    DETOPS_REFERENCE_CACHE_VERIFY=1 a valid file holding another entry's values (swapped) fails its check."""
    cache = tmp_path / "cache"
    r1, first = cached_run(tmp_path, "first", cache)
    assert r1.returncode == 0, r1.stdout[-2000:]
    assert len(first) > 30 and {t.get("reference_cache") for t in first.values()} == {"stored"}
    files = sorted(cache.glob("*/*.ref"))
    assert len(files) == len(first), "one file per (case, dtype, direction)"
    r2, second = cached_run(tmp_path, "second", cache)
    assert r2.returncode == 0, r2.stdout[-2000:]
    assert {t.get("reference_cache") for t in second.values()} == {"hit"}
    for name, t in first.items():
        for field in ("result", "max_abs_error", "max_rel_error", "mismatches", "outcome"):
            assert second[name].get(field) == t.get(field), (name, field)

    # One bit of one stored value flipped: that entry is not used but computed and stored anew.
    damaged = files[len(files) // 2]
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 1
    damaged.write_bytes(bytes(data))
    r3, third = cached_run(tmp_path, "third", cache)
    assert r3.returncode == 0, r3.stdout[-2000:]
    assert sorted(t.get("reference_cache") for t in third.values()).count("stored") == 1
    assert damaged.read_bytes() != bytes(data), "the damaged file was rewritten"

    r4, fourth = cached_run(tmp_path, "fourth", cache, DETOPS_REFERENCE_CACHE_VERIFY="1")
    assert r4.returncode == 0, r4.stdout[-2000:]
    assert {t.get("reference_cache") for t in fourth.values()} == {"hit verified"}
    a, b = files[0], files[-1]  # two valid files, each under the other's key
    a_bytes, b_bytes = a.read_bytes(), b.read_bytes()
    a.write_bytes(b_bytes)
    b.write_bytes(a_bytes)
    r5, fifth = cached_run(tmp_path, "fifth", cache, DETOPS_REFERENCE_CACHE_VERIFY="1")
    assert r5.returncode == 1
    failed = [n for n, t in fifth.items() if t.get("failures")]
    assert len(failed) == 2 and all("differs from the reference computed now" in
                                    fifth[n]["failures"][0]["failure"] for n in failed), failed
