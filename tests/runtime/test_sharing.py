"""One machine, many users: notebooks side by side neither see nor reach each other.

- four notebooks executed at once (four papermill processes) all pass, each with
  its own cluster, engines and results;
- a running cluster's files are readable by their owner only;
- two clusters running at once listen on loopback only, on ports of their own.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from child import child_starter, wait_until
from conftest import NOTEBOOKS, REPO
from helpers.runtime.processes import cluster_processes
from reports import assert_all_pass, exercise
from notebook_runner import assert_records_match_model

pytestmark = pytest.mark.cold   # start-up, lifecycle, timeouts: never the session's warm engines

CHILD_TIMEOUT_S = 240.0
NOTEBOOK_TIMEOUT_S = 1200.0   # four notebooks at once on 2 busy cores
LOOPBACK = ("127.0.0.1", "::1")


def _env(proc: psutil.Process) -> dict:
    try:
        return proc.environ()
    except psutil.Error:
        return {}


def _forked_engines_cluster(proc: psutil.Process) -> str | None:
    """A forked engine's /proc environ is its forkserver's (the kernel's: the run marker
    is there), without IPP_CLUSTER_ID; its nanny, a `python` it started, has that."""
    try:
        if "multiprocessing.forkserver" not in " ".join(proc.cmdline()):
            return None
        return next((_env(c).get("IPP_CLUSTER_ID") for c in proc.children()
                     if _env(c).get("IPP_CLUSTER_ID")), None)
    except psutil.Error:
        return None


# --- four notebooks at once -------------------------------------------------------------

SIMULTANEOUS = ["01_scatter", "03_broadcast", "05_all_reduce", "06_all_gather"]
# Inherited by papermill → kernel → its forkserver and controller → engines and nannies:
# the /proc environ of each run's controller and nannies names the run.
RUN_MARKER = "TUTORIAL_SHARING_TEST_RUN"
SUMMARY_ROW = re.compile(r"^\s*(\d+)\s+cpu\s+\S+\s+(\d+)\s+(\d+)\s*$", re.M)  # rank dev host pid eid


class ClusterWatcher(threading.Thread):
    """Records, while notebooks run, every cluster process: pid → (cluster id, run marker)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen: dict[int, tuple[str, str | None]] = {}
        self.done = threading.Event()
        self.mine = os.environ["IPYTHONDIR"]
        # clusters already running (an earlier test's leftovers) are none of this test's
        self.before = {_env(p).get("IPP_CLUSTER_ID") for p in psutil.process_iter()}

    def run(self) -> None:
        while not self.done.is_set():
            for proc in psutil.process_iter():
                env = _env(proc)
                cluster_id = env.get("IPP_CLUSTER_ID") or _forked_engines_cluster(proc)
                if cluster_id and cluster_id not in self.before and \
                        env.get("IPYTHONDIR") == self.mine:
                    self.seen.setdefault(proc.pid, (cluster_id, env.get(RUN_MARKER)))
            self.done.wait(0.5)

    def clusters_by_run(self) -> dict[str | None, set[str]]:
        by_run: dict[str | None, set[str]] = {}
        for cluster_id, run in self.seen.values():
            by_run.setdefault(run, set()).add(cluster_id)
        return by_run


# jupyter_client picks a kernel's ports by binding port 0 and closing it; another
# process can take one before the kernel binds it ("Address already in use", the
# kernel dies before kernel_info). Several kernels and controllers starting at once
# hit this now and then: such a run never executed a cell, so it is started again.
KERNEL_PORT_RACE = ("Address already in use", "Kernel died before replying to kernel_info")


def _papermill(stem: str, tmp_path: Path, attempt: int) -> tuple[subprocess.Popen, Path]:
    results = tmp_path / stem / "results"
    results.mkdir(parents=True, exist_ok=True)
    out = tmp_path / stem / f"{stem}.ipynb"
    env = dict(os.environ, TUTORIAL_RESULTS_DIR=str(results), **{RUN_MARKER: stem})
    cmd = [sys.executable, "-m", "papermill", str(NOTEBOOKS / f"{stem}.ipynb"), str(out),
           "-p", "n_ranks", "2", "-p", "backend", "gloo", "-k", "python3",
           "--cwd", str(NOTEBOOKS), "--no-progress-bar", "--execution-timeout", "900"]
    log = tmp_path / stem / f"papermill-{attempt}.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, log


@pytest.mark.notebook
def test_four_notebooks_at_once_pass_without_cross_talk(tmp_path):
    watcher = ClusterWatcher()
    watcher.start()
    runs: dict[str, tuple[subprocess.Popen, Path, int]] = {}
    try:
        for stem in SIMULTANEOUS:
            runs[stem] = (*_papermill(stem, tmp_path, 1), 1)
        deadline = time.monotonic() + NOTEBOOK_TIMEOUT_S
        while True:
            for stem, (proc, log, attempt) in list(runs.items()):
                if proc.poll() not in (None, 0) and attempt < 3 and \
                        all(m in log.read_text() for m in KERNEL_PORT_RACE):
                    runs[stem] = (*_papermill(stem, tmp_path, attempt + 1), attempt + 1)
            if all(proc.poll() is not None for proc, _, _ in runs.values()):
                break
            if time.monotonic() > deadline:
                pytest.fail(f"notebooks still running after {NOTEBOOK_TIMEOUT_S:g} s")
            time.sleep(0.5)
    finally:
        watcher.done.set()
        watcher.join(timeout=30)
        for proc, _log, _attempt in runs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)

    for stem, (proc, log, _attempt) in runs.items():
        assert proc.returncode == 0, f"{stem} failed:\n{log.read_text()[-4000:]}"

    by_run = watcher.clusters_by_run()
    assert None not in by_run, "a cluster process that belongs to no notebook run"
    for stem in SIMULTANEOUS:
        assert len(by_run.get(stem, ())) == 1, (stem, by_run)
    cluster_ids = [next(iter(by_run[stem])) for stem in SIMULTANEOUS]
    assert len(set(cluster_ids)) == len(SIMULTANEOUS), by_run

    all_engine_pids = []
    for stem, cluster_id in zip(SIMULTANEOUS, cluster_ids):
        out, results = tmp_path / stem / f"{stem}.ipynb", tmp_path / stem / "results"
        records = json.loads((results / f"{stem}.json").read_text())
        records = records if isinstance(records, list) else [records]
        assert_records_match_model(records, 2)
        # no other notebook's results in this one's folder
        assert [p.name for p in results.iterdir()] == [f"{stem}.json"]

        executed = nbformat.read(out, as_version=4)
        graded = exercise(assert_all_pass(executed, 2))
        assert graded.by_rank() == {0: True, 1: True}, stem   # graded on both ranks
        # the start cell's table, as text (its HTML copy shows the same rows, folded)
        text = "".join(out.get("text", "") + str(out.get("data", {}).get("text/plain", ""))
                       for cell in executed.cells for out in cell.get("outputs", []))
        rows = SUMMARY_ROW.findall(text)
        assert [int(rank) for rank, _pid, _eid in rows] == [0, 1], (stem, rows)
        engine_pids = [int(pid) for _rank, pid, _eid in rows]
        # this notebook's ranks are engines of its own cluster, started for its run
        for pid in engine_pids:
            assert watcher.seen.get(pid) == (cluster_id, stem), (stem, pid, watcher.seen.get(pid))
        all_engine_pids += engine_pids
    assert len(set(all_engine_pids)) == 2 * len(SIMULTANEOUS)

    for cluster_id in cluster_ids:
        assert wait_until(lambda: cluster_processes(cluster_id) == [], 30), cluster_id


# --- child "notebooks" -------------------------------------------------------------------

PRELUDE = """
import json, os, sys
from helpers.runtime.cluster import start_cluster

def say(**values):
    print(json.dumps(values), flush=True)
"""

HOLD_A_CLUSTER = """
c = start_cluster(2, "gloo", quiet=True)
c.client.direct_view(c.engine_ids).execute(
    "t = torch.ones(4) * (rank + 1); dist.all_reduce(t); dist.barrier()", block=True)
say(cluster_id=c.cluster_id, pids=[r.pid for r in c.ranks],
    t=[s["t"].tolist() for s in c.pull("t")])
sys.stdin.readline()                       # hold the cluster until told
c.stop()
say(stopped=True)
"""


@pytest.fixture
def children():
    with child_starter(PRELUDE) as start:
        yield start


def test_cluster_files_are_private_even_with_a_permissive_umask(children, sandbox):
    # A fresh IPYTHONDIR (inside this run's sandbox) so the security folder is created now.
    ipython_dir = sandbox / "ipython-private"
    env = dict(os.environ, IPYTHONDIR=str(ipython_dir))
    child = children("os.umask(0o022)\n" + HOLD_A_CLUSTER, env)
    info = child.read()
    try:
        security = ipython_dir / "profile_default" / "security"
        assert oct(security.stat().st_mode & 0o777) == oct(0o700)
        files = sorted(security.glob("*.json"))
        mine = [f for f in files if info["cluster_id"] in f.name]
        # cluster file + the controller's client and engine connection files
        assert len(mine) >= 3, [f.name for f in files]
        modes = {f.name: oct(f.stat().st_mode & 0o777) for f in files}
        assert set(modes.values()) == {oct(0o600)}, modes
    finally:
        assert child.release() == {"stopped": True}
    assert not list(security.glob(f"*{info['cluster_id']}*"))


def listening(cluster_id: str) -> list[tuple[int, str, int]]:
    found = []
    for proc in cluster_processes(cluster_id):
        with contextlib.suppress(psutil.Error):
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((proc.pid, conn.laddr.ip, conn.laddr.port))
    return found


def remote_ports(cluster_id: str) -> set[int]:
    """Ports the cluster's processes are connected to."""
    ports = set()
    for proc in cluster_processes(cluster_id):
        with contextlib.suppress(psutil.Error):
            ports |= {c.raddr.port for c in proc.net_connections(kind="inet") if c.raddr}
    return ports


def test_two_clusters_at_once_listen_on_loopback_on_ports_of_their_own(children):
    a, b = children(HOLD_A_CLUSTER), children(HOLD_A_CLUSTER)
    one, two = a.read(), b.read()
    assert one["cluster_id"] != two["cluster_id"]
    assert not set(one["pids"]) & set(two["pids"])
    assert one["t"] == two["t"] == [[3.0] * 4] * 2

    ports = {}
    for info in (one, two):
        found = listening(info["cluster_id"])
        assert found, f"cluster {info['cluster_id']} listens nowhere?"
        assert {pid for pid, _, _ in found} & set(info["pids"]), "rank 0's store should listen"
        off_loopback = [entry for entry in found if entry[1] not in LOOPBACK]
        assert not off_loopback, off_loopback
        ports[info["cluster_id"]] = {port for _, _, port in found}
    ports_a, ports_b = ports[one["cluster_id"]], ports[two["cluster_id"]]
    assert not ports_a & ports_b, ports_a & ports_b
    # and neither cluster is connected to a port the other one listens on
    assert not remote_ports(one["cluster_id"]) & ports_b
    assert not remote_ports(two["cluster_id"]) & ports_a

    assert a.release() == {"stopped": True} and b.release() == {"stopped": True}
    assert cluster_processes(one["cluster_id"]) == cluster_processes(two["cluster_id"]) == []
