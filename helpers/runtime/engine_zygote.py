"""Cold starts forked from a zygote: the engines' imports once per environment, not per start.

engine_boot imports torch, ipykernel and ipyparallel's engine once per cluster (about
2 CPU-s on a quiet core), then forks the other engines. Every start paid that again: a
restart, another world size, another kernel, every cold test and build lane. Here the
first start launches a zygote, `python -m helpers.runtime.engine_zygote SOCKET`: it imports
what engine_boot imports, once, then forks one boot per later start. The launched
`engine_boot` process stays what ipyparallel watches (its output file, its exit code,
the signals it is sent): it hands its environment, folder and stdout to the zygote, passes
on the signals it gets, and exits as the forked boot exits.

A zygote serves one user (its socket is in the owner-only folder of
processes.private_socket_dir) and one environment: the name of its socket is a digest
of what engine_boot's imports could read, every variable but PER_START (which they do
not read: a start's own, and what a kernel's differs in from a script's). A forked boot
takes its caller's environment, and shows it in /proc/PID/environ too (written over the
zygote's, which has room for it): processes.cluster_processes finds a cluster's
processes there.

Lifetime: the zygote ends when every process it started engines for is gone (their owners,
TUTORIAL_OWNER_PID: the kernels, a warm cluster's keeper) and every fork server caller,
or after TUTORIAL_ZYGOTE_IDLE seconds (IDLE_S) without a start; a caller that goes kills
what it asked for. A kernel's parent (JPY_PARENT_PID: JupyterLab, a build) is no owner:
shutting the last kernel down ends the zygote, and a restarted kernel starts a new one. Where
fork is not available, with TUTORIAL_ZYGOTE=0, or when the zygote cannot start,
engine_boot boots in place.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import importlib
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from helpers.runtime import forkserver
from helpers.runtime.processes import kill_forked, running

# What differs from one start to the next, or between a kernel and a script, and nothing
# the zygote's preload() reads (tests/runtime/test_engine_zygote.py checks it): the
# cluster's own, our settings, the folders of IPython, Jupyter and matplotlib, pytest's,
# what ipykernel sets for a kernel's subprocesses, and python -u's (which a forked child
# applies itself: forkserver.child_main). Prefixes.
PER_START = ("IPP_CLUSTER_ID", "IPP_PROFILE_DIR", "IPP_CONNECTION_INFO", "TUTORIAL_",
             "JPY_", "PYTEST_", "IPYTHONDIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR",
             "JUPYTER_CONFIG_DIR", "MPL", "CLICOLOR", "FORCE_COLOR", "PAGER", "GIT_PAGER",
             "PYDEVD_", "TORCHINDUCTOR_CACHE_DIR", "PYTHONUNBUFFERED")
ROOM_VARIABLE = "TUTORIAL_ZYGOTE_ROOM"   # fills the zygote's environment: room for a start's
ROOM_BYTES = 8192
IDLE_S = 600.0        # TUTORIAL_ZYGOTE_IDLE: the longest a zygote waits for another start
START_LIMIT_S = 180.0                    # the zygote's imports on a loaded 2-core machine
OWNERS_POLL_S = 1.0
OWNERS = ("TUTORIAL_OWNER_PID",)     # the zygote lives while one of these does
MAX_FDS = 8          # with a request: a boot's 3, a fork server's request file and its fds
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
           signal.SIGUSR2)
_ROOT = str(Path(__file__).resolve().parents[2])   # the folder that holds helpers/


def zygote_environment(env: dict[str, str]) -> dict[str, str]:
    """What a zygote for a boot in `env` is started in: `env` less PER_START."""
    return {k: v for k, v in env.items() if not k.startswith(PER_START)}


def socket_path(env: dict[str, str]) -> Path:
    """Where the zygote for a process in `env` listens."""
    from helpers.runtime.processes import private_socket_dir

    key = json.dumps([sys.executable, _ROOT, sorted(zygote_environment(env).items())])
    return private_socket_dir() / f"zygote-{hashlib.sha256(key.encode()).hexdigest()[:20]}"


# --- the launched engine_boot: hand the boot to the zygote ------------------------------

def boot_in_zygote(argv: list[str]) -> int | None:
    """Run engine_boot's `argv` (after the module) as a boot forked by the zygote, and
    return its exit status (negative: the signal); None where it cannot be forked."""
    env = dict(os.environ)
    if not env.get("TUTORIAL_IPYTHONDIR"):
        return None                      # not a start cell's processes
    try:
        conn = connect(env, owners_of(env))
    except ValueError as err:
        raise SystemExit(str(err)) from None
    if conn is None:
        return None
    with conn:
        request = json.dumps({"argv": argv, "env": env, "cwd": os.getcwd()}).encode()
        try:
            socket.send_fds(conn, [request], [0, 1, 2])
            reply = json.loads(conn.recv(1 << 12) or b"{}")
        except OSError:
            return None          # the zygote ended as we came (its owners had gone)
        if "started" not in reply:
            return None          # e.g. an environment larger than the zygote has room for
        return _follow(conn, reply["started"])


def connect(env: dict[str, str], owner_pids: list[str]) -> socket.socket | None:
    """A connection to the zygote for processes in `env`, started if there is none (for
    `owner_pids`); None where there is no zygote: no fork here, TUTORIAL_ZYGOTE=0, or one
    that did not start. A bad TUTORIAL_ZYGOTE_IDLE is a ValueError that names it."""
    if not forkserver.available() or env.get("TUTORIAL_ZYGOTE", "1") == "0":
        return None
    idle_s = idle_seconds(env)           # checked at every start, not only the first
    path = socket_path(env)
    return _connect(path) or _start_and_connect(path, env, idle_s, owner_pids)


def fits(env: dict[str, str]) -> bool:
    """Whether a process in `env` fits where its zygote's environment is (what
    /proc/PID/environ shows): a zygote refuses one that does not."""
    room = {**zygote_environment(env), ROOM_VARIABLE: "x" * ROOM_BYTES}
    return len(_block(env)) <= len(_block(room))


def _block(env: dict[str, str]) -> bytes:
    """`env` as the environment strings of a process: NAME=value, each ending in NUL."""
    return b"".join(os.fsencode(k) + b"=" + os.fsencode(v) + b"\0" for k, v in env.items())


def _connect(path: Path) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(str(path))
        return conn
    except OSError:
        conn.close()
        return None


def _start_and_connect(path: Path, env: dict[str, str], idle_s: float,
                       owner_pids: list[str]) -> socket.socket | None:
    """Start the zygote (one starter at a time: the lock is on the folder, which leaves no
    file behind) and connect to it; None if it never listens."""
    deadline = time.monotonic() + START_LIMIT_S
    lock = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.05)
        conn = _connect(path)            # another caller may have started it meanwhile
        if conn is not None:
            return conn
        path.unlink(missing_ok=True)     # left by a zygote that was killed
        zygote_env = {**zygote_environment(env), ROOM_VARIABLE: "x" * ROOM_BYTES}
        # It says "ready" on its stdout once it listens. One that fails says nothing else:
        # the boot in place then fails the same way, and says why.
        zygote = subprocess.Popen(
            [sys.executable, "-m", "helpers.runtime.engine_zygote", str(path),
             str(idle_s), *owner_pids],
            env=zygote_env, cwd=_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True)
        with zygote.stdout:
            ready, _, _ = select.select([zygote.stdout], [], [], START_LIMIT_S)
            if not ready or zygote.stdout.readline() != b"ready\n":
                return None
        return _connect(path)
    finally:
        os.close(lock)                   # and with it the lock


def idle_seconds(env: dict[str, str]) -> float:
    """$TUTORIAL_ZYGOTE_IDLE, else IDLE_S; a value that is not a number of seconds above 0
    is a ValueError naming it (a start cell shows it as the engines' output)."""
    raw = env.get("TUTORIAL_ZYGOTE_IDLE", "").strip()
    try:
        idle_s = float(raw) if raw else IDLE_S
    except ValueError:
        idle_s = -1.0
    if not idle_s > 0:
        raise ValueError(f"TUTORIAL_ZYGOTE_IDLE={raw!r}: give the seconds a zygote waits "
                         "for another start, a number above 0")
    return idle_s


def owners_of(env: dict[str, str]) -> list[str]:
    """The processes a start in `env` is made for: its owner (a kernel, a keeper)."""
    return [env[name] for name in OWNERS if env.get(name, "").isdigit()]


def _follow(conn: socket.socket, pid: int) -> int:
    """Pass this process's signals on to the boot `pid` until the zygote says it ended."""
    def relay(signum, frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in RELAYED:
        signal.signal(signum, relay)
    while True:
        message = conn.recv(1 << 12)
        if not message:                  # the zygote is gone: wait for the boot itself
            while _exists(pid):
                time.sleep(0.2)
            return 1
        value = json.loads(message)
        if value.get("ended") == pid:
            return value["code"]


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# --- the zygote ---------------------------------------------------------------------------

def preload() -> None:
    """What a zygote imports: an engine's imports, and a disposable rank's."""
    from helpers.runtime import engine_boot
    from helpers.runtime.disposable_rank import PRELOAD

    engine_boot.preload()
    for name in PRELOAD:
        importlib.import_module(name)


def serve(path: Path, idle_s: float = IDLE_S, owner_pids: tuple[str, ...] = ()) -> None:
    """Import what a boot needs, listen at `path`, fork a boot per request; return once
    no caller is left and every owner is gone (those of `owner_pids`, the starter's, and
    of every request's environment), or after `idle_s` without a request."""
    import gc

    import psutil

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))   # its socket goes with it
    preload()
    gc.freeze()        # the imports are never collected: the forks keep sharing their pages
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    staged = path.with_suffix(".new")
    staged.unlink(missing_ok=True)
    listener.bind(str(staged))
    listener.listen(16)
    os.replace(staged, path)             # a caller connects only once the imports are done
    ours = os.stat(path).st_ino
    print("ready", flush=True)           # to the starter, which then stops reading
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    selector, wake_r, wake_w = forkserver.woken_by_children(listener)
    boots: dict[int, socket.socket] = {}          # pid -> the caller that asked for it
    owners: dict[int, psutil.Process] = {}
    _note_owners(list(owner_pids), owners)
    last_start = time.monotonic()
    try:
        while True:
            for key, _ in selector.select(timeout=OWNERS_POLL_S):
                if key.fileobj is listener:
                    selector.register(listener.accept()[0], selectors.EVENT_READ)
                elif key.fileobj is wake_r:
                    os.read(wake_r, 4096)
                    _reap(boots)
                else:
                    conn = key.fileobj
                    try:
                        request, fds = _receive_request(conn)
                    except OSError:              # a caller killed as it asked: as gone
                        request, fds = None, []
                    if request is None:
                        selector.unregister(conn)
                        _end_boots_of(conn, boots)
                        conn.close()
                        continue
                    pid = _fork(request, fds, selector, wake_w)
                    for fd in fds:
                        os.close(fd)
                    if pid is not None:
                        boots[pid] = conn
                        last_start = time.monotonic()
                        _note_owners(owners_of(request["env"]) + _caller_of(request, conn),
                                     owners)
                    with contextlib.suppress(OSError):   # its end of file comes next
                        conn.send(json.dumps({"started": pid} if pid else
                                             {"refused": "no room"}).encode())
            callers = len(selector.get_map()) - 2
            if callers == 0 and not boots and (
                    (owners and not any(map(running, owners.values())))
                    or time.monotonic() - last_start > idle_s):
                return
    finally:                             # what a later zygote of this name would make anew
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == ours:
                path.unlink()


def _note_owners(pids: list[str], owners: dict) -> None:
    import psutil

    for pid in map(int, pids):
        if pid not in owners:
            with contextlib.suppress(psutil.Error):
                owners[pid] = psutil.Process(pid)


def _reap(boots: dict[int, socket.socket]) -> None:
    for pid, code in forkserver.ended_children():
        conn = boots.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send(json.dumps({"ended": pid, "code": code}).encode())


def _end_boots_of(conn: socket.socket, boots: dict[int, socket.socket]) -> None:
    """The caller is gone (killed): so is its boot, and the engines it forked (its group)."""
    for pid in [p for p, c in boots.items() if c is conn]:
        kill_forked(pid)


def _receive_request(conn: socket.socket) -> tuple[dict | None, list[int]]:
    """The next request on `conn` and the fds that came with it (None: the caller is gone).
    A boot's comes as JSON with its stdin, stdout and stderr; a fork server's
    (forkserver.ForkServer) as b"request" with the request in a file, then its fds."""
    try:
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, MAX_FDS)
    except OSError:                    # killed with our replies unread: ECONNRESET, not EOF
        return None, []
    if not message:
        for fd in fds:
            os.close(fd)
        return None, []
    if message != b"request":
        return json.loads(message), fds
    with os.fdopen(fds.pop(0)) as file:
        return json.load(file), fds


def _caller_of(request: dict, conn: socket.socket) -> list[str]:
    """A fork server's caller is an owner. A boot's is not: the launched engine_boot goes
    as its cluster stops, and the zygote stays for the next start."""
    return [str(forkserver.peer_pid(conn))] if "entry" in request else []


def _fork(request: dict, fds: list[int], selector: selectors.BaseSelector,
          wake_w: int) -> int | None:
    """Fork what `request` asks for: a boot (its "argv"), or a fork server's child (its
    "entry", called with its "spec" and the fds after stdin, stdout and stderr). None if
    its environment does not fit where /proc/PID/environ reads it."""
    env = request["env"]
    block = _block(env)
    start, end = _environ_block()
    if len(block) > end - start:
        return None
    pid = os.fork()
    if pid:
        return pid

    def close() -> None:                 # the zygote's sockets and pipe
        for key in list(selector.get_map().values()):
            key.fileobj.close() if hasattr(key.fileobj, "close") else os.close(key.fileobj)
        selector.close()
        os.close(wake_w)

    def run() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)     # as a new process has it
        # C's environ points at copies now (os.environ's): the block is free to show them
        ctypes.memmove(start, block + bytes(end - start - len(block)), end - start)
        if "entry" in request:
            module, _, function = request["entry"].partition(":")
            getattr(importlib.import_module(module), function)(request["spec"], fds[3:])
            return
        from helpers.runtime import engine_boot

        engine_boot.reseed()
        engine_boot.boot(request["argv"])

    # its engines (or a fork server's child) are its process group: a caller that is
    # killed ends them
    forkserver.child_main(env, request["cwd"], fds, sys.path, close, run)


def _environ_block() -> tuple[int, int]:
    """Where this process's environment strings are (proc(5): /proc/PID/stat's env_start
    and env_end, fields 50 and 51): what /proc/PID/environ shows."""
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    return int(fields[47]), int(fields[48])


if __name__ == "__main__":
    serve(Path(sys.argv[1]), float(sys.argv[2]), tuple(sys.argv[3:]))
