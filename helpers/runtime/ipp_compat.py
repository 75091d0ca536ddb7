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


def _engine_reads_connection_from_the_environment() -> bool:
    import ipyparallel.engine.app as engine_app
    from ipyparallel import Cluster

    return ("IPP_CONNECTION_INFO" in inspect.getsource(engine_app)
            and "send_engines_connection_env" in Cluster.class_traits())


def _engine_sets_keep_their_launchers() -> bool:
    from ipyparallel.cluster.launcher import LocalEngineSetLauncher, LocalProcessLauncher

    return ("launchers" in LocalEngineSetLauncher.class_traits()
            and callable(getattr(LocalProcessLauncher, "get_output", None)))


def _engine_starts_its_nanny_with_module_start_nanny() -> bool:
    import ipyparallel.engine.app as engine_app
    from ipyparallel.engine import nanny

    return ("return start_nanny(" in inspect.getsource(engine_app.IPEngine.start_nanny)
            and "kwargs = pickle.load(f)" in inspect.getsource(nanny.main)
            and "KernelNanny.main(**kwargs)" in inspect.getsource(nanny.main))


def _nanny_finish_unregisters_its_engine() -> bool:
    from ipyparallel.engine.nanny import KernelNanny

    return ("self.notify_exit()" in inspect.getsource(KernelNanny.finish)
            and "self.loop = IOLoop.current()" in inspect.getsource(KernelNanny.start)
            and "unregistration_request" in inspect.getsource(KernelNanny.notify_exit))


def _batch_engines_run_engine_cmd() -> bool:
    from ipyparallel.cluster.launcher import BatchEngineSetLauncher

    return ("engine_cmd" in BatchEngineSetLauncher.class_traits()
            and "return self.engine_cmd" in inspect.getsource(BatchEngineSetLauncher))


def _launcher_class_names() -> bool:
    from ipyparallel.cluster import launcher

    from helpers.runtime import launchers as ours

    return all(hasattr(launcher, name) for name in (
        ours.MPI_ENGINES, ours.SLURM_ENGINES, ours.SLURM_CONTROLLER, ours.LOCAL_ENGINES))


WORKAROUNDS = (
    Workaround(
        "forking-engine-start", "helpers.runtime.engine_boot:boot",
        "one process per engine, each importing torch: engine_boot replaces the local "
        "launcher's engine_cmd, forks, and hands the connection over $IPP_CONNECTION_INFO "
        "(send_engines_connection_env=False in starting.new_ipp_cluster)",
        "the variable and the trait still exist; tests/runtime/test_startup.py passes; or "
        "ipyparallel starts local engines as quickly itself",
        _engine_reads_connection_from_the_environment),
    Workaround(
        "forked-nanny", "helpers.runtime.engine_boot:fork_nanny",
        "an engine starts `python -m ipyparallel.engine.nanny` as it registers (0.3 CPU-s of"
        " imports each): engine_boot forks the nanny instead and replaces the module-level "
        "start_nanny that IPEngine.start_nanny calls, piping it the same settings",
        "IPEngine.start_nanny still calls start_nanny(**settings) and the nanny's main still "
        "runs KernelNanny.main(**settings) (tests/runtime/test_startup.py::test_each_engine_"
        "forks_its_nanny_and_the_nanny_reports_its_death_at_once)",
        _engine_starts_its_nanny_with_module_start_nanny),
    Workaround(
        "nanny-reports-a-job-end", "helpers.runtime.engine_boot:_nanny_class",
        "a nanny dies on SIGTERM without a word: at a Slurm job's end (scancel, time limit) "
        "every process of the step gets SIGTERM, and an engine busy in a cell lives on until "
        "the SIGKILL, so the controller heard of it only from missed heartbeats (30 s); the "
        "forked nanny unregisters its engine (KernelNanny.finish) on SIGTERM",
        "KernelNanny.finish still notifies the controller and start() still sets self.loop "
        "(tests/runtime/test_slurm_launcher.py::test_cancelled_job_mid_cell_gives_an_error_"
        "and_the_next_start_works); or ipyparallel's nanny handles SIGTERM so itself",
        _nanny_finish_unregisters_its_engine),
    Workaround(
        "task-engine-cmd", "helpers.runtime.launchers:SLURM_ENGINE_CMD",
        "srun runs the batch engine set's engine_cmd once per task (ipyparallel's "
        "`python -m ipyparallel.engine`, which starts a nanny of its own): the slurm "
        "launcher runs helpers.runtime.task_engine instead, which forks the nanny above",
        "BatchEngineSetLauncher still runs engine_cmd (tests/runtime/test_launchers.py)",
        _batch_engines_run_engine_cmd),
    Workaround(
        "launcher-internals", "helpers.runtime.starting:_engines_exited",
        "no public way to see that local engine processes exited or what they printed: "
        "engine_set.launchers[...].process and .get_output() (also starting.engine_output)",
        "the attributes still exist; tests/runtime/test_startup.py::test_engines_that_cannot_"
        "start_are_a_clear_error_in_bounded_time",
        _engine_sets_keep_their_launchers),
    Workaround(
        "launcher-class-names", "helpers.runtime.launchers:MPI_ENGINES",
        "launcher settings go on cluster.config under ipyparallel's class names",
        "the classes keep their names (tests/runtime/test_launchers.py)",
        _launcher_class_names),
    Workaround(
        "stop-chatter", "helpers.runtime.starting:quiet",
        "stop_cluster_sync prints 'engine set stopped ... exit_code 1' and engine logs; "
        "log_level does not silence it",
        "a notebook's teardown cell without quiet() prints nothing"),
    Workaround(
        "own-stop", "helpers.runtime.cluster:TutorialCluster.stop",
        "stop_cluster_sync waits ~3 s and leaves the nannies running 3-10 s: stop() ends "
        "the processes itself, then lets ipyparallel do its bookkeeping",
        "time stop_cluster_sync() alone for 4 ranks and count the nannies left after it "
        "(tests/runtime/test_startup.py::test_stop_of_4_ranks_is_quick_and_leaves_nothing)"),
    Workaround(
        "blocking-px", "helpers.runtime.starting:activate",
        "rc[:].activate() registers %px with a non-blocking view: under nbclient a %%px "
        "cell saves only '<AsyncResult(%px): pending>'",
        "a %%px cell's output is saved with view.block left alone"),
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
