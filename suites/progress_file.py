"""Progress of a long test entry for the test command's watcher (scripts/lib.sh detops_watch_progress, started by
scripts/test.sh): with DETOPS_PROGRESS_FILE set, lines '[<tag> <done>/<total> <elapsed>s]' appended to that file,
0/N when the tests are collected, then at the end of a test that reaches a whole percent or ends 15 s or more after
the last line, and N/N at the end. The
variable is taken out of this process's environment once read, so the pytest runs that tests start themselves do
not write into the entry's progress."""
import os
import time


class ProgressFile:
    """A pytest plugin: register one per session (conftest.py's pytest_configure)."""

    def __init__(self, tag, path):
        self.tag = tag
        self.path = path
        self.total = 0
        self.done = 0
        self.start = time.monotonic()
        self.last_pct = -1
        self.last_t = 0.0

    def _write(self):
        now = time.monotonic()
        try:
            with open(self.path, "a") as f:
                f.write(f"[{self.tag} {self.done}/{self.total} {int(now - self.start)}s]\n")
        except OSError:
            pass  # progress is a courtesy: never a test failure
        self.last_t = now

    def pytest_collection_finish(self, session):
        if session.config.option.collectonly:
            return
        self.total = len(session.items)
        if self.total:
            self._write()

    def pytest_runtest_logfinish(self, nodeid, location):
        if not self.total:
            return
        self.done += 1
        pct = self.done * 100 // self.total
        if pct != self.last_pct or self.done >= self.total or time.monotonic() - self.last_t >= 15:
            self.last_pct = pct
            self._write()


def register(config, tag):
    """Registers a ProgressFile for `tag` when DETOPS_PROGRESS_FILE is set (and removes it from the environment)."""
    path = os.environ.pop("DETOPS_PROGRESS_FILE", "")
    if path:
        config.pluginmanager.register(ProgressFile(tag, path), "detops_progress_file")
