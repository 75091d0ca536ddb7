"""■ pressed during a `%%px` cell: what each rank is doing, and whether the group still works.

JupyterLab's ■ interrupts the notebook's kernel. ipyparallel's `%%px` then sends SIGINT to
every engine and stops waiting; the series' `%%px` (no streaming) next asks for the
results anyway and raises `TimeoutError: result not ready`, whose traceback is
ipyparallel's own code. `start_cluster`'s exception handler shows this report instead:
one line per rank (finished, stopped, or where py-spy sees it waiting) and what the
reader can do next, which depends on whether a rank is inside a collective.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from helpers.checks import Report
from helpers.debugging import stacks as stack_dumps


history: list[dict] = []   # every report shown in this kernel: its figures, for the results
_results: list[tuple[Any, list[int]]] = []   # each report's AsyncResult and its ranks
_pressed: list[float] = []  # when press_stop sent each SIGINT (time.time())


def rank_of_engine(cluster: Any) -> dict[int, int]:
    """Engine id → rank, for the cluster's ranks."""
    return {info.engine_id: info.rank for info in cluster.ranks}


def ranks_of(result: Any, targets: Any,
             engine_ranks: dict[int, int]) -> list[tuple[int, str]]:
    """(rank, msg id) of each part of `result`, a `%%px` AsyncResult sent to `targets`:
    the engine its replies name (the result's `metadata`), else its place in `targets`."""
    engines = [targets] if isinstance(targets, int) else list(targets)
    pairs = []
    for place, (msg_id, found) in enumerate(zip(result.msg_ids, parts_metadata(result))):
        engine = found.get("engine_id")
        if engine is None and place < len(engines):
            engine = engines[place]
        pairs.append((engine_ranks.get(engine, engine), msg_id))
    return pairs


def stacks_once_started(cluster: Any, deadline_s: float = stack_dumps.START_DEADLINE_S
                        ) -> dict[int, list[stack_dumps.Frame] | str]:
    """Each rank's frames (helpers.debugging.stacks) once every rank has begun the last
    `%%px` cell: `read_once_started`, with the ranks whose part of it ipyparallel still
    waits for."""
    from IPython import get_ipython

    shell = get_ipython()
    magics = px_magics(shell) if shell is not None else None
    result = getattr(magics, "last_result", None)
    if result is None:                           # no %%px cell yet: nothing to wait for
        return stack_dumps.stacks(cluster)
    parts = ranks_of(result, magics.view.targets, rank_of_engine(cluster))
    # one id at a time: the client's thread adds and removes ids while the set is read
    return stack_dumps.read_once_started(
        cluster, lambda: [rank for rank, msg_id in parts
                          if msg_id in cluster.client.outstanding], deadline_s)


def pending_ranks(result: Any, targets: Any, client: Any,
                  engine_ranks: dict[int, int]) -> tuple[int, ...]:
    """The ranks whose part of `result` the client still waits for."""
    try:
        waiting = set(client.outstanding)    # another thread adds and removes ids
    except RuntimeError:
        return ()
    return tuple(sorted(rank for rank, msg_id in
                        ranks_of(result, targets, engine_ranks)
                        if msg_id in waiting))


def dropped_ranks(result: Any, targets: Any,
                  engine_ranks: dict[int, int]) -> tuple[int, ...]:
    """The ranks whose engine dropped its part of `result` (status "aborted")."""
    status = {msg_id: found.get("status")
              for msg_id, found in zip(result.msg_ids, parts_metadata(result))}
    return tuple(sorted(rank for rank, msg_id in
                        ranks_of(result, targets, engine_ranks)
                        if status[msg_id] == "aborted"))


def px_magics(shell: Any) -> Any:
    """ipyparallel's `%px` magics registered in `shell` (None before a cluster's start)."""
    return shell.magics_manager.registry.get("ParallelMagics")


def pending_result(shell: Any, cluster: Any) -> Any | None:
    """The `%%px` cell's AsyncResult when it has not finished, else None."""
    result = getattr(px_magics(shell), "last_result", None)
    if cluster is None or result is None or result.ready():
        return None
    return result


def parts_metadata(result: Any) -> list[dict]:
    """The result's public `metadata`, one dict per part (it is one dict for one part)."""
    found = result.metadata
    return found if isinstance(found, list) else [found]


def done_state(metadata: dict) -> str:
    """What a finished part of a `%%px` cell did, from its metadata."""
    if metadata.get("status") == "aborted":
        return "did not run the cell: its engine dropped it after an earlier error"
    error = metadata.get("error")
    if error is not None or metadata.get("status") == "error":
        return f"stopped: {getattr(error, 'ename', 'an error')}"
    return "finished the cell"


def rank_states(cluster: Any, result: Any,
                parts: list[tuple[int, str]]) -> dict[int, tuple[bool | None, str]]:
    """Per rank of the cell (`parts`: `ranks_of`): (free to run the next cell?, what it is
    doing)."""
    pending = set(cluster.client.outstanding)
    busy = {rank for rank, msg_id in parts if msg_id in pending}
    metadata = dict(zip(result.msg_ids, parts_metadata(result)))
    where: dict[int, Any] = {}
    if busy:
        try:
            where = stack_dumps.stacks(cluster, ranks=sorted(busy))
        except FileNotFoundError as err:          # no py-spy
            where = {rank: str(err) for rank in busy}
    states: dict[int, tuple[bool | None, str]] = {}
    for rank, msg_id in parts:
        if rank not in busy:
            states[rank] = (True, done_state(metadata[msg_id]))
            continue
        frames = where.get(rank, "not read")
        if isinstance(frames, str):
            states[rank] = (None, f"still running the cell (py-spy: {frames})")
        elif frames and frames[-1].kind == "torch":
            states[rank] = (False, f"blocked in {stack_dumps.innermost(frames)}")
        else:
            states[rank] = (False, f"still running: {stack_dumps.innermost(frames)}")
    return dict(sorted(states.items()))


def report(cluster: Any, result: Any, targets: Any) -> Report:
    """What ■ left: a verdict per rank (✓ free, ✗ still busy), then what to do."""
    parts = ranks_of(result, targets, rank_of_engine(cluster))
    states = rank_states(cluster, result, parts)
    elapsed = result.elapsed
    still = any(free is not True for free, _ in states.values())
    shown = Report(f"■ stopped this cell's wait after {elapsed:.1f} s; "
                   + ("the ranks run on. What each rank is doing now:" if still else
                      "every rank stopped too:"))
    for rank, (free, text) in states.items():
        shown.add(rank, free, text)
    submitted = parts_metadata(result)[0].get("submitted")
    start = submitted.timestamp() if submitted is not None else time.time() - elapsed
    pressed = [at - start for at in _pressed if 0 <= at - start <= elapsed]
    _results.append((result, [rank for rank, _ in parts]))
    history.append({"elapsed_s": round(elapsed, 2), "timeout_s": cluster.timeout_s,
                    "pressed_s": round(pressed[-1], 2) if pressed else None,
                    "backend": cluster.backend,
                    "ranks": {rank: {"free": free, "state": text}
                              for rank, (free, text) in states.items()}})
    in_collective = [r for r, (_, text) in states.items() if text.startswith("blocked in")]
    busy = [r for r, (free, _) in states.items() if free is not True]
    left = max(cluster.timeout_s - elapsed, 0.0)
    if in_collective and cluster.backend == "gloo":
        shown.note(
            f"Rank(s) {ranks_text(in_collective)} wait inside a gloo collective and do not "
            "stop at ■: ipyparallel sent them SIGINT, and Python acts on a signal only "
            "when gloo's wait returns, at the collective timeout "
            f"({cluster.timeout_s:g} s, at most {left:.0f} s from now). They then raise "
            "KeyboardInterrupt, and the process group is broken: no collective works on "
            "it again.")
        shown.note("A %%px cell run before then waits for them, then shows only the "
                   "other ranks' output.")
    elif in_collective:
        shown.note(f"Rank(s) {ranks_text(in_collective)} wait inside a {cluster.backend} "
                   "collective; the collective timeout ends the wait.")
    elif busy:
        shown.note(f"Rank(s) {ranks_text(busy)} still run the cell, outside any collective.")
    else:
        shown.note("No rank is inside a collective: the process group can still be used.")
    if busy:
        shown.note("To go on now: re-run the start cell. It gives the ranks a new process "
                   "group in a few seconds; this kernel and its variables stay.")
    return shown


def timeline(index: int = -1) -> dict:
    """Report `index` (`history`) with each rank's start and end of the cell, in seconds
    from its submission (the engines' `started` and `completed`, arrived since)."""
    entry, (result, ranks_in_order) = dict(history[index]), _results[index]
    found = parts_metadata(result)
    start = found[0]["submitted"].timestamp()
    ranks = {}
    for rank, metadata in zip(ranks_in_order, found):
        began, ended = metadata.get("started"), metadata.get("completed")
        error = metadata.get("error")
        ranks[rank] = {"started_s": began and round(began.timestamp() - start, 2),
                       "completed_s": ended and round(ended.timestamp() - start, 2),
                       "outcome": getattr(error, "ename", None) or metadata.get("status")}
    entry["timeline"] = ranks
    return entry


def ranks_text(ranks: tuple[int, ...] | list[int]) -> str:
    """"0, 2, 3"."""
    return ", ".join(map(str, ranks))


def show(shell: Any, cluster: Any) -> bool:
    """Display the report when the last `%%px` cell was interrupted; whether it did."""
    result = pending_result(shell, cluster)
    if result is None:
        return False
    from IPython.display import display

    display(report(cluster, result, px_magics(shell).view.targets))
    return True


def press_stop(after_s: float) -> None:
    """Press ■ for the reader `after_s` into the next cell: SIGINT to this kernel's process
    group, which is what jupyter_client's `interrupt_kernel` sends a kernel whose
    interrupt_mode is "signal" (its LocalProvisioner.send_signal: `os.killpg`)."""
    from IPython import get_ipython

    shell = get_ipython()
    group = os.getpgid(0)
    target = (lambda: os.killpg(group, signal.SIGINT)) if group == os.getpid() else (
        lambda: os.kill(os.getpid(), signal.SIGINT))     # not a group leader: itself only

    def press() -> None:
        _pressed.append(time.time())
        target()

    timer = threading.Timer(after_s, press)

    def start(info: Any) -> None:
        shell.events.unregister("pre_run_cell", start)
        timer.start()

    def cancel(outcome: Any) -> None:
        if timer.is_alive() or timer.finished.is_set():   # the next cell has run
            timer.cancel()
            shell.events.unregister("post_run_cell", cancel)

    shell.events.register("pre_run_cell", start)
    shell.events.register("post_run_cell", cancel)
