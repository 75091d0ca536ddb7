"""A `%%px` cell that waits says so, and one that was interrupted says what the ranks do.

The series runs `%%px` without ipyparallel's progress bar (`starting.activate`), so a cell
whose ranks wait out a collective timeout would show nothing until it ends. `PxWatch`,
registered on IPython's `pre_run_cell` and `post_run_cell` events by `start_cluster`,
shows one line once such a cell has run DELAY_S: how long, which ranks it still waits for,
against the collective timeout. A thread updates the line (ipykernel sends a thread's
output to the cell that started the thread); the cell's end leaves its total.

What it reads is public: the `%%px` magic's `last_result` (`%result` shows it), the
view's `targets`, the result's `msg_ids` (one per target, in the targets' order) and the
client's `outstanding` set of msg ids.
"""
from __future__ import annotations

import html
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from IPython.display import display

from helpers.debugging import interrupted

DELAY_S = 1.0        # a cell shorter than this shows no line
INTERVAL_S = 1.0     # how often the line changes
GRACE_S = 2.0        # after the timeout, the time a failed collective takes to return


@dataclass(frozen=True)
class Waiting:
    """What one `%%px` cell waits for, at one moment."""
    elapsed_s: float
    pending: tuple[int, ...]      # the ranks that have not finished the cell
    world_size: int
    timeout_s: float
    ended: bool = False           # the cell is over (finished, failed or interrupted)
    hidden: bool = False          # over and fine: nothing shown (the data- attributes stay)

    def text(self) -> str:
        seconds = f"{self.elapsed_s:.1f} s" if self.ended else f"{self.elapsed_s:.0f} s"
        who = ", ".join(map(str, self.pending))
        if self.ended:
            if self.pending:
                return (f"⏹ stopped waiting after {seconds}: rank(s) {who} had not finished "
                        "(below: what each rank was doing)")
            return f"⏱ this cell took {seconds} (collective timeout {self.timeout_s:g} s)"
        line = f"⏳ waiting {seconds} for rank(s) {who} of {self.world_size}"
        if self.elapsed_s <= self.timeout_s + GRACE_S:
            return (f"{line}; a collective gives up after the {self.timeout_s:g} s timeout "
                    "(■ stops the wait)")
        return (f"{line}: longer than the {self.timeout_s:g} s collective timeout "
                "(■ shows where each rank is)")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        pending = ",".join(map(str, self.pending))
        tag = "span" if self.hidden else "pre"
        shown = "" if self.hidden else html.escape(self.text())
        page = (f'<{tag} class="px-waiting" data-elapsed="{self.elapsed_s:.2f}" '
                f'data-pending="{pending}" data-ended="{str(self.ended).lower()}">'
                f"{shown}</{tag}>")
        return {"text/plain": "" if self.hidden else self.text(), "text/html": page}

    __str__ = text


class PxWatch:
    """The waiting line of `%%px` cells; `register` puts it on a shell's events."""

    def __init__(self, current: Callable[[], Any]):
        self.current = current                    # the cluster in use, or None
        self._cell: dict[str, Any] = {}           # the %%px cell running now

    def add(self, shell: Any, current: Callable[[], Any]) -> None:
        """Watch the %%px cells of `shell` (cluster.ON_START's signature)."""
        self.current = current
        self.register(shell)

    def register(self, shell: Any) -> None:
        for event, callback in (("pre_run_cell", self.pre_run_cell),
                                ("post_run_cell", self.post_run_cell)):
            if callback not in shell.events.callbacks[event]:
                shell.events.register(event, callback)

    def pre_run_cell(self, info: Any) -> None:
        cluster, magics = self.current(), _px_magics()
        if cluster is None or magics is None or not info.raw_cell.lstrip().startswith("%%px"):
            return
        before = magics.last_result
        if before is not None and not before.ready():
            behind = interrupted.pending_ranks(before, magics.view.targets, cluster.client,
                                               interrupted.rank_of_engine(cluster))
            print(f"⚠ rank(s) {interrupted.ranks_text(behind)} still run an earlier cell "
                  "(■ stops the wait, not the ranks): this cell waits behind it. To go on at "
                  "once, re-run the start cell.")
        stop = threading.Event()
        cell = dict(cluster=cluster, magics=magics, before=before, stop=stop,
                    start=time.perf_counter(), handle=None)
        cell["thread"] = threading.Thread(target=self._watch, args=(cell,), name="px-waiting",
                                          daemon=True)
        self._cell = cell
        cell["thread"].start()

    def post_run_cell(self, outcome: Any) -> None:
        cell, self._cell = self._cell, {}
        if not cell:
            return
        cell["stop"].set()
        cell["thread"].join(timeout=5)
        result = cell["magics"].last_result
        if result is None or result is cell["before"]:
            return                                # no %%px ran (a syntax error, --help)
        cluster, targets = cell["cluster"], cell["magics"].view.targets
        errors = [found.get("error") for found in interrupted.parts_metadata(result)]
        stopped = result.ready() and any(_stopped_by_signal(error) for error in errors)
        if cell["handle"] is not None:    # kept where the cell failed or ■ stopped it
            quiet = outcome.error_in_exec is None and result.ready() and not stopped
            cell["handle"].update(self._now(cell, result, ended=True, hidden=quiet))
        if stopped:
            display(interrupted.report(cluster, result, targets))   # ■ stopped every rank
        dropped = interrupted.dropped_ranks(result, targets,
                                            interrupted.rank_of_engine(cluster))
        if dropped:
            print(f"⚠ rank(s) {interrupted.ranks_text(dropped)} did not run this cell: an "
                  "engine drops the cells queued behind one that ended in an error. Re-run "
                  "the start cell.")

    def _now(self, cell: dict[str, Any], result: Any, ended: bool = False,
             hidden: bool = False) -> Waiting:
        cluster = cell["cluster"]
        pending = interrupted.pending_ranks(result, cell["magics"].view.targets,
                                            cluster.client, interrupted.rank_of_engine(cluster))
        return Waiting(time.perf_counter() - cell["start"], pending, cluster.world_size,
                       cluster.timeout_s, ended, hidden)

    def _watch(self, cell: dict[str, Any]) -> None:
        if cell["stop"].wait(DELAY_S):
            return
        result = cell["magics"].last_result
        if result is None or result is cell["before"]:
            return                      # not a blocking %%px of this cell
        while not cell["stop"].is_set() and not result.ready():
            now = self._now(cell, result)
            if cell["handle"] is None:
                cell["handle"] = display(now, display_id=True)
            else:
                cell["handle"].update(now)
            cell["stop"].wait(INTERVAL_S)


def _stopped_by_signal(reply: Any) -> bool:
    return getattr(reply, "ename", None) == "KeyboardInterrupt"


def install() -> None:
    """Have every `start_cluster` of this process add the waiting line, and its exception
    handler show `interrupted.show`'s report for a cell ■ stopped (idempotent)."""
    from helpers.runtime import cluster, diagnose

    if _WATCH.add not in cluster.ON_START:
        cluster.ON_START.append(_WATCH.add)
    if interrupted.show not in diagnose.INTERRUPT_REPORTS:
        diagnose.INTERRUPT_REPORTS.append(interrupted.show)


def _px_magics() -> Any:
    from IPython import get_ipython

    shell = get_ipython()
    return None if shell is None else interrupted.px_magics(shell)


_WATCH = PxWatch(lambda: None)
