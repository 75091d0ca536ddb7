"""`@pytest.mark.alone`: a test that runs while no other test of the same run does.

A cluster start ends every orphan on the machine (`end_orphans`, on purpose: nothing a
dead kernel left may stay). So a test that makes orphans and then counts them, or counts
what a sweep ended, races with any cluster start in the other xdist worker. Such a test
is marked `alone`: every test runs holding a shared lock, an `alone` test an exclusive
one. A turnstile lock in front keeps the other worker from starving it: once an `alone`
test waits, no new test starts until it has run.

The locks are files in a folder made once per run (the xdist controller makes it; its
workers inherit the path), so two runs on one machine do not wait for each other.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Iterator

RUN_FOLDER_VARIABLE = "NCCL_NOTEBOOKS_TESTS_RUN_LOCKS"
WAIT_S = 900.0   # longer than any one test; past it the waiting test fails, it never hangs
POLL_S = 0.02


class LockTimeout(RuntimeError):
    """Another test held the lock for longer than WAIT_S."""


@contextlib.contextmanager
def _locked(path: Path, mode: int, wait_s: float) -> Iterator[None]:
    with open(path, "a+") as handle:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockTimeout(f"another test held {path.name} for over {wait_s:.0f} s")
                time.sleep(POLL_S)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class RunLock:
    """Shared for ordinary tests, exclusive for `alone` ones, with writer preference."""

    def __init__(self, folder: Path, wait_s: float = WAIT_S):
        folder.mkdir(parents=True, exist_ok=True)
        self.turnstile = folder / "turnstile.lock"
        self.tests = folder / "tests.lock"
        self.wait_s = wait_s

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with _locked(self.turnstile, fcntl.LOCK_EX, self.wait_s):
            pass   # wait here while an `alone` test waits or runs
        with _locked(self.tests, fcntl.LOCK_SH, self.wait_s):
            yield

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with _locked(self.turnstile, fcntl.LOCK_EX, self.wait_s), \
                _locked(self.tests, fcntl.LOCK_EX, self.wait_s):
            yield


def run_folder(default: Path) -> Path:
    """The run's lock folder: the first process to ask (the controller) names it."""
    return Path(os.environ.setdefault(RUN_FOLDER_VARIABLE, str(default)))
