"""Watchdog: `python -m helpers.runtime.reaper KERNEL_PID CLUSTER_ID IPYTHONDIR`.

ipyparallel stops a cluster when the process that started it exits normally
(Cluster.shutdown_atexit); a kernel that is killed (SIGKILL, a crash, `os._exit`) leaves
the controller, and the engines, whose heartbeat the controller still answers, with it.
This process, started in its own session by `start_cluster`, waits for the kernel to
disappear and then stops the cluster as `ipcluster stop` does (processes.stop_by_file). A
normal `cluster.stop()` terminates the reaper itself.
"""
from __future__ import annotations

import sys
import time

import psutil

from helpers.runtime.processes import running, stop_by_file

POLL_S = 0.5


def watch(kernel_pid: int, cluster_id: str, ipython_dir: str) -> None:
    """Return once the kernel is gone and the cluster is stopped."""
    try:
        kernel = psutil.Process(kernel_pid)
        while running(kernel):
            time.sleep(POLL_S)
    except psutil.NoSuchProcess:
        pass
    stop_by_file(cluster_id, ipython_dir)


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2], sys.argv[3])
