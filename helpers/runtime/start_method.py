"""Whether this process can fork from the standard library's forkserver: the local engines
(forked_engines.py), the disposable ranks (disposable.py) and the notebook kernels
(tools/kernel_provisioner.py) all ask here, and use a new `python` each where it cannot."""
from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
from collections.abc import Sequence
from multiprocessing import forkserver

# A unix socket's path must fit in sockaddr_un.sun_path: 108 bytes on Linux, 104 on macOS
# and the BSDs, the terminating NUL included.
SOCKET_PATH_MAX = 108 if sys.platform.startswith("linux") else 104


def forkserver_socket_path_length(temp_dir: str | None = None) -> int:
    """How long the server's socket path will be: multiprocessing puts it at
    <temp dir>/pymp-XXXXXXXX/listener-XXXXXXXX (util.get_temp_dir, then
    connection.arbitrary_address("AF_UNIX"); tempfile's names have 8 random characters)."""
    folder = temp_dir or tempfile.gettempdir()
    return len(os.fsencode(os.path.join(folder, "pymp-" + "x" * 8, "listener-" + "x" * 8)))


def forkserver_usable() -> bool:
    """The platform has the forkserver start method (not Windows) and its socket's path
    fits (a deep TMPDIR makes it fail with "AF_UNIX path too long")."""
    return ("forkserver" in multiprocessing.get_all_start_methods()
            and forkserver_socket_path_length() < SOCKET_PATH_MAX)


def forkserver_context(preload: Sequence[str]) -> multiprocessing.context.BaseContext:
    """This process's forkserver context, the modules its server imports before it forks
    set to `preload` (the standard library keeps one server per process: whoever starts
    it first decides; set later, a preload changes nothing)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))
    return context


def start_forkserver(preload: Sequence[str]) -> None:
    """Start this process's server now, without waiting for its imports: what it preloads
    overlaps whatever the caller does next (forkserver.ensure_running, in its __all__)."""
    forkserver_context(preload)
    forkserver.ensure_running()
