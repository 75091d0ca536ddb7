"""Find and end the processes of a cluster: nothing the series starts may outlive its use.

ipyparallel gives every process it starts for a cluster IPP_CLUSTER_ID in its
environment; a local engine forked from the forkserver (forked_engines.py) has the
forkserver's environment and command line as /proc shows them, and is known by the file
it keeps open instead: the cluster's engine log. Beside each cluster's file, an owner
file names the process that answers for it (the kernel, or the keeper of a warm cluster)
and its watchdog (the reaper, or the keeper). When both are gone, the cluster is an orphan, and the next start
cell of the same user and the same IPYTHONDIR stops it: another project (another
IPYTHONDIR) or another user keeps its own.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    import ipyparallel as ipp


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return {}


def _writes_to(proc: psutil.Process, marker: str) -> bool:
    """Whether a child of a forkserver has a file open whose path holds `marker` (an
    engine keeps its log open, though ipykernel puts a pipe on its fd 1)."""
    try:
        if "multiprocessing.forkserver" not in " ".join(proc.cmdline()):
            return False
        return any(marker in f.path for f in proc.open_files())
    except psutil.Error:
        return False


def _this_users(proc: psutil.Process) -> bool:
    """Run by this user (root reads every process's environment: it must not end others')."""
    try:
        return proc.uids().real == os.getuid()
    except psutil.Error:
        return False


def cluster_processes(cluster_id: str) -> list[psutil.Process]:
    """Every live process of this user started for the ipyparallel cluster `cluster_id`:
    its controller, engines and their nannies."""
    engine_log = f"{os.sep}ipengine-{cluster_id}-"   # LocalEngineSetLauncher's output file
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid() or not _this_users(proc):
            continue
        if (_environ(proc).get("IPP_CLUSTER_ID") == cluster_id
                or _writes_to(proc, engine_log)):
            found.append(proc)
    return found


def current_ipython_dir() -> str:
    """This process's IPYTHONDIR, as an absolute path (what TUTORIAL_IPYTHONDIR holds)."""
    from IPython.paths import get_ipython_dir

    return os.path.realpath(get_ipython_dir())


def security_dir(ipython_dir: str | None = None) -> Path:
    """Where ipyparallel writes a cluster's files, for IPYTHONDIR `ipython_dir`."""
    from IPython.paths import get_ipython_dir

    return Path(ipython_dir or get_ipython_dir()) / "profile_default" / "security"


def batch_script(cluster_id: str, launcher_class: str, ipython_dir: str | None = None) -> Path:
    """Where the slurm launcher's batch script for `launcher_class` of a cluster goes."""
    return security_dir(ipython_dir) / f"batch-{cluster_id}-{launcher_class}.sbatch"


def owner_file(cluster_id: str, ipython_dir: str | None = None) -> Path:
    """Where the owner and the watchdog of a cluster are named."""
    return security_dir(ipython_dir) / f"owner-{cluster_id}.json"


def _started(pid: int) -> float:
    """When `pid` started, on a clock that no time sync moves: clock ticks since boot
    (/proc/PID/stat, field 22). psutil's create_time adds the boot time as the system
    clock gives it now, which can move a second between two readers (psutil's docs:
    "affected by ... time synchronization"); a kernel alive would then read as dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            raise psutil.NoSuchProcess(pid) from None
        return psutil.Process(pid).create_time()         # no procfs (macOS)
    return float(stat.rsplit(")", 1)[1].split()[19])     # after "(comm)": field 3 on


def _identity(pid: int) -> list[float]:
    """[pid, start]: a pid the system gives a new process later is not the same."""
    return [pid, _started(pid)]


def _alive(identity: list[float]) -> bool:
    pid, started = identity
    try:
        return running(int(pid)) and abs(_started(int(pid)) - started) < 0.5
    except (psutil.Error, OSError, ValueError, TypeError):
        return False


def owners(path: Path) -> dict[str, Any] | None:
    """What an owner file names ({"owner": [pid, start], "watcher": [pid, start]}), or
    None where there is none, or half of one (a start killed while it wrote it)."""
    try:
        named = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    whole = isinstance(named, dict) and all(
        isinstance(named.get(k), list) and len(named[k]) == 2 for k in ("owner", "watcher"))
    return named if whole else None


def record_owner(cluster_id: str, owner_pid: int, watcher_pid: int) -> None:
    """Name the process that answers for the cluster and the one that stops it if the
    owner dies abruptly. The file is 0600, as the cluster's own, and renamed into place
    whole: another start's orphan sweep, which counts a file cut short as an orphan's,
    must never read it half written and stop a cluster that is starting."""
    path = owner_file(cluster_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = json.dumps({"owner": _identity(owner_pid), "watcher": _identity(watcher_pid)})
    fd, part = tempfile.mkstemp(dir=path.parent, prefix=".owner-", suffix=".part")  # 0600
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(part, path)
    except BaseException:
        Path(part).unlink(missing_ok=True)
        raise


def forget_cluster_files(cluster_id: str, ipython_dir: str | None = None) -> None:
    """Remove the cluster and connection files of a cluster whose processes are gone, its
    owner file and its batch scripts (slurm): a SIGKILLed controller cannot remove them."""
    folder = security_dir(ipython_dir)
    for path in [folder / f"cluster-{cluster_id}.json", owner_file(cluster_id, ipython_dir),
                 *folder.glob(f"ipcontroller-{cluster_id}-*.json"),
                 *folder.glob(f"batch-{cluster_id}-*.sbatch")]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def stop_cluster(ipp_cluster: "ipp.Cluster | None", cluster_id: str,
                 ipython_dir: str | None = None) -> None:
    """ipyparallel's stop of `ipp_cluster` (engines and controller, then the cluster file),
    if there is one; then whatever of cluster `cluster_id` still runs gets SIGTERM and, at
    once, SIGKILL (a nanny whose engine ended a moment ago: nothing there needs a clean
    exit), and the files a SIGKILLed controller leaves go."""
    if ipp_cluster is not None:
        with contextlib.suppress(Exception):
            ipp_cluster.stop_cluster_sync()
    end_processes(cluster_processes(cluster_id), grace_s=0.0)
    forget_cluster_files(cluster_id, ipython_dir)


def stop_by_file(cluster_id: str, ipython_dir: str | None = None) -> None:
    """Stop a cluster this process did not start, the way `ipcluster stop` does:
    ipyparallel rebuilds its launchers from the cluster file (stop_cluster then stops
    what they started)."""
    import ipyparallel as ipp

    folder = Path(ipython_dir or current_ipython_dir()) / "profile_default"
    ipp_cluster = None
    with contextlib.suppress(Exception):      # no file (stopped already), or half of one
        ipp_cluster = ipp.Cluster.from_file(profile_dir=str(folder), cluster_id=cluster_id)
        ipp_cluster.log.disabled = True
    stop_cluster(ipp_cluster, cluster_id, ipython_dir)


def running(proc: psutil.Process | int) -> bool:
    """Alive and not a zombie (a process, or a pid)."""
    try:
        proc = psutil.Process(proc) if isinstance(proc, int) else proc
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def end_processes(procs: list[psutil.Process], grace_s: float = 3.0,
                  kill_wait_s: float = 5.0) -> None:
    """SIGTERM, wait up to `grace_s`, then SIGKILL whatever is left and wait for it.

    A zombie counts as ended: its parent (ipyparallel's launcher, the forkserver) reaps
    it later, or nobody does (a process adopted by PID 1, which may not reap).
    """
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    alive = _wait_ended([p for p in procs if running(p)], grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    _wait_ended(alive, kill_wait_s)


def _wait_ended(procs: list[psutil.Process], wait_s: float) -> list[psutil.Process]:
    """Poll until none of `procs` runs or `wait_s` passed; those still running."""
    deadline = time.monotonic() + wait_s
    alive = [p for p in procs if running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.01)
        alive = [p for p in alive if running(p)]
    return alive


def orphaned_clusters(ipython_dir: str) -> list[str]:
    """The clusters of IPYTHONDIR `ipython_dir` whose owner and watchdog are both gone."""
    orphans = []
    for path in security_dir(ipython_dir).glob("owner-*.json"):
        named = owners(path)
        if named is None and not path.exists():
            continue                                  # its cluster was stopped meanwhile
        if named is None or not (_alive(named["owner"]) or _alive(named["watcher"])):
            orphans.append(path.stem.removeprefix("owner-"))
    return orphans


def end_orphans(ipython_dir: str | None = None) -> int:
    """Stop what a dead kernel (or keeper) of this user and this IPYTHONDIR (or
    `ipython_dir`) left running, and its files; return the count of clusters stopped."""
    folder = os.path.realpath(ipython_dir) if ipython_dir else current_ipython_dir()
    orphans = orphaned_clusters(folder)
    for cluster_id in orphans:
        stop_by_file(cluster_id, folder)
    return len(orphans)
