"""Where the standard library's forkserver cannot be used, everything that forks from it
starts a new `python` instead: a deep TMPDIR makes its unix socket's path too long."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO
from helpers.runtime import launchers, start_method

PROBE = """
import json, multiprocessing
from multiprocessing import forkserver
from helpers.runtime import start_method
try:
    forkserver.ensure_running()
    started = "started"
except OSError as err:
    started = str(err)
print(json.dumps([start_method.forkserver_usable(), started]))
"""


def _probe(temp_dir: str) -> list:
    import json

    env = dict(os.environ, TMPDIR=temp_dir)
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_usable_exactly_where_the_standard_library_can_start_its_server(tmp_path):
    """The length rule is checked against the server itself, on both sides of the limit."""
    short = tmp_path.parent / "s"
    short.mkdir(exist_ok=True)
    usable, started = _probe(str(short))
    assert usable and started == "started", started
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    usable, started = _probe(str(deep))
    assert not usable and "too long" in started, started


def test_a_deep_temp_dir_gives_ipyparallels_own_local_engines(tmp_path, monkeypatch):
    monkeypatch.setattr(start_method.tempfile, "gettempdir", lambda: str(tmp_path / ("d" * 90)))
    assert launchers.local_engine_launcher() == "local"
    monkeypatch.setattr(start_method.tempfile, "gettempdir", lambda: "/tmp")
    assert launchers.local_engine_launcher() == launchers.FORKSERVER_ENGINES
