"""What one disposable rank runs (helpers/runtime/disposable.py): join a fresh gloo group
(unless the spec says no group), call the case, send back what it returned, raised or
took, then wait to be let go.

`run` is the target of a `multiprocessing` process (forkserver, else spawn): a process
of its own, in a session of its own, with the caller's folder, environment and sys.path.
It lives only while its caller does: a thread waits on the rank's end of the pipe to the
caller and ends the process when that pipe closes (the caller lets it go, or died).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import sys
import threading
import time
from typing import Any

# What a process's fork server imports before it forks a rank or an engine
# (disposable_preload.py: torch, ipyparallel's engine, and the modules below).
PRELOAD = ("helpers.runtime.disposable_preload",)


def no_core_dumps() -> None:
    """No core dump when gloo aborts this process: the kernel keeps a dumping process's
    sockets open until the dump is written (189 MB, or a pipe to a crash collector), so its
    peers would wait out the timeout instead of failing at once, and a `core` file would be
    left in the notebook's folder. A soft RLIMIT_CORE of 1 byte stops both: a file dump
    smaller than a page is not written, and the kernel refuses to pipe a dump for a process
    whose limit is exactly 1 (fs/coredump.c, do_coredump); 0 would not stop a piped one."""
    hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
    soft = 1 if hard == resource.RLIM_INFINITY or hard >= 1 else 0
    resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))


def _own_output(stderr_path: str) -> None:
    """stdout to nowhere, stderr (fd 2: gloo's abort message too) to the caller's file, and
    both unbuffered, as python -u has them: what a rank wrote before it died is kept. The
    file's name goes once it is open here (the caller reads it through its own open file):
    nothing is left behind however the caller ends."""
    for fd, path, flags in ((1, os.devnull, os.O_WRONLY),
                            (2, stderr_path, os.O_WRONLY | os.O_APPEND)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    with contextlib.suppress(OSError):     # Windows keeps an open file's name
        os.unlink(stderr_path)
    sys.stdout, sys.stderr = (
        io.TextIOWrapper(open(fd, "wb", 0, closefd=False), encoding=old.encoding,
                         errors=old.errors, write_through=True)
        for fd, old in ((1, sys.stdout), (2, sys.stderr)))


def _end_with(conn: Any) -> threading.Thread:
    """A thread that ends this process once `conn` (the caller's pipe) closes."""
    def wait() -> None:
        try:
            while True:
                conn.recv_bytes()
        except (EOFError, OSError):
            pass
        os._exit(0)   # no teardown: a peer may be dead, and these processes are disposable

    thread = threading.Thread(target=wait, name="disposable-caller", daemon=True)
    thread.start()
    return thread


def run(spec: dict, conn: Any, listener: Any = None) -> None:
    """A rank: the process target. `conn` is its end of the pipe to the caller; `listener`
    rank 0's listening socket for the store (a `rendezvous.listening_socket`)."""
    if hasattr(os, "setsid"):
        os.setsid()               # its own session: the caller's interrupt is not its
    _own_output(spec["stderr"])
    no_core_dumps()
    watcher = _end_with(conn)
    os.environ.clear()
    os.environ.update(spec["env"])
    report, store = main(spec, None if listener is None else listener.detach())
    conn.send_bytes(json.dumps(report, default=lambda v: v.tolist()).encode())
    watcher.join()                # until the caller lets every rank go, or dies
    del store                     # never reached: held until here, rank 0's serves the group


def main(spec: dict, listen_fd: int | None) -> tuple[dict, Any]:
    """Run the case `spec` names as rank spec["rank"]: what it returned (tensors as lists) or
    raised, and the seconds it took; and the group's store (None without a group)."""
    import torch
    import torch.distributed as dist

    from helpers.runtime.rendezvous import join
    from helpers.runtime.transfer import encode

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL" if spec["detail"] else "OFF"
    dist.set_debug_level_from_env()   # torch read it at import: in a forked rank, the server's
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))   # the pool was sized by the server's environment
    rank, world_size = spec["rank"], spec["world_size"]
    store = None
    if spec["group"]:
        store = join("gloo", rank, world_size, "127.0.0.1", spec["port"], spec["timeout_s"],
                     listen_fd=listen_fd, store_timeout_s=spec["timeout_s"] + 10)
    namespace = {"torch": torch, "dist": dist, "__name__": "__disposable__"}
    exec(compile(spec["source"], "<case>", "exec"), namespace)
    case = namespace[spec["name"]]
    start = time.monotonic()
    try:
        value = (case(rank, world_size, **spec["args"]) if spec["group"]
                 else case(**spec["args"]))       # no group: the case makes its own
        report = {"result": encode(value)}
    except Exception as err:
        report = {"error": f"{type(err).__name__}: {err}"}
    report["seconds"] = time.monotonic() - start
    return report, store
