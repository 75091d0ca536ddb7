"""Unix sockets, in an owner-only folder, for the ipyparallel controller of one host.

Any local user can connect to a loopback TCP port; a unix socket in a folder only its
owner may enter (0700) is reachable by that owner alone. helpers/runtime/launchers.py
puts the controller of the local and mpi launchers here (`cluster_options`); the
controller runs as `python -m helpers.runtime.unix_sockets controller` (`run_controller`
says why). No notebook imports this module directly; tests/runtime/test_private_sockets.py
checks what it promises.
"""
from __future__ import annotations

import os
import secrets
import socket
import stat
import sys
import tempfile
import time
from pathlib import Path

CONTROLLER_MODULE = "helpers.runtime.unix_sockets"
SOCKET_PATH_MAX = 100   # sun_path holds 108 bytes on Linux, 104 on macOS


def private_socket_dir() -> Path:
    """An owner-only (0700) folder for unix sockets, made if missing.

    $XDG_RUNTIME_DIR/nccl-notebooks when that is set (a per-user folder already), else
    <temp dir>/nccl-notebooks-<uid>. A folder of that name that another user owns, that
    is a link, or that others can enter is refused: /tmp is shared.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    folder = (Path(runtime) / "nccl-notebooks" if runtime and os.path.isdir(runtime)
              else Path(tempfile.gettempdir()) / f"nccl-notebooks-{os.getuid()}")
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise RuntimeError(f"{folder} is not a folder of this user: remove it, or set "
                           "XDG_RUNTIME_DIR to a private folder")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise RuntimeError(f"{folder} can be entered by other users "
                           f"(mode {stat.S_IMODE(info.st_mode):o}): chmod 700 it")
    return folder


def remove_stale_sockets(folder: Path, min_age_s: float = 60.0) -> int:
    """Remove the controller sockets in `folder` that nothing listens on any more (left by a
    killed controller) and are older than `min_age_s` (not one being set up); the count."""
    removed = 0
    for path in folder.glob("ipp-*:*"):
        try:
            if not stat.S_ISSOCK(path.lstat().st_mode) or \
                    time.time() - path.lstat().st_mtime < min_age_s:
                continue
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(1)
                probe.connect(str(path))
        except ConnectionRefusedError:
            path.unlink(missing_ok=True)
            removed += 1
        except OSError:
            continue
    return removed


def remove_sockets(prefix: str) -> None:
    """Remove one controller's socket files (`<prefix>:<port>`): a controller ended by
    SIGKILL, as `stop()` ends it, cannot remove them itself."""
    path = Path(prefix)
    for socket_file in path.parent.glob(f"{path.name}:*"):
        socket_file.unlink(missing_ok=True)


def controller_socket_prefix() -> str:
    """A fresh path prefix for one controller's sockets (`<prefix>:<port>` each)."""
    folder = private_socket_dir()
    remove_stale_sockets(folder)
    prefix = str(folder / f"ipp-{secrets.token_hex(4)}")
    if len(prefix) + len(":65535") > SOCKET_PATH_MAX:
        raise RuntimeError(f"unix socket paths under {prefix} would be too long for the OS: "
                           "set XDG_RUNTIME_DIR (or TMPDIR) to a shorter folder")
    return prefix


def controller_command(python: str | None = None) -> list[str]:
    """The command that starts the controller of a local or mpi plan."""
    return [python or sys.executable, "-m", CONTROLLER_MODULE, "controller"]


def ipc_url(interface: str, port: int | str) -> str:
    """Where ipyparallel 9.2's engines and client look for a channel: `<interface>:<port>`
    (engine/app.py `url`, client/client.py), for ipc:// as for tcp://."""
    return f"{interface}:{port}"


def run_controller(argv: list[str] | None = None) -> None:
    """ipyparallel's controller, binding its ipc sockets where engines and clients look.

    ipyparallel 9.2's controller names an ipc socket `<interface>-<port>`
    (IPController.construct_url) while its engines and client connect to
    `<interface>:<port>`, so with transport=ipc no engine ever registers. This one
    names them as the engines do; tests/runtime/test_private_sockets.py checks both spellings
    (ipp_compat: ipc-url-spelling).
    """
    from ipyparallel.controller.app import IPController

    class UnixSocketController(IPController):
        def construct_url(self, kind: str, channel: str, index=None) -> str:
            url = super().construct_url(kind, channel, index)
            info = {"engine": self.engine_info, "client": self.client_info,
                    "internal": self.internal_info}[kind]
            interface = info["interface"]
            if not interface.startswith("ipc://"):
                return url
            return ipc_url(interface, url[len(interface) + 1:])

    app = UnixSocketController.instance()
    try:
        app.initialize(argv)
        app.start()
    finally:  # a socket file outlives its socket: remove this controller's
        interface = app.engine_info.get("interface", "") if app.engine_info else ""
        if interface.startswith("ipc://"):
            remove_sockets(interface[len("ipc://"):])


if __name__ == "__main__":
    if sys.argv[1:2] != ["controller"]:
        sys.exit("usage: python -m helpers.runtime.unix_sockets controller [options]")
    run_controller(sys.argv[2:])
