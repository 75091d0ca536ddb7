"""Run a case on a disposable group of processes, where a dead rank costs nothing.

Some mistakes do not raise on gloo: they kill the receiving process (SIGABRT from gloo's
own checks), which no timeout can catch. The notebooks show such
cases for real with `run_disposable` (or `start_disposable`, which does not wait, so that
several cases run at once): the case is an ordinary function of
`(rank, world_size)` written in a notebook cell, its source is shipped to `world_size`
new processes that form their own gloo group (a new TCPStore on 127.0.0.1, gloo pinned
to `lo`, a short timeout), and each process reports what the function returned, what it
raised, or the signal that ended it (disposable_rank.py). The processes are forked from a
server that has imported torch already: the engines' zygote (engine_zygote.py), shared by
every kernel in the same environment, else a fork server of the caller's own
(forkserver.py), else a new `python` each where fork is not available. The notebook's own
engines are not involved.
tests/claims/test_claims.py runs the ledger's claims through the same function.
"""
from __future__ import annotations

import inspect
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from helpers.runtime import forkserver
from helpers.runtime.disposable_rank import COLD_START, PRELOAD, RESULT_MARK
from helpers.runtime.launchers import local_engine_env
from helpers.runtime.rendezvous import listening_socket
from helpers.runtime.tracebacks import without_machine_paths

_ROOT = str(Path(__file__).resolve().parents[2])   # the folder that holds helpers/
RANKS = forkserver.Kind(PRELOAD, "helpers.runtime.disposable_rank:forked", zygote=True)


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
    """What the ranks start with: this process's environment and a local cluster's engine
    settings, so one zygote (keyed by the environment) forks both that cluster's engines
    and these ranks, and torch's C++ warnings stay out of both's stderr."""
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
    listener = listening_socket("127.0.0.1")
    port = listener.getsockname()[1]
    env = rank_environment(world_size)
    run = DisposableRun(time.monotonic() + limit_s)
    try:
        server = forkserver.fork_server(RANKS, env, _ROOT) if forkserver.available() else None
        for rank in range(world_size):
            spec = {"rank": rank, "world_size": world_size, "port": port,
                    "listen_fd": listener.fileno() if rank == 0 else None,
                    "timeout_s": timeout_s, "detail": detail, "group": group,
                    "source": source, "name": name, "args": dict(args or {})}
            out = open(Path(run.folder.name) / f"{rank}.out", "w+")
            err = open(Path(run.folder.name) / f"{rank}.err", "w+")
            run.logs.append((out, err))
            run.procs.append(_start_rank(server, spec, env, out, err))
    except BaseException:
        run.abandon()
        raise
    finally:
        listener.close()
    return run


class DisposableRun:
    """The ranks of one disposable run (start_disposable), until `outcomes()` collects
    them. One dropped uncollected is ended: its ranks killed, its files removed."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.folder = tempfile.TemporaryDirectory(prefix="disposable-")
        self.procs: list = []
        self.logs: list = []
        self._outcomes: list[RankOutcome] | None = None
        self._end = weakref.finalize(self, _kill_all, self.procs)

    def abandon(self) -> None:
        """Kill the ranks and remove their files, without reading what they said."""
        self._end()
        for out, err in self.logs:
            out.close()
            err.close()
        self.folder.cleanup()

    def outcomes(self) -> list[RankOutcome]:
        """Wait until every rank has reported or died (or the limit), then how each ended."""
        if self._outcomes is None:
            self._outcomes = self._collect()
        return self._outcomes

    def _collect(self) -> list[RankOutcome]:
        procs, logs = self.procs, self.logs
        pending = _wait_until_reported(procs, [out for out, _ in logs], self.deadline)
        for proc in procs:
            proc.stdin.close()   # a rank that reported may go
        codes: list[int | None] = []
        for rank, proc in enumerate(procs):
            try:     # one still working at the limit is killed now, not waited for
                codes.append(None if rank in pending else proc.wait(timeout=5))
            except subprocess.TimeoutExpired:
                codes.append(None)
        for proc, code in zip(procs, codes):
            if code is None:
                os.killpg(proc.pid, signal.SIGKILL)   # our own child's session
                proc.wait()
        self._end.detach()
        outcomes = []
        for rank, ((out, err), code) in enumerate(zip(logs, codes)):
            out.seek(0)
            err.seek(0)
            outcome = RankOutcome(rank, code, stderr=err.read())
            for line in out.read().splitlines():
                if line.startswith(RESULT_MARK):
                    report = json.loads(line[len(RESULT_MARK):])
                    outcome.result = report.get("result")
                    outcome.error = report.get("error")
                    outcome.seconds = report.get("seconds")
            out.close()
            err.close()
            outcomes.append(outcome)
        self.folder.cleanup()
        return outcomes


def _kill_all(procs: list) -> None:
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()


def _start_rank(server: forkserver.ForkServer | None, spec: dict, env: dict[str, str],
                out, err) -> subprocess.Popen | forkserver.ForkedChild:
    """One rank: forked from `server`, or a new `python` where there is none."""
    if server is None:
        fd = spec["listen_fd"]
        return subprocess.Popen([sys.executable, "-c", COLD_START, json.dumps(spec), _ROOT],
                                stdin=subprocess.PIPE, stdout=out, stderr=err, env=env,
                                start_new_session=True, pass_fds=(fd,) if fd is not None else ())
    read_end, write_end = os.pipe()
    try:
        fds = [read_end, out.fileno(), err.fileno()]
        fds += [] if spec["listen_fd"] is None else [spec["listen_fd"]]
        rank = server.fork(spec, env, os.getcwd(), fds)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    rank.stdin = os.fdopen(write_end, "w")
    return rank


def _wait_until_reported(procs: list, outs: list, deadline: float) -> set[int]:
    """Until `deadline`: wait for every process to have printed its result or ended.
    Returns the ranks still running without a result at the deadline (none before it)."""
    while True:
        pending = set()
        for rank, (proc, out) in enumerate(zip(procs, outs)):
            if proc.poll() is None:
                out.flush()
                with open(out.name) as text:
                    if RESULT_MARK not in text.read():
                        pending.add(rank)
        if not pending or time.monotonic() >= deadline:
            return pending
        time.sleep(0.05)


def show(outcomes: list[RankOutcome]) -> list[RankOutcome]:
    """Print one line per disposable rank (how it ended) and return the outcomes."""
    for outcome in outcomes:
        print(outcome.summary())
    return outcomes
