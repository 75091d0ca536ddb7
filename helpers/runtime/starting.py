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
from pathlib import Path
from typing import Any, Iterator

import ipyparallel as ipp
import psutil

from helpers.runtime import launchers
from helpers.runtime.forked_engines import ForkserverEngineSetLauncher, start_forkserver
from helpers.runtime.processes import batch_script, current_ipython_dir, running
from helpers.runtime.progress import StartProgress

# Schedulers run as threads (--usethreads), not as forked processes; the heartbeat
# settings are the launcher's (launchers.controller_args). ipyparallel's controller
# itself, on 127.0.0.1 (launchers.cluster_options).
CONTROLLER_ARGS = ["--usethreads"]
# Seconds the client waits for the controller's first answer (ipyparallel's Client
# `timeout`, 10 s by default): four notebooks starting at once on 2 cores took longer.
CONNECT_TIMEOUT_S = 60.0

# What a forked engine that died before its first line most likely met.
MAIN_GUARD = ("\n(An engine forked by multiprocessing first imports the script that started "
              "it, as every multiprocessing child does: in a script, call start_cluster() "
              "under `if __name__ == \"__main__\":`; the error is above, in that script's "
              "output.)")

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
def private() -> Iterator[None]:
    """Files created inside are 0600: ipyparallel's controller writes a connection file
    (the key) before it chmods it 0600 (IPController.save_connection_dict), so with umask
    077 it is never readable by others."""
    previous_umask = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous_umask)


def start_reaper(cluster_id: str, owner_pid: int | None = None) -> subprocess.Popen:
    """A watchdog that stops the cluster if its owner (this kernel) dies abruptly."""
    return subprocess.Popen(
        [sys.executable, "-m", "helpers.runtime.reaper", str(owner_pid or os.getpid()),
         cluster_id, current_ipython_dir()],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # survives a signal sent to the kernel's group
    )


def new_ipp_cluster(plan: launchers.LaunchPlan, **kwargs: Any) -> ipp.Cluster:
    """An unstarted ipyparallel cluster for `plan`, set up to start quickly: engines at
    once after the controller (delay=0; ipyparallel waits 1 s by default), forked from the
    standard library's forkserver on one host (helpers/runtime/forked_engines.py)."""
    options = dict(plan.cluster_kwargs)
    options.update(kwargs)
    controller_args = [*CONTROLLER_ARGS, *options.pop("controller_args", [])]
    ipp_cluster = ipp.Cluster(log=IPP_LOG, delay=0, controller_args=controller_args,
                              **options)
    launchers.apply(plan, ipp_cluster)
    if plan.launcher == "slurm":
        # ipyparallel writes a batch script into the working directory (the notebook's
        # folder) unless its name is absolute: it goes beside the connection files, and
        # forget_cluster_files removes it with them.
        for name in (launchers.SLURM_ENGINES, launchers.SLURM_CONTROLLER):
            ipp_cluster.config[name].batch_file_name = str(
                batch_script(ipp_cluster.cluster_id, name))
    return ipp_cluster


def start_processes(ipp_cluster: ipp.Cluster, n_ranks: int,
                    progress: StartProgress) -> ipp.Client:
    """Controller and engines; returns a client once all `n_ranks` engines registered."""
    forked = ipp_cluster.engine_launcher_class is ForkserverEngineSetLauncher
    if forked:
        start_forkserver()    # its imports overlap the controller's start
    client = start_controller(ipp_cluster)
    progress.done("controller")
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
                + f"; their last output:\n{engine_output(ipp_cluster)}"
                + (MAIN_GUARD if forked and exited else ""))
        with contextlib.suppress(TimeoutError):
            client.wait_for_engines(len(client.ids) + 1, timeout=0.5, interactive=False)
        progress.registered(len(client.ids))
    progress.done("engines registered")
    activate(client)
    return client


# ipyparallel's controller picks its ports by binding port 0 and closing the socket
# (util.select_random_ports), and binds them again a moment later: another process can
# take one in between, and the controller exits with "Address already in use" (seen once
# in CI, with four clusters and their gloo groups starting on one machine). It binds the
# hub's ports before it writes its connection files and the schedulers' after (ipyparallel
# 9.2, controller/app.py: init_hub, then init_schedulers): a port taken there leaves the
# files of a dead controller. Another try draws other ports.
CONTROLLER_TRIES = 3
PORT_TAKEN = "Address already in use"
# One try at the controller's first answer: between tries, a controller that has exited is
# seen, instead of after the whole CONNECT_TIMEOUT_S.
CONNECT_TRY_S = 5.0


def start_controller(ipp_cluster: ipp.Cluster) -> ipp.Client:
    """Start the controller and return a client connected to it; up to CONTROLLER_TRIES
    starts when a port it drew was taken, else a clear error with its last output."""
    attempt = 1
    while True:
        ipp_cluster.start_controller_sync()
        try:
            return _connect(ipp_cluster)
        except RuntimeError as error:       # "Controller stopped with N while waiting"
            output = controller_output(ipp_cluster)
            for path in ipp_cluster.controller.connection_files.values():
                Path(path).unlink(missing_ok=True)    # a dead controller's: never read them
            ipp_cluster.stop_controller_sync()
            if PORT_TAKEN not in output or attempt == CONTROLLER_TRIES:
                raise RuntimeError(f"{error}; tried {attempt} time(s); the controller's "
                                   f"last output:\n{output or '(none)'}") from None
            attempt += 1


def _connect(ipp_cluster: ipp.Cluster) -> ipp.Client:
    """A client, once the controller has written its files and answers: tries of
    CONNECT_TRY_S for up to CONNECT_TIMEOUT_S; RuntimeError once the controller exited."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            return ipp_cluster.connect_client_sync(timeout=CONNECT_TRY_S)
        except TimeoutError:
            if _controller_exited(ipp_cluster):
                raise RuntimeError("the controller exited after writing its connection "
                                   "files") from None
            if time.monotonic() >= deadline:
                raise


def _controller_exited(ipp_cluster: ipp.Cluster) -> bool:
    """True when this machine's controller process has ended, a zombie included (its
    launcher's process: ipp_compat: launcher-internals); False when unknown (Slurm)."""
    proc = getattr(ipp_cluster.controller, "process", None)
    return isinstance(proc, psutil.Process) and not running(proc)


def controller_output(ipp_cluster: ipp.Cluster, lines: int = 12) -> str:
    """The last `lines` lines the controller process wrote (stdout and stderr)."""
    with contextlib.suppress(Exception):
        return "".join(ipp_cluster.controller.get_output().splitlines(True)[-lines:])
    return ""


def _engines_exited(ipp_cluster: ipp.Cluster) -> bool:
    """True when every engine process this machine started has ended (local launcher);
    the launcher's process (ipp_compat: launcher-internals)."""
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


# The engines' output reaches a client over PUB/SUB (ipyparallel's IOPub relay), where the
# first messages after a socket connects can be lost while its subscription propagates
# (ZeroMQ's "slow joiner"). Measured here: 4 processes starting 2-rank clusters in a loop
# on 2 cores, once in about 250 starts neither engine's output of the first execute
# arrived though both replies had. A %%px cell waits for that output with no bound
# (ipyparallel's display_outputs), so the engines are handed over only once an empty cell's
# output has come back: OUTPUT_PROBE_S a try, OUTPUT_PROBES tries.
OUTPUT_PROBE_S = 5.0
OUTPUT_PROBES = 6


def wait_for_output_path(client: ipp.Client) -> None:
    """Return once an empty cell run on every engine has sent its output (each engine's
    idle status, the end of a cell's output) back to `client`; else a clear error."""
    view = client[:]
    for _ in range(OUTPUT_PROBES):
        probe = view.execute("", block=False)
        probe.get(timeout=CONNECT_TIMEOUT_S)
        if probe.wait_for_output(OUTPUT_PROBE_S):
            return
    raise RuntimeError(f"the engines' output did not reach this kernel in {OUTPUT_PROBES} "
                       f"tries of {OUTPUT_PROBE_S:g} s (ipyparallel's IOPub relay)")


def activate(client: ipp.Client) -> None:
    """In IPython: %px / %%px on every engine, blocking, output in engine order
    (ipp_compat: blocking-px), once the engines' output reaches this client."""
    wait_for_output_path(client)
    if shell() is None:
        return
    view = client[:]
    view.block = True  # %px waits for the engines, as start_and_connect(activate=True)
    view.activate()
    shell().run_line_magic("pxconfig", "--no-stream --progress-after -1")  # no progress bar
