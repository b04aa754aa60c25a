"""Progress with the time left: the build's (lib.sh detops_build_progress, run.sh and test.sh), and the test command's
(scripts/test.sh): the long entries append
'[<tag> <done>/<total> <elapsed>s]' lines to DETOPS_PROGRESS_FILE (the correctness binary, shard_suite.py, the pytest
entries through suites/progress_file.py), and lib.sh's detops_watch_progress shows the newest one with the time left."""
import os
import pathlib
import re
import select
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("DETOPS_CORRECTNESS_BIN")
LINE = re.compile(r"\[(\w+) (\d+)/(\d+) (\d+)s\]")
pytestmark = pytest.mark.no_detops_library


def progress_lines(path):
    lines = path.read_text().splitlines()
    assert lines and all(LINE.fullmatch(ln) for ln in lines), lines
    return [(m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))) for m in map(LINE.fullmatch, lines)]


def check_counts(lines, tag, total):
    """0/total first, then counts that never go back, total/total last, elapsed times that never go back."""
    assert {t for t, *_ in lines} == {tag}, lines
    assert lines[0][1:3] == (0, total) and lines[-1][1:3] == (total, total), lines
    assert all(a[1] <= b[1] and a[3] <= b[3] for a, b in zip(lines, lines[1:])), lines
    assert all(n == total for _, _, n, _ in lines), lines


@pytest.mark.skipif(not BIN, reason="DETOPS_CORRECTNESS_BIN is not set (CTest sets it to the correctness suite)")
def test_the_correctness_binary_writes_its_progress(tmp_path):
    out = tmp_path / "progress.log"
    env = dict(os.environ, DETOPS_PROGRESS_FILE=str(out))
    env.pop("DETOPS_PROGRESS", None)
    r = subprocess.run([BIN, "--gtest_filter=nms.bad_input.*.cpu:box_iou.bad_input.*.cpu", "--gtest_brief=1"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    total = int(re.search(r"(\d+) tests? from", r.stdout).group(1))
    lines = progress_lines(out)
    check_counts(lines, "correctness", total)
    assert len(lines) == total + 1  # under 100 tests: every test is a whole percent
    assert "[correctness " not in r.stderr  # the stderr lines stay DETOPS_PROGRESS's


def test_a_pytest_entry_writes_its_progress_and_keeps_it_from_the_runs_it_starts(tmp_path):
    out = tmp_path / "progress.log"
    env = dict(os.environ, DETOPS_PROGRESS_FILE=str(out))
    # The three probes below, in a pytest of their own.
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(ROOT / "suites/python/test_progress.py"), "-k", "nested_probe"],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    check_counts(progress_lines(out), "python", 3)


@pytest.mark.parametrize("k", range(3))
def test_nested_probe(k):
    """Run by the test above in a pytest of its own: the variable is gone from the environment of the run's tests
    (progress_file.register takes it out), so a pytest they start would not write into the entry's progress."""
    assert "DETOPS_PROGRESS_FILE" not in os.environ


def test_shard_suite_writes_the_merged_progress_not_its_processes(tmp_path):
    """shard_suite.py: its processes' progress merged into '[shard_suite <done>/<total> <elapsed>s]' lines, and the
    processes themselves (which would each write their own counts) never see the variable."""
    fake = tmp_path / "fake_suite.py"
    fake.write_text(
        "import os, sys, time, json\n"
        "args = sys.argv[1:]\n"
        "if '--gtest_list_tests' in args:\n"
        "    print('a.\\n  t1\\n  t2'); sys.exit(0)\n"
        "assert 'DETOPS_PROGRESS_FILE' not in os.environ, 'the shard saw DETOPS_PROGRESS_FILE'\n"
        "out = [a[len('--gtest_output=json:'):] for a in args if a.startswith('--gtest_output=json:')][0]\n"
        "for i in range(1, 3):\n"
        "    print(f'[correctness {i}/2] a', file=sys.stderr, flush=True); time.sleep(1.6)\n"
        "json.dump({'tests': 2, 'failures': 0, 'testsuites': [{'name': 'a', 'testsuite': [\n"
        "    {'name': 't1', 'time': '0.1s', 'result': 'COMPLETED'}, {'name': 't2', 'time': '0.1s', 'result': 'COMPLETED'}]}]},\n"
        "    open(out, 'w'))\n")
    wrapper = tmp_path / "suite"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {fake} \"$@\"\n")
    wrapper.chmod(0o755)
    out = tmp_path / "progress.log"
    env = dict(os.environ, DETOPS_PROGRESS_FILE=str(out))
    r = subprocess.run([sys.executable, str(ROOT / "scripts/shard_suite.py"), "--binary", str(wrapper), "--shards", "1",
                        "--interval", "1", "--out", str(tmp_path / "merged.json")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = progress_lines(out)
    assert lines and {t for t, *_ in lines} == {"shard_suite"}, lines
    assert all(n == 2 and 0 <= d <= 2 for _, d, n, _ in lines), lines


def test_the_build_step_shows_the_time_left():
    """scripts/lib.sh's detops_build_progress (the build of run.sh and test.sh): ninja's lines pass through
    unchanged, a [detops] line with the steps done, the time so far and the time left follows a step line once
    DETOPS_PROGRESS_S seconds have passed since the last one (none after the last step), and under pipefail a
    failing build still fails the pipeline."""
    def run(script, every):
        env = dict(os.environ, DETOPS_PROGRESS_S=str(every))
        return subprocess.run(["bash", "-c", f'set -euo pipefail; source "{ROOT}/scripts/lib.sh" >/dev/null; {script}'],
                              capture_output=True, text=True, env=env)

    ninja = r'printf "[1/4] Building CXX a.o\n[2/4] Building CUDA b.o\nwarning: w\n[3/4] Linking c\n[4/4] Linking d"'
    r = run(f"{ninja} | detops_build_progress", 0)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [ln for ln in lines if not ln.startswith("[detops]")] == [
        "[1/4] Building CXX a.o", "[2/4] Building CUDA b.o", "warning: w", "[3/4] Linking c", "[4/4] Linking d"]
    # One line after every step but the last; the clock may tick over a second boundary during the run (a loaded CI
    # machine did), so the times are matched, not spelt: elapsed 0 or 1 s, and the time left at that pace.
    progress = [ln for ln in lines if ln.startswith("[detops]")]
    assert len(progress) == 3, progress
    for k, ln in enumerate(progress, start=1):
        m = re.fullmatch(rf"\[detops\] build: {k}/4 steps, ([01])s, about ([0-9]+)s left", ln)
        assert m and int(m[2]) == int(m[1]) * (4 - k) // k, ln
    assert lines[1] == progress[0]  # right after its step
    # Two seconds in, two of five steps done: 2 s * 3 / 2 = 3 s left (one clock second either way).
    r = run(r'{ printf "[1/5] a\n"; sleep 2.2; printf "[2/5] b\n"; } | detops_build_progress', 2)
    assert r.returncode == 0, r.stderr
    progress = [ln for ln in r.stdout.splitlines() if ln.startswith("[detops]")]
    assert len(progress) == 1 and re.fullmatch(r"\[detops\] build: 2/5 steps, [23]s, about [345]s left", progress[0]), progress
    r = run(r'{ printf "[1/2] a\nerror: e\n"; exit 3; } | detops_build_progress || echo "status $?"', 0)
    assert r.stdout.splitlines()[-1] == "status 3", r.stdout


def test_the_watcher_shows_the_newest_line_with_the_time_left(tmp_path):
    """lib.sh's detops_watch_progress: each new line once, the time left at the entry's pace (elapsed * left / done),
    no estimate at 0 or at the end, lines of another form ignored."""
    log = tmp_path / "progress.log"
    log.write_text("")
    env = dict(os.environ, DETOPS_PROGRESS_S="0.2")
    p = subprocess.Popen(["bash", "-c", f'set -euo pipefail; source "{ROOT}/scripts/lib.sh" >/dev/null; '
                                        f'detops_watch_progress "{log}"'], stdout=subprocess.PIPE, text=True, env=env)
    def shown_next():  # the watcher's next line, waited for (a loaded machine may take more than one poll)
        assert select.select([p.stdout], [], [], 20)[0], "the watcher showed nothing within 20 s"
        return p.stdout.readline().rstrip("\n")

    shown = []
    try:
        for line in ("[correctness 0/400 0s]", "[correctness 100/400 30s]", "not a progress line",
                     "[python 50/200 100s]", "[python 200/200 130s]"):
            with open(log, "a") as f:
                f.write(line + "\n")
            if line.startswith("["):
                shown.append(shown_next())
            else:
                time.sleep(0.7)  # several polls see it as the newest line; none may show it
    finally:
        p.terminate()
    shown += p.communicate(timeout=10)[0].splitlines()  # nothing more: each line once
    assert shown == ["[detops] tests: correctness 0/400, 0s",
                     "[detops] tests: correctness 100/400, 30s, about 1m30s left",
                     "[detops] tests: python 50/200, 1m40s, about 5m00s left",
                     "[detops] tests: python 200/200, 2m10s"], shown


def test_the_watcher_ends_with_its_sleep():
    """Sent TERM (test.sh, once CTest has ended), the watcher ends its sleep too: an orphaned `sleep 60` would hold
    the test command's output open for up to a minute after the tests."""
    env = dict(os.environ, DETOPS_PROGRESS_S="30")
    p = subprocess.Popen(["bash", "-c", f'set -euo pipefail; source "{ROOT}/scripts/lib.sh" >/dev/null; '
                                        'detops_watch_progress /nonexistent/progress.log'],
                         stdout=subprocess.PIPE, text=True, env=env)
    time.sleep(0.5)
    t0 = time.monotonic()
    p.terminate()
    out, _ = p.communicate(timeout=10)  # EOF on stdout: no process holds it any more
    assert time.monotonic() - t0 < 5 and out == ""
