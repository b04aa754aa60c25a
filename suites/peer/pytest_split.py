"""The peer suite split over several pytest processes (scripts/run.sh: DETOPS_PYTEST_SHARD=I/N), by the test times
of an earlier run where there are some, else by a hash of the test id.

- DETOPS_PYTEST_TIMES_OUT=FILE: this process writes {test id: seconds (setup + call + teardown)} of the tests it
  ran to FILE when it ends (a temporary file, then a rename).
- DETOPS_PYTEST_TIMES=F1:F2:... (os.pathsep): such files of an earlier run (every process's; .gz read too: the
  committed results/suite-times/<gpu>.peer.json.gz that scripts/run.sh falls back on). With times for some
  of the collected tests, the N processes split the tests by expected time (scripts/shard_suite.py's
  balanced_partition: longest first, each to the least loaded process, an unrecorded test counting as the median
  recorded one); without any (first run, files missing or unreadable, ids from another layout), by CRC-32 of the id.

Every process collects the same tests and reads the same files, so they compute the same split: disjoint, and
together every test once. On one H200 (2026-11-29) the hash split gave the two processes 135 s and 187 s.
"""
import gzip
import json
import os
import pathlib
import sys
import zlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
from shard_suite import balanced_partition  # noqa: E402


def recorded_times(spec):
    """{test id: seconds} from the files in spec (os.pathsep-separated); files that are missing, unreadable or not
    such a mapping are left out (the split then has fewer or no times), and their paths returned as the second
    value, for a warning."""
    times, bad = {}, []
    for path in filter(None, (spec or "").split(os.pathsep)):
        try:
            with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
                data = json.load(f)
            if not isinstance(data, dict):
                raise ValueError("not an object")
            for k, v in data.items():
                if isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
                    times[k] = float(v)
        except (OSError, ValueError, EOFError, zlib.error) as e:
            bad.append(f"{path} ({type(e).__name__}: {e})")
    return times, bad


def split(ids, index, n, times):
    """The ids (collection order) process index of n keeps, and how it split: "times" or "hash"."""
    if times and any(i in times for i in ids):
        lists, _ = balanced_partition(list(ids), times, n)
        mine = set(lists[index])
        return [i for i in ids if i in mine], "times"
    return [i for i in ids if zlib.crc32(i.encode()) % n == index], "hash"


class TimesRecorder:
    """A pytest plugin: each test's setup + call + teardown seconds, written to path when the session ends."""

    def __init__(self, path):
        self.path = path
        self.times = {}

    def pytest_runtest_logreport(self, report):
        self.times[report.nodeid] = self.times.get(report.nodeid, 0.0) + float(report.duration)

    def pytest_sessionfinish(self, session, exitstatus):
        tmp = f"{self.path}.tmp.{os.getpid()}"
        try:
            with open(tmp, "w") as f:
                json.dump(self.times, f, sort_keys=True)
            os.replace(tmp, self.path)
        except OSError as e:  # the times only balance the next run: never fail this one over them
            print(f"\npytest_split: test times not written to {self.path}: {e}", file=sys.stderr)


def main(argv=None):
    """pytest_split.py OUT.json.gz TIMES.json ...: the runs' per-process times merged into one gzip file, as committed
    under results/suite-times/<gpu>.peer.json.gz for fresh machines. Exit 2 when an input cannot be read."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or not argv[0].endswith(".json.gz"):
        print("usage: pytest_split.py OUT.json.gz TIMES.json [TIMES.json ...]", file=sys.stderr)
        return 2
    times, bad = recorded_times(os.pathsep.join(argv[1:]))
    if bad or not times:
        print(f"pytest_split: cannot read {'; '.join(bad) or 'any test time'}", file=sys.stderr)
        return 2
    with gzip.open(argv[0], "wt") as f:
        json.dump(times, f, sort_keys=True)
    print(f"pytest_split: {len(times)} test times ({sum(times.values()):.0f} s) -> {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
