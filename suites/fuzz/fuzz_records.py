#!/usr/bin/env python3
"""Coverage-guided fuzzing (atheris: libFuzzer for Python) of the readers of run records: scripts/compare.py,
scripts/report.py, scripts/merge_records.py and scripts/baseline_key.py, each given the fuzzer's input as a record
(and a valid baseline beside it), and of the correctness report's reader, scripts/summarize_correctness.py, given
the same input as a GoogleTest JSON report (the seeds hold one: gtest_report.json). A reader may answer any input with exit 0, 1 (a regression) or 2 (a record it
refuses, with a line '<reader>: error: ...'); anything else (an uncaught exception, another exit status) is a finding and stops the run.

  python suites/fuzz/fuzz_records.py [libFuzzer flags] CORPUS_DIR [SEED_DIR ...]

e.g. -max_total_time=30 -rss_limit_mb=4096. The committed seeds are suites/fuzz/corpus/ (valid and near-valid
records); libFuzzer writes what it finds new into the first directory, so give it a scratch copy.
suites/python/test_fuzz_records.py runs it for a bounded time.
"""
import contextlib
import io
import os
import pathlib
import sys
import tempfile

import atheris

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
with atheris.instrument_imports():
    import baseline_key  # noqa: E402
    import compare  # noqa: E402
    import merge_records  # noqa: E402
    import report  # noqa: E402
    import summarize_correctness  # noqa: E402

WORK = pathlib.Path(tempfile.mkdtemp(prefix="detops-fuzz-"))
BASELINE = ROOT / "suites" / "fuzz" / "corpus" / "valid_small.json"
ALLOWED = {0, 1, 2}


def run_reader(name, fn, argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = fn(argv)
        except SystemExit as e:  # argparse and sys.exit paths
            code = e.code
    if code not in ALLOWED:
        raise RuntimeError(f"{name} exited {code!r} on a fuzzed record:\n{err.getvalue()[-2000:]}")
    said = err.getvalue()
    if code == 2 and (not said.strip().startswith(f"{name}: error:") or "Traceback" in said):
        raise RuntimeError(f"{name} refused a record without saying why:\n{said[-2000:]}")


def test_one_input(data):
    cand = WORK / "candidate.json"
    cand.write_bytes(data)
    run_reader("compare", compare.main, [str(BASELINE), str(cand), "--json-out", str(WORK / "result.json")])
    run_reader("report", report.main, [str(cand), "--baseline", str(BASELINE), "-o", str(WORK / "report.html")])
    run_reader("merge_records", merge_records.main, [str(WORK / "merged.json"), str(BASELINE), str(cand), "--replace"])
    run_reader("baseline_key", baseline_key.main, [str(cand)])
    run_reader("summarize_correctness", summarize_correctness.main, [str(cand)])


def main():
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
