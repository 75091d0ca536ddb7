"""What the runtime does around ipyparallel's own behaviour, and when each piece can go.

Every workaround for ipyparallel, and every use of its internals, was checked against
CHECKED_AGAINST (the version requirements.txt pins). tests/runtime/test_ipp_compat.py
fails when a newer ipyparallel is installed, naming each entry below to re-check; where a
probe can tell whether the upstream behaviour is still there, it also fails once
ipyparallel has changed it, saying which workaround can go. The code of each entry says
`ipp_compat` beside it, with the entry's key.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from importlib.metadata import version
from typing import Callable

CHECKED_AGAINST = "9.2.0"


@dataclass(frozen=True)
class Workaround:
    key: str
    where: str        # "module:qualified.name" of the code that does it
    why: str          # what ipyparallel does that makes it needed
    recheck: str      # how to tell it can go (or must change)
    still_needed: Callable[[], bool] | None = None   # probe of the upstream behaviour


def _local_launchers_keep_their_process() -> bool:
    from ipyparallel.cluster.launcher import LocalEngineSetLauncher, LocalProcessLauncher

    start = inspect.getsource(LocalProcessLauncher.start)
    return ("launchers" in LocalEngineSetLauncher.class_traits()
            and callable(getattr(LocalProcessLauncher, "get_output", None))
            and "self.pid = proc.pid" in start
            and "self.process = psutil.Process(proc.pid)" in start
            and "self.notify_start(self.process.pid)" in start
            and "self.process = psutil.Process(d['pid'])"
            in inspect.getsource(LocalProcessLauncher._reconstruct_process))


def _stop_logs_each_engine_set() -> bool:
    from ipyparallel.cluster import cluster, launcher

    return ("engine set stopped" in inspect.getsource(cluster.Cluster._engines_stopped)
            and '"Output for %s' in inspect.getsource(launcher.BaseLauncher._log_output))


def _views_do_not_block() -> bool:
    from ipyparallel.client.view import View

    return View.class_traits()["block"].default_value is False


def _launcher_class_names() -> bool:
    from ipyparallel.cluster import launcher

    from helpers.runtime import launchers as ours

    return all(hasattr(launcher, name) for name in (
        ours.MPI_ENGINES, ours.SLURM_ENGINES, ours.SLURM_CONTROLLER, ours.LOCAL_ENGINES))


WORKAROUNDS = (
    Workaround(
        "launcher-internals", "helpers.runtime.forked_engines:ForkserverEngineLauncher",
        "the launcher plug-in point has no documented contract for what a local engine's "
        "start must leave: forked_engines sets pid and process and calls notify_start as "
        "LocalProcessLauncher.start does (from_dict rebuilds process from pid), and "
        "starting reads engine_set.launchers[...].process and .get_output() to tell that "
        "engines exited and what they printed",
        "the attributes still exist and LocalProcessLauncher.start still sets them; "
        "tests/runtime/test_forked_engines.py and tests/runtime/test_startup.py::"
        "test_engines_that_cannot_start_are_a_clear_error_in_bounded_time",
        _local_launchers_keep_their_process),
    Workaround(
        "launcher-class-names", "helpers.runtime.launchers:MPI_ENGINES",
        "launcher settings go on cluster.config under ipyparallel's class names",
        "the classes keep their names (tests/runtime/test_launchers.py)",
        _launcher_class_names),
    Workaround(
        "stop-chatter", "helpers.runtime.starting:quiet",
        "stop_cluster_sync logs 'engine set stopped ... exit_code' and each engine's output "
        "to the cluster's log; log_level does not silence it",
        "a notebook's teardown cell without quiet() prints nothing",
        _stop_logs_each_engine_set),
    Workaround(
        "blocking-px", "helpers.runtime.starting:activate",
        "rc[:].activate() registers %px with a non-blocking view (View.block is False by "
        "default): under nbclient a %%px cell saves only '<AsyncResult(%px): pending>'",
        "a %%px cell's output is saved with view.block left alone",
        _views_do_not_block),
)


def installed() -> str:
    return version("ipyparallel")


def _release(text: str) -> tuple[int, ...]:
    """(9, 2, 0) for "9.2.0", "9.2.0rc1" or "9.2.0.dev0"."""
    match = re.match(r"\d+(?:\.\d+)*", text.strip())
    return tuple(int(part) for part in match.group().split(".")) if match else ()


def newer_than_checked(found: str | None = None) -> bool:
    """True when `found` (default: the installed ipyparallel) is newer than CHECKED_AGAINST."""
    return _release(found or installed()) > _release(CHECKED_AGAINST)


def to_recheck() -> str:
    """One line per workaround: where, why, and how to tell it can go."""
    return "\n".join(f"- {w.key} ({w.where}): {w.why}; re-check: {w.recheck}"
                     for w in WORKAROUNDS)
