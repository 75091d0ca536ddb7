"""Starting a cluster's processes quickly, and quietly: controller, engines, registration.

helpers.runtime.cluster (every notebook's start cell) calls these; the stages they
report (controller, engines registered) are those of helpers.runtime.progress.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import time
from typing import Any, Iterator

import ipyparallel as ipp
import psutil

from helpers.runtime import launchers
from helpers.runtime.processes import (IPYTHONDIR_VARIABLE, OWNER_VARIABLE, batch_script,
                                       current_ipython_dir, running)
from helpers.runtime.progress import StartProgress

# The controller counts an engine as registered at the heartbeat after its first pong:
# up to 2 periods, 3 s each by default. A 0.25 s period with 120 misses allowed keeps
# the 30 s (10 x 3 s) before a silent engine is declared dead; the engines check for it
# every period + 0.5 s (launchers.HEARTBEAT_MISSES). Schedulers run as threads
# (--usethreads), not as forked processes. ipyparallel's controller itself, on
# 127.0.0.1 (launchers.cluster_options).
CONTROLLER_ARGS = ["--usethreads", "--HeartMonitor.period=250",
                   "--HeartMonitor.max_heartmonitor_misses=120"]

# ipyparallel's own log: its start-up and shutdown chatter has no place in a tutorial.
IPP_LOG = logging.getLogger("helpers.runtime.cluster.ipyparallel")
IPP_LOG.addHandler(logging.NullHandler())
IPP_LOG.propagate = False


def shell():
    """The IPython shell this code runs in, or None in a plain Python process."""
    from IPython import get_ipython

    return get_ipython()


@contextlib.contextmanager
def quiet(ipp_cluster: ipp.Cluster) -> Iterator[None]:
    """Hide ipyparallel's shutdown chatter ("engine set stopped ... exit_code");
    ipp_compat: stop-chatter."""
    previous = ipp_cluster.log.level
    ipp_cluster.log.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        ipp_cluster.log.setLevel(previous)


@contextlib.contextmanager
def owned_and_private(owner_pid: int) -> Iterator[None]:
    """Processes started inside carry their owner's pid and this IPYTHONDIR (whose start
    cells may end them once the owner is gone), and create files 0600: ipyparallel's
    controller writes a connection file (the key) before it chmods it 0600
    (IPController.save_connection_dict), so with umask 077 it is never readable by others."""
    stamps = {OWNER_VARIABLE: str(owner_pid), IPYTHONDIR_VARIABLE: current_ipython_dir()}
    previous = {name: os.environ.get(name) for name in stamps}
    os.environ.update(stamps)
    previous_umask = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous_umask)
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def start_reaper(cluster_id: str) -> subprocess.Popen:
    """A watchdog that ends the cluster's processes if this kernel dies abruptly."""
    return subprocess.Popen(
        [sys.executable, "-m", "helpers.runtime.reaper", str(os.getpid()), cluster_id],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # survives a signal sent to the kernel's group
    )


def new_ipp_cluster(plan: launchers.LaunchPlan, **kwargs: Any) -> ipp.Cluster:
    """An unstarted ipyparallel cluster for `plan`, set up to start quickly.

    delay=0: ipyparallel waits 1 s between controller and engines by default. Local
    engines start at once, as one process that imports torch while the controller
    starts and then forks the other engines (helpers/runtime/engine_boot.py), instead of
    one process per engine started once the controller's connection files exist
    (ipp_compat: forking-engine-start).
    """
    options = dict(plan.cluster_kwargs)
    controller_args = [*options.pop("controller_args", []), *CONTROLLER_ARGS]
    local = plan.launcher == "local"
    ipp_cluster = ipp.Cluster(log=IPP_LOG, delay=0, controller_args=controller_args,
                              send_engines_connection_env=not local, **options, **kwargs)
    launchers.apply(plan, ipp_cluster)
    if plan.launcher == "slurm":
        # ipyparallel writes a batch script into the working directory (the notebook's
        # folder) unless its name is absolute: it goes beside the connection files, and
        # forget_cluster_files removes it with them.
        for name in (launchers.SLURM_ENGINES, launchers.SLURM_CONTROLLER):
            ipp_cluster.config[name].batch_file_name = str(
                batch_script(ipp_cluster.cluster_id, name))
    if local:
        engine_file = os.path.join(ipp_cluster.profile_dir, "security",
                                   f"ipcontroller-{ipp_cluster.cluster_id}-engine.json")
        ipp_cluster.config.LocalEngineSetLauncher.engine_cmd = [
            sys.executable, "-m", "helpers.runtime.engine_boot", engine_file,
            str(plan.n_ranks)]
    return ipp_cluster


def start_processes(ipp_cluster: ipp.Cluster, plan: launchers.LaunchPlan, n_ranks: int,
                    progress: StartProgress) -> ipp.Client:
    """Controller and engines; returns a client once all `n_ranks` engines registered."""
    local = plan.launcher == "local"
    ipp_cluster.start_controller_sync()
    if local:  # one process, forking the others; they wait for the controller themselves
        ipp_cluster.start_engines_sync(1)
    client = ipp_cluster.connect_client_sync()  # waits for the controller's files
    progress.done("controller")
    if not local:
        ipp_cluster.start_engines_sync(n_ranks)
    deadline = time.monotonic() + ipp_cluster.engine_timeout
    while len(client.ids) < n_ranks:
        exited = _engines_exited(ipp_cluster)
        if exited or time.monotonic() > deadline:
            client.close()
            raise RuntimeError(
                f"{len(client.ids)} of {n_ranks} engines registered "
                + ("before the engine processes exited" if exited
                   else f"within {ipp_cluster.engine_timeout} s")
                + f"; their last output:\n{engine_output(ipp_cluster)}")
        with contextlib.suppress(TimeoutError):
            client.wait_for_engines(len(client.ids) + 1, timeout=0.5, interactive=False)
        progress.registered(len(client.ids))
    progress.done("engines registered")
    activate(client)
    return client


def _engines_exited(ipp_cluster: ipp.Cluster) -> bool:
    """True when every engine process this machine started has ended (local launcher);
    ipp_compat: launcher-internals."""
    found = [getattr(launcher, "process", None) for engine_set in ipp_cluster.engines.values()
             for launcher in getattr(engine_set, "launchers", {}).values()]  # local only
    return bool(found) and all(isinstance(proc, psutil.Process) and not running(proc)
                               for proc in found)


def engine_output(ipp_cluster: ipp.Cluster, lines: int = 12) -> str:
    """The last `lines` lines each engine process wrote (stdout and stderr)."""
    tails = []
    for engine_set in ipp_cluster.engines.values():
        for launcher in engine_set.launchers.values():
            with contextlib.suppress(Exception):
                tails.append("".join(launcher.get_output().splitlines(True)[-lines:]))
    return "\n".join(tail for tail in tails if tail) or "(none)"


def activate(client: ipp.Client) -> None:
    """In IPython: %px / %%px on every engine, blocking, output in engine order
    (ipp_compat: blocking-px)."""
    if shell() is None:
        return
    view = client[:]
    view.block = True  # %px waits for the engines, as start_and_connect(activate=True)
    view.activate()
    shell().run_line_magic("pxconfig", "--no-stream --progress-after -1")  # no progress bar
