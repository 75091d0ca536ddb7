"""Start ipyparallel engines and make them the ranks of one torch.distributed world.

    cluster = start_cluster()          # 4 CPU ranks on gloo, or one rank per GPU on NCCL
    %%px                               # every cell now runs on every rank
    ...
    cluster.pull("before", "after")  # values from every rank, in rank order
    cluster.stop()

Settings and their environment variables: helpers/runtime/config.py. Launchers (local,
mpi, slurm): helpers/runtime/launchers.py. Warm start: helpers/runtime/warm.py.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
from typing import Any, Callable

import ipyparallel as ipp

from helpers.runtime import engine, launchers
from helpers.runtime import warm as warm_start
from helpers.runtime.config import (DEFAULT_TIMEOUT_S, ClusterConfigError, resolve_config,
                                    on_off, resolve_debug, resolve_timeout)
from helpers.runtime.diagnose import show_with_diagnosis
from helpers.runtime.group import START_TIMEOUT_S, RankInfo, join_process_group
from helpers.runtime.folded import Folded
from helpers.runtime.progress import COLD_STAGES, WARM_STAGES, StartProgress, timings_line
from helpers.runtime.tracebacks import quiet_paths_in_tracebacks
from helpers.runtime.transfer import decode
from helpers.runtime.starting import (activate, new_ipp_cluster, private, quiet, shell,
                                      start_processes, start_reaper)
from helpers.runtime.processes import end_orphans, record_owner, stop_cluster


_current: "TutorialCluster | None" = None  # the cluster this kernel started last
# What start_cluster adds to the kernel beside its exception handler, from outside the
# runtime (which imports no lesson code): helpers/debugging/waiting.py registers the
# waiting line of %%px cells here; each is called with the shell and the current cluster.
ON_START: list[Callable[[Any, Callable[[], Any]], None]] = []


def stop_ipp_cluster(ipp_cluster: ipp.Cluster) -> None:
    """processes.stop_cluster, without ipyparallel's chatter."""
    with quiet(ipp_cluster):
        stop_cluster(ipp_cluster, ipp_cluster.cluster_id)


class TutorialCluster:
    """A running set of engines, one per rank, joined in one process group."""

    def __init__(self, ipp_cluster: ipp.Cluster | None, client: ipp.Client, backend: str,
                 ranks: list[RankInfo], timeout_s: float, owner: subprocess.Popen | None,
                 launcher: str = "local", debug: str = "off",
                 lease: warm_start.Lease | None = None, reused: bool = False,
                 cluster_id: str | None = None):
        # None for a warm cluster taken over: its launchers belong to the keeper
        self._ipp_cluster = ipp_cluster
        self._cluster_id = cluster_id or ipp_cluster.cluster_id
        self.client = client
        self.backend = backend
        self.ranks = ranks
        self.timeout_s = timeout_s
        self.launcher = launcher
        self.debug = debug
        self._owner = owner      # the reaper; a warm cluster's keeper is not ours to end
        self._lease = lease      # held while this notebook uses a warm cluster
        self.reused = reused     # True: a warm cluster's engines, not new ones
        self.stopped = False
        # Seconds per start stage, in order: cold "controller", "engines registered",
        # "torch ready", "group joined"; warm "reuse", "group joined".
        self.start_timings: dict[str, float] = {}

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    @property
    def warm(self) -> bool:
        return self._lease is not None

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def engine_ids(self) -> list[int]:
        """Engine ids in rank order (an engine id is not a rank)."""
        return [info.engine_id for info in self.ranks]

    def pull(self, *names: str, alive_only: bool = False) -> list[dict[str, Any]]:
        """Bring named engine variables to the notebook: one dict per rank, in rank order,
        {"rank": r, name: value, ...}.

        Tensors arrive as CPU torch tensors of the rank's dtype, NumPy arrays as arrays,
        containers as lists and dicts (helpers.runtime.transfer). `alive_only`: only from
        the engines still alive (after one died), the dead ranks left out.
        """
        self._check_running()
        ranks = self.ranks
        if alive_only:
            ranks = [info for info in ranks if info.engine_id in self.client.ids]
        view = self.client.direct_view([info.engine_id for info in ranks])
        per_rank = view.apply_async(engine.pull, list(names)).get(timeout=self.timeout_s)
        return [{"rank": info.rank, **decode(values)}
                for info, values in zip(ranks, per_rank)]

    def values(self, name: str) -> list[Any]:
        """`name` on every rank, in rank order (tensors as CPU tensors, as `pull`)."""
        return [state[name] for state in self.pull(name)]

    def apply(self, function: Callable[..., Any], *args: Any,
              timeout_s: float | None = None) -> list[Any]:
        """Call `function(*args)` on every rank; the results, in rank order.

        Waits at most `timeout_s` seconds (default: the cluster's collective timeout).
        """
        self._check_running()
        view = self.client.direct_view(self.engine_ids)
        wait_s = self.timeout_s if timeout_s is None else timeout_s
        return view.apply_async(function, *args).get(timeout=wait_s)

    def run(self, code: str) -> None:
        """Run `code` on every rank and wait for all of them (a %%px cell, as a string)."""
        self._check_running()
        self.client.direct_view(self.engine_ids).execute(code, block=True)

    @property
    def engines_alive(self) -> int:
        """How many of this cluster's engines the controller still has."""
        return len(set(self.client.ids) & set(self.engine_ids))

    def push(self, **values: Any) -> None:
        """Send notebook values to every rank: `cluster.push(src=src)` defines `src` there."""
        self._check_running()
        self.client.direct_view(self.engine_ids).push(values, block=True)

    def summary_line(self) -> str:
        """One line: world size, backend, how the engines came (and the checks and the
        timeout when they are not the defaults)."""
        how = "warm start: engines reused, group re-created" if self.reused else (
            "warm start: engines kept for the next notebook" if self.warm
            else f"new engines ({self.launcher} launcher)")
        parts = [f"{self.world_size} rank(s)", f"backend {self.backend}"]
        if self.debug != "off":
            parts.append(f"checks {self.debug}")
        if self.timeout_s != DEFAULT_TIMEOUT_S:
            parts.append(f"collective timeout {self.timeout_s:g} s")
        return " · ".join([*parts, how])

    def details(self) -> str:
        """The settings, one row per rank (device, host, pid, engine) and the start's
        stage timings: what the summary line leaves out."""
        lines = [f"collective timeout {self.timeout_s:g} s · checks {self.debug} · "
                 f"launcher {self.launcher}",
                 f"{'rank':>4}  {'device':<8} {'host':<16} {'pid':>7}  engine"]
        for r in self.ranks:
            device = f"{r.device} ({r.gpu})" if r.gpu else r.device
            lines.append(f"{r.rank:>4}  {device:<8} {r.host[:16]:<16} {r.pid:>7}  {r.engine_id}")
        if self.start_timings:
            lines.append(timings_line(self.start_timings))
        return "\n".join(lines)

    def summary(self) -> str:
        """The summary line, then the details (what a terminal or a log shows)."""
        return self.summary_folded().text()

    def summary_folded(self) -> Folded:
        """What the start cell shows: the summary line, the details folded under it."""
        return Folded(self.summary_line(), self.details())

    def __repr__(self) -> str:
        state = "stopped" if self.stopped else "running"
        return (f"<TutorialCluster {state}: {self.world_size} rank(s), "
                f"backend {self.backend}, id {self.cluster_id}>")

    def stop(self) -> None:
        """End every engine and the controller quietly (no process is left). Idempotent.

        A warm cluster keeps its engines (emptied) for the next notebook instead.
        """
        global _current
        if self.stopped:
            return
        self.stopped = True
        if _current is self:
            _current = None
        if self.warm:
            self._hand_back()
            return
        with contextlib.suppress(Exception):
            self.client.close()
        # ipyparallel's own stop: engines and controller together, then the cluster file. No
        # leave_group first: an engine stuck in a collective would hold it up, and an
        # ended process leaves its group anyway.
        stop_ipp_cluster(self._ipp_cluster)
        with contextlib.suppress(Exception):
            self._owner.terminate()
            self._owner.wait(timeout=5)

    def _hand_back(self) -> None:
        """Warm: leave the group, empty every namespace, let the next notebook in."""
        try:
            self.client.direct_view(self.engine_ids).apply_async(
                engine.fresh_start).get(timeout=10)
        except Exception:
            warm_start.discard(self.cluster_id)  # not clean: nobody may reuse it
        finally:
            with contextlib.suppress(Exception):
                self.client.close()
            self._lease.release()

    def __enter__(self) -> "TutorialCluster":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _check_running(self) -> None:
        if self.stopped:
            raise RuntimeError("this cluster was stopped: run start_cluster() again")


def start_cluster(n_ranks: int | None = None, backend: str | None = None,
                  timeout_s: float | None = None, quiet: bool = False, *,
                  launcher: str | None = None, debug: str | None = None,
                  warm: bool | None = None, interface: str | None = None) -> TutorialCluster:
    """Start one engine per rank and join them in a torch.distributed process group.

    n_ranks / backend default to TUTORIAL_RANKS / TUTORIAL_BACKEND, then to the
    hardware (one rank per GPU with NCCL when there are 2+ GPUs, else 4 CPU ranks
    on gloo). timeout_s bounds every collective (TUTORIAL_TIMEOUT, default 60 s),
    so a mismatched call raises instead of hanging. debug="detail" (TUTORIAL_DEBUG;
    default "off") checks every collective's arguments across ranks first.
    launcher: "local", "mpi" or "slurm" (TUTORIAL_LAUNCHER); interface: the network
    interface for multi-node runs (TUTORIAL_IFNAME). warm=True (TUTORIAL_WARM_START=1)
    reuses the engines a previous notebook left. A cluster started earlier in this
    kernel is stopped first; processes a dead kernel of this user left behind under
    the same IPYTHONDIR are ended (another IPYTHONDIR's are left alone).
    In a Jupyter kernel the cell shows what it waits for, then the summary
    (quiet=True: nothing); `cluster.start_timings` has each stage's seconds.
    """
    global _current
    try:
        launcher = launchers.resolve_launcher(launcher)
        if launcher == "mpi":
            launchers.require_mpi()
    except (ValueError, RuntimeError) as err:
        raise ClusterConfigError(str(err)) from None
    n_ranks, backend = resolve_config(n_ranks, backend, multi_node=launcher == "slurm")
    timeout_s = resolve_timeout(timeout_s)
    debug = resolve_debug(debug)
    use_warm = warm_start.warm_requested(warm) and launcher == "local"
    # The README's other settings, checked now whether or not this start reads them:
    on_off("TUTORIAL_WARM_START")       # (warm= given wins over it)
    warm_start.idle_seconds()           # (read by the warm cluster's keeper)
    on_off("TUTORIAL_OFFLINE")          # (read by the diagrams)
    try:
        plan = launchers.cluster_options(launcher, n_ranks, interface=interface)
    except ValueError as err:
        raise ClusterConfigError(str(err)) from None
    if _current is not None:
        _current.stop()
    end_orphans()

    cluster = None
    progress = StartProgress(n_ranks, WARM_STAGES if use_warm else COLD_STAGES,
                             show=not quiet)
    if use_warm:
        cluster = _take_warm_cluster(n_ranks, backend, timeout_s, debug, plan, progress)
        if cluster is None:
            progress.restart(COLD_STAGES)
    if cluster is None:
        try:
            cluster = _start_new_cluster(n_ranks, backend, timeout_s, debug, plan, use_warm,
                                         progress)
        except BaseException as err:
            progress.failed(err)
            raise
    cluster.start_timings = dict(progress.timings)
    _current = cluster
    ipython = shell()
    if ipython is not None:
        from ipyparallel.error import CompositeError, RemoteError

        # ■ during %%px surfaces as KeyboardInterrupt or "TimeoutError: result not ready"
        ipython.set_custom_exc((CompositeError, RemoteError, KeyboardInterrupt, TimeoutError),
                               show_with_diagnosis(lambda: _current))
        for add in ON_START:
            add(ipython, lambda: _current)
        quiet_paths_in_tracebacks(ipython)   # no machine paths in any error this kernel shows
    if not quiet:
        if progress.shown:
            progress.finish(cluster.summary_folded().bundle())
        else:
            print(cluster.summary())
    return cluster


def _start_new_cluster(n_ranks: int, backend: str, timeout_s: float, debug: str,
                       plan: launchers.LaunchPlan, warm: bool,
                       progress: StartProgress) -> TutorialCluster:
    lease = None
    if warm:
        cluster_id = warm_start.warm_cluster_id(n_ranks)
        lease = warm_start.Lease(cluster_id)
        if lease.acquire():
            warm_start.discard(cluster_id)  # whatever an unusable warm cluster left
        else:
            lease, warm = None, False       # in use by another notebook: start cold
    if warm:
        owner = warm_start.start_keeper(cluster_id)
        # ipyparallel's own local engines: they outlive this kernel, which a forked engine
        # does not (forked_engines ends them at this process's exit)
        ipp_cluster = new_ipp_cluster(plan, cluster_id=cluster_id, shutdown_atexit=False,
                                      engine_launcher_class="local")
    else:
        ipp_cluster = new_ipp_cluster(plan)
        owner = start_reaper(ipp_cluster.cluster_id)
    # Who answers for the processes: the keeper of a warm cluster, else this kernel.
    record_owner(ipp_cluster.cluster_id, owner.pid if warm else os.getpid(), owner.pid)
    try:
        with quiet(ipp_cluster), private():
            client = start_processes(ipp_cluster, n_ranks, progress)
        ids = sorted(client.ids)[:n_ranks]
        client[ids].apply_async(engine.ready).get(timeout=START_TIMEOUT_S)
        progress.done("torch ready")
        ranks = join_process_group(client, backend, timeout_s, debug, plan, n_ranks)
        progress.done("group joined")
    except BaseException:
        stop_ipp_cluster(ipp_cluster)
        owner.terminate()
        if lease is not None:
            lease.release()
        raise
    return TutorialCluster(ipp_cluster, client, backend, ranks, timeout_s, owner,
                           launcher=plan.launcher, debug=debug, lease=lease)


def _take_warm_cluster(n_ranks: int, backend: str, timeout_s: float, debug: str,
                       plan: launchers.LaunchPlan,
                       progress: StartProgress) -> TutorialCluster | None:
    """Reuse the warm cluster of this shape if it is free and healthy; else None."""
    cluster_id = warm_start.warm_cluster_id(n_ranks)
    if not (warm_start.security_dir() / f"cluster-{cluster_id}.json").exists():
        return None
    lease = warm_start.Lease(cluster_id)
    if not lease.acquire():
        return None
    client = None
    try:
        # The controller's client file is all a client needs (ipp.Cluster.from_file
        # rebuilds every launcher: 0.15 s).
        client = ipp.Client(str(warm_start.security_dir()
                                / f"ipcontroller-{cluster_id}-client.json"),
                            cluster_id=cluster_id, timeout=10)
        # The controller's answer to the connection lists the engines it has. Every engine
        # of a warm cluster registered before it was first handed out, and a dead one has
        # been reported by its nanny: one short now never comes back (waiting for it cost
        # every start after a crash 10 s).
        if len(client.ids) != n_ranks:
            raise RuntimeError(f"{len(client.ids)} engines instead of {n_ranks}")
        client[sorted(client.ids)].apply_async(engine.fresh_start).get(timeout=10)
        activate(client)
        progress.done("reuse")
        ranks = join_process_group(client, backend, timeout_s, debug, plan, n_ranks)
        progress.done("group joined")
    except Exception:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        warm_start.discard(cluster_id)   # broken or half-gone: a new one takes its place
        lease.release()
        return None
    return TutorialCluster(None, client, backend, ranks, timeout_s, None, launcher="local",
                           debug=debug, lease=lease, reused=True, cluster_id=cluster_id)
