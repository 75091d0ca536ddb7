"""Processes forked from a server that has imported torch (and the rest) once.

Starting `python` and importing torch costs about 1.5 s of CPU on a quiet core, several
seconds on a busy one. Two kinds of process paid it again and again: every rank of every
disposable case (disposable.py), and every kernel a build or a test starts
(tools/execute.py, with matplotlib and ipyparallel: 3.1 s more CPU than a bare kernel).
A fork server pays it once per caller: it imports its kind's `preload`, then forks a child
per request, which calls the kind's `entry`. The server freezes what it imported
(gc.freeze, as the gc module's docs advise before fork), so a child's full collections
skip it: one walks about 200,000 objects otherwise, 0.1 CPU-s on a quiet core, and
IPython's reset runs one as each kernel exits. The child is as new as a fresh process to
what it runs: the server never creates a group, a store, a kernel or a thread (fork is
only safe from a process with one thread; tests/runtime/test_disposable.py checks it).

A child runs in its caller's folder and environment, in a session of its own. What was
read from the environment at import is the server's, though, so a server serves only
callers whose environment is its own but for the variables its kind ignores; another
caller gets a new server, and the old one ends.

Lifetime: the server ends when its caller closes the socket or dies (end of file on it),
and kills the children still running then. A kind with `zygote=True` (disposable ranks)
is forked by engine_zygote's zygote where there is one instead: it imports an engine's
modules and a rank's, serves every process of its user and environment (less what a
start has of its own), and outlives its callers; a caller that goes still takes its
children with it.
"""
from __future__ import annotations

import io
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Any, Callable, Iterator, NoReturn

# The server: import `preload` once, then fork a child per request that calls `entry`.
_SERVER = r"""
import contextlib, importlib, json, os, socket, sys
sock = socket.socket(fileno=int(sys.argv[1]))
path = list(sys.path)
sys.path.append(sys.argv[2])           # last: never in front of what the child imports
for name in json.loads(sys.argv[3]):
    importlib.import_module(name)      # the work every child skips
from helpers.runtime.forkserver import child_main, ended_children, woken_by_children
from helpers.runtime.processes import end_forked
module, _, function = sys.argv[4].partition(":")
entry = getattr(importlib.import_module(module), function)
import gc
gc.freeze()     # the imports are never collected: a child's full collections skip them

selector, wake_r, wake_w = woken_by_children(sock)
children = set()

def caller_gone():                     # so are the children, reaped: no zombie for init
    end_forked(children)
    sys.exit(0)

def tell(message):
    try:
        sock.send(json.dumps(message).encode())
    except OSError:                    # a caller killed as a child ended: gone too
        caller_gone()

tell({"ready": os.getpid()})

def fork_child(request, fds):
    pid = os.fork()
    if pid:
        return pid

    def close():
        sock.close(); os.close(wake_r); os.close(wake_w)

    child_main(request["env"], request["cwd"], fds, path, close,
               lambda: entry(request["spec"], fds[3:]))

while True:
    for key, _ in selector.select():
        if key.fileobj is sock:
            message = b""              # a caller killed with our notices unread: ECONNRESET
            with contextlib.suppress(ConnectionResetError):
                message, fds, _, _ = socket.recv_fds(sock, 1 << 16, 8)
            if not message:
                caller_gone()
            with os.fdopen(fds.pop(0)) as file:    # the request: a file with no name
                request = json.load(file)
            pid = fork_child(request, fds)
            children.add(pid)
            for fd in fds:
                os.close(fd)
            tell({"started": pid})
        else:
            os.read(wake_r, 4096)
            for pid, code in ended_children():
                children.discard(pid)
                tell({"ended": pid, "code": code})
"""

START_LIMIT_S = 180.0   # importing torch on a loaded 2-core machine


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


@dataclass(frozen=True)
class Kind:
    """What a server imports (`preload`), what its children call (`entry`, "module:function",
    called with the request's spec and the fds after stdin, stdout and stderr), and the
    variables a caller's environment may differ in from the server's: ones nothing in
    `preload` reads when it is imported."""

    preload: tuple[str, ...]
    entry: str
    ignored: tuple[str, ...] = ("PYTEST_CURRENT_TEST",)   # prefixes
    defaults: tuple[tuple[str, str], ...] = ()   # the server's, where the caller sets none
    # forked by the zygote of engine_zygote (which imports `preload` too) where there is one
    zygote: bool = False

    def server_environment(self, env: dict[str, str]) -> dict[str, str]:
        """The environment a server for a caller in `env` imports `preload` in."""
        return {**dict(self.defaults), **env}

    def same_environment(self, server: dict[str, str], caller: dict[str, str]) -> bool:
        """Whether a server started in environment `server` may serve a caller in `caller`."""
        def kept(env):
            return {k: v for k, v in env.items() if not k.startswith(self.ignored)}
        return kept(server) == kept(self.server_environment(caller))


class ForkServer:
    """One server process of `kind`, for the environment `env`; `fork` asks it for a child.
    The server is a process of its own, or, given `zygote` (a connection to it), the
    zygote of engine_zygote: one per user and environment, which outlives this caller."""

    def __init__(self, kind: Kind, env: dict[str, str], root: str,
                 zygote: socket.socket | None = None) -> None:
        self.kind, self.env = kind, kind.server_environment(env)
        self.ended: dict[int, int] = {}    # pid -> exit code, as Popen.returncode has it
        self._gone = False
        self.process: subprocess.Popen | None = None
        if zygote is not None:
            from helpers.runtime import engine_zygote

            self._sock, self.pid = zygote, peer_pid(zygote)
            self._zygote_path = engine_zygote.socket_path(self.env)
            return
        self._log = tempfile.TemporaryFile(mode="w+")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(theirs.fileno()), root,
             json.dumps(kind.preload), kind.entry],
            env=self.env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
            pass_fds=(theirs.fileno(),), start_new_session=True)
        self.pid = self.process.pid
        theirs.close()
        self._sock = ours
        self._receive("ready", START_LIMIT_S)

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        try:
            self.collect()
        except RuntimeError:
            pass
        return not self._gone

    def serves(self, env: dict[str, str]) -> bool:
        """Whether this server may fork a child for a caller in `env`."""
        if self.process is not None:
            return self.kind.same_environment(self.env, env)
        from helpers.runtime import engine_zygote

        return engine_zygote.socket_path(env) == self._zygote_path and engine_zygote.fits(env)

    def fork(self, spec: Any, env: dict[str, str], cwd: str, fds: list[int]) -> "ForkedChild":
        """A child calling the kind's entry with `spec`, in folder `cwd` and environment
        `env`, with fds[0:3] as its stdin, stdout and stderr (the rest passed on)."""
        if not self.serves(env):
            raise ValueError("this fork server was started in another environment")
        with tempfile.TemporaryFile("w+") as request:    # unlinked: nothing left behind
            json.dump({"spec": spec, "cwd": cwd, "env": env, "entry": self.kind.entry},
                      request)
            request.flush()
            request.seek(0)
            socket.send_fds(self._sock, [b"request"], [request.fileno(), *fds])
            return ForkedChild(self, self._receive("started", START_LIMIT_S))

    def collect(self, timeout_s: float = 0.0) -> None:
        """Take in the children's ends the server has reported, waiting up to `timeout_s`."""
        self._sock.settimeout(timeout_s)
        try:
            while True:
                self._take(self._sock.recv(1 << 12))
                self._sock.settimeout(0)
        except (BlockingIOError, socket.timeout):
            pass
        finally:
            self._sock.settimeout(None)

    def close(self) -> None:
        """End the server (or, with the zygote, this caller's connection to it), and with it
        any child still running."""
        self._sock.close()
        if self.process is not None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self._log.close()

    def _receive(self, kind: str, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            self._sock.settimeout(left)
            try:
                message = self._sock.recv(1 << 12)
            except socket.timeout:
                break
            finally:
                self._sock.settimeout(None)
            value = self._take(message)
            if kind in value:
                return value[kind]
            if "refused" in value:
                raise RuntimeError(f"the zygote refused the fork: {value['refused']}")
        if self.process is not None:
            self.process.kill()
        raise RuntimeError(f"the fork server ({self.kind.entry}) gave no '{kind}' in "
                           f"{timeout_s:.0f} s: {self._log_tail()}")

    def _take(self, message: bytes) -> dict:
        if not message:
            self._gone = True
            if self.process is None:
                raise RuntimeError(f"the zygote that forks {self.kind.entry} ended")
            self.process.wait(timeout=10)
            raise RuntimeError(f"the fork server ({self.kind.entry}) ended (exit code "
                               f"{self.process.returncode}): {self._log_tail()}")
        value = json.loads(message)
        if "ended" in value:
            self.ended[value["ended"]] = value["code"]
        return value

    def _log_tail(self) -> str:
        if self.process is None:
            return "(the zygote's output is not kept)"
        self._log.seek(0)
        return self._log.read()[-2000:] or "(it printed nothing)"


class ForkedChild:
    """A forked child, with the parts of Popen's face that its callers use."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.stdin: IO | None = None       # the write end of its stdin, where the caller keeps it
        self.stdout = self.stderr = None
        self.returncode: int | None = None

    def poll(self) -> int | None:
        self.server.collect()
        self.returncode = self.server.ended.get(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pid not in self.server.ended:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout)
            self.server.collect(min(left, 1.0) if left is not None else 1.0)
        self.returncode = self.server.ended[self.pid]
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


_servers: dict[Kind, ForkServer] = {}


def fork_server(kind: Kind, env: dict[str, str], root: str) -> ForkServer:
    """The running server of `kind` for `env`; a new one (the old one ended) if `env` has
    changed in a variable that `kind` does not ignore."""
    if kind.zygote:
        from helpers.runtime import engine_zygote

        engine_zygote.idle_seconds(env)  # a bad setting is an error, zygote or not
    server = _servers.get(kind)
    if server is not None and not (server.serves(env) and server.alive()):
        server.close()
        server = None
    if server is None:
        server = _servers[kind] = ForkServer(kind, env, root, _zygote_for(kind, env))
    return server


def _zygote_for(kind: Kind, env: dict[str, str]) -> socket.socket | None:
    """A connection to the zygote that forks `kind` for a caller in `env` (this process
    its owner, with the ones its environment names); None where `kind` has none, or `env`
    has no room in it."""
    if not kind.zygote:
        return None
    from helpers.runtime import engine_zygote

    if not engine_zygote.fits(env):
        return None
    return engine_zygote.connect(env, engine_zygote.owners_of(env) + [str(os.getpid())])


def available() -> bool:
    """Fork where forking a process that imported torch is safe and passes fds."""
    return sys.platform == "linux" and hasattr(socket, "send_fds")
