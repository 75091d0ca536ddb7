"""Watchdog: `python -m helpers.runtime.reaper KERNEL_PID CLUSTER_ID`.

ipyparallel stops its engines when the kernel exits normally, but a kernel that
is killed (SIGKILL, a crash, `os._exit`) leaves the controller and every engine
running. This process, started in its own session by `start_cluster`, waits for
the kernel to disappear and then ends the cluster's processes. A normal
`cluster.stop()` terminates the reaper itself.
"""
from __future__ import annotations

import sys
import time

import psutil

from helpers.runtime.processes import (cluster_processes, end_processes, forget_cluster_files,
                                       running)

POLL_S = 0.5


def watch(kernel_pid: int, cluster_id: str) -> None:
    """Return once the kernel is gone and the cluster's processes are ended."""
    try:
        kernel = psutil.Process(kernel_pid)
        while running(kernel):
            time.sleep(POLL_S)
    except psutil.NoSuchProcess:
        pass
    # Processes started by the engines a moment before the kernel died may still
    # be appearing: sweep twice.
    for _ in range(2):
        end_processes(cluster_processes(cluster_id))
        time.sleep(1.0)
    forget_cluster_files(cluster_id)  # or `ipcluster list` shows it as a stopped cluster


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2])
