"""What a process that forks children from one that imported torch once needs: the engines'
zygote (engine_zygote.py) is the one such process left.

`child_main` makes a forked child what a new `python` in a given folder and environment
would be (its own session, its stdin, stdout and stderr, its atexit functions);
`woken_by_children` and `ended_children` let a server's loop reap children as they end;
`peer_pid` names the process at the other end of a unix socket. A fork is only safe from a
process with one thread, which never created a group, a store, a kernel or a thread.

The notebook kernels (tools/kernel_provisioner.py) and the disposable ranks (disposable.py)
are forked by the standard library's multiprocessing forkserver instead; the zygote, and
this module with it, go when the engines do too (issue 51).
"""
from __future__ import annotations

import io
import os
import selectors
import signal
import socket
import struct
import sys
from typing import Callable, Iterator, NoReturn


def woken_by_children(sock: socket.socket) -> tuple[selectors.BaseSelector, int, int]:
    """A selector on `sock` and on a pipe that a child's end (SIGCHLD) writes to, and that
    pipe's two ends."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    return selector, wake_r, wake_w


def ended_children() -> Iterator[tuple[int, int]]:
    """The children that have ended since the last call, reaped: (pid, exit code as
    Popen.returncode has it)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return
        yield pid, os.waitstatus_to_exitcode(status)


def peer_pid(sock: socket.socket) -> int:
    """The process at the other end of the unix socket `sock` (as it was when it connected)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[0]


def child_main(env: dict[str, str], cwd: str, fds: list[int], path: list[str],
               close: Callable[[], None], run: Callable[[], None]) -> NoReturn:
    """What a forked child does, to be what a new `python` in folder `cwd`, environment
    `env`, with fds[0:3] as stdin, stdout and stderr would be: `close` the server's own
    sockets, a session of its own, then `run()`; it ends as python ends (its exit status,
    its atexit functions) and never returns into the server's loop."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        close()
        os.setsid()                    # as start_new_session gives
        os.environ.clear()
        os.environ.update(env)
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
        for fd in fds[:3]:
            os.close(fd)
        os.chdir(cwd)
        sys.path[:] = [cwd] + path[1:]     # as `python -m` in that folder has it
        if env.get("PYTHONUNBUFFERED"):    # as python -u has them (the server's may not be)
            sys.stdout, sys.stderr = (
                io.TextIOWrapper(open(fd, "wb", 0, closefd=False), encoding=old.encoding,
                                 errors=old.errors, write_through=True)
                for fd, old in ((1, sys.stdout), (2, sys.stderr)))
        run()
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        try:
            import atexit
            atexit._run_exitfuncs()    # what the child registered, as an ending python runs
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def available() -> bool:
    """Fork where forking a process that imported torch is safe and passes fds."""
    return sys.platform == "linux" and hasattr(socket, "send_fds")
