"""Disposable ranks forked from a process that has imported torch once.

A disposable rank (disposable.py) used to be a new `python` that imported torch: about
1.5 s of CPU on a quiet core, several seconds on a busy one, paid again by every rank of
every case. The fork server pays it once. It is a process that imports torch and the
rank's helpers, then forks a child for each rank it is asked for. The child is as new to
gloo as a fresh process: the server never creates a group, a store or a thread (fork is
only safe from a process with one thread; tests/runtime/test_disposable.py checks it).

A rank runs in its caller's folder and environment. What torch read from the environment
when it was imported is the server's, though, so a server serves only the environment it
started with (`same_environment`): a caller whose environment has changed gets a new server,
and the old one ends. The rank re-reads TORCH_DISTRIBUTED_DEBUG itself.

Lifetime: the server ends when its caller closes the socket or dies (end of file on it);
a rank ends when the caller closes its stdin, or at its group's timeout.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

# The server: import once, then fork a rank per request; report each rank's end.
_SERVER = r'''
import json, os, selectors, signal, socket, sys
sock = socket.socket(fileno=int(sys.argv[1]))
sys.path.insert(0, sys.argv[2])
from helpers.runtime.disposable_rank import main, no_core_dumps
no_core_dumps()                        # the ranks inherit it
import torch, torch.distributed        # the work every rank skips
import helpers.runtime.rendezvous, helpers.runtime.transfer

wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)
selector = selectors.DefaultSelector()
selector.register(sock, selectors.EVENT_READ)
selector.register(wake_r, selectors.EVENT_READ)
sock.send(json.dumps({"ready": os.getpid()}).encode())


def fork_rank(request, fds):
    pid = os.fork()
    if pid:
        return pid
    try:                               # the rank: nothing of the server's but its imports
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close(); os.close(wake_r); os.close(wake_w)
        os.setsid()                    # a session of its own, as start_new_session gives
        os.environ.clear()
        os.environ.update(request["env"])
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
        os.chdir(request["cwd"])
        spec = request["spec"]
        spec["listen_fd"] = fds[3] if len(fds) > 3 else None
        for fd in fds[:3]:
            os.close(fd)
        main(spec)
    finally:
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


while True:
    for key, _ in selector.select():
        if key.fileobj is sock:
            message, fds, _, _ = socket.recv_fds(sock, 1 << 16, 4)
            if not message:
                sys.exit(0)            # the caller is gone
            with open(json.loads(message)["request"]) as file:
                request = json.load(file)
            pid = fork_rank(request, fds)
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"started": pid}).encode())
        else:
            os.read(wake_r, 4096)
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if not pid:
                    break
                code = os.waitstatus_to_exitcode(status)
                sock.send(json.dumps({"ended": pid, "code": code}).encode())
'''

START_LIMIT_S = 180.0   # importing torch on a loaded 2-core machine


class ForkServer:
    """One server process, for the environment `env`; `fork` asks it for a rank."""

    def __init__(self, env: dict[str, str], root: str) -> None:
        self.env = env
        self.ended: dict[int, int] = {}    # pid -> exit code, as Popen.returncode has it
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(theirs.fileno()), root],
            env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
            pass_fds=(theirs.fileno(),), start_new_session=True)
        theirs.close()
        self._sock = ours
        self._receive("ready", START_LIMIT_S)

    def alive(self) -> bool:
        return self.process.poll() is None

    def fork(self, spec: dict, env: dict[str, str], folder: Path, stdin: int, stdout: IO,
             stderr: IO, listen_fd: int | None) -> "ForkedRank":
        """A new rank running helpers.runtime.disposable_rank.main(spec) in this process's
        folder and in `env`, with these as its stdin, stdout and stderr (and rank 0's
        listening socket); the request goes through a file in `folder`."""
        if not same_environment(self.env, env):
            raise ValueError("this fork server was started in another environment")
        request = folder / f"request-{spec['rank']}.json"
        request.write_text(json.dumps({"spec": spec, "cwd": os.getcwd(), "env": env}))
        fds = [stdin, stdout.fileno(), stderr.fileno()]
        fds += [listen_fd] if listen_fd is not None else []
        socket.send_fds(self._sock, [json.dumps({"request": str(request)}).encode()], fds)
        return ForkedRank(self, self._receive("started", START_LIMIT_S))

    def collect(self, timeout_s: float = 0.0) -> None:
        """Take in the ranks' ends the server has reported, waiting up to `timeout_s`."""
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
        """End the server (its ranks end when their stdin closes)."""
        self._sock.close()
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
        self.process.kill()
        raise RuntimeError(f"the disposable ranks' fork server gave no '{kind}' in "
                           f"{timeout_s:.0f} s: {self._log_tail()}")

    def _take(self, message: bytes) -> dict:
        if not message:
            self.process.wait(timeout=10)
            raise RuntimeError("the disposable ranks' fork server ended (exit code "
                               f"{self.process.returncode}): {self._log_tail()}")
        value = json.loads(message)
        if "ended" in value:
            self.ended[value["ended"]] = value["code"]
        return value

    def _log_tail(self) -> str:
        self._log.seek(0)
        return self._log.read()[-2000:] or "(it printed nothing)"


class ForkedRank:
    """A forked rank, with the parts of Popen's face that disposable.py uses."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.stdin: IO | None = None       # the write end of its stdin (disposable.py sets it)

    def poll(self) -> int | None:
        self.server.collect()
        return self.server.ended.get(self.pid)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pid not in self.server.ended:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"rank {self.pid}", timeout)
            self.server.collect(min(left, 1.0) if left is not None else 1.0)
        return self.server.ended[self.pid]


_server: ForkServer | None = None
# Set by pytest for each test and phase, and read by nothing in torch.
_NOT_READ_AT_IMPORT = {"PYTEST_CURRENT_TEST"}


def same_environment(a: dict[str, str], b: dict[str, str]) -> bool:
    """Whether a server started in environment `a` may serve a caller in `b`."""
    def kept(env):
        return {k: v for k, v in env.items() if k not in _NOT_READ_AT_IMPORT}
    return kept(a) == kept(b)


def fork_server(env: dict[str, str], root: str) -> ForkServer:
    """The running server for `env`; a new one (the old one ended) if `env` has changed."""
    global _server
    if _server is not None and not (same_environment(_server.env, env) and _server.alive()):
        _server.close()
        _server = None
    if _server is None:
        _server = ForkServer(env, root)
    return _server


def available() -> bool:
    """Fork a rank where forking a process that imported torch is safe and passes fds."""
    return sys.platform == "linux" and hasattr(socket, "send_fds")
