"""Warm start (opt-in): the engines of one notebook serve the next one.

Starting engines is most of a start cell (about 7 s for 4 CPU engines). With
TUTORIAL_WARM_START=1 (or `start_cluster(warm=True)`), the first notebook starts
a cluster named after its shape and leaves it running at teardown; the next
notebook asking for the same shape takes it over: its process group is
re-created and every engine's namespace emptied, so nothing carries over.

- A lock file says who is using a warm cluster (the OS frees it when a kernel
  dies), so two notebooks never share one: the second starts a cold cluster.
- A keeper process (`python -m helpers.runtime.warm keep ...`) owns the warm cluster and
  ends it after TUTORIAL_WARM_IDLE seconds (default 300) without a user.
- `stop_warm_clusters()` (or `python -m helpers.runtime.warm stop`) ends them at once;
  `make html WARM=1` calls it when the build is done.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

from helpers.runtime import processes
from helpers.runtime.config import ClusterConfigError, on_off
from helpers.runtime.processes import (cluster_processes, end_processes, forget_cluster_files,
                                       owner_file, owners)

PREFIX = "nccl-notebooks-warm"
DEFAULT_IDLE_S = 300.0
POLL_S = 1.0


def warm_requested(warm: bool | None = None) -> bool:
    """The argument, else TUTORIAL_WARM_START (1/true/yes/on; 0/false/no/off; anything
    else is an error), else False."""
    if warm is not None:
        return bool(warm)
    return on_off("TUTORIAL_WARM_START")


def idle_seconds() -> float:
    raw = os.environ.get("TUTORIAL_WARM_IDLE", "").strip()
    try:
        value = float(raw) if raw else DEFAULT_IDLE_S
    except ValueError:
        raise ClusterConfigError(
            f"TUTORIAL_WARM_IDLE must be a number of seconds, not {raw!r}") from None
    if not value > 0:
        raise ClusterConfigError(f"TUTORIAL_WARM_IDLE must be positive, not {raw!r}")
    return value


def warm_cluster_id(n_ranks: int) -> str:
    """One name per shape, per IPYTHONDIR and per engine settings (process lookups go by
    this name): engines started with another OMP_NUM_THREADS are not reused."""
    import hashlib

    from helpers.runtime.launchers import engine_settings

    settings = sorted(engine_settings(n_ranks).items())
    place = hashlib.sha256(f"{security_dir()}{settings}".encode()).hexdigest()[:8]
    return f"{PREFIX}-{n_ranks}-{place}"


def security_dir() -> Path:
    """Where ipyparallel keeps cluster files (IPYTHONDIR's default profile), made 0700."""
    path = processes.security_dir()
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


class Lease:
    """An exclusive claim on one warm cluster, held while a notebook uses it."""

    def __init__(self, cluster_id: str):
        self.cluster_id = cluster_id
        self.path = security_dir() / f"{cluster_id}.lock"
        self._fd: int | None = None

    def acquire(self, wait_s: float = 2.0) -> bool:
        """Take the claim; False if another notebook holds it for `wait_s`."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._fd = fd
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.1)

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
            self._fd = None


def start_keeper(cluster_id: str) -> subprocess.Popen:
    """The process that owns a warm cluster and ends it once it is idle too long."""
    return subprocess.Popen(
        [sys.executable, "-m", "helpers.runtime.warm", "keep", cluster_id, str(idle_seconds())],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # outlives the kernel that started it
    )


def discard(cluster_id: str) -> None:
    """End a warm cluster's processes and forget its files (the caller holds the lease)."""
    end_processes(cluster_processes(cluster_id))
    forget_cluster_files(cluster_id)


def keep(cluster_id: str, idle_s: float, start_grace_s: float = 180.0) -> None:
    """Keeper loop: end the cluster after `idle_s` without a lease holder.

    Finding the cluster's processes reads every process's environment (5 ms of CPU among
    a hundred processes, more among more): the keeper looks only until it finds them, then
    watches those, and looks again before it concludes they are all gone.
    """
    started_at = idle_since = time.monotonic()
    ours: list = []
    while True:
        time.sleep(POLL_S)
        if not any(processes.running(proc) for proc in ours):
            # Only the processes this keeper owns: a new cluster under the same name has its own.
            seen = bool(ours)
            ours = cluster_processes(cluster_id) if _keeps(cluster_id) else []
            if (seen and not ours) or (
                    not ours and time.monotonic() - started_at > start_grace_s):
                return  # stopped by someone else, or never started
        lease = Lease(cluster_id)
        if not lease.acquire(wait_s=0):
            idle_since = time.monotonic()
            continue
        try:
            if time.monotonic() - idle_since > idle_s:
                discard(cluster_id)
                return
        finally:
            lease.release()


def _keeps(cluster_id: str) -> bool:
    """Whether this process is the keeper the cluster's owner file names: a new cluster
    started under the same name has a keeper of its own."""
    named = owners(owner_file(cluster_id))
    return named is not None and named["watcher"][0] == os.getpid()


def stop_warm_clusters() -> list[str]:
    """End every warm cluster of this IPYTHONDIR now; return their ids."""
    stopped = []
    folder = security_dir()
    # By cluster file, and by lease file: a cluster may have lost its file, not its lease.
    ids = {p.stem.removeprefix("cluster-") for p in folder.glob(f"cluster-{PREFIX}-*.json")}
    ids |= {p.stem for p in folder.glob(f"{PREFIX}-*.lock") if cluster_processes(p.stem)}
    for cluster_id in sorted(ids):
        lease = Lease(cluster_id)
        lease.acquire(wait_s=5.0)  # wait for a notebook that is finishing; then go anyway
        try:
            discard(cluster_id)
        finally:
            lease.release()
        stopped.append(cluster_id)
    return stopped


if __name__ == "__main__":
    if sys.argv[1:2] == ["keep"]:
        keep(sys.argv[2], float(sys.argv[3]))
    elif sys.argv[1:2] == ["stop"]:
        for cid in stop_warm_clusters():
            print(f"stopped {cid}")
    else:
        sys.exit("usage: python -m helpers.runtime.warm keep CLUSTER_ID IDLE_S | stop")
