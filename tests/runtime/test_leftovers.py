"""Nothing left behind: however a kernel ends, its cluster's processes go.

Each test starts a real kernel (jupyter_client, cwd = the repository), starts a
2-engine gloo cluster in it, ends the kernel one way or another, and then counts
the cluster's processes (processes.cluster_processes: its controller, its engines, their
nannies): zero within a bounded time.
Each test has an IPYTHONDIR of its own: a start ends only the orphans of its own
IPYTHONDIR, so tests that count orphans need no lock against other tests' starts.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from jupyter_client import KernelManager

from child import wait_until
from conftest import REPO
from helpers.runtime.cluster import start_cluster
from helpers.runtime.processes import (cluster_processes, end_orphans, orphaned_clusters,
                                       owner_file, owners, record_owner, running)
from helpers.runtime.warm import security_dir

pytestmark = pytest.mark.cold   # start-up, lifecycle, timeouts: never the session's warm engines

GONE_WITHIN_S = 30.0
START_CELL = """
import json, os
from helpers.runtime.cluster import start_cluster
c = start_cluster(2, "gloo", quiet=True)
print(json.dumps({"cluster_id": c.cluster_id, "kernel_pid": os.getpid()}))
"""


@pytest.fixture(autouse=True)
def own_ipython_dir(tmp_path, monkeypatch) -> Path:
    """This test's IPYTHONDIR (inherited by its kernels, engines and child starts)."""
    folder = tmp_path / "ipython"
    folder.mkdir()
    monkeypatch.setenv("IPYTHONDIR", str(folder))
    return folder


def describe(procs: list[psutil.Process]) -> list[str]:
    out = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            out.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
    return out


def reapers(cluster_id: str) -> list[psutil.Process]:
    """The watchdog(s) start_cluster started for this cluster."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            cmd = " ".join(proc.cmdline())
            if "helpers.runtime.reaper" in cmd and cluster_id in cmd and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


@contextlib.contextmanager
def kernel():
    """A python3 kernel in the repository, with this test run's sandbox environment."""
    km = KernelManager(kernel_name="python3")
    # A graceful shutdown/restart runs ipyparallel's atexit stop (seconds on a busy
    # machine): give it time rather than the default 5 s before the kernel is killed.
    km.shutdown_wait_time = 60.0
    km.start_kernel(cwd=str(REPO), env=dict(os.environ))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        yield km, kc
    finally:
        kc.stop_channels()
        with contextlib.suppress(Exception):
            km.shutdown_kernel(now=True)


def run_cell(kc, code: str, timeout_s: float = 180) -> str:
    """Execute `code`; return its stdout; fail the test on an error."""
    stdout, errors = [], []

    def hook(msg):
        kind, content = msg["header"]["msg_type"], msg["content"]
        if kind == "stream" and content["name"] == "stdout":
            stdout.append(content["text"])
        elif kind == "error":
            errors.append("\n".join(content["traceback"]))

    reply = kc.execute_interactive(code, timeout=timeout_s, output_hook=hook)
    assert reply["content"]["status"] == "ok" and not errors, "\n".join(errors)
    return "".join(stdout)


def last_json(text: str) -> dict:
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def start_in_kernel(kc) -> tuple[str, int]:
    """Start the cluster in the kernel; check it really has its processes."""
    info = last_json(run_cell(kc, START_CELL))
    cluster_id, kernel_pid = info["cluster_id"], info["kernel_pid"]
    procs = cluster_processes(cluster_id)
    # controller (+ its schedulers), 2 engines, 2 nannies
    assert len(procs) >= 5, describe(procs)
    assert len(reapers(cluster_id)) == 1, "no reaper watches the kernel"
    return cluster_id, kernel_pid


def connection_files(cluster_id: str) -> list[Path]:
    """The controller's connection files (each holds the cluster's key); call while the
    cluster runs."""
    found = list(security_dir().glob(f"ipcontroller-{cluster_id}-*.json"))
    assert len(found) == 2, found      # engine and client
    return found


def assert_no_connection_files(files: list[Path], timeout_s: float = GONE_WITHIN_S) -> None:
    assert wait_until(lambda: not any(f.exists() for f in files), timeout_s), \
        [str(f) for f in files if f.exists()]


def assert_nothing_left(cluster_id: str, timeout_s: float = GONE_WITHIN_S) -> None:
    assert wait_until(lambda: cluster_processes(cluster_id) == [], timeout_s), \
        describe(cluster_processes(cluster_id))
    assert wait_until(lambda: reapers(cluster_id) == [], timeout_s), \
        describe(reapers(cluster_id))


def test_normal_teardown_leaves_nothing():
    with kernel() as (_km, kc):
        cluster_id, _ = start_in_kernel(kc)
        run_cell(kc, "c.stop()")
        # stop() ends the processes itself: nothing to wait for
        assert cluster_processes(cluster_id) == [], describe(cluster_processes(cluster_id))
        assert_nothing_left(cluster_id, timeout_s=10)
        assert not list(security_dir().glob(f"*{cluster_id}*")), "cluster files left"


def test_kernel_shutdown_without_stop_leaves_nothing():
    with kernel() as (km, kc):
        cluster_id, _ = start_in_kernel(kc)
        km.shutdown_kernel(now=False)
        assert not km.is_alive()
    assert_nothing_left(cluster_id)
    assert not list(security_dir().glob(f"*{cluster_id}*")), "cluster files left"


def test_kernel_restart_leaves_nothing_and_the_new_kernel_has_no_cluster():
    with kernel() as (km, kc):
        cluster_id, old_pid = start_in_kernel(kc)
        km.restart_kernel(now=False)
        kc.wait_for_ready(timeout=120)
        state = last_json(run_cell(kc, (
            "import json, os\n"
            "from helpers.runtime import cluster as cl\n"
            "print(json.dumps({'pid': os.getpid(), 'current': repr(cl._current)}))")))
        assert km.is_alive() and state["pid"] != old_pid
        assert state["current"] == "None"
        assert_nothing_left(cluster_id)
        assert not list(security_dir().glob(f"*{cluster_id}*")), "cluster files left"
        # no other cluster belongs to the new kernel either
        owned = [f.name for f in security_dir().glob("owner-*.json")
                 if json.loads(f.read_text())["owner"][0] == state["pid"]]
        assert owned == [], owned


def test_sigkilled_kernel_leaves_nothing():
    with kernel() as (km, kc):
        cluster_id, kernel_pid = start_in_kernel(kc)
        key_files = connection_files(cluster_id)
        os.kill(kernel_pid, signal.SIGKILL)
        assert wait_until(lambda: not km.is_alive(), 10)
        assert_nothing_left(cluster_id)
        assert_no_connection_files(key_files)


ANOTHER_START = """
import json
from helpers.runtime.cluster import start_cluster
c = start_cluster(2, "gloo", quiet=True)
print(json.dumps({"cluster_id": c.cluster_id}), flush=True)
c.stop()
"""


def test_sigkilled_kernel_and_reaper_orphans_are_ended_by_the_next_start():
    with kernel() as (km, kc):
        cluster_id, kernel_pid = start_in_kernel(kc)
        key_files = connection_files(cluster_id)
        (reaper,) = reapers(cluster_id)
        reaper.kill()   # the watchdog first, so nobody cleans up behind the kernel
        # not our child: it stays a zombie of the kernel until the kernel goes
        assert wait_until(lambda: not running(reaper), 10)
        os.kill(kernel_pid, signal.SIGKILL)
        assert wait_until(lambda: not km.is_alive(), 10)
        # with kernel and reaper gone, the processes are orphans: still there
        assert len(cluster_processes(cluster_id)) >= 5, describe(cluster_processes(cluster_id))

    proc = subprocess.run([sys.executable, "-c", ANOTHER_START], cwd=REPO, env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    other_id = last_json(proc.stdout)["cluster_id"]
    assert other_id != cluster_id
    assert wait_until(lambda: cluster_processes(cluster_id) == [], GONE_WITHIN_S), \
        describe(cluster_processes(cluster_id))
    assert cluster_processes(other_id) == []
    assert_no_connection_files(key_files, timeout_s=0)



KILLED_CHILD = """
import json, time
from helpers.runtime.cluster import start_cluster
c = start_cluster(2, "gloo", quiet=True)
print(json.dumps({"cluster_id": c.cluster_id}), flush=True)
time.sleep(600)
"""


def test_a_killed_kernels_cluster_file_goes_too():
    proc = subprocess.Popen([sys.executable, "-c", KILLED_CHILD], cwd=REPO, env=dict(os.environ),
                            stdout=subprocess.PIPE, text=True)
    try:
        cluster_id = json.loads(proc.stdout.readline())["cluster_id"]
        assert (security_dir() / f"cluster-{cluster_id}.json").exists()
        key_files = connection_files(cluster_id)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert_nothing_left(cluster_id)
    assert_no_connection_files(key_files)
    assert not list(security_dir().glob(f"*{cluster_id}*")), \
        [f.name for f in security_dir().glob(f"*{cluster_id}*")]


SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def gone_pid() -> int:
    """The pid of a process that has ended: an owner that is gone."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def cluster_process(cluster_id: str, owner_pid: int | None) -> subprocess.Popen:
    """A stand-in for one process of cluster `cluster_id` (it carries IPP_CLUSTER_ID, as
    ipyparallel's processes do), and the cluster's owner file, as a start cell writes it:
    naming `owner_pid` as owner and watchdog, or (None) an owner and watchdog long gone."""
    proc = subprocess.Popen(SLEEPER, env=dict(os.environ, IPP_CLUSTER_ID=cluster_id))
    if owner_pid is None:
        gone = [gone_pid(), 0.0]
        security_dir()
        owner_file(cluster_id).write_text(json.dumps({"owner": gone, "watcher": gone}))
    else:
        record_owner(cluster_id, owner_pid, owner_pid)
    return proc


def test_orphan_sweep_stops_a_cluster_whose_owner_and_watchdog_are_gone_only():
    """An owner file naming a live process keeps its cluster; one whose owner and watchdog
    are both gone is stopped: its processes end and its files go."""
    files = {name: security_dir() / f"cluster-{name}.json" for name in ("left", "live")}
    for path in files.values():
        path.write_text("{}")
    orphan = cluster_process("left", None)
    live = cluster_process("live", os.getpid())
    try:
        assert wait_until(lambda: len(cluster_processes("left")) == 1
                          and len(cluster_processes("live")) == 1, 10)
        assert end_orphans() == 1
        assert orphan.wait(timeout=10) is not None and live.poll() is None
        assert files["live"].exists() and owner_file("live").exists(), \
            "the live cluster's files were removed"
        assert not files["left"].exists() and not owner_file("left").exists(), \
            "an orphaned cluster's files should go with it"
        assert end_orphans() == 0
    finally:
        for proc in (orphan, live):
            if proc.poll() is None:
                proc.kill()


def test_an_owner_file_cut_short_counts_as_an_orphan():
    """A start killed while it wrote the file leaves it half written: never a crash."""
    security_dir()
    owner_file("cut").write_text('{"owner": [1')
    assert end_orphans() == 1 and not owner_file("cut").exists()


def test_a_start_ends_the_orphans_of_its_own_ipythondir_only(tmp_path, monkeypatch):
    """Two projects of one user (two IPYTHONDIRs): a start in one never ends the other's
    processes; a start in the orphan's own IPYTHONDIR ends it, and its files."""
    one, two = tmp_path / "one", tmp_path / "two"
    monkeypatch.setenv("IPYTHONDIR", str(one))
    security_dir()
    cluster_file = security_dir() / "cluster-left-behind.json"
    cluster_file.write_text("{}")
    orphan = cluster_process("left-behind", None)
    try:
        assert wait_until(lambda: len(cluster_processes("left-behind")) == 1, 10)
        monkeypatch.setenv("IPYTHONDIR", str(two))
        start_cluster(2, "gloo", quiet=True, warm=False).stop()
        assert orphan.poll() is None, "a start in another IPYTHONDIR ended the orphan"
        assert cluster_file.exists()
        monkeypatch.setenv("IPYTHONDIR", str(one))
        start_cluster(2, "gloo", quiet=True, warm=False).stop()
        assert orphan.wait(timeout=10) is not None, "a start in its IPYTHONDIR left it"
        assert not cluster_file.exists(), "an orphaned cluster's file should go with it"
    finally:
        if orphan.poll() is None:
            orphan.kill()


def test_running_takes_a_process_or_a_pid_and_a_zombie_has_ended():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    assert running(os.getpid()) and running(psutil.Process(os.getpid()))
    assert wait_until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, 10)
    assert not running(child.pid), "a zombie (ended, not yet reaped) counts as ended"
    child.wait()
    assert not running(child.pid)


def test_forgetting_a_cluster_removes_its_files_only(tmp_path):
    """The reaper and the orphan sweep end with forget_cluster_files: a controller that had
    to be SIGKILLed leaves its connection files (the key) and the cluster file."""
    from helpers.runtime.processes import batch_script, forget_cluster_files

    security = tmp_path / "profile_default" / "security"
    security.mkdir(parents=True)
    for kind in ("engine", "client"):
        (security / f"ipcontroller-c1-{kind}.json").write_text("{}")
    (security / "cluster-c1.json").write_text("{}")
    batch_script("c1", "SlurmEngineSetLauncher", str(tmp_path)).write_text("#!/bin/sh\n")
    kept = [batch_script("c2", "SlurmEngineSetLauncher", str(tmp_path)),
            security / "ipcontroller-c2-engine.json", security / "cluster-c10.json"]
    for path in kept:
        path.write_text("{}")
    forget_cluster_files("c1", str(tmp_path))
    assert sorted(security.iterdir()) == sorted(kept)


def test_an_owner_file_is_never_seen_half_written(tmp_path, monkeypatch):
    """Two starts at once (two lanes of a build): one's orphan sweep reads the owner file
    the other is writing. A file cut short counts as an orphan's, so it must appear whole:
    written beside, renamed into place, 0600."""
    import threading

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    security_dir()
    done = threading.Event()
    seen_cut = []

    def write_again_and_again():
        while not done.is_set():
            record_owner("busy", os.getpid(), os.getpid())

    record_owner("busy", os.getpid(), os.getpid())    # a sweep never reads a file not there
    writer = threading.Thread(target=write_again_and_again)
    writer.start()
    try:
        for _ in range(2000):
            if owners(owner_file("busy")) is None:
                seen_cut.append(owner_file("busy").read_bytes())
    finally:
        done.set()
        writer.join()
    assert seen_cut == []
    assert oct(owner_file("busy").stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in security_dir().iterdir()] == ["owner-busy.json"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's boot time")
def test_a_live_owner_is_no_orphan_when_the_clock_moves(tmp_path, monkeypatch):
    """Linux gives its boot time as the wall clock now less the time since boot, so a
    time sync moves it, and psutil's create_time with it. Owners recorded before such a
    step must still read as alive after it, or another start stops a live kernel's
    cluster (four notebooks at once: one's collective cell then waited for good)."""
    import psutil._pslinux as pslinux

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    record_owner("live", os.getpid(), os.getpid())
    boot_time = pslinux.boot_time
    monkeypatch.setattr(pslinux, "boot_time", lambda: boot_time() + 1.0)
    assert orphaned_clusters(str(tmp_path / "ipython")) == []
