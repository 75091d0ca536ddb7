"""Every rank's Python stack, read from outside while a cell waits: py-spy's dump.

py-spy (PyPI `py-spy`) reads a running process's memory and prints the stack of each of its
Python threads without stopping it. `stacks(cluster)` runs `py-spy dump --json` on each
rank's engine (its pid: `cluster.ranks`) and keeps the frames a reader wrote, the cell's
and their own files', and the innermost frame of torch.distributed: where the rank waits.
`read_once_started` reads them once every running rank has begun a cell: one sent with
`--noblock` may not have reached every engine when the next cell runs
(helpers.debugging.interrupted.stacks_once_started: the last `%%px` cell's ranks).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

DUMP_TIMEOUT_S = 30.0
START_DEADLINE_S = 10.0   # how long read_once_started waits for a rank to begin the cell


@dataclass(frozen=True)
class Frame:
    """One frame of a rank's main thread."""
    function: str
    where: str          # "the cell, line 6", "distributed_c10d.py:3252", "train.py:12"
    kind: str           # "cell", "torch" (torch.distributed) or "code" (a file of yours)


def py_spy() -> str:
    """The py-spy program: beside this Python (a venv), else on PATH."""
    here = Path(sys.executable).with_name("py-spy")
    found = str(here) if here.exists() else shutil.which("py-spy")
    if found is None:
        raise FileNotFoundError("py-spy is not installed: pip install py-spy "
                                "(requirements.txt pins it)")
    return found


def _kind(path: str) -> str | None:
    """What a frame's file is to the reader; None for the machinery in between (Python,
    IPython, ipyparallel, the series' runtime)."""
    if re.search(r"ipykernel_\d+", path):
        return "cell"
    if "/torch/distributed/" in path:
        return "torch"
    if "site-packages" in path or "/lib/python3" in path or path.startswith("<") \
            or "/helpers/runtime/" in path:
        return None
    return "code"


def main_thread(dump: list[dict[str, Any]]) -> list[Frame]:
    """The main thread's frames of one `py-spy dump --json`, outermost first: the reader's
    frames and the innermost torch.distributed one."""
    thread = next((t for t in dump if t.get("thread_name") == "MainThread"), None)
    if thread is None:
        return []
    kept = []
    for frame in reversed(thread.get("frames", [])):          # py-spy: innermost first
        path, kind = frame.get("filename", ""), _kind(frame.get("filename", ""))
        if kind is None:
            continue
        where = (f"the cell, line {frame['line']}" if kind == "cell"
                 else f"{Path(path).name}:{frame['line']}")
        kept.append(Frame(frame.get("name", "?"), where, kind))
    torch_frames = [f for f in kept if f.kind == "torch"]
    innermost_torch = torch_frames[-1:] if torch_frames else []
    return [f for f in kept if f.kind != "torch"] + innermost_torch


def stacks(cluster: Any, ranks: list[int] | None = None) -> dict[int, list[Frame] | str]:
    """Each rank's main-thread frames (`main_thread`), read by py-spy while the rank runs,
    all ranks at once (or those of `ranks`); for a rank py-spy could not read, its error
    (a permission, a process gone)."""
    program = py_spy()
    chosen = [info for info in cluster.ranks if ranks is None or info.rank in ranks]
    with ThreadPoolExecutor(max_workers=max(len(chosen), 1)) as pool:
        found = dict(zip((info.rank for info in chosen),
                         pool.map(lambda info: _dump(program, info.pid), chosen)))
    return dict(sorted(found.items()))


def read_once_started(cluster: Any, running: Callable[[], Iterable[int]],
                      deadline_s: float = START_DEADLINE_S,
                      clock: Callable[[], float] = time.monotonic
                      ) -> dict[int, list[Frame] | str]:
    """`stacks(cluster)` once every rank that runs the cell shows a frame of it.

    `running()`: the ranks whose part of the cell has not finished. py-spy reads the others
    again, back to back, until they show a frame of a cell, then reads every rank once more,
    so that a rank seen at its cell's first line is read where it went on to. A rank that
    finished, or that py-spy cannot read, is not waited for. TimeoutError after
    `deadline_s`, naming the ranks that never showed the cell.
    """
    deadline = clock() + deadline_s
    waiting = [info.rank for info in cluster.ranks]
    while True:
        found = stacks(cluster, ranks=waiting)
        busy = set(running())          # after the read: a rank that ended since is done
        waiting = [rank for rank, frames in found.items() if rank in busy and
                   not isinstance(frames, str) and all(f.kind != "cell" for f in frames)]
        if not waiting:
            return stacks(cluster)
        if clock() >= deadline:
            names = ", ".join(map(str, waiting))
            raise TimeoutError(f"rank(s) {names} had not begun the cell after "
                               f"{deadline_s:g} s: py-spy showed no frame of a cell there, "
                               "and ipyparallel had no reply from them")


def _dump(program: str, pid: int) -> list[Frame] | str:
    try:
        done = subprocess.run([program, "dump", "--pid", str(pid), "--json"],
                              capture_output=True, text=True, timeout=DUMP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"py-spy gave no answer in {DUMP_TIMEOUT_S:g} s"
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return lines[0] if lines else f"py-spy exit code {done.returncode}"
    return main_thread(json.loads(done.stdout))


def innermost(frames: list[Frame] | str) -> str:
    """Where a rank is: "all_reduce (distributed_c10d.py:3252), from the cell, line 6"."""
    if isinstance(frames, str):
        return f"no stack: {frames}"
    if not frames:
        return "no Python frame of yours (idle)"
    last, callers = frames[-1], [f for f in frames[:-1] if f.kind != "torch"]
    text = f"{last.function} ({last.where})"
    return f"{text}, from {callers[-1].where}" if callers and last.kind == "torch" else text
