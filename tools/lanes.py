"""Lanes: `make html` executing several notebooks at once, each lane on engines of its own.

One notebook at a time leaves two cores about two-thirds idle: its ranks mostly wait on
one another (gloo's handshakes, timeouts that the debugging notebooks run into on
purpose). A lane is a `python -m tools.build --lane` process that builds the notebooks
written to its stdin, one a line, and ends each with a DONE line. The lanes take the
notebooks from one queue, the longest first (by their last run, tools.build's
.seconds stamps; in a clean build, the run times kept in the instructors' kit), so none is
left running alone at the end for long.

Each lane but the first has an IPYTHONDIR of its own: warm engines are named after it
(helpers.runtime.warm), so the lanes never take over one another's engines, and a lane's
clean-up ends only its own leftovers. A lane ends its warm engines when its stdin closes.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Callable

from helpers.paths import REPO_ROOT

DONE = "\x1enotebook done: "      # a record separator first: no notebook prints this line
UNKNOWN_S = 60.0                   # a notebook never built here: somewhere in the middle
KIT_TIMES = REPO_ROOT / "docs" / "kit" / "measured.json"   # tools.kit's, run_s per notebook


def expected_seconds(notebook: Path, stamps: Path, kit: Path = KIT_TIMES) -> float:
    """How long the notebook took the last time it was built here; never built here (a
    clean build), its run time in the instructors' kit (docs/kit/measured.json, committed);
    UNKNOWN_S if neither has it."""
    try:
        return float((stamps / f"{notebook.stem}.seconds").read_text())
    except (OSError, ValueError):
        pass
    try:
        return float(json.loads(kit.read_text())[notebook.stem]["run_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return UNKNOWN_S


def lane(build_one: Callable[[Path], bool]) -> int:
    """A lane's process: build each notebook named on stdin; DONE ok|failed after each."""
    from helpers.runtime.warm import stop_warm_clusters, warm_requested

    try:
        for line in sys.stdin:
            if line.strip():
                ok = build_one(Path(line.strip()))
                print(f"{DONE}{'ok' if ok else 'failed'}", flush=True)
    finally:
        if warm_requested():
            stop_warm_clusters()
    return 0


def run_lanes(notebooks: list[Path], jobs: int, timeout_s: int, stamps: Path,
              cards: bool = True,
              then: Callable[[list[str]], object] | None = None) -> list[str]:
    """Build `notebooks` on `jobs` lanes; the names of those that failed. With `cards`, each
    lane draws the card picture of each notebook it built. `then(failed)` runs once every
    notebook is done, while the lanes end their engines (the site step, say).

    Progress lines come through as the lanes print them, whole lines at a time.
    """
    queue = deque(sorted(notebooks, key=lambda nb: -expected_seconds(nb, stamps)))
    lock = threading.Lock()
    failed: list[str] = []
    idle = threading.Semaphore(0)      # a release per lane whose notebooks are all done

    def say(text: str) -> None:
        with lock:
            sys.stdout.write(text)
            sys.stdout.flush()

    def take() -> Path | None:
        with lock:
            return queue.popleft() if queue else None

    def run(index: int) -> None:
        folder = tempfile.mkdtemp(prefix="nccl-lane-") if index else None
        env = dict(os.environ, **({"IPYTHONDIR": folder} if folder else {}))
        proc = subprocess.Popen(
            [sys.executable, "-m", "tools.build", "--lane", "--timeout", str(timeout_s),
             *([] if cards else ["--no-site"])],
            cwd=REPO_ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, bufsize=1)
        try:
            while (notebook := take()) is not None:
                try:
                    proc.stdin.write(f"{notebook}\n")
                    proc.stdin.flush()
                except BrokenPipeError:
                    pass                # the lane is gone: the loop below says so
                for line in proc.stdout:
                    if line.startswith(DONE):
                        if line.strip().endswith("failed"):
                            with lock:
                                failed.append(notebook.name)
                        break
                    say(line)
                else:                  # the lane is gone: the others take the rest
                    with lock:
                        failed.append(notebook.name)
                    say(f"{notebook.name:<32} FAILED: its lane ended "
                        f"(exit code {proc.wait()})\n")
                    return
        finally:
            idle.release()
            try:
                proc.stdin.close()     # the lane ends its warm engines, then exits
            except BrokenPipeError:
                pass
            for line in proc.stdout:
                say(line)
            proc.wait()
            if folder:
                shutil.rmtree(folder, ignore_errors=True)

    threads = [threading.Thread(target=run, args=(i,), name=f"lane-{i}")
               for i in range(min(jobs, len(notebooks)))]
    for thread in threads:
        thread.start()
    for _ in threads:
        idle.acquire()
    order = {nb.name: i for i, nb in enumerate(notebooks)}
    with lock:
        failed.sort(key=order.get)
    try:
        if then is not None:
            then(list(failed))
    finally:
        for thread in threads:
            thread.join()
    return failed
