"""scripts/doctor.py against real libraries built here, one per failure mode: each is built with the local nvcc /
g++ in a temporary directory and the doctor's diagnosis of it asserted. No GPU needed: --device-arch and
--driver-cuda say which GPU and driver to judge for."""

import ctypes
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.no_detops_library

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCTOR = ROOT / "scripts" / "doctor.py"
NVCC = shutil.which("nvcc")
GXX = shutil.which("g++")
need_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: cannot build device code")
need_gxx = pytest.mark.skipif(GXX is None, reason="g++ is not on PATH: cannot build host libraries")

try:
    import torch
except ImportError:
    torch = None
need_torch = pytest.mark.skipif(torch is None, reason="torch is not installed in this Python")

KERNEL = r"""
__global__ void scale(float* x) { x[threadIdx.x] *= 2.f; }
extern "C" void launch(float* x) { scale<<<1, 32>>>(x); }
"""


def sh(*cmd, cwd=None):
    cp = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    assert cp.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{cp.stderr}"


def doctor(*args):
    """Runs the doctor as a user would; returns (exit status, findings, stdout+stderr of a text run)."""
    cmd = [sys.executable, str(DOCTOR), "--python", sys.executable, *map(str, args)]
    cp = subprocess.run(cmd + ["--json", "-"], capture_output=True, text=True, timeout=300)
    assert "Traceback" not in cp.stderr, cp.stderr
    doc = json.loads(cp.stdout)
    assert doc["exit"] == cp.returncode
    return cp.returncode, doc["findings"]


def lib_findings(findings, lib, check=None):
    return [f for f in findings if f["subject"] == str(lib) and (check is None or f["check"] == check)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return tmp_path_factory.mktemp("doctor")


def nvcc_lib(d, name, *gencode):
    cu = d / "k.cu"
    cu.write_text(KERNEL)
    out = d / name
    sh(NVCC, "-shared", "-Xcompiler", "-fPIC", *gencode, cu, "-o", out)
    return out


@need_nvcc
def test_ptx_only_compute_80_is_jit_on_sm_90(built):
    lib = nvcc_lib(built, "libptx80.so", "-gencode", "arch=compute_80,code=compute_80")
    rc, f = doctor("--library", lib, "--device-arch", "sm_90", "--driver-cuda", "13.0")
    (v,) = lib_findings(f, lib, "on sm_90")
    assert v["status"] == "warn" and v["found"].startswith("JIT from PTX:"), v
    assert "compute_80" in v["found"] and "rebuild with -gencode arch=compute_90,code=sm_90" in v["action"]
    assert rc == 0  # a JIT is slow and different, not a failure


@need_nvcc
def test_ptx_newer_than_driver_fails(built):
    lib = nvcc_lib(built, "libptx80b.so", "-gencode", "arch=compute_80,code=compute_80")
    rc, f = doctor("--library", lib, "--device-arch", "sm_90", "--driver-cuda", "12.4")
    (v,) = lib_findings(f, lib, "on sm_90")
    assert v["status"] == "fail" and "PTX newer than the driver" in v["found"], v
    assert "unsupported toolchain" in v["found"] and "12.4" in v["found"]
    assert rc == 1


@need_nvcc
def test_sm_90_sass_only_has_no_kernel_image_for_sm_80(built):
    lib = nvcc_lib(built, "libsm90.so", "-gencode", "arch=compute_90,code=sm_90")
    rc, f = doctor("--library", lib, "--device-arch", "sm_80", "--device-arch", "9.0", "--driver-cuda", "13.0")
    (v80,) = lib_findings(f, lib, "on sm_80")
    assert v80["status"] == "fail" and v80["found"].startswith("none:") and "no kernel image" in v80["found"], v80
    (v90,) = lib_findings(f, lib, "on sm_90")
    assert v90["status"] == "ok" and v90["found"].startswith("native SASS"), v90
    assert rc == 1


@need_nvcc
def test_compatible_sass_and_arch_specific_sass(built):
    lib = nvcc_lib(built, "libsm80a.so", "-gencode", "arch=compute_80,code=sm_80",
                   "-gencode", "arch=compute_90a,code=sm_90a")
    rc, f = doctor("--library", lib, "--device-arch", "sm_86", "--device-arch", "sm_90", "--device-arch", "sm_100")
    assert lib_findings(f, lib, "on sm_86")[0]["found"].startswith("compatible SASS")
    assert lib_findings(f, lib, "on sm_90")[0]["found"].startswith("native SASS")
    v100 = lib_findings(f, lib, "on sm_100")[0]  # sm_90a runs only on sm_90; sm_80 is another major
    assert v100["status"] == "fail" and v100["found"].startswith("none:"), v100
    assert rc == 1


@need_nvcc
def test_fatbin_reader_agrees_with_cuobjdump(built):
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump is None:
        pytest.skip("cuobjdump is not on PATH (pip download nvidia-cuda-cuobjdump gives one)")
    lib = nvcc_lib(built, "libmix.so", "-gencode", "arch=compute_80,code=compute_80",
                   "-gencode", "arch=compute_90,code=sm_90")
    sys.path.insert(0, str(DOCTOR.parent))
    import doctor as d
    entries = d.parse_fatbins(d.Elf(lib).section(".nv_fatbin"))
    ours = {(e["kind"], e["arch"]) for e in entries}
    elf = subprocess.run([cuobjdump, "--list-elf", lib], capture_output=True, text=True).stdout
    ptx = subprocess.run([cuobjdump, "--list-ptx", lib], capture_output=True, text=True).stdout
    theirs = {("sass", int(a)) for a in __import__("re").findall(r"\.sm_(\d+)\w*\.cubin", elf)}
    theirs |= {("ptx", int(a)) for a in __import__("re").findall(r"\.sm_(\d+)\w*\.ptx", ptx)}
    assert ours == theirs


@need_gxx
def test_cpu_only_library_has_no_device_code(built):
    c = built / "cpu.cpp"
    c.write_text('extern "C" int add(int a, int b) { return a + b; }\n')
    lib = built / "libcpu.so"
    sh(GXX, "-shared", "-fPIC", c, "-o", lib)
    rc, f = doctor("--library", lib, "--device-arch", "sm_90", "--driver-cuda", "13.0")
    (v,) = lib_findings(f, lib, "device code")
    assert v["status"] == "warn" and v["found"].startswith("no device code") and "CPU-only" in v["found"], v
    assert rc == 0


@need_gxx
@need_torch
def test_cpu_only_torch_extension_fails(built):
    """A torch extension built without CUDA (as on a GPU-less login node): it links libc10 but has no fatbin."""
    c = built / "ext.cpp"
    c.write_text('#include <c10/core/Device.h>\nextern "C" int is_cuda(int t) '
                 '{ return c10::Device(static_cast<c10::DeviceType>(t)).is_cuda(); }\n')
    torch_dir = pathlib.Path(torch.__file__).parent
    lib = built / "libcpuext.so"
    sh(GXX, "-shared", "-fPIC", "-std=c++17", f"-I{torch_dir / 'include'}", c, f"-L{torch_dir / 'lib'}", "-lc10",
       f"-Wl,-rpath,{torch_dir / 'lib'}", "-o", lib)
    rc, f = doctor("--library", lib, "--device-arch", "sm_90", "--driver-cuda", "13.0")
    (v,) = lib_findings(f, lib, "device code")
    assert v["status"] == "fail" and "CPU-only build of a torch extension" in v["found"], v
    assert rc == 1


def stub_cudart12(d):
    """A stand-in libcudart.so.12 (soname and one symbol), and a library linked against it."""
    stub_dir = d / "cuda12"
    stub_dir.mkdir(exist_ok=True)
    (d / "stub.c").write_text("int cudaRuntimeGetVersion(int* v) { *v = 12040; return 0; }\n")
    sh(GXX, "-shared", "-fPIC", "-x", "c", d / "stub.c", "-Wl,-soname,libcudart.so.12", "-o", stub_dir / "libcudart.so.12")
    (d / "use12.c").write_text("int cudaRuntimeGetVersion(int*);\nint version(void) { int v; "
                               "cudaRuntimeGetVersion(&v); return v; }\n")
    return stub_dir


@need_gxx
def test_missing_runtime_major(built):
    try:
        ctypes.CDLL("libcudart.so.12")
        pytest.skip("a libcudart.so.12 is loadable here, so a missing major cannot be reproduced")
    except OSError:
        pass
    stub_dir = stub_cudart12(built)
    lib = built / "libneeds12.so"
    sh(GXX, "-shared", "-fPIC", "-x", "c", built / "use12.c", f"-L{stub_dir}", "-l:libcudart.so.12", "-o", lib)
    rc, f = doctor("--library", lib, "--device-arch", "sm_90", "--driver-cuda", "13.0")
    (load,) = lib_findings(f, lib, "load")
    assert load["status"] == "fail" and load["found"].startswith("missing runtime major"), load
    assert "libcudart.so.12" in load["found"] and "cannot open shared object file" in load["found"]
    assert rc == 1


@need_gxx
@need_torch
def test_two_cuda_majors_in_one_process(built):
    stub_dir = stub_cudart12(built)
    lib = built / "libwith12.so"
    sh(GXX, "-shared", "-fPIC", "-x", "c", built / "use12.c", f"-L{stub_dir}", "-l:libcudart.so.12",
       f"-Wl,-rpath,{stub_dir}", "-o", lib)
    rc, f = doctor("--library", lib, "--device-arch", "sm_90", "--driver-cuda", "13.0")
    if not any(x["section"] == "Process" and "libcudart (major 13)" in x["found"] for x in f):
        pytest.skip("torch maps no libcudart.so.13 in this environment")
    (two,) = lib_findings(f, lib, "two CUDA majors")
    assert two["status"] == "fail" and "[12, 13]" in two["found"], two
    assert lib_findings(f, lib, "CUDA major")[0]["status"] == "fail"
    assert lib_findings(f, lib, "load")[0]["status"] == "ok"
    assert rc == 1


@need_gxx
def test_symbol_version_skew(built):
    """Built against a libnvJitLink.so.12 that defines __nvJitLinkCreate_12_5; at load time an older copy
    (same soname, only __nvJitLinkCreate_12_0) wins the search, as through LD_LIBRARY_PATH."""
    new_dir, old_dir = built / "jl_new", built / "jl_old"
    for d, sym in ((new_dir, "__nvJitLinkCreate_12_5"), (old_dir, "__nvJitLinkCreate_12_0")):
        d.mkdir(exist_ok=True)
        (d / "s.c").write_text(f"int {sym}(void) {{ return 0; }}\n")
        (d / "v.map").write_text("libnvJitLink.so.12 { global: *; };\n")
        sh(GXX, "-shared", "-fPIC", "-x", "c", d / "s.c", f"-Wl,--version-script={d / 'v.map'}",
           "-Wl,-soname,libnvJitLink.so.12", "-o", d / "libnvJitLink.so.12")
    (built / "jl.c").write_text("int __nvJitLinkCreate_12_5(void);\nint create(void) { return __nvJitLinkCreate_12_5(); }\n")
    lib = built / "libjitlinkuser.so"
    sh(GXX, "-shared", "-fPIC", "-x", "c", built / "jl.c", f"-L{new_dir}", "-l:libnvJitLink.so.12",
       f"-Wl,-rpath,{old_dir}", "-o", lib)
    rc, f = doctor("--library", lib, "--device-arch", "sm_90", "--driver-cuda", "13.0")
    (load,) = lib_findings(f, lib, "load")
    assert load["status"] == "fail" and load["found"].startswith("version skew"), load
    assert "__nvJitLinkCreate_12_5" in load["found"] and str(old_dir) in load["found"]  # which copy won
    assert rc == 1


@need_gxx
@need_torch
def test_cxx_abi_mismatch(built):
    if not torch._C._GLIBCXX_USE_CXX11_ABI:
        pytest.skip("this torch uses the old C++ ABI; the test builds an old-ABI library against a new-ABI torch")
    c = built / "abi.cpp"
    c.write_text("#include <string>\nvoid detops_probe(const std::string&);\n"
                 'extern "C" void call() { detops_probe("x"); }\n')
    lib = built / "liboldabi.so"
    sh(GXX, "-shared", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=0", c, "-o", lib)
    rc, f = doctor("--library", lib, "--device-arch", "sm_90", "--driver-cuda", "13.0")
    (load,) = lib_findings(f, lib, "load")
    assert load["status"] == "fail" and load["found"].startswith("C++ ABI mismatch"), load
    assert "-D_GLIBCXX_USE_CXX11_ABI=1" in load["action"]
    assert rc == 1


def test_detops_library_native_on_sm_90():
    lib = next((p for p in (ROOT / "build" / s / "ops" / "libdetops_torch.so" for s in ("ci", "dev", "release"))
                if p.exists()), None)
    if lib is None:
        pytest.skip("libdetops_torch.so is not built (scripts/test.sh builds it)")
    if torch is None:
        pytest.skip("torch is not installed: the DetOps library cannot be loaded")
    rc, f = doctor("--library", lib, "--device-arch", "sm_90", "--driver-cuda", "13.0")
    (v,) = lib_findings(f, lib, "on sm_90")
    assert v["status"] == "ok" and v["found"].startswith("native SASS"), v
    assert lib_findings(f, lib, "load")[0]["status"] == "ok"
    assert rc == 0, [x for x in f if x["status"] == "fail"]


def test_bad_usage_exits_2_without_traceback(tmp_path):
    for args in (["--library", str(tmp_path / "missing.so")], ["--device-arch", "volta"],
                 ["--driver-cuda", "thirteen"], ["--frobnicate"]):
        cp = subprocess.run([sys.executable, str(DOCTOR), *args], capture_output=True, text=True)
        assert cp.returncode == 2, (args, cp.stdout, cp.stderr)
        assert "Traceback" not in cp.stderr and "doctor: error:" in cp.stderr, cp.stderr


def test_not_an_elf_file_is_a_finding(tmp_path):
    junk = tmp_path / "libjunk.so"
    junk.write_text("not a library\n")
    rc, f = doctor("--library", junk, "--device-arch", "sm_90", "--driver-cuda", "13.0")
    (v,) = lib_findings(f, junk, "ELF")
    assert v["status"] == "fail" and "not an ELF file" in v["found"]
    assert rc == 1
