"""Helpers of the process tests: a Python child that reports JSON lines, and waiting."""
from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import REPO

CHILD_TIMEOUT_S = 240.0   # one cluster start on a busy 2-core machine, with room to spare
PRELUDE = """
import json, os, sys
from helpers.runtime.cluster import start_cluster

def say(**values):
    print(json.dumps(values), flush=True)
"""


class Child:
    """A Python child running `prelude` + `script`; reads its JSON lines with a timeout."""

    def __init__(self, script: str, env: dict | None = None, prelude: str = PRELUDE):
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-c", prelude + script], cwd=REPO,
            env=dict(os.environ) if env is None else env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        self.log: list[str] = []
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def read(self, timeout_s: float = CHILD_TIMEOUT_S) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no report from the child within {timeout_s:g} s:\n{self.output()}")
            if line is None:
                self.proc.wait(timeout=30)
                pytest.fail(f"the child ended (exit {self.proc.returncode}) without a report:\n"
                            f"{self.output()}")
            if line.startswith("{"):
                return json.loads(line)
            self.log.append(line)

    def send(self, line: str = "go") -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def release(self) -> dict:
        """Let a child that holds its cluster go on (a line on its stdin); its next report."""
        self.send()
        return self.read()

    def finish(self, timeout_s: float = 60) -> None:
        """Wait for a clean exit (exit 0)."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the child did not exit within {timeout_s:g} s:\n{self.output()}")
        assert self.proc.returncode == 0, self.output()

    def output(self) -> str:
        time.sleep(0.2)
        while not self._lines.empty():
            line = self._lines.get_nowait()
            if line is not None:
                self.log.append(line)
        return "".join(self.log)[-6000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def wait_until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.25)
    return predicate()


@contextlib.contextmanager
def child_starter(prelude: str = PRELUDE):
    """`start(script, env)` makes a Child; every child started is killed at the end."""
    started: list[Child] = []

    def start(script: str, env: dict | None = None) -> Child:
        child = Child(script, env, prelude)
        started.append(child)
        return child

    try:
        yield start
    finally:
        for child in started:
            child.kill()   # a killed child's reaper ends its cluster
