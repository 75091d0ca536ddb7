"""Run a case on a disposable group of processes, where a dead rank costs nothing.

Some mistakes do not raise on gloo: they kill the receiving process (SIGABRT from gloo's
own checks), which no timeout can catch. The notebooks show such
cases for real with `run_disposable` (or `start_disposable`, which does not wait, so that
several cases run at once): the case is an ordinary function of
`(rank, world_size)` written in a notebook cell, its source is shipped to `world_size`
new processes that form their own gloo group (a new TCPStore on 127.0.0.1, gloo pinned
to `lo`, a short timeout), and each process reports what the function returned, what it
raised, or the signal that ended it (disposable_rank.py). The notebook's own engines are
not involved.

The processes are the standard library's: `multiprocessing`'s forkserver context, whose
server imports torch once (its preload, disposable_preload.py) and forks a rank per
request; where there is no forkserver (Windows), spawn: a new `python` each. A script
that calls run_disposable needs the `if __name__ == "__main__":` guard that every
`multiprocessing` script needs: a rank imports its caller's main module. The server
lives as long as its caller; each rank as long as the pipe its caller holds to it.
tests/claims/test_claims.py runs the ledger's claims through the same function.
"""
from __future__ import annotations

import contextlib
import inspect
import json
import multiprocessing
import os
import re
import signal
import tempfile
import textwrap
import time
import weakref
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Callable

from helpers.runtime import disposable_rank
from helpers.runtime.launchers import local_engine_env
from helpers.runtime.rendezvous import listening_socket
from helpers.runtime.start_method import forkserver_context, forkserver_usable
from helpers.runtime.tracebacks import without_machine_paths

# forkserver where this process can use one (Linux, macOS; start_method), else spawn. The
# preload is the context's (the standard library keeps one forkserver per process): set
# before any start.
START_METHOD = "forkserver" if forkserver_usable() else "spawn"
_CONTEXT = (forkserver_context(disposable_rank.PRELOAD) if START_METHOD == "forkserver"
            else multiprocessing.get_context("spawn"))
LET_GO_S = 5.0   # how long a rank that reported has to exit once let go


@dataclass
class RankOutcome:
    """How one disposable rank ended."""

    rank: int
    returncode: int | None       # None: still running at the limit, then killed
    result: Any = None           # what the case returned (tensors as lists)
    error: str | None = None     # "Type: message" of what the case raised
    seconds: float | None = None  # time spent in the case itself
    stderr: str = ""

    @property
    def signal(self) -> str | None:
        """The signal that ended the process ("SIGABRT"), or None."""
        if self.returncode is None or self.returncode >= 0:
            return None
        return signal.Signals(-self.returncode).name

    @property
    def killed(self) -> bool:
        return self.signal is not None

    @property
    def gloo_message(self) -> str | None:
        """The line of stderr where gloo (or torch's C++ side) says why it aborted."""
        lines = self.stderr.splitlines()
        for wanted in ("what():", "enforce fail", "gloo"):
            for line in lines:
                if wanted in line.lower():
                    return _short(line.split("what():")[-1].strip())
        return None

    def summary(self) -> str:
        if self.returncode is None:
            return f"rank {self.rank}: still running at the limit (killed)"
        if self.killed:
            return (f"rank {self.rank}: killed by {self.signal} (exit code {self.returncode}); "
                    f"gloo: {self.gloo_message or '(no message)'}")
        if self.error is not None:
            return f"rank {self.rank}: raised after {self.seconds:.2f} s: {_short(self.error)}"
        if self.returncode == 0 and self.seconds is not None:
            return f"rank {self.rank}: returned {self.result!r} after {self.seconds:.2f} s"
        # the last line it wrote (a traceback's ends with the error), without machine paths
        last = next((line for line in reversed(self.stderr.splitlines()) if line.strip()), "")
        return (f"rank {self.rank}: exit code {self.returncode}: "
                f"{_short(without_machine_paths(last.strip()))}")


def _short(text: str, keep: int = 110) -> str:
    """A long error message as its start and its end (where torch says what differs).

    gloo's source paths are cut to the file name, and its advice after the message goes.
    """
    text = re.sub(r"\[(enforce fail at )?/\S*/([^/\s\]]+:\d+)\]", r"[\1\2]",
                  " ".join(text.split()))
    text = text.split(" This is typically caused by")[0].split(" Is there a distributed")[0]
    return text if len(text) <= 2 * keep + 5 else f"{text[:keep]} … {text[-keep:]}"


def case_source(case: Callable[..., Any]) -> str:
    """The source of a case function (a notebook cell's function works too), decorators off."""
    lines = textwrap.dedent(inspect.getsource(case)).splitlines(keepends=True)
    while lines and not lines[0].startswith(("def ", "async def ")):
        lines.pop(0)   # a decorator: it belongs to where the case was written, not to the ranks
    return "".join(lines)


def run_disposable(case: Callable[..., Any], world_size: int = 2,
                   args: dict[str, Any] | None = None, timeout_s: float = 5.0,
                   limit_s: float = 60.0, detail: bool = False,
                   group: bool = True) -> list[RankOutcome]:
    """Run `case(rank, world_size, **args)` on `world_size` fresh gloo processes.

    Returns one RankOutcome per rank. `args` must be JSON values (they travel as JSON).

    `timeout_s` is the group's timeout (every collective raises after it); `limit_s`
    bounds the whole run: a process still alive then is killed and reported as such.
    `detail=True` turns on TORCH_DISTRIBUTED_DEBUG=DETAIL in the processes.
    `group=False`: the processes join no group and call `case(**args)`, for a case that
    makes a group of its own (a fake one, say) and leaves none in the caller.
    """
    return start_disposable(case, world_size, args, timeout_s, limit_s, detail,
                            group).outcomes()


def rank_environment(world_size: int) -> dict[str, str]:
    """What the ranks run in: this process's environment and a local cluster's engine
    settings (gloo on loopback, torch's C++ warnings out of their stderr, one OpenMP
    thread each)."""
    return {**os.environ, "OMP_NUM_THREADS": "1", **local_engine_env(world_size),
            "PYTHONUNBUFFERED": "1"}


def start_disposable(case: Callable[..., Any], world_size: int = 2,
                     args: dict[str, Any] | None = None, timeout_s: float = 5.0,
                     limit_s: float = 60.0, detail: bool = False,
                     group: bool = True) -> "DisposableRun":
    """`run_disposable`'s run, started and not waited for: several cases run at once, and
    their timeouts overlap. `.outcomes()` waits for it (`limit_s` counts from now)."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, not {world_size}")
    source, name = case_source(case), case.__name__
    env = rank_environment(world_size)
    run = DisposableRun(time.monotonic() + limit_s)
    listener = listening_socket("127.0.0.1") if group else None
    port = listener.getsockname()[1] if listener is not None else None
    try:
        for rank in range(world_size):
            spec = {"rank": rank, "world_size": world_size, "port": port,
                    "timeout_s": timeout_s, "detail": detail, "group": group,
                    "source": source, "name": name, "args": dict(args or {}), "env": env}
            run.start(spec, listener if rank == 0 else None)
    except BaseException:
        run.abandon()
        raise
    finally:
        if listener is not None:
            listener.close()      # rank 0 has its own copy now
    return run


@dataclass
class _Rank:
    process: Any                  # a multiprocessing Process
    conn: Any                     # the caller's end of the pipe to it
    stderr: Any                   # the caller's open file of its stderr
    path: str                     # that file's name, until the rank removes it


class DisposableRun:
    """The ranks of one disposable run (start_disposable), until `outcomes()` collects
    them. One dropped uncollected is ended: its ranks killed, its files removed."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self._ranks: list[_Rank] = []
        self._outcomes: list[RankOutcome] | None = None
        self._end = weakref.finalize(self, _end_all, self._ranks)

    @property
    def procs(self) -> list:
        """The ranks' processes (multiprocessing Process objects), in rank order."""
        return [rank.process for rank in self._ranks]

    def start(self, spec: dict, listener: Any) -> None:
        """Start the rank `spec` describes (rank 0 gets the store's `listener`)."""
        fd, path = tempfile.mkstemp(prefix="disposable-", suffix=f"-{spec['rank']}.err")
        ours, theirs = _CONTEXT.Pipe()
        process = _CONTEXT.Process(
            target=disposable_rank.run, args=({**spec, "stderr": path}, theirs, listener),
            name=f"disposable-rank-{spec['rank']}", daemon=True)
        self._ranks.append(_Rank(process, ours, open(fd, "r", errors="replace"), path))
        try:
            process.start()
        finally:
            theirs.close()        # the rank's end is the rank's alone: it sees EOF when we go

    def abandon(self) -> None:
        """Kill the ranks and remove their files, without reading what they said."""
        self._end()

    def outcomes(self) -> list[RankOutcome]:
        """Wait until every rank has reported or died (or the limit), then how each ended."""
        if self._outcomes is None:
            self._outcomes = self._collect()
        return self._outcomes

    def _collect(self) -> list[RankOutcome]:
        reports, pending = _wait_for_reports(self._ranks, self.deadline)
        for index in pending:         # still working at the limit: killed, not waited for
            _kill(self._ranks[index].process)
        codes: list[int | None] = []
        for index, rank in enumerate(self._ranks):
            rank.conn.close()         # let go: a rank that reported exits now
            rank.process.join(LET_GO_S)
            code = rank.process.exitcode
            if code is None:          # reported, then never left: killed, and said so
                _kill(rank.process)
                rank.process.join()
            codes.append(None if index in pending else code)
        outcomes = []
        for index, (rank, code) in enumerate(zip(self._ranks, codes)):
            rank.stderr.seek(0)
            report = reports.get(index, {})
            outcomes.append(RankOutcome(index, code, report.get("result"), report.get("error"),
                                        report.get("seconds"), rank.stderr.read()))
        self._end()                   # files closed and removed; nothing is left running
        return outcomes


def _wait_for_reports(ranks: list[_Rank], deadline: float) -> tuple[dict[int, dict], set[int]]:
    """Until `deadline`: each rank's report, or its end without one. Returns the reports
    by rank, and the ranks that had neither reported nor ended at the deadline."""
    reports: dict[int, dict] = {}
    waiting = {rank.conn: index for index, rank in enumerate(ranks)}
    ended = {rank.process.sentinel: rank.conn for rank in ranks}
    while waiting and (left := deadline - time.monotonic()) > 0:
        for ready in wait([*waiting, *(s for s, c in ended.items() if c in waiting)], left):
            conn = ended.get(ready, ready)
            if conn not in waiting:
                continue
            if ready is conn or conn.poll():   # a report, or the end of the pipe
                with contextlib.suppress(EOFError, OSError):
                    reports[waiting[conn]] = json.loads(conn.recv_bytes())
            waiting.pop(conn)
    return reports, set(waiting.values())


def _kill(process: Any) -> None:
    """SIGKILL a rank and its session (what it started), if it is still running."""
    if process.pid is None or process.exitcode is not None:
        return
    if hasattr(os, "killpg"):
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        process.kill()


def _end_all(ranks: list[_Rank]) -> None:
    """Kill whatever rank still runs, reap it, close and remove its files."""
    for rank in ranks:
        _kill(rank.process)
        rank.conn.close()
        if rank.process.pid is not None:
            rank.process.join()
        rank.stderr.close()
        with contextlib.suppress(OSError):
            os.unlink(rank.path)


def show(outcomes: list[RankOutcome]) -> list[RankOutcome]:
    """Print one line per disposable rank (how it ended) and return the outcomes."""
    for outcome in outcomes:
        print(outcome.summary())
    return outcomes
