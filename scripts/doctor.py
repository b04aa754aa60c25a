#!/usr/bin/env python3
"""DetOps doctor: inspects the machine, the Python environment and CUDA extension libraries, and says for
each known CUDA build/load failure mode what it found and what to do (see README.md, "doctor").

Usage: scripts/doctor.py [--library PATH ...] [--json OUT] [--device-arch SM ...] [--driver-cuda X.Y]
                         [--python PY]
Exit status: 0 nothing will fail, 1 something will fail, 2 bad usage.

Standard library only. torch is imported only in child processes (the --python interpreter), whose own
/proc/self/maps tell which CUDA libraries a process that imports torch really loads."""

import argparse
import ctypes
import glob
import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"

# PTX ISA version -> the first CUDA release whose driver can JIT it.
PTX_ISA_TO_CUDA = {
    (6, 0): (9, 0), (6, 1): (9, 1), (6, 2): (9, 2), (6, 3): (10, 0), (6, 4): (10, 1), (6, 5): (10, 2),
    (7, 0): (11, 0), (7, 1): (11, 1), (7, 2): (11, 2), (7, 3): (11, 3), (7, 4): (11, 4), (7, 5): (11, 5),
    (7, 6): (11, 6), (7, 7): (11, 7), (7, 8): (11, 8),
    (8, 0): (12, 0), (8, 1): (12, 1), (8, 2): (12, 2), (8, 3): (12, 3), (8, 4): (12, 4), (8, 5): (12, 5),
    (8, 6): (12, 7), (8, 7): (12, 8), (8, 8): (12, 9),
    (9, 0): (13, 0), (9, 1): (13, 1),
}

# CUDA libraries whose copies in one process are compared (name stem -> what it is).
CUDA_LIBS = ("libcudart", "libcublas", "libcublasLt", "libnvrtc", "libnvJitLink", "libcudnn", "libcufft",
             "libcusparse", "libcusolver", "libcurand", "libcupti", "libnccl", "libcuda")
RUNTIME_LIBS = ("libcudart", "libcublas", "libcublasLt", "libnvrtc", "libnvJitLink", "libcufft", "libcusparse",
                "libcusolver", "libcurand", "libcupti", "libcudnn")


class ElfError(Exception):
    pass


ELF_ERRORS = (OSError, ElfError, struct.error, IndexError, ValueError)


class Report:
    def __init__(self):
        self.findings = []
        self.facts = {}

    def add(self, section, check, status, found, action="", subject=None):
        self.findings.append({"section": section, "check": check, "status": status, "found": found,
                              "action": action, "subject": subject})

    def worst(self):
        return 1 if any(f["status"] == FAIL for f in self.findings) else 0


def ver_str(v):
    return ".".join(str(x) for x in v) if v else "?"


def parse_version(text):
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_arch(text):
    """'sm_90', 'sm_90a', '90', '9.0', 'compute_90' -> (90, '' or 'a' or 'f')."""
    t = text.strip().lower()
    m = re.fullmatch(r"(?:sm_|compute_)?(\d)\.(\d)([af]?)", t)
    if m:
        return int(m.group(1)) * 10 + int(m.group(2)), m.group(3)
    m = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3})([af]?)", t)
    if m:
        return int(m.group(1)), m.group(2)
    return None


def arch_name(arch, variant="", prefix="sm_"):
    return f"{prefix}{arch}{variant}"


# ---------------------------------------------------------------------------------------------------- ELF

class Elf:
    """A small reader of 64-bit little-endian ELF shared objects: sections, dynamic entries, undefined
    dynamic symbols with their version requirements, and the raw bytes of a section."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.data = f.read()
        d = self.data
        if len(d) < 64 or d[:4] != b"\x7fELF":
            raise ElfError("not an ELF file")
        if d[4] != 2 or d[5] != 1:
            raise ElfError("not a 64-bit little-endian ELF file (class %d, data %d)" % (d[4], d[5]))
        self.e_type = struct.unpack_from("<H", d, 16)[0]
        shoff, = struct.unpack_from("<Q", d, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
        if shoff == 0 or shnum == 0 or shoff + shnum * shentsize > len(d):
            raise ElfError("ELF file without a readable section table")
        self.sections = []
        for i in range(shnum):
            name, typ, flags, addr, off, size, link, info, align, entsize = struct.unpack_from(
                "<IIQQQQIIQQ", d, shoff + i * shentsize)
            self.sections.append({"name_off": name, "type": typ, "offset": off, "size": size, "link": link,
                                  "entsize": entsize})
        strtab = self.sections[shstrndx] if shstrndx < shnum else None
        for s in self.sections:
            s["name"] = self._str(strtab, s["name_off"]) if strtab else ""

    def _str(self, sec, off):
        start = sec["offset"] + off
        end = self.data.find(b"\0", start, sec["offset"] + sec["size"])
        return self.data[start:end if end >= 0 else start].decode("utf-8", "replace")

    def section(self, name):
        for s in self.sections:
            if s["name"] == name and s["type"] != 8:  # 8: SHT_NOBITS
                return self.data[s["offset"]:s["offset"] + s["size"]]
        return None

    def _by_type(self, typ):
        return next((s for s in self.sections if s["type"] == typ), None)

    def dynamic(self):
        """{'needed': [...], 'soname': str, 'runpath': [...], 'rpath': [...]}"""
        out = {"needed": [], "soname": None, "runpath": [], "rpath": []}
        dyn = self._by_type(6)
        if dyn is None:
            return out
        strs = self.sections[dyn["link"]]
        for off in range(dyn["offset"], dyn["offset"] + dyn["size"], 16):
            tag, val = struct.unpack_from("<qQ", self.data, off)
            if tag == 0:
                break
            if tag == 1:
                out["needed"].append(self._str(strs, val))
            elif tag == 14:
                out["soname"] = self._str(strs, val)
            elif tag == 15:
                out["rpath"] = [p for p in self._str(strs, val).split(":") if p]
            elif tag == 29:
                out["runpath"] = [p for p in self._str(strs, val).split(":") if p]
        return out

    def undefined_symbols(self):
        """[(name, version or None, library the version belongs to or None)] of the undefined dynamic symbols."""
        dynsym = self._by_type(11)
        if dynsym is None:
            return []
        strs = self.sections[dynsym["link"]]
        versym = self._by_type(0x6FFFFFFF)
        verneed = self._by_type(0x6FFFFFFE)
        need = {}
        if verneed is not None:
            vstrs = self.sections[verneed["link"]]
            off = verneed["offset"]
            while True:
                _, cnt, vfile, aux, nxt = struct.unpack_from("<HHIII", self.data, off)
                aoff = off + aux
                for _ in range(cnt):
                    _, _, other, vname, anext = struct.unpack_from("<IHHII", self.data, aoff)
                    need[other] = (self._str(vstrs, vname), self._str(vstrs, vfile))
                    if anext == 0:
                        break
                    aoff += anext
                if nxt == 0:
                    break
                off += nxt
        out = []
        count = dynsym["size"] // 24
        for i in range(1, count):
            st_name, info, other, shndx = struct.unpack_from("<IBBH", self.data, dynsym["offset"] + i * 24)
            if shndx != 0 or st_name == 0:
                continue
            name = self._str(strs, st_name)
            ver = lib = None
            if versym is not None:
                idx = struct.unpack_from("<H", self.data, versym["offset"] + i * 2)[0] & 0x7FFF
                if idx in need:
                    ver, lib = need[idx]
            out.append((name, ver, lib))
        return out


# ------------------------------------------------------------------------------------------------- fatbin

FATBIN_MAGIC = 0xBA55ED50


def parse_fatbins(blob):
    """Entries of every fatbin in a .nv_fatbin section: [{'kind': 'sass'|'ptx', 'arch': 90, 'variant': '',
    'ptx_isa': (9, 0) or None}]. Read from the entry headers, so compressed entries need no decompression."""
    entries = []
    pos = 0
    n = len(blob)
    while pos + 16 <= n:
        magic, version, hsize, fsize = struct.unpack_from("<IHHQ", blob, pos)
        if magic != FATBIN_MAGIC:
            pos += 8
            continue
        off, end = pos + hsize, min(pos + hsize + fsize, n)
        while off + 64 <= end:
            kind, _, ehs, size, csize, _, minor, major, arch = struct.unpack_from("<HHIQIIHHI", blob, off)
            flags, = struct.unpack_from("<Q", blob, off + 40)
            if ehs < 64 or kind not in (1, 2):
                break
            variant = "a" if flags & 0x100000 else ""
            e = {"kind": "ptx" if kind == 1 else "sass", "arch": arch, "variant": variant, "ptx_isa": None}
            if kind == 1:
                e["ptx_isa"] = (major, minor)
                payload = blob[off + ehs:off + ehs + min(size, 4096)]
                if not csize:  # uncompressed PTX: its own ".version" line is authoritative
                    m = re.search(rb"\.version\s+(\d+)\.(\d+)", payload)
                    if m:
                        e["ptx_isa"] = (int(m.group(1)), int(m.group(2)))
            entries.append(e)
            off += ehs + size
        pos = max(pos + 8, (pos + hsize + fsize + 7) & ~7)
    return entries


def ptx_min_cuda(isa):
    if isa in PTX_ISA_TO_CUDA:
        return PTX_ISA_TO_CUDA[isa], True
    if isa[0] >= 9:  # past the table: PTX ISA 9.N has come with CUDA 13.N
        return (isa[0] + 4, isa[1]), False
    return None, False


def arch_verdict(entries, dev, driver):
    """What the CUDA runtime would run of a library's device code on SM dev=(arch, variant) under a driver of
    CUDA version driver (or None). Returns (status, verdict, detail, action)."""
    d_arch, d_var = dev
    d_major = d_arch // 10
    sass = [e for e in entries if e["kind"] == "sass"]
    ptx = [e for e in entries if e["kind"] == "ptx"]
    names = lambda es: ", ".join(sorted({arch_name(e["arch"], e["variant"]) for e in es})) or "none"
    if any(e["arch"] == d_arch for e in sass):
        return OK, "native SASS", f"SASS {names(sass)}", ""
    compat = [e for e in sass if e["arch"] // 10 == d_major and e["arch"] < d_arch and e["variant"] != "a"]
    if compat:
        best = max(compat, key=lambda e: e["arch"])
        return OK, "compatible SASS", f"runs {arch_name(best['arch'])} SASS (same major, lower minor)", ""
    jit = [e for e in ptx if e["arch"] <= d_arch and (e["variant"] != "a" or e["arch"] == d_arch)]
    if jit:
        best = max(jit, key=lambda e: e["arch"])
        isa = best["ptx_isa"]
        need, exact = ptx_min_cuda(isa) if isa else (None, False)
        detail = (f"no SASS for {arch_name(d_arch, d_var)} (SASS: {names(sass)}); the driver JIT-compiles "
                  f"{arch_name(best['arch'], best['variant'], 'compute_')} PTX (ISA {ver_str(isa)}"
                  + (f", needs a CUDA {ver_str(need)}{'' if exact else ' (assumed)'} driver" if need else "") + ")")
        rebuild = f"rebuild with -gencode arch=compute_{d_arch},code=sm_{d_arch}"
        if need and driver and need > driver:
            return (FAIL, "JIT from PTX, PTX newer than the driver",
                    detail + f"; the driver is CUDA {ver_str(driver)}: cudaErrorUnsupportedPtxVersion "
                    "('PTX was compiled with an unsupported toolchain')",
                    f"{rebuild} (SASS runs on older drivers of the same major), or update the driver "
                    f"to CUDA {ver_str(need)}+")
        if need and not driver:
            detail += "; driver version unknown (give --driver-cuda X.Y)"
        return WARN, "JIT from PTX", detail + ": slow first launch, codegen differs from a native build", rebuild
    return (FAIL, "none", f"no SASS for {arch_name(d_arch, d_var)} and no PTX it can JIT (SASS: {names(sass)}; "
            f"PTX: {', '.join(sorted({arch_name(e['arch'], e['variant'], 'compute_') for e in ptx})) or 'none'}): "
            "'no kernel image is available for execution on the device'",
            f"rebuild with -gencode arch=compute_{d_arch},code=sm_{d_arch} (or add PTX of compute_{d_arch} or lower)")


# ----------------------------------------------------------------------------------------------- machine

def probe_driver():
    """{'driver': (13, 0) or None, 'error': str, 'gpus': [{'name', 'arch'}]} through libcuda, no torch."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return {"driver": None, "error": f"libcuda.so.1 not loadable ({e})", "gpus": []}
    v = ctypes.c_int(0)
    if cuda.cuDriverGetVersion(ctypes.byref(v)) != 0:
        return {"driver": None, "error": "cuDriverGetVersion failed", "gpus": []}
    out = {"driver": (v.value // 1000, (v.value % 1000) // 10), "error": None, "gpus": []}
    rc = cuda.cuInit(0)
    if rc != 0:
        out["error"] = f"cuInit failed with CUresult {rc} (no usable GPU?)"
        return out
    n = ctypes.c_int(0)
    cuda.cuDeviceGetCount(ctypes.byref(n))
    for i in range(n.value):
        dev = ctypes.c_int(0)
        cuda.cuDeviceGet(ctypes.byref(dev), i)
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGetName(name, 256, dev)
        out["gpus"].append({"index": i, "name": name.value.decode(errors="replace"),
                            "arch": major.value * 10 + minor.value})
    return out


def nvcc_version(nvcc):
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


# ----------------------------------------------------------------------------------- child-process probes

# Runs in the --python interpreter. argv[1]: JSON {"library": path or None, "search": [dirs]}.
PROBE = r'''
import ctypes, json, os, re, sys
args = json.loads(sys.argv[1])
out = {"python": sys.executable, "torch": None, "torch_error": None, "dists": [], "maps_torch": [],
       "maps_library": [], "load_error": None, "resolved": {}, "runtime_versions": {}}
def maps():
    paths = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/"):
                p = parts[5].strip()
                if p not in paths:
                    paths.append(p)
    return paths
try:
    import importlib.metadata as md
    for d in md.distributions():
        name = d.metadata["Name"] or ""
        if name.lower().startswith("nvidia-"):
            libs = sorted({os.path.basename(str(f)) for f in (d.files or []) if re.search(r"\.so(\.|$)", str(f))})
            out["dists"].append({"name": name, "version": d.version, "libs": libs})
except Exception as e:
    out["dists_error"] = str(e)
try:
    import torch
    t = {"version": torch.__version__, "cuda": torch.version.cuda,
         "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI), "arch_list": []}
    try:
        flags = torch._C._cuda_getArchFlags() if hasattr(torch._C, "_cuda_getArchFlags") else ""
        t["arch_list"] = (flags or "").split() or list(torch.cuda.get_arch_list())
    except Exception:
        pass
    try:
        t["cuda_available"] = torch.cuda.is_available()
        if t["cuda_available"]:
            torch.zeros(1, device="cuda")
    except Exception as e:
        t["cuda_error"] = str(e)
    out["torch"] = t
except Exception as e:
    out["torch_error"] = "%s: %s" % (type(e).__name__, e)
out["maps_torch"] = maps()
for p in out["maps_torch"]:
    if re.match(r"libcudart(\.[0-9a-f]{8})?\.so", os.path.basename(p)):
        try:
            v = ctypes.c_int(0)
            ctypes.CDLL(p).cudaRuntimeGetVersion(ctypes.byref(v))
            out["runtime_versions"][p] = v.value
        except Exception:
            pass
lib = args.get("library")
if lib:
    try:
        ctypes.CDLL(lib, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as e:
        out["load_error"] = str(e)
        for name in args.get("needed", []):
            for d in args.get("search", []) + [None]:
                cand = os.path.join(d, name) if d else name
                if d and not os.path.exists(cand):
                    continue
                try:
                    ctypes.CDLL(cand, mode=os.RTLD_LAZY | os.RTLD_LOCAL)
                except OSError:
                    continue
                hit = [p for p in maps() if os.path.basename(p) == name or os.path.realpath(p) == os.path.realpath(cand)]
                out["resolved"][name] = hit[-1] if hit else cand
                break
    out["maps_library"] = maps()
print("DOCTOR-JSON " + json.dumps(out))
'''


def run_probe(python, library=None, needed=(), search=()):
    arg = json.dumps({"library": library, "needed": list(needed), "search": list(search)})
    env = dict(os.environ)
    try:
        cp = subprocess.run([python, "-c", PROBE, arg], capture_output=True, text=True, timeout=300, env=env)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"could not run {python}: {e}"
    for line in cp.stdout.splitlines():
        if line.startswith("DOCTOR-JSON "):
            return json.loads(line[len("DOCTOR-JSON "):]), None
    tail = (cp.stderr or cp.stdout).strip().splitlines()[-1:] or [f"exit status {cp.returncode}"]
    return None, f"the probe in {python} died: {tail[0]}"


LIB_RE = re.compile(r"^(lib[A-Za-z_+-]*?[A-Za-z])(?:[-.][0-9a-f]{8})?\.so(?:\.(\d+))?")


def lib_family(path):
    """'/x/libcudart.so.13' -> ('libcudart', 13); torchvision's vendored 'libcudart.4d8b2b32.so.13' too."""
    base = os.path.basename(path)
    m = LIB_RE.match(base)
    if not m:
        return None, None
    stem = m.group(1)
    if stem.startswith("libcudnn"):
        stem = "libcudnn"
    return stem, (int(m.group(2)) if m.group(2) else None)


def cuda_mappings(paths):
    """{family: {major: [paths]}} for the CUDA and torch libraries among mapped paths."""
    out = {}
    for p in paths:
        fam, major = lib_family(p)
        if fam in CUDA_LIBS or fam in ("libtorch", "libtorch_cuda", "libc10", "libc10_cuda"):
            if fam == "libnvrtc" and "builtins" in os.path.basename(p):
                continue
            out.setdefault(fam, {}).setdefault(major, [])
            if p not in out[fam][major]:
                out[fam][major].append(p)
    return out


# ------------------------------------------------------------------------------------------------ checks

def check_machine(rep, args, drv):
    S = "Machine"
    if args.driver_cuda:
        rep.add(S, "driver", INFO, f"CUDA {ver_str(args.driver_cuda)} (given by --driver-cuda)"
                + (f"; real driver: CUDA {ver_str(drv['driver'])}" if drv["driver"] else ""))
    elif drv["driver"]:
        rep.add(S, "driver", OK, f"CUDA {ver_str(drv['driver'])} (cuDriverGetVersion)")
    else:
        rep.add(S, "driver", WARN, f"no driver: {drv['error']}",
                "nothing CUDA can run here; to judge libraries for another machine give --device-arch and "
                "--driver-cuda")
    if args.device_arch:
        for a in args.device_arch:
            rep.add(S, "device", INFO, f"{arch_name(*a)} (given by --device-arch)")
    elif drv["gpus"]:
        for g in drv["gpus"]:
            rep.add(S, "device", OK, f"GPU {g['index']}: {g['name']}, {arch_name(g['arch'])}")
    else:
        rep.add(S, "device", INFO, "no GPU" + (f" ({drv['error']})" if drv["driver"] and drv["error"] else ""),
                "give --device-arch SM to judge the libraries' device code for a GPU")


def check_toolkits(rep, probe, torch_cuda):
    S = "Toolkits"
    seen = []
    nvcc = shutil.which("nvcc")
    if nvcc:
        v = nvcc_version(nvcc)
        seen.append(("nvcc on PATH", nvcc, v))
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        hn = os.path.join(home, "bin", "nvcc")
        if os.path.exists(hn):
            if not any(os.path.realpath(hn) == os.path.realpath(q) for _, q, _ in seen):
                seen.append(("CUDA_HOME", hn, nvcc_version(hn)))
        else:
            rep.add(S, "CUDA_HOME", WARN, f"{home} has no bin/nvcc", "point CUDA_HOME at a CUDA toolkit or unset it")
    for d in sorted(glob.glob("/usr/local/cuda-*")):
        hn = os.path.join(d, "bin", "nvcc")
        if os.path.exists(hn) and all(os.path.realpath(hn) != os.path.realpath(p) for _, p, _ in seen):
            seen.append(("installed", hn, nvcc_version(hn)))
    for dist in (probe or {}).get("dists", []):
        if dist["name"].lower().startswith("nvidia-cuda-nvcc"):
            seen.append(("pip " + dist["name"], "(wheel)", parse_version(".".join(dist["version"].split(".")[:2]))))
    for where, path, v in seen:
        rep.add(S, "toolkit", INFO, f"{where}: {path}, CUDA {ver_str(v)}")
    if not seen:
        rep.add(S, "nvcc", WARN, "no nvcc on PATH, in CUDA_HOME or /usr/local/cuda-*",
                "extensions cannot be built here: install the CUDA toolkit, or pip install nvidia-cuda-nvcc")
    build_nvcc = seen[0] if seen else None
    if build_nvcc and torch_cuda and build_nvcc[2]:
        tv = parse_version(torch_cuda)
        nv = build_nvcc[2]
        if tv and tv[0] != nv[0]:
            rep.add(S, "libtorch CUDA vs nvcc", FAIL,
                    f"libtorch is built for CUDA {ver_str(tv)}, {build_nvcc[0]} nvcc is CUDA {ver_str(nv)}",
                    f"install a CUDA {tv[0]}.x toolkit (or pip nvidia-cuda-nvcc) and put its nvcc first, or install "
                    f"the torch build for CUDA {nv[0]}")
        elif tv and tv != nv:
            rep.add(S, "libtorch CUDA vs nvcc", WARN,
                    f"libtorch CUDA {ver_str(tv)}, nvcc CUDA {ver_str(nv)} (same major, other minor)",
                    "builds and loads; for like-for-like results use the nvcc of libtorch's minor")
        elif tv:
            rep.add(S, "libtorch CUDA vs nvcc", OK, f"both CUDA {ver_str(tv)}")
    majors = {v[0] for _, _, v in seen if v}
    if len(majors) > 1:
        rep.add(S, "several toolkits", WARN, "toolkits of CUDA majors " + ", ".join(map(str, sorted(majors))),
                "CMake takes nvcc from PATH/CUDACXX, torch.utils.cpp_extension from CUDA_HOME: make them agree")
    for dist in (probe or {}).get("dists", []):
        libs = ", ".join(dist["libs"][:6]) + (" ..." if len(dist["libs"]) > 6 else "")
        rep.add(S, "pip wheel", INFO, f"{dist['name']} {dist['version']}" + (f": {libs}" if libs else ""))


def check_process(rep, probe, err, driver):
    S = "Process"
    if probe is None:
        rep.add(S, "probe", WARN, err, "give --python a Python with torch installed")
        return
    paths = probe["maps_torch"]
    maps = cuda_mappings(paths)
    what = "a process that imports torch" if probe["torch"] else "a Python process (torch not importable)"
    for fam in sorted(maps):
        for major, ps in sorted(maps[fam].items(), key=lambda kv: kv[0] or 0):
            for p in ps:
                rep.add(S, "loaded", INFO, f"{fam} (major {major if major is not None else '-'}): {p}")
    rep.add(S, "source", INFO, f"read from /proc/self/maps of {what} ({probe['python']})")
    for fam in sorted(maps):
        majors = [m for m in maps[fam] if m is not None]
        if fam in RUNTIME_LIBS and len(set(majors)) > 1:
            rep.add(S, "two CUDA majors", FAIL, f"{fam} majors {sorted(set(majors))} in one process: "
                    + "; ".join(p for m in maps[fam] for p in maps[fam][m]),
                    "rebuild every extension against the CUDA major of torch; uninstall the other major's wheels")
        elif fam in ("libcudart",) and sum(len(v) for v in maps[fam].values()) > 1:
            rep.add(S, "two copies", WARN, f"{sum(len(v) for v in maps[fam].values())} copies of {fam} mapped "
                    "(e.g. one vendored by torchvision)", "harmless if of one major; ignore collect_env's version")
    for p, v in probe.get("runtime_versions", {}).items():
        rv = (v // 1000, (v % 1000) // 10)
        if driver is None:
            rep.add(S, "runtime vs driver", INFO, f"runtime CUDA {ver_str(rv)} ({os.path.basename(p)}), no driver")
        elif rv[0] > driver[0]:
            rep.add(S, "runtime vs driver", FAIL, f"runtime CUDA {ver_str(rv)} on a CUDA {ver_str(driver)} driver: "
                    "'CUDA driver version is insufficient for CUDA runtime version'",
                    f"install a driver for CUDA {rv[0]}.x, or a torch built for CUDA {driver[0]}")
        elif rv > driver:
            rep.add(S, "runtime vs driver", WARN, f"runtime CUDA {ver_str(rv)} on a CUDA {ver_str(driver)} driver "
                    "(minor-version compatibility: SASS runs, newer PTX cannot be JIT-compiled)",
                    "embed SASS for every target GPU, or update the driver")
        else:
            rep.add(S, "runtime vs driver", OK, f"runtime CUDA {ver_str(rv)} on a CUDA {ver_str(driver)} driver")


def check_torch(rep, probe):
    S = "torch"
    if probe is None:
        return
    t = probe["torch"]
    if t is None:
        rep.add(S, "torch", WARN, f"not importable in {probe['python']}: {probe['torch_error']}",
                "scripts/setup.sh installs it into .venv; or give --python")
        return
    rep.add(S, "torch", OK if t["cuda"] else WARN,
            f"torch {t['version']}, CUDA {t['cuda'] or 'none (CPU-only torch)'}, C++11 ABI "
            f"{int(t['cxx11_abi'])}, archs {' '.join(t['arch_list']) or '?'}",
            "" if t["cuda"] else "install a CUDA build of torch (e.g. torch==2.11.0 from PyPI, CUDA 13.0)")
    if t.get("cuda_error"):
        rep.add(S, "CUDA in torch", WARN, t["cuda_error"])


def classify_load_error(msg, torch_info, lib_path):
    """(status, kind, action) for a dlopen error message."""
    abi = torch_info["cxx11_abi"] if torch_info else None
    m = re.search(r"undefined symbol: ([^\s,]+)(?:, version (\S+))?", msg)
    if m:
        sym, ver = m.group(1), m.group(2)
        if re.search(r"_\d+_\d+$", sym) or (ver and re.match(r"lib.*\.so", ver)):
            return ("version skew", f"'{sym}' is missing from the copy of {ver or 'its library'} that was found: "
                    "an older library won the search (often through LD_LIBRARY_PATH) over the one the build used",
                    "remove the older copy's directory from LD_LIBRARY_PATH, or install matching wheel versions")
        demangled = demangle(sym) if sym.startswith("_Z") else sym
        new_abi = "__cxx11" in sym or "__cxx11" in demangled
        old_abi = sym.startswith("_Z") and not new_abi and (
            "std::string" in demangled or "std::basic_string" in demangled or re.search(r"(?<![0-9A-Za-z])Ss|RKSs|Ss[E_]", sym))
        if (new_abi and abi is False) or (old_abi and abi is True):
            built = "1 (new)" if new_abi else "0 (old)"
            return ("C++ ABI mismatch", f"'{demangled}' uses _GLIBCXX_USE_CXX11_ABI={built}, torch uses "
                    f"{int(bool(abi))}", f"rebuild with -D_GLIBCXX_USE_CXX11_ABI={int(bool(abi))} (what "
                    "torch._C._GLIBCXX_USE_CXX11_ABI says)")
        return ("undefined symbol", f"'{demangled}' is defined by no loaded library: built against another "
                "torch (or library) version", "rebuild against the torch in this environment")
    m = re.search(r"version `(GLIBCXX_[0-9.]+|CXXABI_[0-9.]+|GLIBC_[0-9.]+)' not found", msg)
    if m:
        return ("C++ runtime too old", f"needs {m.group(1)}, the libstdc++/glibc found is older",
                "run with a newer libstdc++ (e.g. the compiler's, via LD_LIBRARY_PATH) or build with the system g++")
    m = re.search(r"(lib[^\s:]*?\.so(?:\.(\d+))?[^\s:]*): cannot open shared object file", msg)
    if m:
        fam, major = lib_family(m.group(1))
        if fam in RUNTIME_LIBS:
            return ("missing runtime major", f"{m.group(1)} (CUDA major {major}) is not loadable here",
                    f"rebuild against the CUDA major torch uses, or install the CUDA {major} runtime wheel "
                    "(two CUDA majors in one process are fragile)")
        return ("missing library", f"{m.group(1)} is not found", "install it or add its directory to the "
                "library's RUNPATH / LD_LIBRARY_PATH")
    if "invalid ELF header" in msg or "wrong ELF class" in msg:
        return ("not loadable", msg, "give a shared library built for this machine")
    return ("load error", msg, "")


def demangle(sym):
    cf = shutil.which("c++filt")
    if not cf:
        return sym
    try:
        return subprocess.run([cf, sym], capture_output=True, text=True, timeout=10).stdout.strip() or sym
    except (OSError, subprocess.SubprocessError):
        return sym


def is_torch_extension(needed):
    return any(n.startswith(("libtorch", "libc10")) for n in needed)


def wants_cuda(needed):
    return any(lib_family(n)[0] in RUNTIME_LIBS or n.startswith(("libtorch_cuda", "libc10_cuda")) for n in needed)


def probe_library(path, python):
    """Loads the library in a child process that imported torch first (as torch.ops.load_library does).
    The child's mappings before the load double as the environment probe."""
    try:
        dyn = Elf(path).dynamic()
    except ELF_ERRORS:
        dyn = {"needed": [], "runpath": [], "rpath": []}
    origin = os.path.dirname(os.path.abspath(path))
    search = [p.replace("${ORIGIN}", origin).replace("$ORIGIN", origin) for p in (dyn["runpath"] or dyn["rpath"])]
    search += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    return run_probe(python, os.path.abspath(path), dyn["needed"], search)


def check_library(rep, path, args, devices, driver, lib_probe, torch_info, torch_maps):
    S = f"Library {path}"
    try:
        elf = Elf(path)
        dyn = elf.dynamic()
        undefined = elf.undefined_symbols()
        blob = b"".join(b for b in (elf.section(".nv_fatbin"), elf.section("__nv_relfatbin")) if b)
        entries = parse_fatbins(blob) if blob else []
    except ELF_ERRORS as e:
        rep.add(S, "ELF", FAIL, f"cannot read it as a shared library: {e}", "give the path of a built .so",
                subject=path)
        return
    needed = dyn["needed"]
    rep.add(S, "ELF", OK if elf.e_type == 3 else WARN,
            f"{'shared object' if elf.e_type == 3 else 'ELF type %d (not a shared object)' % elf.e_type}"
            f", NEEDED: {', '.join(needed) or 'none'}", subject=path)
    ext = is_torch_extension(needed)
    if not entries:
        if ext or wants_cuda(needed):
            rep.add(S, "device code", FAIL, "no device code (no .nv_fatbin): a CPU-only build"
                    + (" of a torch extension: its ops have no CUDA implementation ('... implementation for "
                       "device cuda:0 not found')" if ext else ""),
                    "rebuild on a machine with the CUDA toolkit (nvcc) and CUDA enabled", subject=path)
        else:
            rep.add(S, "device code", WARN, "no device code (no .nv_fatbin): a CPU-only library",
                    "fine for CPU code; a CUDA extension must be built with nvcc", subject=path)
    else:
        sass = sorted({arch_name(e["arch"], e["variant"]) for e in entries if e["kind"] == "sass"})
        ptx = sorted({f"{arch_name(e['arch'], e['variant'], 'compute_')} (ISA {ver_str(e['ptx_isa'])})"
                      for e in entries if e["kind"] == "ptx"})
        rep.add(S, "device code", INFO, f"SASS: {', '.join(sass) or 'none'}; PTX: {', '.join(ptx) or 'none'}",
                subject=path)
        if devices:
            for dev in devices:
                status, verdict, detail, action = arch_verdict(entries, dev, driver)
                rep.add(S, f"on {arch_name(*dev)}", status, f"{verdict}: {detail}", action, subject=path)
        else:
            rep.add(S, "on the device", INFO, "no GPU to judge against", "give --device-arch SM", subject=path)
        if driver:
            for e in entries:
                if e["kind"] == "ptx" and e["ptx_isa"]:
                    need, _ = ptx_min_cuda(e["ptx_isa"])
                    if need and need > driver and not devices:
                        rep.add(S, "PTX vs driver", WARN, f"compute_{e['arch']} PTX ISA {ver_str(e['ptx_isa'])} "
                                f"needs a CUDA {ver_str(need)} driver, the driver is {ver_str(driver)}",
                                "it cannot be JIT-compiled here; embed SASS", subject=path)
    # CUDA runtime majors the library asks for, against those torch maps.
    torch_majors = {fam: set(m for m in v if m is not None) for fam, v in cuda_mappings(torch_maps).items()}
    for n in needed:
        fam, major = lib_family(n)
        if fam in RUNTIME_LIBS and major is not None and torch_majors.get(fam) and major not in torch_majors[fam]:
            rep.add(S, "CUDA major", FAIL, f"NEEDED {n}, but torch's process maps {fam} major "
                    f"{', '.join(map(str, sorted(torch_majors[fam])))}: two CUDA majors in one process",
                    "rebuild the library with the CUDA toolkit of torch's major", subject=path)
    if ext and torch_info:
        und = [s for s, _, _ in undefined if s.startswith("_Z")]
        new = sum("B5cxx11" in s or "__cxx11" in s for s in und)
        if new and not torch_info["cxx11_abi"]:
            rep.add(S, "C++ ABI", FAIL, f"{new} undefined symbols use the C++11 ABI (std::__cxx11), torch has "
                    "_GLIBCXX_USE_CXX11_ABI=0", "rebuild with -D_GLIBCXX_USE_CXX11_ABI=0", subject=path)
    # Load it for real, after torch, as torch.ops.load_library does.
    probe, err = lib_probe
    if probe is None:
        rep.add(S, "load", WARN, err, subject=path)
        return
    if probe["load_error"]:
        kind, found, action = classify_load_error(probe["load_error"], probe["torch"], path)
        extra = "; ".join(f"{k} -> {v}" for k, v in probe["resolved"].items() if lib_family(k)[0] in CUDA_LIBS)
        rep.add(S, "load", FAIL, f"{kind}: {found}. dlopen: {probe['load_error'].strip()}"
                + (f". resolved: {extra}" if extra else ""), action, subject=path)
        rep.facts.setdefault("libraries", {})[path] = {"load_error": probe["load_error"], "kind": kind}
        return
    after = cuda_mappings(probe["maps_library"])
    rep.add(S, "load", OK, "loads with RTLD_NOW after importing torch" if probe["torch"] else
            "loads with RTLD_NOW (torch not importable)", subject=path)
    for fam, by_major in after.items():
        majors = {m for m in by_major if m is not None}
        if fam in RUNTIME_LIBS and len(majors) > 1:
            rep.add(S, "two CUDA majors", FAIL, f"after loading it the process maps {fam} majors "
                    f"{sorted(majors)}: " + "; ".join(p for m in sorted(majors) for p in by_major[m]),
                    "rebuild the library with the CUDA toolkit of torch's major", subject=path)
    rep.facts.setdefault("libraries", {})[path] = {
        "needed": needed, "fatbin": [dict(e, ptx_isa=list(e["ptx_isa"]) if e["ptx_isa"] else None) for e in entries]}


def default_libraries():
    env = os.environ.get("DETOPS_TORCH_LIBRARY")
    if env:
        return [env]
    for preset in ("dev", "ci", "release"):
        p = ROOT / "build" / preset / "ops" / "libdetops_torch.so"
        if p.exists():
            return [str(p)]
    return []


def default_python():
    env = os.environ.get("DETOPS_PYTHON")
    if env:
        return env
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


# ------------------------------------------------------------------------------------------------ output

MARK = {OK: "[ ok ]", WARN: "[warn]", FAIL: "[FAIL]", INFO: "[    ]"}


def print_text(rep, out):
    section = None
    for f in rep.findings:
        if f["section"] != section:
            section = f["section"]
            out.write(f"\n== {section}\n")
        out.write(f"{MARK[f['status']]} {f['check']}: {f['found']}\n")
        if f["action"] and f["status"] in (WARN, FAIL):
            out.write(f"       -> {f['action']}\n")
    counts = {s: sum(f["status"] == s for f in rep.findings) for s in (OK, WARN, FAIL)}
    out.write(f"\ndoctor: {counts[OK]} ok, {counts[WARN]} warn, {counts[FAIL]} fail: "
              + ("something will fail (exit 1)\n" if counts[FAIL] else "nothing will fail (exit 0)\n"))


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        sys.stderr.write(f"doctor: error: {message}\n")
        sys.exit(2)


def main(argv=None):
    p = Parser(prog="scripts/doctor.py", description="Diagnose CUDA build/load problems of torch extensions.")
    p.add_argument("--library", action="append", default=None, metavar="PATH",
                   help="a shared library to inspect (repeatable; default: DetOps's built libdetops_torch.so)")
    p.add_argument("--json", metavar="OUT", help="also write the findings as JSON to OUT ('-' for stdout only)")
    p.add_argument("--device-arch", action="append", default=None, metavar="SM",
                   help="judge the libraries for this GPU architecture (sm_90, 9.0, 90, sm_90a; repeatable) "
                        "instead of the GPUs present")
    p.add_argument("--driver-cuda", metavar="X.Y", help="judge against a driver of this CUDA version instead of "
                   "the installed one")
    p.add_argument("--python", metavar="PY", help="the Python whose torch to inspect (default: $DETOPS_PYTHON, "
                   ".venv/bin/python, or this Python)")
    args = p.parse_args(argv)
    if args.device_arch:
        parsed = []
        for a in args.device_arch:
            v = parse_arch(a)
            if v is None:
                p.error(f"--device-arch {a!r}: expected an SM like sm_90, 9.0 or 90")
            parsed.append(v)
        args.device_arch = parsed
    if args.driver_cuda:
        v = parse_version(args.driver_cuda)
        if v is None:
            p.error(f"--driver-cuda {args.driver_cuda!r}: expected a CUDA version like 13.0")
        args.driver_cuda = v
    libraries = args.library if args.library is not None else default_libraries()
    for lib in libraries:
        if not os.path.isfile(lib):
            p.error(f"--library {lib}: no such file")
    python = args.python or default_python()
    if not shutil.which(python) and not os.path.isfile(python):
        p.error(f"--python {python}: not found")

    rep = Report()
    drv = probe_driver()
    driver = args.driver_cuda or drv["driver"]
    devices = args.device_arch or [(g["arch"], "") for g in drv["gpus"]]
    check_machine(rep, args, drv)
    lib_probes = {lib: probe_library(lib, python) for lib in libraries}
    probe, err = next((lp for lp in lib_probes.values() if lp[0] is not None), (None, None))
    if probe is None:
        probe, err = run_probe(python)
    torch_info = probe["torch"] if probe else None
    check_toolkits(rep, probe, torch_info["cuda"] if torch_info else None)
    check_process(rep, probe, err, driver)
    check_torch(rep, probe)
    if not libraries:
        rep.add("Libraries", "DetOps library", WARN, "libdetops_torch.so is not built (build/{dev,ci,release}/ops)",
                "build it (scripts/test.sh) or give --library PATH")
    for lib in libraries:
        check_library(rep, lib, args, devices, driver, lib_probes[lib], torch_info, probe["maps_torch"] if probe else [])
    code = rep.worst()
    rep.facts.update({"driver": list(driver) if driver else None, "gpus": drv["gpus"],
                      "devices": [arch_name(*d) for d in devices], "torch": torch_info,
                      "python": python, "libraries_checked": libraries})
    if args.json != "-":
        print_text(rep, sys.stdout)
    if args.json:
        doc = json.dumps({"exit": code, "findings": rep.findings, "facts": rep.facts}, indent=1, default=str)
        if args.json == "-":
            print(doc)
        else:
            try:
                pathlib.Path(args.json).write_text(doc + "\n")
            except OSError as e:
                sys.stderr.write(f"doctor: cannot write {args.json}: {e}\n")
                return 2
    return code


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
