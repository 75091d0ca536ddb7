"""A kernel provisioner that forks ipykernels from the standard library's forkserver.

A launched kernel is a new `python` that imports torch, matplotlib, ipyparallel and the
helpers at its first cell: seconds of CPU, every kernel a build or a test starts. This
provisioner (jupyter_client's plug-in point, the entry point `nccl-forkserver` in
pyproject.toml) starts the kernel from `multiprocessing.get_context("forkserver")`, whose
server imported KERNELS_PRELOAD once (`set_forkserver_preload`), one server per process
that runs notebooks. The child is what `python -m ipykernel_launcher` would be: a session
of its own, in the kernel's folder and environment, writing to the caller's fd 1 and 2,
with the same `sys.path` and its exit handlers run as it ends.

Lifetime: the fork server outlives its caller while one of its children runs (each holds
the server's "alive" pipe), so the kernel watches its caller itself: a pipe only the caller
writes to, read to its end in a thread (`_watch_caller`); a killed caller takes its kernels
with it, and the server ends after them. A caller that exits with a kernel still running
kills it (`_kill_left`).
Where the forkserver start method or fd passing is missing, `available()` is False and
tools.execute keeps jupyter_client's LocalProvisioner.
"""
from __future__ import annotations

import asyncio
import atexit
import gc
import json
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
from multiprocessing import reduction
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning import LocalProvisioner

import helpers
from helpers.runtime import disposable_rank
from helpers.runtime.start_method import forkserver_context, forkserver_usable, start_forkserver
from tools import jupyter_compat

NAME = "nccl-forkserver"     # the entry point's name (pyproject.toml)

# What the fork server imports: what the notebooks' first cells import (3.1 s of CPU a
# kernel on a quiet core; the helpers behind `from helpers import ...` and the animations,
# with pyplot, 0.4 s more), and torch._dynamo, which torch imports at the first optimizer
# it makes (torch._disable_dynamo: 1.1 CPU-s in every training notebook's kernel). All are
# installed packages: the server imports them with the caller's sys.path unset (3.11's
# forkserver ignores it), and an ImportError there is silently skipped.
# The standard library keeps one forkserver per process, with the preload of whoever starts
# it: the disposable ranks' preload comes first (it sets torch's C++ log level before torch
# is imported), so that ranks forked from a server the kernels started are what they would
# be from their own.
KERNELS_PRELOAD = (*disposable_rank.PRELOAD, "torch", "torch._dynamo", "numpy", "matplotlib",
                   "ipyparallel", "ipykernel.kernelapp", "helpers", *helpers.MODULES,
                   "helpers.figures.animation", "matplotlib.pyplot")
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
KERNEL_MODULE = "ipykernel_launcher"
# Variables a kernel may have other than the server's: read at run time, never when
# KERNELS_PRELOAD is imported (MPLBACKEND is applied in the child: _match_backend).
IGNORED = ("PYTEST_CURRENT_TEST", "TUTORIAL_", "JPY_", "IPYTHONDIR", "MPLBACKEND")


def available() -> bool:
    """Whether this process forks kernels: a forkserver it can use (start_method), fds
    passed to its children, and the names jupyter_compat lists."""
    return (forkserver_usable()
            and reduction.HAVE_SEND_HANDLE
            and all(entry.present() for entry in jupyter_compat.ENTRIES))


def _context() -> multiprocessing.context.BaseContext:
    """The forkserver context, its preload the kernels' (read as the server starts)."""
    return forkserver_context(KERNELS_PRELOAD)


def start_server() -> None:
    """Start this process's forkserver now, with the kernels' preload: in a process that
    forks disposable ranks too (the test suite's workers), whoever starts the server first
    sets what it imports, and the ranks' preload is the first part of the kernels'."""
    if available():
        start_forkserver(KERNELS_PRELOAD)


class ForkserverProvisioner(LocalProvisioner):
    """LocalProvisioner (jupyter_client's reference provisioner, made to be subclassed),
    but an ipykernel is a child of the forkserver instead of a new process."""

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        if not available() or cmd[1:3] != ["-m", KERNEL_MODULE] or cmd[0] != sys.executable:
            return await super().launch_kernel(cmd, **kwargs)
        # JPY_PARENT_PID: what jupyter_client's launcher gives a kernel it starts
        env = {**(kwargs.get("env") or os.environ), "JPY_PARENT_PID": str(os.getpid())}
        cwd = str(kwargs.get("cwd") or os.getcwd())
        watch, self.caller_alive = os.pipe()       # only this process writes to it
        process = _context().Process(
            target=run_kernel, name=f"kernel-{self.kernel_id}",
            args=(cmd, env, cwd, _launched_path(env), Inherited(1), Inherited(2),
                  Inherited(watch)))
        try:
            process.start()
        finally:
            os.close(watch)
        if not _running:      # after multiprocessing's exit handler: run before it
            atexit.unregister(_kill_left)
            atexit.register(_kill_left)
        _running.add(process)
        self.process, self.pid, self.pgid = process, process.pid, process.pid
        self.cwd = cwd
        return self.connection_info

    async def poll(self) -> int | None:
        if not isinstance(self.process, multiprocessing.process.BaseProcess):
            return await super().poll()
        return self.process.exitcode

    async def wait(self) -> int | None:
        process = self.process
        if not isinstance(process, multiprocessing.process.BaseProcess):
            return await super().wait()
        while process.exitcode is None:
            await asyncio.sleep(0.1)
        code = process.exitcode
        _running.discard(process)
        process.close()       # its sentinel fd
        os.close(self.caller_alive)
        self.process = None
        return code

    async def send_signal(self, signum: int) -> None:
        if not isinstance(self.process, multiprocessing.process.BaseProcess):
            return await super().send_signal(signum)
        if self.process.exitcode is not None:
            return
        try:           # the kernel's group, as LocalProvisioner signals a launched kernel's
            os.killpg(self.pgid, signum)
        except OSError:      # before the child's setsid: the kernel alone
            os.kill(self.pid, signum)


class Inherited:
    """One of this process's fds, as the forkserver child receives it: pickled as
    reduction.DupFd (the way multiprocessing passes a Connection's fd to a child), so the
    child gets the fd this process has *now*, not the server's (jupyter_compat 'dupfd')."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple:
        return (_detach, (reduction.DupFd(self.fd),))    # jupyter_compat: dupfd


def _detach(dup: Any) -> int:
    return dup.detach()


def run_kernel(cmd: list[str], env: dict[str, str], cwd: str, path: list[str],
               out: int, err: int, watch: int) -> None:
    """The forked child: become what `cmd` (`python -m ipykernel_launcher ...`) started in
    `cwd` with `env` would be, then run the kernel; a `python` of `cmd` where the server's
    environment differs from `env` in what the preload may have read."""
    os.setsid()                                   # as start_new_session gives
    for target, fd in ((1, out), (2, err)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(cwd)
    # ipykernel exits when its parent changes: the fork server, which ends with our caller
    argv = [*cmd[3:], f"--IPKernelApp.parent_handle={os.getppid()}"]
    if _differs(dict(os.environ), env):
        sys.stdout.flush()
        sys.stderr.flush()
        os.set_inheritable(watch, True)
        os.execve(cmd[0], [cmd[0], "-c", _WATCHED_KERNEL, str(watch), *argv], env)
    exec(_WATCH, {"fd": watch})
    gc.freeze()       # the preloaded objects are never collected: full collections skip them
    os.environ.clear()
    os.environ.update(env)
    sys.path[:] = [cwd if p == "" else p for p in path]   # `python -m` has its folder first
    _match_backend(env)
    sys.argv = [KERNEL_MODULE, *argv]
    try:
        runpy.run_module(KERNEL_MODULE, run_name="__main__", alter_sys=True)
    finally:          # what an ending python runs; multiprocessing's child ends in os._exit
        jupyter_compat.run_exit_handlers()
        sys.stdout.flush()
        sys.stderr.flush()


# The kernel's watch on its caller: ends the process, as ipykernel's parent poller does,
# when the read end `fd` of the caller's pipe reaches its end (the caller is gone).
_WATCH = """
import os, sys, threading
def _watch(fd):
    while os.read(fd, 64):
        pass
    print("Kernel: the process that started it exited, shutting down.", file=sys.stderr)
    os._exit(1)
threading.Thread(target=_watch, args=(fd,), name="caller-watch", daemon=True).start()
"""
# `python -c` of it: the kernel that `python -m ipykernel_launcher ARGV` is, watching its
# caller (ipykernel_launcher takes the cwd off sys.path either way)
_WATCHED_KERNEL = ("import runpy, sys\nfd = int(sys.argv.pop(1))\n" + _WATCH
                   + "runpy.run_module('ipykernel_launcher', run_name='__main__', "
                   "alter_sys=True)\n")


def _differs(server: dict[str, str], env: dict[str, str]) -> bool:
    """Whether `env` sets a variable the preloaded modules may have read to another value
    than the server had (variables the caller has unset since are not told apart from the
    ones importing the preload set, TORCHINDUCTOR_CACHE_DIR: they are not compared)."""
    return any(server.get(k) != v for k, v in env.items() if not k.startswith(IGNORED))


def _match_backend(env: dict[str, str]) -> None:
    """matplotlib, imported in the server, read the server's MPLBACKEND: set the backend a
    launched kernel's matplotlib would read (ipykernel's kernelapp sets MPLBACKEND to the
    inline backend where it is unset); pyplot resolves it at its first figure."""
    if "matplotlib" in sys.modules:
        import matplotlib

        matplotlib.rcParams["backend"] = env.get("MPLBACKEND") or INLINE_BACKEND


_paths: dict[str, list[str]] = {}


def _launched_path(env: dict[str, str]) -> list[str]:
    """sys.path of a `python -c` started with `env`, "" where `python -m` has its folder:
    what a launched kernel has, not this process's (asked once per PYTHON* settings)."""
    wanted = {k: v for k, v in env.items() if k.startswith(("PYTHON", "HOME", "PATH"))}
    key = json.dumps(sorted(wanted.items()))
    if key not in _paths:
        found = subprocess.run(
            [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path))"],
            env=wanted, capture_output=True, text=True, timeout=60, check=True)
        _paths[key] = json.loads(found.stdout)
    return _paths[key]


_running: set[multiprocessing.process.BaseProcess] = set()


def _kill_left() -> None:
    """A caller that exits with a kernel running kills it: multiprocessing's own exit
    handler (registered before this one, so run after it) would wait for it forever."""
    for process in list(_running):
        if process.exitcode is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                process.kill()
            process.join(10)
