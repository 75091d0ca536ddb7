"""Local engines forked from the standard library's forkserver: a launcher for ipyparallel.

    ipp.Cluster(n=4, engines="forkserver")  # pyproject: entry point ipyparallel.engine_launchers

ipyparallel's local launcher starts each engine as a new `python`, and every engine then
imports torch (1.5 CPU-s each, all at once on a laptop's cores). This launcher plug-in
is ipyparallel's LocalEngineSetLauncher, each engine a LocalEngineLauncher whose process
is a child of this process's `multiprocessing` forkserver instead: the server imported
torch and ipyparallel's engine once (its preload, disposable_rank.PRELOAD, which the
disposable ranks share), and forks an engine per request. Only public methods are
overridden (`start`, `join`); stop, signal, output, the stock nanny, heartbeats and the
cluster file are ipyparallel's. The server exits by itself once this process and every
engine it forked are gone (multiprocessing.forkserver reads the end of its "alive" pipe).
"""
from __future__ import annotations

import asyncio
import atexit
import multiprocessing
import os
import sys
import threading

import psutil
from ipyparallel.cluster.launcher import LocalEngineLauncher, LocalEngineSetLauncher
from traitlets import Float

from helpers.runtime import start_method
from helpers.runtime.disposable_rank import PRELOAD

ENTRY_POINT = "forkserver"     # its name in pyproject.toml's ipyparallel.engine_launchers
# What torch, c10 and the OpenMP runtimes read as they are imported (OMP_NUM_THREADS is
# applied in the child with torch.set_num_threads instead).
READ_AT_IMPORT = ("TORCH_", "PYTORCH_", "KMP_", "MKL_", "GOMP_")
EXIT_WAIT_S = 2.0              # at this process's exit, how long an engine has to end
_engines: set[multiprocessing.process.BaseProcess] = set()


def context() -> multiprocessing.context.BaseContext:
    """This process's forkserver context, with the preload the disposable ranks use too."""
    return start_method.forkserver_context(PRELOAD)


def start_forkserver() -> None:
    """Start the server now, so that its imports overlap the controller's start."""
    start_method.start_forkserver(PRELOAD)


def run_engine(argv: list[str], env: dict[str, str], cwd: str, output_file: str) -> None:
    """In the forked child: become what `Popen(ipengine argv, env, cwd, stdout=output_file,
    start_new_session=True)` would have started, then run ipyparallel's engine; a new
    `python -m ipyparallel.engine` where the server's environment differs from `env` in
    what torch reads as it is imported."""
    os.setsid()       # as LocalProcessLauncher: the kernel's Ctrl-C is not the engine's
    os.chdir(cwd)
    out = os.open(output_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    for target, source in ((0, null), (1, out), (2, out)):
        os.dup2(source, target)
    if read_differently(dict(os.environ), env):
        os.execve(sys.executable, [sys.executable, "-m", "ipyparallel.engine", *argv], env)
    os.environ.clear()
    os.environ.update(env)
    import torch

    torch.seed()      # the server's random state is every child's: draw anew, as a new
    if "numpy" in sys.modules:        # process would (the random module does so itself)
        sys.modules["numpy"].random.seed()
    threads = env.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:   # torch read it as the server imported it
        torch.set_num_threads(int(threads))
    from ipyparallel.engine.app import IPEngine

    sys.argv = ["ipengine", *argv]
    IPEngine.launch_instance(argv)


def read_differently(server: dict[str, str], env: dict[str, str]) -> bool:
    """Whether `env` gives a variable that torch or its OpenMP runtime reads once, as they
    are imported (TORCH_CPP_LOG_LEVEL: c10's log level), another value than the server
    had. Variables `env` leaves unset are not compared: importing torch sets some."""
    return any(server.get(name) != value for name, value in env.items()
               if name.startswith(READ_AT_IMPORT))


def _end_left() -> None:
    """At this process's exit: end the engines still running, instead of multiprocessing's
    exit handler waiting for them forever (ipyparallel stops its clusters before this)."""
    for engine in list(_engines):
        if engine.exitcode is None:
            engine.terminate()
    for engine in list(_engines):
        engine.join(EXIT_WAIT_S)
        if engine.exitcode is None:
            engine.kill()
            engine.join(EXIT_WAIT_S)


class ForkserverEngineLauncher(LocalEngineLauncher):
    """One engine: a forkserver child instead of a new interpreter. What start() leaves is
    what LocalProcessLauncher.start leaves (ipp_compat: launcher-internals)."""

    def start(self) -> None:
        env = {**os.environ, **self.get_env()}
        child = context().Process(
            target=run_engine, name=f"ipengine-{self.identifier}",
            args=(self.cluster_args + self.engine_args, env, os.path.abspath(self.work_dir),
                  self.output_file))
        child.start()
        if not _engines:      # registered after multiprocessing's handler: runs before it
            atexit.unregister(_end_left)
            atexit.register(_end_left)
        _engines.add(child)
        self.pid = child.pid
        self.process = psutil.Process(child.pid)
        self.notify_start(child.pid)
        loop = self.loop      # read here: in the waiting thread it would be that thread's
        threading.Thread(target=self._wait_for_exit, args=(child, loop), daemon=True,
                         name=f"wait(pid={child.pid})").start()

    def _wait_for_exit(self, child: multiprocessing.process.BaseProcess, loop) -> None:
        """In the background: tell ipyparallel, on the launcher's loop, that the engine ended."""
        child.join()
        _engines.discard(child)
        data = dict(exit_code=child.exitcode, pid=self.pid, identifier=self.identifier)
        loop.add_callback(lambda: self.notify_stop(data))

    async def join(self, timeout: float | None = None) -> None:
        """Wait for the engine to end (psutil: a launcher rebuilt from the cluster file too)."""
        try:
            await asyncio.to_thread(self.process.wait, timeout)
        except psutil.TimeoutExpired:
            raise TimeoutError(f"Process {self.pid} did not exit in {timeout} seconds.") from None
        except psutil.NoSuchProcess:
            pass


class ForkserverEngineSetLauncher(LocalEngineSetLauncher):
    """ipyparallel's local engine set, each engine a ForkserverEngineLauncher."""

    launcher_class = ForkserverEngineLauncher
    delay = Float(0.0, config=True, help="seconds between engine starts (a fork: none)")
