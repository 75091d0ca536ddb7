"""What docs/security.md says of the forkserver the local engines are forked from.

The local engines (helpers/runtime/forked_engines.py) and the disposable ranks are forked
by the standard library's `multiprocessing` forkserver of the process that starts them.
Its server forks a process that runs whatever a client sends, and checks nothing of who
connects: only the modes of its socket and of the socket's folder keep other users out.
A child process starts the server as forked_engines does (its context, then
`forkserver.ensure_running`), under a permissive umask, with an empty preload (the socket
does not depend on what the server imports; no torch here).
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conftest import REPO
from helpers.runtime.processes import running

CHILD = r"""
import json, multiprocessing, os, sys
from multiprocessing import forkserver

import psutil

from helpers.runtime import forked_engines

os.umask(0)                       # the modes must not come from the caller's umask
context = forked_engines.context()
assert context is multiprocessing.get_context("forkserver"), context
context.set_forkserver_preload([])
forkserver.ensure_running()
[server] = [p for p in psutil.Process().children()
            if "multiprocessing.forkserver" in " ".join(p.cmdline())]
paths = [c.laddr for c in server.net_connections(kind="unix") if c.laddr]
print(json.dumps({"server": server.pid, "paths": paths}), flush=True)
sys.stdin.readline()              # the test looks at the socket, then lets this process end
"""


def _start_child() -> tuple[subprocess.Popen, dict]:
    child = subprocess.Popen([sys.executable, "-c", CHILD], cwd=REPO, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    line = child.stdout.readline()
    assert line, f"the child printed nothing (exit {child.wait(timeout=30)})"
    return child, json.loads(line)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_forkserver_listens_in_an_owner_only_folder_and_goes_with_its_process():
    child, seen = _start_child()
    try:
        [path] = [Path(p) for p in seen["paths"]]
        folder = path.parent
        # connection.arbitrary_address('AF_UNIX') under util.get_temp_dir()
        assert path.name.startswith("listener-") and folder.name.startswith("pymp-"), path
        assert folder.parent == Path(tempfile.gettempdir()), folder
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert _mode(folder) == 0o700, oct(_mode(folder))
        assert _mode(path) == 0o600, oct(_mode(path))
        assert folder.stat().st_uid == path.stat().st_uid == os.getuid()
    finally:
        child.communicate("\n", timeout=30)
    # The folder goes at the process's exit, the server once nothing holds its "alive" pipe.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (folder.exists() or running(seen["server"])):
        time.sleep(0.05)
    assert not folder.exists(), f"{folder} outlived its process"
    assert not running(seen["server"]), "the forkserver outlived its process"
