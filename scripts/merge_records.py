#!/usr/bin/env python3
"""Merges the records of one build measured in parts into one record.

A part is a run of detops_bench over some of the benchmarks: a --benchmark_filter split that keeps every call
under a time limit, a rerun of the ops a change touched, one GPU's shard of a node. compare.py and report.py
read the merged record as any other.

  scripts/merge_records.py OUT PART [PART ...] [--replace]

Every part is validated first (the schema, with compare.py's validator). The parts must come from one build
on one GPU model: the same GPU name and compute capability, CUDA runtime, nvcc, driver, libtorch, git commit
and dirty flag, timer and measurement settings. Timings are only comparable within that, and a merged record
that mixed them would hide the difference.
- benchmarks: the parts' entries, in part order. A benchmark (its run_name) measured in two parts is an error,
  unless --replace, where the later part's entries replace the earlier's (a rerun after a change).
- correctness: the union of the parts' tests by name. A test in several parts must be the same in each (each
  part was given the same correctness JSON), unless --replace, where the later part's wins; the summary is
  recounted.
- peers: per (op, case, dtype, direction), the later part's entry.
- context: the first part's, with detops.complete true only if every part is complete, and detops.merged_from
  listing each part (file, run_id, date, host, GPU uuid, how many benchmarks it gave).
- A part with output dumps ("outputs") is refused: a record points at one dump. With --drop-outputs such parts are
  merged without them, and merged_from says where each part's dumps are (the Slurm template's merge).

Exit 0: OUT written. Exit 2: a part that cannot be read, validated or merged, said in one line naming the file
and what was expected; OUT is not written.
"""
import argparse
import json
import os
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import compare  # noqa: E402

EXIT_OK = 0
EXIT_USAGE = 2

# Provenance fields that must be equal in every part (compare.provenance keys), with their names for messages.
SAME_BUILD_FIELDS = (("gpu_name", "GPU"), ("cuda_runtime_version", "CUDA runtime"), ("nvcc_version", "nvcc"),
                     ("driver_version", "driver"), ("libtorch_version", "libtorch"),
                     ("libtorch_cuda_version", "libtorch's CUDA"), ("git_sha", "git commit"),
                     ("git_dirty", "git dirty flag"), ("timer", "timer"), ("settings", "measurement settings"),
                     ("cuda_archs", "CUDA archs"), ("sass_archs", "SASS archs"))



def load_part(path, drop_outputs=False):
    rec = compare.load_record(path)
    status, errors = compare.validate_record(rec)
    if status == "not a DetOps record":
        raise compare.RecordError(f"{path}: not a DetOps record (no context.detops_schema_version): nothing to merge "
                                  "provenance from")
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise compare.RecordError(f"{path}: invalid record: {errors[0]}{more}")
    if "outputs" in rec:
        if not drop_outputs:
            raise compare.RecordError(f"{path}: has output dumps ('outputs'); a record points at one dump, so parts "
                                      "with dumps cannot be merged (--drop-outputs merges them without)")
        rec = dict(rec)
        dumps = rec.pop("outputs")
        rec["_dumps"] = os.path.join(os.path.dirname(os.path.abspath(path)), str(dumps.get("dir", "outputs"))) \
            if isinstance(dumps, dict) else None
    return rec


def check_same_build(paths, recs):
    first = compare.provenance(recs[0])
    for path, rec in zip(paths[1:], recs[1:]):
        p = compare.provenance(rec)
        for key, label in SAME_BUILD_FIELDS:
            if p[key] != first[key]:
                raise compare.RecordError(f"{path}: {label} {p[key]!r} differs from {paths[0]}'s {first[key]!r}; "
                                          "parts of one record must come from one build on one GPU model")
        cc, cc0 = p["gpu"].get("compute_capability"), first["gpu"].get("compute_capability")
        if cc != cc0:
            raise compare.RecordError(f"{path}: compute capability {cc!r} differs from {paths[0]}'s {cc0!r}")


def merge_benchmarks(paths, recs, replace):
    order, by_name, source = [], {}, {}
    for path, rec in zip(paths, recs):
        mine = {}
        for i, b in enumerate(rec["benchmarks"]):
            name = b.get("run_name", b.get("name"))
            if not isinstance(name, str):
                raise compare.RecordError(f"{path}: benchmarks/{i}: expected a run_name (or name) string")
            mine.setdefault(name, []).append(b)
        for name, entries in mine.items():
            if name in by_name:
                if not replace:
                    raise compare.RecordError(f"{path}: benchmark {name} is also in {source[name]}; pass --replace to "
                                              "keep the later part's measurement")
            else:
                order.append(name)
            by_name[name], source[name] = entries, path
    counts = {p: 0 for p in paths}
    for name in order:
        counts[source[name]] += 1
    return [b for name in order for b in by_name[name]], counts


def merge_correctness(paths, recs, replace):
    tests, source, seen = {}, {}, False
    for path, rec in zip(paths, recs):
        c = rec.get("correctness")
        if c is None:
            continue
        seen = True
        for t in c.get("tests", []):
            name = t["name"]
            if name in tests and tests[name] != t and not replace:
                raise compare.RecordError(f"{path}: correctness test {name} differs from {source[name]}'s; the parts "
                                          "must carry the same correctness results, or pass --replace to keep the "
                                          "later part's")
            tests[name], source[name] = t, path
    if not seen:
        return None
    summary = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    for t in tests.values():
        summary[compare.SUMMARY_KEY.get(t["outcome"], "skipped")] += 1
    return {"summary": summary, "tests": list(tests.values())}


def merge_peers(recs):
    peers = {}
    for rec in recs:
        for e in rec.get("peers", []):
            peers[compare.peer_key(e)] = e
    return list(peers.values())


def merge(paths, replace=False, drop_outputs=False):
    recs = [load_part(p, drop_outputs) for p in paths]
    dumps = [r.pop("_dumps", None) for r in recs]
    check_same_build(paths, recs)
    benchmarks, counts = merge_benchmarks(paths, recs, replace)
    out = {"context": json.loads(json.dumps(recs[0]["context"])), "benchmarks": benchmarks}
    d = out["context"]["detops"]
    provs = [compare.provenance(r) for r in recs]
    d["complete"] = all(pv["complete"] is not False for pv in provs)
    d["merged_from"] = [{"file": os.path.basename(p), "run_id": pv["run_id"], "date": pv["date"], "host": pv["host"],
                         "gpu_uuid": pv["gpu"].get("uuid"), "benchmarks": counts[p]} for p, pv in zip(paths, provs)]
    for entry, where in zip(d["merged_from"], dumps):
        if where:  # --drop-outputs: the part's output dumps stay in its folder; say where
            entry["output_dumps"] = where
    correctness = merge_correctness(paths, recs, replace)
    if correctness is not None:
        out["correctness"] = correctness
    peers = merge_peers(recs)
    if peers or any("peers" in r for r in recs):
        out["peers"] = peers
    status, errors = compare.validate_record(out)
    if errors:  # a bug here, not in the parts: say so rather than write it
        raise compare.RecordError(f"the merged record does not validate: {errors[0]}")
    return out


def write_atomically(path, rec):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".merge-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(rec, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv=None):
    ap = argparse.ArgumentParser(description="Merge the records of one build measured in parts into one record "
                                             "(exit 0 written, 2 a part that cannot be merged; OUT untouched then).")
    ap.add_argument("out", help="the merged record.json to write")
    ap.add_argument("parts", nargs="+", help="the parts' record.json files, in order")
    ap.add_argument("--replace", action="store_true",
                    help="a benchmark or a correctness test in several parts: keep the later part's instead of failing")
    ap.add_argument("--drop-outputs", action="store_true",
                    help="merge parts that point at output dumps, without them (merged_from says where each part's are)")
    args = ap.parse_args(argv)
    if any(os.path.abspath(p) == os.path.abspath(args.out) for p in args.parts):
        print(f"merge_records: error: {args.out} is also a part; write the merged record elsewhere", file=sys.stderr)
        return EXIT_USAGE
    try:
        rec = merge(args.parts, args.replace, args.drop_outputs)
    except compare.RecordError as e:
        print(f"merge_records: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    write_atomically(args.out, rec)
    n = len(rec["benchmarks"])
    print(f"merge_records: wrote {args.out}: {n} benchmark entries from {len(args.parts)} parts")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
