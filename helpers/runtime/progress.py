"""What a start cell shows while `start_cluster` waits, and how long each stage took.

In a Jupyter kernel the start cell shows one output, updated in place (a display_id),
that names the stage being waited for ("engines registered 2/4"); the last update
replaces it with the cluster's summary (one line, the details folded under it in HTML),
so a saved notebook holds only the summary
(nbclient applies each update to the output with that display_id). In a plain Python
process, or with quiet=True, nothing is displayed.
"""
from __future__ import annotations

import time
from typing import Any, Callable

COLD_STAGES = ("controller", "engines registered", "torch ready", "group joined")
WARM_STAGES = ("reuse", "group joined")
WAITING_FOR = {  # what the start cell says while a stage runs
    "controller": "starting the controller",
    "engines registered": "engines registered",
    "torch ready": "torch ready on every engine",
    "reuse": "taking over the warm engines",
    "group joined": "ranks joining the process group",
}


def _kernel_display() -> Callable[..., Any] | None:
    """IPython's display function when this runs in a Jupyter kernel, else None."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return None  # plain Python, or a terminal IPython where updates would pile up
    from IPython.display import display

    return display


class StartProgress:
    """Stage timings of one start, and (in a kernel) a live line saying what it waits for.

    `timings` maps each finished stage to its duration in seconds, in order.
    """

    def __init__(self, n_ranks: int, stages: tuple[str, ...], show: bool = True,
                 clock: Callable[[], float] = time.perf_counter,
                 render: Callable[[str], None] | None = None):
        self.n_ranks = n_ranks
        self.stages = stages
        self.timings: dict[str, float] = {}
        self._clock = clock
        self._stage_started = clock()
        self._registered = 0
        self._handle = None
        self._render = render
        display = _kernel_display() if render is None and show else None
        if display is not None:
            self._handle = display({"text/plain": self._text()}, raw=True, display_id=True)
            self._render = lambda text: self._handle.update({"text/plain": text}, raw=True)
        elif render is not None:
            render(self._text())

    @property
    def shown(self) -> bool:
        """True when the progress is on screen (a kernel, not quiet)."""
        return self._render is not None

    def restart(self, stages: tuple[str, ...]) -> None:
        """Start over with other stages in the same output (a warm start fell back)."""
        self.stages = stages
        self.timings = {}
        self._registered = 0
        self._stage_started = self._clock()
        self._show()

    @property
    def current(self) -> str | None:
        """The stage being waited for (None once all are done)."""
        for stage in self.stages:
            if stage not in self.timings:
                return stage
        return None

    def _text(self) -> str:
        stage = self.current
        if stage is None:
            return "started"
        done = " · ".join(f"{name} ✓" for name in self.timings)
        waiting = WAITING_FOR[stage]
        if stage == "engines registered":
            waiting = f"{waiting} {self._registered}/{self.n_ranks}"
        return f"starting {self.n_ranks} rank(s): " + (f"{done} · " if done else "") + \
            f"waiting: {waiting} …"

    def _show(self) -> None:
        if self._render is not None:
            self._render(self._text())

    def registered(self, count: int) -> None:
        """`count` engines have registered so far (shown as count/N when it changes)."""
        if count != self._registered:
            self._registered = min(count, self.n_ranks)
            self._show()

    def done(self, stage: str) -> None:
        """`stage` is over: record its duration and show the next one."""
        if stage != self.current:
            raise ValueError(f"stage {stage!r} out of order: waiting for {self.current!r}")
        now = self._clock()
        self.timings[stage] = now - self._stage_started
        self._stage_started = now
        if stage == "engines registered":
            self._registered = self.n_ranks
        self._show()

    def finish(self, shown: str | dict[str, str] | None) -> None:
        """Replace the progress with `shown` (the summary: text, or a MIME bundle with
        text/plain); None clears it."""
        if self._handle is not None and isinstance(shown, dict):
            self._handle.update(shown, raw=True)
        elif self._render is not None:
            self._render(shown["text/plain"] if isinstance(shown, dict) else shown or "")

    def failed(self, error: BaseException) -> None:
        """Say which stage the start stopped in (the error itself is raised as usual)."""
        if self._render is not None:
            self._render(f"start_cluster stopped while waiting for: "
                         f"{WAITING_FOR.get(self.current or '', self.current)} "
                         f"({type(error).__name__})")


# Short names in the summary: the progress phrase "engines registered" must not appear
# in a start cell's final output (a browser test tells the two apart by it).
SUMMARY_NAMES = {"engines registered": "engines up", "torch ready": "torch",
                 "group joined": "group"}


def timings_line(timings: dict[str, float]) -> str:
    """"started in 3.2 s: controller 0.90 s · engines up 1.60 s · torch 0.10 s · ..."."""
    total = sum(timings.values())
    parts = " · ".join(f"{SUMMARY_NAMES.get(name, name)} {seconds:.2f} s"
                       for name, seconds in timings.items())
    return f"started in {total:.1f} s: {parts}"
