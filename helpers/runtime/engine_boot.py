"""Engines of the local launcher: one process imports torch, the others are forked from it.

    python -m helpers.runtime.engine_boot CONNECTION_FILE N_ENGINES [ipengine arguments...]

ipyparallel starts each engine once the controller has written its connection file,
and each engine imports torch (1.5 CPU-s) when the first cell needs it. Here one
process starts at once, imports torch, ipykernel and the engine code while the
controller starts, then forks N_ENGINES - 1 copies of itself, so the imports are paid
once instead of once per rank (the way a torch DataLoader forks its workers after
importing torch: nothing has started CUDA, MPI or a ZeroMQ context yet). Every
process then waits (bounded) for the controller's engine connection file, hands it
to ipyparallel's engine through $IPP_CONNECTION_INFO and becomes one engine.
Where this IPYTHONDIR has an engine zygote (engine_zygote.py), the process launched
here hands that whole boot to it instead, so the imports are not paid again at all.

Each copy is forked twice and its middle process exits, so the engines are not
children of one another: any of them can end without leaving a zombie in another.
Each copy reseeds Python's and torch's random generators, as a new process would.
ipp_compat: forking-engine-start (the ipyparallel interfaces this relies on).
Started by helpers.runtime.starting (the local launcher).
"""
from __future__ import annotations

import gc
import json
import os
import random
import sys
import time

def read_connection_file(path: str, wait_s: float | None = None,
                         poll_s: float = 0.05) -> str:
    """The JSON text of `path` once it exists and parses; SystemExit after `wait_s`
    ($TUTORIAL_ENGINE_WAIT_S, else 120 s).

    The controller writes the file in place, so a reader can see it half written.
    """
    if wait_s is None:
        wait_s = float(os.environ.get("TUTORIAL_ENGINE_WAIT_S", "120"))
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
            json.loads(text)
            return text
        except (FileNotFoundError, ValueError):
            if time.monotonic() > deadline:
                raise SystemExit(f"engine_boot: the controller's connection file {path} "
                                 f"did not arrive within {wait_s:g} s") from None
            time.sleep(poll_s)


def fork_engines(copies: int) -> bool:
    """Fork `copies` detached copies of this process; True in a copy, False in the original."""
    for _ in range(copies):
        middle = os.fork()
        if middle == 0:
            if os.fork() != 0:
                os._exit(0)  # the middle process: its child is adopted, not ours
            reseed()
            return True
        os.waitpid(middle, 0)
    return False


def reseed() -> None:
    """Fresh random state, as a new process has (a fork copies its parent's)."""
    import torch

    random.seed()
    torch.seed()


JOB_END_EXIT_S = 1.0       # a nanny sent SIGTERM exits at the latest this much later


def _set_name(name: str) -> None:
    """This process's name as ps and top show it (Linux's prctl PR_SET_NAME)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(15, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass        # not Linux: only the name is lost


def _be_the_nanny(settings_fd: int, url_fd: int) -> None:
    """The forked child: wait for the engine's settings, then run ipyparallel's nanny."""
    import pickle

    os.setsid()              # as start_nanny's start_new_session: the engine's signals pass
    from helpers.runtime.processes import NANNY_NAME

    _set_name(NANNY_NAME)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)         # not the engine's stdout: its launcher waits for that to close
    os.dup2(null, 1)
    with os.fdopen(settings_fd, "rb") as settings:
        data = settings.read()
    if data:
        # the engine reads the nanny's URL from this pipe and holds it open: its closing
        # tells the nanny that the engine is gone
        _nanny_class().main(**pickle.loads(data), pipe=os.fdopen(url_fd, "w", buffering=1))


def _nanny_class() -> type:
    """ipyparallel's KernelNanny, which also tells the controller at once when it is sent
    SIGTERM: the end of a whole job (Slurm's scancel or time limit signals every process
    of the job step at once). An engine busy in a cell outlives its SIGTERM (its handler
    waits for the cell) until the SIGKILL that comes KillWait later, and that kills the
    nanny with it: the controller would learn of the end only from the missed heartbeats,
    30 s later. Our own ends of a cluster (stop, the reaper, the orphan sweep) end its
    controller too, and give the nannies SIGKILL (processes.end_processes).
    (ipp_compat: nanny-reports-a-job-end)"""
    import signal
    import threading

    from ipyparallel.engine.nanny import KernelNanny

    class JobEndNanny(KernelNanny):
        async def start(self) -> None:
            await super().start()
            signal.signal(signal.SIGTERM, self._job_ends)

        def _job_ends(self, signum, frame) -> None:
            self.loop.add_callback_from_signal(self.finish)   # unregisters, then stops
            # a controller that is ending too never takes the message: never wait out
            # notify_exit's 3 s linger for it (a live one has it within milliseconds)
            threading.Timer(JOB_END_EXIT_S, os._exit, (128 + signum,)).start()

    return JobEndNanny


def fork_nanny() -> None:
    """Fork this engine's nanny now, and have ipyparallel's engine hand it its settings.

    ipyparallel's engine starts `python -m ipyparallel.engine.nanny` as it registers
    (start_nanny): a process that imports ipyparallel again, 0.3 CPU-s an engine. Forked
    here, while this process is still one thread, the child has it imported already; it
    waits for the settings the engine would have piped to that command, then runs the
    same KernelNanny. An engine that never asks closes the pipe as it exits, and the
    child ends. (ipp_compat: forked-nanny)
    """
    import pickle

    settings_r, settings_w = os.pipe()
    url_r, url_w = os.pipe()
    if os.fork() == 0:
        os.close(settings_w)
        os.close(url_r)
        try:                 # whatever happens, this child never returns into the engine
            _be_the_nanny(settings_r, url_w)
        except BaseException:
            import traceback

            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    os.close(settings_r)
    os.close(url_w)

    def start_nanny(**kwargs) -> tuple[str, object]:
        with os.fdopen(settings_w, "wb") as settings:
            pickle.dump({**kwargs, "pid": os.getpid()}, settings)
        url_pipe = os.fdopen(url_r, "rb")
        url = url_pipe.readline().decode().strip()
        if not url:
            raise RuntimeError("nanny failed")
        return url, url_pipe      # kept by the engine, as it keeps the nanny's Popen

    import ipyparallel.engine.app as engine_app

    engine_app.start_nanny = start_nanny


USAGE = ("usage: python -m helpers.runtime.engine_boot CONNECTION_FILE N_ENGINES "
         "[ipengine arguments...]")


def preload() -> None:
    """What every engine imports, paid once here (or once in the zygote)."""
    import ipykernel.ipkernel  # noqa: F401
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401
    import ipyparallel.engine.app  # noqa: F401

    import helpers.runtime.engine  # noqa: F401


def boot(argv: list[str]) -> None:
    """Become the first of N_ENGINES engines, forking the others: `argv` is
    CONNECTION_FILE N_ENGINES [ipengine arguments...]."""
    connection_file, n_engines = argv[0], int(argv[1])
    sys.argv = [__file__, *argv[2:]]       # what ipyparallel's engine app parses
    preload()
    from ipyparallel.engine.app import main as engine_main

    # What the imports made is never collected: a full collection (IPython's reset calls
    # one as each engine exits) then walks only what the notebook made, and the forks
    # keep sharing those pages (the gc module's docs: freeze before fork).
    gc.freeze()
    fork_engines(n_engines - 1)
    fork_nanny()
    # ipyparallel's engine app reads its connection from this variable
    # (ipp_compat: forking-engine-start)
    os.environ["IPP_CONNECTION_INFO"] = read_connection_file(connection_file)
    engine_main()


def main() -> None:
    argv = sys.argv[1:]
    if len(argv) < 2 or not argv[1].isdigit() or int(argv[1]) < 1:
        raise SystemExit(USAGE)
    from helpers.runtime.engine_zygote import boot_in_zygote

    code = boot_in_zygote(argv)     # forked from this IPYTHONDIR's zygote, where it can be
    if code is None:
        boot(argv)
    elif code < 0:                  # ended by a signal: so does this process, as ours
        import signal

        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    raise SystemExit(code or 0)


if __name__ == "__main__":
    main()
