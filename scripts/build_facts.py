#!/usr/bin/env python3
"""What a build of DetOps is, as two builds are compared (scripts/cross_build.sh).

  build_facts.py collect BUILD_DIR --label L -o FACTS.json
      nvcc and ptxas versions, the -gencode list nvcc was given, the architectures that carry SASS and PTX,
      and per kernel and architecture the registers, spills, stack and shared memory that ptxas reported
      (the build compiles with -Xptxas=-v; its log is BUILD_DIR/build.log).
  build_facts.py check-image DOCTOR.json FACTS.json
      exit 0 when this GPU runs the build's code as it was built to: a build that carries SASS must carry
      SASS for this GPU (a 13.0 driver cannot JIT a newer toolkit's PTX, and JIT code is not the code that
      was built); a PTX-only build must be JIT-compiled (and is said to be). Exit 1 with the reason otherwise.
  build_facts.py finish RUN_DIR --facts FACTS.json --library LIB
      writes RUN_DIR/build-facts.json: FACTS plus a digest of each kernel's SASS (cuobjdump -sass; none for a
      PTX-only build, whose SASS the driver makes at load), and points RUN_DIR/record.json at RUN_DIR/outputs.
  build_facts.py diff BASE.json CAND.json [--base-correctness B.json --cand-correctness C.json]
      markdown: the two builds' facts side by side, how many kernels have identical SASS, and the kernels
      whose registers, spills or shared memory changed; with the correctness reports, also each registered
      kernel as the CUDA runtime loaded it (registers, local memory, SASS or JIT), which covers PTX builds.
"""
import argparse
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import compare  # noqa: E402

ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)' for '(sm_[0-9]+[af]?)'")
PROPS = re.compile(r"ptxas info\s*: Function properties for (\S+)")
STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"ptxas info\s*: Used (\d+) registers")
SMEM = re.compile(r"(\d+) bytes smem")
GENCODE = re.compile(r"(?:--generate-code=|-gencode[= ])arch=(compute_[0-9]+[af]?),code=(\[[^\]]*\]|[A-Za-z_0-9]+)")


def run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    except OSError:
        return ""


def cache_value(cache_text, key):
    m = re.search(rf"^{re.escape(key)}:[A-Z]+=(.*)$", cache_text, re.M)
    return m.group(1).strip() if m else None


def parse_ptxas_log(text):
    """{(mangled kernel, arch): {registers, stack_bytes, spill_stores, spill_loads, smem_bytes}}; the last
    report of a kernel wins (the log is appended to by every rebuild)."""
    kernels = {}
    current = None
    props_for = None
    pending_stack = None
    for line in text.splitlines():
        m = ENTRY.search(line)
        if m:
            current = (m.group(1), m.group(2))
            kernels[current] = {}
            props_for = None
            continue
        m = PROPS.search(line)
        if m:
            props_for = m.group(1)
            continue
        m = STACK.search(line)
        if m and props_for is not None:
            pending_stack = (props_for, int(m.group(1)), int(m.group(2)), int(m.group(3)))
            continue
        m = USED.search(line)
        if m and current is not None:
            entry = kernels[current]
            entry["registers"] = int(m.group(1))
            s = SMEM.search(line)
            entry["smem_bytes"] = int(s.group(1)) if s else 0
            if pending_stack and pending_stack[0] == current[0]:
                entry["stack_bytes"], entry["spill_stores"], entry["spill_loads"] = pending_stack[1:]
            current = None
            pending_stack = None
    return {k: v for k, v in kernels.items() if "registers" in v}


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def collect(args):
    bdir = pathlib.Path(args.build_dir)
    cache = (bdir / "CMakeCache.txt").read_text()
    nvcc = cache_value(cache, "CMAKE_CUDA_COMPILER")
    ptxas = os.path.join(os.path.dirname(nvcc), "ptxas") if nvcc else None
    archs = cache_value(cache, "CMAKE_CUDA_ARCHITECTURES") or ""
    gencode = set()
    ninja = bdir / "build.ninja"
    if ninja.is_file():
        for line in ninja.read_text().splitlines():
            if "FLAGS" in line and ("generate-code" in line or "gencode" in line):
                gencode.update(f"arch={a},code={c}" for a, c in GENCODE.findall(line))
    log = bdir / "build.log"
    kernels = parse_ptxas_log(log.read_text(errors="replace")) if log.is_file() else {}
    names = demangle(sorted({k for k, _ in kernels}))
    facts = {
        "label": args.label,
        "build_dir": str(bdir),
        "nvcc": nvcc,
        "nvcc_version": (re.search(r"release [0-9.]+, V([0-9.]+)", run([nvcc, "--version"])) or [None, None])[1]
        if nvcc else None,
        "ptxas_version": (re.search(r"release [0-9.]+, V([0-9.]+)", run([ptxas, "--version"])) or [None, None])[1]
        if ptxas and os.path.exists(ptxas) else None,
        "toolkit_note": (pathlib.Path(nvcc).parent.parent / "TOOLKIT.txt").read_text().strip()
        if nvcc and (pathlib.Path(nvcc).parent.parent / "TOOLKIT.txt").is_file() else "the toolkit of this nvcc",
        "cxx": cache_value(cache, "CMAKE_CXX_COMPILER"),
        "build_type": cache_value(cache, "CMAKE_BUILD_TYPE"),
        "cuda_architectures": archs,
        "sass_architectures": sorted({re.match(r"([0-9]+[af]?)", a).group(1) for a in archs.split(";")
                                      if a and not a.endswith("-virtual") and re.match(r"[0-9]", a)}),
        "gencode": sorted(gencode),
        "kernels": [dict(name=k, arch=a, demangled=names.get(k, k), **v) for (k, a), v in sorted(kernels.items())],
    }
    if not facts["sass_architectures"]:
        facts["kernels_note"] = ("PTX only: no SASS was built, so ptxas reported nothing; the driver JIT-compiles the "
                                 "PTX at load (registers per kernel: the record's kernel_images)")
    pathlib.Path(args.out).write_text(json.dumps(facts, indent=1) + "\n")
    print(f"[build_facts] {args.label}: nvcc {facts['nvcc_version']}, ptxas {facts['ptxas_version']}, "
          f"{' '.join(facts['gencode']) or 'no -gencode found'}, {len(facts['kernels'])} kernel images reported by ptxas")
    return 0


def check_image(args):
    doctor = json.loads(pathlib.Path(args.doctor).read_text())
    facts = json.loads(pathlib.Path(args.facts).read_text())
    findings = doctor.get("findings", [])
    lib = [f for f in findings if (f.get("section") or "").startswith("Library ")]
    fails = [f for f in lib if f.get("status") == "fail"]
    on = [f for f in lib if (f.get("check") or "").startswith("on ")]
    label = facts.get("label")
    if fails:
        for f in fails:
            print(f"[build_facts] {label}: {f['check']}: {f['found']} ({f.get('action') or ''})", file=sys.stderr)
        return 1
    if not on:
        print(f"[build_facts] {label}: the doctor judged the library against no GPU", file=sys.stderr)
        return 1
    for f in on:
        verdict = f["found"].split(":")[0]
        if facts.get("sass_architectures"):
            if verdict != "native SASS":
                print(f"[build_facts] {label}: built with SASS for {','.join(facts['sass_architectures'])} but {f['check']} "
                      f"the GPU would run '{verdict}' ({f['found']}); timings would not be of the code that was built",
                      file=sys.stderr)
                return 1
        elif verdict != "JIT from PTX":
            print(f"[build_facts] {label}: a PTX-only build, but {f['check']}: '{verdict}'", file=sys.stderr)
            return 1
        print(f"[build_facts] {label}: {f['check']}: {f['found']}")
    return 0


def find_cuobjdump():
    for cand in (shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def sass_digests(library):
    """{mangled kernel: {arch: sha256 of its instructions}} from cuobjdump -sass (addresses, encodings and
    header flags left out), or (None, reason)."""
    tool = find_cuobjdump()
    if not tool:
        return None, "no cuobjdump on PATH"
    proc = subprocess.Popen([tool, "-sass", library], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    digests = {}
    arch = None
    name = None
    h = None
    for line in proc.stdout:
        s = line.strip()
        m = re.match(r"code for (sm_[0-9]+[af]?)", s)
        if m:
            arch = m.group(1)
            continue
        m = re.match(r"Function : (\S+)", s)
        if m:
            if name and h:
                digests.setdefault(name, {})[arch_of_name] = h.hexdigest()[:16]
            name, arch_of_name, h = m.group(1), arch, hashlib.sha256()
            continue
        if h is None or not s.startswith("/*"):
            continue
        s = re.sub(r"^/\*[0-9a-f]{4,}\*/", "", s)
        s = re.sub(r"/\* 0x[0-9a-f]{16} \*/", "", s).strip()
        if s:
            h.update(s.encode() + b"\n")
    if name and h:
        digests.setdefault(name, {})[arch_of_name] = h.hexdigest()[:16]
    err = proc.stderr.read()
    rc = proc.wait()
    if rc != 0 and not digests:
        return None, f"cuobjdump -sass failed (exit {rc}): {err.strip()[:200]}"
    return digests, None


def finish(args):
    run_dir = pathlib.Path(args.run_dir)
    facts = json.loads(pathlib.Path(args.facts).read_text())
    if facts.get("sass_architectures"):
        digests, why = sass_digests(args.library)
        if digests is None:
            facts["sass_digest_note"] = why
        else:
            by_key = {(k["name"], k["arch"]): k for k in facts["kernels"]}
            for name, per_arch in digests.items():
                for arch, d in per_arch.items():
                    entry = by_key.get((name, arch))
                    if entry is None:
                        entry = {"name": name, "arch": arch, "demangled": name}
                        facts["kernels"].append(entry)
                        by_key[(name, arch)] = entry
                    entry["sass_sha256_16"] = d
            facts["sass_digest_note"] = f"cuobjdump -sass ({find_cuobjdump()}): {len(digests)} kernels"
    else:
        facts["sass_digest_note"] = "PTX only: the SASS is the driver's JIT output, not in the library"
    (run_dir / "build-facts.json").write_text(json.dumps(facts, indent=1) + "\n")
    if (run_dir / "record.json").is_file():
        compare.attach_output_dumps(run_dir / "record.json")
    print(f"[build_facts] {facts['label']}: {facts['sass_digest_note']}")
    return 0


def short(name, n=96):
    return name if len(name) <= n else name[: n - 3] + "..."


def diff(args):
    a = json.loads(pathlib.Path(args.base).read_text())
    b = json.loads(pathlib.Path(args.cand).read_text())
    out = ["", "## Build facts", "",
           f"| | {a['label']} (baseline) | {b['label']} (candidate) |", "|---|---|---|"]
    for key, title in (("nvcc_version", "nvcc"), ("ptxas_version", "ptxas"), ("toolkit_note", "toolkit"),
                       ("cuda_architectures", "CMAKE_CUDA_ARCHITECTURES"), ("gencode", "-gencode"),
                       ("sass_digest_note", "SASS digests")):
        va, vb = a.get(key), b.get(key)
        fmt = lambda v: (" ".join(v) if isinstance(v, list) else str(v)).replace("\n", "; ").replace("|", "/")
        out.append(f"| {title} | {fmt(va)} | {fmt(vb)} |")
    runtime = []
    if args.base_correctness and args.cand_correctness:
        ra, rb = runtime_kernels(args.base_correctness), runtime_kernels(args.cand_correctness)
        if ra and rb:
            runtime = diff_runtime(a["label"], b["label"], ra, rb, args.limit)
        else:
            runtime = ["", "(no device facts with kernels in the correctness reports)"]
    ka = {(k["name"], k["arch"]): k for k in a.get("kernels", [])}
    kb = {(k["name"], k["arch"]): k for k in b.get("kernels", [])}
    common = sorted(set(ka) & set(kb))
    out.append("")
    if not common:
        notes = [n for n in (a.get("kernels_note"), b.get("kernels_note")) if n]
        out.append("No kernel image is in both builds' ptxas facts" + (f" ({'; '.join(notes)})" if notes else "") + ".")
        print("\n".join(out + runtime))
        return 0
    same_sass = sum(1 for k in common if ka[k].get("sass_sha256_16") and ka[k].get("sass_sha256_16") == kb[k].get("sass_sha256_16"))
    with_sass = sum(1 for k in common if ka[k].get("sass_sha256_16") and kb[k].get("sass_sha256_16"))
    changed = []
    for k in common:
        x, y = ka[k], kb[k]
        fields = [f for f in ("registers", "spill_stores", "spill_loads", "stack_bytes", "smem_bytes")
                  if x.get(f) is not None and y.get(f) is not None and x.get(f) != y.get(f)]
        if fields:
            changed.append((k, fields))
    up = sum(1 for k, f in changed if "registers" in f and kb[k]["registers"] > ka[k]["registers"])
    down = sum(1 for k, f in changed if "registers" in f and kb[k]["registers"] < ka[k]["registers"])
    spills_a = sum(1 for k in common if ka[k].get("spill_stores"))
    spills_b = sum(1 for k in common if kb[k].get("spill_stores"))
    out.append(f"Kernel images in both builds: {len(common)} (only in {a['label']}: {len(set(ka) - set(kb))}, "
               f"only in {b['label']}: {len(set(kb) - set(ka))}). Identical SASS: {same_sass} of {with_sass} with "
               f"digests on both sides. Registers changed in {up + down} ({up} more, {down} fewer); kernels that "
               f"spill: {spills_a} -> {spills_b}.")
    if changed:
        out += ["", "| kernel | arch | registers | spill stores | stack | smem |", "|---|---|---|---|---|---|"]
        changed.sort(key=lambda kf: (-abs(kb[kf[0]].get("spill_stores", 0) - ka[kf[0]].get("spill_stores", 0)),
                                     -abs(kb[kf[0]].get("registers", 0) - ka[kf[0]].get("registers", 0))))
        for k, _ in changed[: args.limit]:
            x, y = ka[k], kb[k]
            cell = lambda f: (f"{x.get(f)} -> {y.get(f)}" if x.get(f) != y.get(f) else str(x.get(f)))
            out.append(f"| `{short(x['demangled'])}` | {k[1]} | {cell('registers')} | {cell('spill_stores')} | "
                       f"{cell('stack_bytes')} | {cell('smem_bytes')} |")
        if len(changed) > args.limit:
            out.append(f"| ... {len(changed) - args.limit} more (build-facts.json) | | | | | |")
    print("\n".join(out + runtime))
    return 0


def runtime_kernels(correctness_path):
    """{(op, kernel): entry} from the device facts a correctness run recorded (the CUDA runtime's view of each
    registered kernel: registers and local memory as loaded, also for JIT-compiled PTX), or None."""
    try:
        report = json.loads(pathlib.Path(correctness_path).read_text())
        facts = report.get("detops_device_facts")
        facts = json.loads(facts) if isinstance(facts, str) else facts
        return {(k["op"], k["kernel"]): k for k in facts["kernels"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def diff_runtime(a_label, b_label, ka, kb, limit):
    out = ["", "### Kernels as loaded (CUDA runtime: cudaFuncGetAttributes)", ""]
    common = sorted(set(ka) & set(kb))
    src = lambda ks: ", ".join(f"{n} {s}" for s, n in sorted(
        __import__("collections").Counter(k.get("runs_from") for k in ks.values()).items()))
    changed = [k for k in common if (ka[k].get("registers"), ka[k].get("local_bytes")) !=
               (kb[k].get("registers"), kb[k].get("local_bytes"))]
    up = sum(1 for k in changed if kb[k].get("registers", 0) > ka[k].get("registers", 0))
    down = sum(1 for k in changed if kb[k].get("registers", 0) < ka[k].get("registers", 0))
    local_a = sum(1 for k in common if ka[k].get("local_bytes"))
    local_b = sum(1 for k in common if kb[k].get("local_bytes"))
    out.append(f"Registered kernels in both: {len(common)}; {a_label} runs {src(ka)}, {b_label} runs {src(kb)}. "
               f"Registers differ in {up + down} ({up} more, {down} fewer); kernels with local memory (spills or "
               f"stack): {local_a} -> {local_b}.")
    if changed:
        out += ["", "| op | kernel | registers | local bytes |", "|---|---|---|---|"]
        changed.sort(key=lambda k: (-abs(kb[k].get("local_bytes", 0) - ka[k].get("local_bytes", 0)),
                                    -abs(kb[k].get("registers", 0) - ka[k].get("registers", 0))))
        for k in changed[:limit]:
            x, y = ka[k], kb[k]
            cell = lambda f: f"{x.get(f)} -> {y.get(f)}" if x.get(f) != y.get(f) else str(x.get(f))
            out.append(f"| {k[0]} | `{short(k[1])}` | {cell('registers')} | {cell('local_bytes')} |")
        if len(changed) > limit:
            out.append(f"| ... {len(changed) - limit} more | | | |")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("collect")
    p.add_argument("build_dir")
    p.add_argument("--label", required=True)
    p.add_argument("-o", "--out", required=True)
    p = sub.add_parser("check-image")
    p.add_argument("doctor")
    p.add_argument("facts")
    p = sub.add_parser("finish")
    p.add_argument("run_dir")
    p.add_argument("--facts", required=True)
    p.add_argument("--library", required=True)
    p = sub.add_parser("diff")
    p.add_argument("base")
    p.add_argument("cand")
    p.add_argument("--limit", type=int, default=25)
    p.add_argument("--base-correctness", help="the baseline's correctness report (its device facts list each kernel as loaded)")
    p.add_argument("--cand-correctness", help="the candidate's correctness report")
    args = ap.parse_args(argv)
    return {"collect": collect, "check-image": check_image, "finish": finish, "diff": diff}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
