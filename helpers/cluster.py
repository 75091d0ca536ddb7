"""Start ipyparallel engines and make them the ranks of one torch.distributed world.

    cluster = start_cluster()          # 4 CPU ranks on gloo, or one rank per GPU on NCCL
    %%px                               # every cell now runs on every rank
    ...
    cluster.gather("before", "after")  # values from every rank, in rank order
    cluster.stop()
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import ipyparallel as ipp
import psutil

from helpers import engine

BACKENDS = ("auto", "nccl", "gloo")
DEFAULT_CPU_RANKS = 4
DEFAULT_TIMEOUT_S = 60.0
START_TIMEOUT_S = 120.0

_current: "TutorialCluster | None" = None  # the cluster this kernel started last


class ClusterConfigError(ValueError):
    """The requested ranks/backend cannot run on this machine."""


@dataclass(frozen=True)
class RankInfo:
    rank: int
    engine_id: int
    device: str
    host: str
    pid: int
    gpu: str | None = None


def visible_gpu_count() -> int:
    """GPUs torch can see from this process (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_config(n_ranks: int | None = None, backend: str | None = None,
                   gpu_count: int | None = None) -> tuple[int, str]:
    """Decide (world size, backend) from arguments, then environment, then hardware.

    Arguments win over TUTORIAL_RANKS / TUTORIAL_BACKEND. `auto` means NCCL when
    every rank gets a GPU of its own, gloo on CPU otherwise.
    """
    gpus = visible_gpu_count() if gpu_count is None else gpu_count
    backend = (backend or os.environ.get("TUTORIAL_BACKEND") or "auto").strip().lower()
    if backend not in BACKENDS:
        raise ClusterConfigError(
            f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if n_ranks is None and os.environ.get("TUTORIAL_RANKS", "").strip():
        raw = os.environ["TUTORIAL_RANKS"].strip()
        if not raw.isdigit():
            raise ClusterConfigError(f"TUTORIAL_RANKS must be a whole number, not {raw!r}")
        n_ranks = int(raw)
    if n_ranks is None:
        if backend == "nccl" or (backend == "auto" and gpus >= 2):
            n_ranks = gpus
        else:
            n_ranks = DEFAULT_CPU_RANKS
    if isinstance(n_ranks, bool) or not isinstance(n_ranks, int) or n_ranks < 1:
        raise ClusterConfigError(f"n_ranks must be a positive whole number, not {n_ranks!r}")
    if backend == "auto":
        backend = "nccl" if gpus >= n_ranks else "gloo"
    if backend == "nccl" and gpus < n_ranks:
        raise ClusterConfigError(
            f"backend 'nccl' needs one GPU per rank: {n_ranks} rank(s) were asked for "
            f"but this machine has {gpus} GPU(s). Ask for at most {gpus} rank(s) "
            "(n_ranks=... or TUTORIAL_RANKS), or use backend='gloo' "
            "(TUTORIAL_BACKEND=gloo) to run the ranks on the CPU."
            if gpus else
            f"backend 'nccl' needs one GPU per rank: {n_ranks} rank(s) were asked for "
            "but this machine has no GPU. Use backend='gloo' (TUTORIAL_BACKEND=gloo) "
            "to run the ranks on the CPU.")
    return n_ranks, backend


def cluster_processes(cluster_id: str) -> list[psutil.Process]:
    """Every live process started for the ipyparallel cluster `cluster_id`."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get("IPP_CLUSTER_ID") == cluster_id:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def end_processes(procs: list[psutil.Process], grace_s: float = 3.0) -> None:
    """SIGTERM, wait up to `grace_s`, then SIGKILL whatever is left.

    A zombie counts as ended: its parent (ipyparallel's launcher) reaps it later.
    """
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    deadline = time.monotonic() + grace_s
    alive = [p for p in procs if _running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if _running(p)]
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)


class TutorialCluster:
    """A running set of engines, one per rank, joined in one process group."""

    def __init__(self, ipp_cluster: ipp.Cluster, client: ipp.Client, backend: str,
                 ranks: list[RankInfo], timeout_s: float, reaper: subprocess.Popen):
        self._ipp_cluster = ipp_cluster
        self.client = client
        self.backend = backend
        self.ranks = ranks
        self.timeout_s = timeout_s
        self._reaper = reaper
        self.stopped = False

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    @property
    def cluster_id(self) -> str:
        return self._ipp_cluster.cluster_id

    @property
    def engine_ids(self) -> list[int]:
        """Engine ids in rank order (an engine id is not a rank)."""
        return [info.engine_id for info in self.ranks]

    def gather(self, *names: str) -> list[dict[str, Any]]:
        """Bring named engine variables to the notebook: one dict per rank, in rank order.

        Tensors arrive as {"values": nested list, "dtype": ..., "device": ...}.
        """
        self._check_running()
        view = self.client.direct_view(self.engine_ids)
        per_rank = view.apply_async(engine.pull, list(names)).get(timeout=self.timeout_s)
        return [{"rank": info.rank, **values} for info, values in zip(self.ranks, per_rank)]

    def push(self, **values: Any) -> None:
        """Send notebook values to every rank: `cluster.push(src=src)` defines `src` there."""
        self._check_running()
        self.client.direct_view(self.engine_ids).push(values, block=True)

    def summary(self) -> str:
        lines = [f"{self.world_size} rank(s) · backend {self.backend} · "
                 f"collective timeout {self.timeout_s:g} s",
                 f"{'rank':>4}  {'device':<8} {'host':<16} {'pid':>7}  engine"]
        for r in self.ranks:
            device = f"{r.device} ({r.gpu})" if r.gpu else r.device
            lines.append(f"{r.rank:>4}  {device:<8} {r.host[:16]:<16} {r.pid:>7}  {r.engine_id}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        state = "stopped" if self.stopped else "running"
        return (f"<TutorialCluster {state}: {self.world_size} rank(s), "
                f"backend {self.backend}, id {self.cluster_id}>")

    def stop(self) -> None:
        """Destroy the process groups, then stop every engine quietly. Idempotent."""
        global _current
        if self.stopped:
            return
        self.stopped = True
        if _current is self:
            _current = None
        with contextlib.suppress(Exception):
            self.client.direct_view(self.engine_ids).apply_async(
                engine.leave_group).get(timeout=10)
        with contextlib.suppress(Exception):
            self.client.close()
        # Ending the processes ourselves takes ~1 s; ipyparallel's own stop waits ~3 s
        # and leaves the engine nannies running for seconds more.
        end_processes(cluster_processes(self.cluster_id))
        with _quiet(self._ipp_cluster), contextlib.suppress(Exception):
            self._ipp_cluster.stop_cluster_sync()  # its bookkeeping: the cluster file
        with contextlib.suppress(Exception):
            self._reaper.terminate()
            self._reaper.wait(timeout=5)

    def __enter__(self) -> "TutorialCluster":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _check_running(self) -> None:
        if self.stopped:
            raise RuntimeError("this cluster was stopped: run start_cluster() again")


@contextlib.contextmanager
def _quiet(ipp_cluster: ipp.Cluster):
    """Hide ipyparallel's shutdown chatter ("engine set stopped ... exit_code")."""
    previous = ipp_cluster.log.level
    ipp_cluster.log.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        ipp_cluster.log.setLevel(previous)


def _start_reaper(cluster_id: str) -> subprocess.Popen:
    """A watchdog that ends the cluster's processes if this kernel dies abruptly."""
    return subprocess.Popen(
        [sys.executable, "-m", "helpers.reaper", str(os.getpid()), cluster_id],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # survives a signal sent to the kernel's group
    )


# ipyparallel's own log: its start-up and shutdown chatter has no place in a tutorial.
_IPP_LOG = logging.getLogger("helpers.cluster.ipyparallel")
_IPP_LOG.addHandler(logging.NullHandler())
_IPP_LOG.propagate = False


def _timeout(timeout_s: float | None) -> float:
    """The collective timeout: the argument, else TUTORIAL_TIMEOUT, else 60 s."""
    if timeout_s is None:
        raw = os.environ.get("TUTORIAL_TIMEOUT", "").strip()
        try:
            timeout_s = float(raw) if raw else DEFAULT_TIMEOUT_S
        except ValueError:
            raise ClusterConfigError(
                f"TUTORIAL_TIMEOUT must be a number of seconds, not {raw!r}") from None
    if not timeout_s > 0:
        raise ClusterConfigError(f"the collective timeout must be positive, not {timeout_s!r}")
    return float(timeout_s)


def _shell():
    """The IPython shell this code runs in, or None in a plain Python process."""
    from IPython import get_ipython

    return get_ipython()


def start_cluster(n_ranks: int | None = None, backend: str | None = None,
                  timeout_s: float | None = None, quiet: bool = False) -> TutorialCluster:
    """Start one engine per rank and join them in a torch.distributed process group.

    n_ranks / backend default to TUTORIAL_RANKS / TUTORIAL_BACKEND, then to the
    hardware (one rank per GPU with NCCL when there are 2+ GPUs, else 4 CPU ranks
    on gloo). timeout_s bounds every collective (TUTORIAL_TIMEOUT, default 60 s),
    so a mismatched call raises instead of hanging. A cluster started earlier in
    this kernel is stopped first.
    """
    global _current
    n_ranks, backend = resolve_config(n_ranks, backend)
    timeout_s = _timeout(timeout_s)
    if _current is not None:
        _current.stop()

    ipp_cluster = ipp.Cluster(n=n_ranks, log=_IPP_LOG, controller_ip="127.0.0.1")
    reaper = _start_reaper(ipp_cluster.cluster_id)
    try:
        in_ipython = _shell() is not None
        with _quiet(ipp_cluster):
            client = ipp_cluster.start_and_connect_sync(activate=in_ipython)
        if in_ipython:
            # Blocking %%px, output gathered per engine in engine order, no progress bar.
            _shell().run_line_magic("pxconfig", "--no-stream --progress-after -1")
        engine_ids = sorted(client.ids)[:n_ranks]  # rank = position in the id list
        ranks = _join_process_group(client, engine_ids, backend, timeout_s)
    except BaseException:
        end_processes(cluster_processes(ipp_cluster.cluster_id))
        with _quiet(ipp_cluster), contextlib.suppress(Exception):
            ipp_cluster.stop_cluster_sync()
        reaper.terminate()
        raise
    _current = TutorialCluster(ipp_cluster, client, backend, ranks, timeout_s, reaper)
    if not quiet:
        print(_current.summary())
    return _current


def _join_process_group(client: ipp.Client, engine_ids: list[int], backend: str,
                        timeout_s: float) -> list[RankInfo]:
    world_size = len(engine_ids)
    port = client[engine_ids[0]].apply_async(
        engine.open_store, world_size, timeout_s).get(timeout=START_TIMEOUT_S)
    pending = [
        client[eid].apply_async(engine.join_group, rank, world_size, backend, port,
                                timeout_s, rank)  # one host: local rank = rank
        for rank, eid in enumerate(engine_ids)
    ]
    ranks = []
    for eid, result in zip(engine_ids, pending):
        try:
            info = result.get(timeout=START_TIMEOUT_S)
        except ipp.error.TimeoutError:
            raise TimeoutError(
                f"engine {eid} did not join the {backend} process group within "
                f"{START_TIMEOUT_S:g} s") from None
        ranks.append(RankInfo(rank=info["rank"], engine_id=eid, device=info["device"],
                              host=info["host"], pid=info["pid"], gpu=info["gpu"]))
    return ranks
