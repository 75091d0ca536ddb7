"""Find and end the processes of a cluster: nothing the series starts may outlive its use.

Every process ipyparallel starts for a cluster carries IPP_CLUSTER_ID in its
environment; ours also carry TUTORIAL_OWNER_PID, the process that answers for
them (the kernel, or the keeper of a warm cluster), and TUTORIAL_IPYTHONDIR, the
IPYTHONDIR whose profile holds the cluster's files. When the owner is gone, the
processes are orphans, and the next start cell of the same user and the same
IPYTHONDIR ends them: another project (another IPYTHONDIR) or another user keeps its own.
"""
from __future__ import annotations

import contextlib
import os
import signal
import stat
import tempfile
import time
from pathlib import Path

import psutil

OWNER_VARIABLE = "TUTORIAL_OWNER_PID"
IPYTHONDIR_VARIABLE = "TUTORIAL_IPYTHONDIR"
NANNY_NAME = "ipp-nanny"   # what ps, top and psutil's name() show for a forked nanny


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return {}


def _this_users(proc: psutil.Process) -> bool:
    """Run by this user (root reads every process's environment: it must not end others')."""
    try:
        return proc.uids().real == os.getuid()
    except psutil.Error:
        return False


def cluster_processes(cluster_id: str) -> list[psutil.Process]:
    """Every live process of this user started for the ipyparallel cluster `cluster_id`."""
    return [proc for proc in psutil.process_iter()
            if proc.pid != os.getpid() and _environ(proc).get("IPP_CLUSTER_ID") == cluster_id
            and _this_users(proc)]


def owned_by(procs: list[psutil.Process], owner_pid: int) -> list[psutil.Process]:
    """Those of `procs` whose owner (TUTORIAL_OWNER_PID) is `owner_pid`."""
    return [p for p in procs if _environ(p).get(OWNER_VARIABLE) == str(owner_pid)]


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


def forget_cluster_files(cluster_id: str, ipython_dir: str | None = None) -> None:
    """Remove the cluster and connection files of a cluster whose processes are gone, and
    its batch scripts (slurm): a controller that was SIGKILLed could not remove them."""
    folder = security_dir(ipython_dir)
    for path in [folder / f"cluster-{cluster_id}.json",
                 *folder.glob(f"ipcontroller-{cluster_id}-*.json"),
                 *folder.glob(f"batch-{cluster_id}-*.sbatch")]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def private_socket_dir() -> Path:
    """An owner-only (0700) folder for this user's unix sockets (the engines' zygote),
    made if missing.

    $XDG_RUNTIME_DIR/nccl-notebooks when that is set (a per-user folder already), else
    <temp dir>/nccl-notebooks-<uid>. A folder of that name that another user owns, that
    is a link, or that others can enter is refused: /tmp is shared.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    folder = (Path(runtime) / "nccl-notebooks" if runtime and os.path.isdir(runtime)
              else Path(tempfile.gettempdir()) / f"nccl-notebooks-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise RuntimeError(f"{folder} is not a folder of this user: remove it, or set "
                           "XDG_RUNTIME_DIR to a private folder")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise RuntimeError(f"{folder} can be entered by other users "
                           f"(mode {stat.S_IMODE(info.st_mode):o}): chmod 700 it")
    return folder


def running(proc: psutil.Process | int) -> bool:
    """Alive and not a zombie (a process, or a pid)."""
    try:
        proc = psutil.Process(proc) if isinstance(proc, int) else proc
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_forked(pid: int) -> None:
    """SIGKILL a forked child's process group, and the child itself: until its setsid it is
    still in its parent's group."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)


def end_forked(pids: set[int]) -> None:
    """kill_forked each of `pids`, children of this process, and reap it."""
    for pid in pids:
        kill_forked(pid)
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def end_processes(procs: list[psutil.Process], grace_s: float = 3.0,
                  kill_wait_s: float = 5.0) -> None:
    """SIGTERM, wait up to `grace_s`, then SIGKILL whatever is left and wait for it.

    A zombie counts as ended: its parent (ipyparallel's launcher) reaps it later, or
    nobody does (an engine forked by another is adopted by PID 1, which may not reap).
    A forked nanny gets SIGKILL at once: on SIGTERM it would report its engine's end to
    a controller that is ending too (engine_boot._nanny_class), and linger up to 1 s.
    """
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            if proc.name() == NANNY_NAME:
                proc.kill()
            else:
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


def orphaned_processes(ipython_dir: str) -> list[psutil.Process]:
    """This user's cluster processes of IPYTHONDIR `ipython_dir` whose owner process is gone."""
    orphans = []
    for proc in psutil.process_iter():
        env = _environ(proc)
        owner = env.get(OWNER_VARIABLE, "")
        if (proc.pid == os.getpid() or not env.get("IPP_CLUSTER_ID") or not owner.isdigit()
                or env.get(IPYTHONDIR_VARIABLE) != ipython_dir or not _this_users(proc)):
            continue
        try:
            owner_alive = running(psutil.Process(int(owner)))
        except psutil.NoSuchProcess:
            owner_alive = False
        if not owner_alive:
            orphans.append(proc)
    return orphans


def end_orphans(ipython_dir: str | None = None) -> int:
    """End what a dead kernel (or keeper) of this user and this IPYTHONDIR (or `ipython_dir`)
    left running, and its files; return the count of processes ended."""
    folder = os.path.realpath(ipython_dir) if ipython_dir else current_ipython_dir()
    orphans = orphaned_processes(folder)
    clusters = {_environ(proc).get("IPP_CLUSTER_ID") for proc in orphans}
    if orphans:
        end_processes(orphans)
    for cluster_id in clusters:
        # A warm cluster's name is reused: keep the files of a live cluster of that name.
        if cluster_id and not cluster_processes(cluster_id):
            forget_cluster_files(cluster_id, folder)
    return len(orphans)
