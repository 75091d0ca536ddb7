"""How the engines are started: `local`, `mpi` (mpiexec) or `slurm` (sbatch/srun).

    plan = cluster_options(resolve_launcher(None), 4)
    cluster = ipp.Cluster(**plan.cluster_kwargs)
    apply(plan, cluster)                 # launcher settings go on cluster.config
    cluster.start_and_connect_sync()

The notebook side builds a `LaunchPlan` (data). The engine side needs only
`rank_from_environment()`, which reads the ranks that mpiexec or srun gave the process
(stdlib only).

On one host (local, mpi) the controller is ipyparallel's own, on 127.0.0.1 (its messages
HMAC-signed with the key of an owner-only connection file: docs/security.md), and the
engines watch its heartbeat: they leave by themselves when it is gone.
"""
from __future__ import annotations

import copy
import functools
import math
import os
import shlex
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # engines import this module too: keep ipyparallel off its import path
    import ipyparallel as ipp

LAUNCHERS = ("local", "mpi", "slurm")
LOOPBACK = "127.0.0.1"

# ipyparallel's class names (ipyparallel/cluster/launcher.py, entry points "mpi"/"slurm";
# ipp_compat: launcher-class-names)
MPI_ENGINES = "MPIEngineSetLauncher"
SLURM_ENGINES = "SlurmEngineSetLauncher"
SLURM_CONTROLLER = "SlurmControllerLauncher"
LOCAL_ENGINES = "LocalEngineSetLauncher"
# The local engines: forked from this process's standard-library forkserver by our launcher
# plug-in (helpers/runtime/forked_engines.py, entry point "forkserver" in pyproject.toml),
# where the platform has a forkserver; ipyparallel's own local launcher elsewhere.
FORKSERVER_ENGINES = "forkserver"
# The controller counts an engine as registered at the heartbeat after its first pong: up
# to 2 periods, 3 s each by default: 0.25 s instead (controller_args).
HEARTBEAT_PERIOD_MS = 250
# An engine checks for the controller's heartbeat every period + 0.5 s (IPEngine.
# start_heartbeat) and exits after this many checks in a row without one: a SIGKILLed
# controller's engines are gone within about 6 s (tests/runtime/test_loopback.py) instead
# of ipyparallel's 50 (37 s).
HEARTBEAT_MISSES = 8
ENGINE_ARGS = [f"--IPEngine.max_heartbeat_misses={HEARTBEAT_MISSES}"]
# How long the controller hears nothing from an engine before it counts it dead, in
# heartbeat periods. One host: 30 s, ipyparallel's own (10 x 3 s); an engine that ends is
# reported at once by its nanny anyway. Slurm: 10 s. A job's end (scancel, the time limit)
# signals every process of the step at once, the nannies included, and an engine busy in
# a cell outlives its SIGTERM until the SIGKILL that comes KillWait later: from then on
# only the missing heartbeat tells the controller, and a cell on the cancelled engines.
CONTROLLER_MISSES = {"local": 120, "mpi": 120, "slurm": 40}


def controller_args(launcher: str) -> list[str]:
    """The heartbeat settings of `launcher`'s controller (see CONTROLLER_MISSES)."""
    return [f"--HeartMonitor.period={HEARTBEAT_PERIOD_MS}",
            f"--HeartMonitor.max_heartmonitor_misses={CONTROLLER_MISSES[launcher]}"]


def local_engine_launcher() -> str:
    """"forkserver" (our plug-in) where this process can use one, else ipyparallel's own
    "local" (start_method.forkserver_usable)."""
    from helpers.runtime.start_method import forkserver_usable

    return FORKSERVER_ENGINES if forkserver_usable() else "local"


@dataclass(frozen=True)
class LaunchPlan:
    """What to hand ipyparallel, and where the ranks meet.

    cluster_kwargs: keyword arguments for `ipp.Cluster(...)`.
    config: traitlets config, {"LauncherClass": {"trait": value}}, for `cluster.config`.
    rendezvous_host: the address rank 0's TCPStore and gloo bind (see cluster_options).
    interface: network interface for GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME.
    """

    launcher: str
    n_ranks: int
    cluster_kwargs: dict[str, Any]
    config: dict[str, dict[str, Any]] = field(default_factory=dict)
    rendezvous_host: str = LOOPBACK
    interface: str = "lo"


def resolve_launcher(name: str | None = None) -> str:
    """The launcher: the argument, else $TUTORIAL_LAUNCHER, else "local"."""
    raw = name if name is not None else os.environ.get("TUTORIAL_LAUNCHER", "")
    chosen = raw.strip().lower() or "local"
    if chosen not in LAUNCHERS:
        source = "launcher" if name is not None else "TUTORIAL_LAUNCHER"
        raise ValueError(
            f"{source} must be one of {', '.join(LAUNCHERS)}, not {raw!r}")
    return chosen


def interface_address(name: str) -> str:
    """The IPv4 address of network interface `name` (e.g. "eth0", "ib0", "lo")."""
    import psutil

    interfaces = psutil.net_if_addrs()
    if name not in interfaces:
        raise ValueError(
            f"no network interface named {name!r}; this machine has: "
            f"{', '.join(sorted(interfaces))}")
    for addr in interfaces[name]:
        if addr.family == socket.AF_INET:
            return addr.address
    raise ValueError(f"network interface {name!r} has no IPv4 address")


@functools.lru_cache(maxsize=None)
def mpi_flavor(mpiexec: str = "mpiexec") -> str | None:
    """"openmpi" (4.x and older, ORTE), "openmpi5" (PRRTE), "mpich" (Hydra: MPICH,
    Intel MPI) or None when `mpiexec` is missing or unrecognised."""
    path = shutil.which(mpiexec)
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    if "OpenRTE" in out:
        return "openmpi"
    if "Open MPI" in out:
        return "openmpi5"
    if "HYDRA" in out or "MPICH" in out or "Intel" in out:
        return "mpich"
    return None


def mpi_args(flavor: str | None = "openmpi", as_root: bool | None = None) -> list[str]:
    """mpiexec arguments for one host with more ranks than cores.

    Open MPI refuses both by default; `--mca btl self,<shared memory>` keeps the
    ranks from opening TCP listeners on every interface (ports 1024+). Hydra
    (MPICH, Intel MPI) allows root and oversubscription and rejects these flags.
    """
    if flavor not in ("openmpi", "openmpi5"):
        return []
    as_root = os.geteuid() == 0 if as_root is None else as_root
    shared_memory = "vader" if flavor == "openmpi" else "sm"
    return (["--oversubscribe"] + (["--allow-run-as-root"] if as_root else [])
            + ["--mca", "btl", f"self,{shared_memory}"])


def require_mpi(mpiexec: str = "mpiexec") -> None:
    """Raise RuntimeError unless `mpiexec` is on PATH and mpi4py imports.

    Engines started with `--mpi` import mpi4py for their id (= MPI rank).
    """
    import importlib.util

    missing = []
    if shutil.which(mpiexec) is None:
        missing.append(f"{mpiexec!r} is not on PATH (Debian/Ubuntu: "
                       "apt-get install openmpi-bin libopenmpi-dev)")
    if importlib.util.find_spec("mpi4py") is None:
        missing.append("mpi4py is not installed (pip install mpi4py)")
    if missing:
        raise RuntimeError("the mpi launcher needs MPI: " + "; ".join(missing))


def _escape(value: str) -> str:
    """Literal text inside an ipyparallel batch template (it is str.format-ed)."""
    return value.replace("{", "{{").replace("}", "}}")


def _slurm_options() -> list[str]:
    """#SBATCH lines for partition / account / time from TUTORIAL_SLURM_*."""
    lines = []
    for env, flag in (("TUTORIAL_SLURM_PARTITION", "partition"),
                      ("TUTORIAL_SLURM_ACCOUNT", "account"),
                      ("TUTORIAL_SLURM_TIME", "time")):
        value = os.environ.get(env, "").strip()
        if value:
            lines.append(f"#SBATCH --{flag}={_escape(value)}")
    return lines


def _gpus_per_node(gpus_per_node: int | None) -> int:
    if gpus_per_node is None:
        raw = os.environ.get("TUTORIAL_SLURM_GPUS_PER_NODE", "").strip()
        if not raw:
            raise ValueError(
                "the slurm launcher needs the number of GPUs per node: pass "
                "gpus_per_node=... or set TUTORIAL_SLURM_GPUS_PER_NODE (0 for CPU ranks)")
        if not raw.isdigit():
            raise ValueError(
                f"TUTORIAL_SLURM_GPUS_PER_NODE must be a whole number, not {raw!r}")
        gpus_per_node = int(raw)
    if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) \
            or gpus_per_node < 0:
        raise ValueError(f"gpus_per_node must be a whole number >= 0, not {gpus_per_node!r}")
    return gpus_per_node


def slurm_engine_template(n_ranks: int, gpus_per_node: int) -> str:
    """sbatch script for the engines: n_ranks tasks, one per GPU, GPUs visible per node.

    `--gres=gpu:G` with `--ntasks-per-node=G` (not `--gpus-per-task=1`) keeps every
    GPU of the node visible to every task, so local rank = CUDA device index.
    """
    lines = ["#!/bin/sh", "#SBATCH --export=ALL",
             "#SBATCH --job-name=ipengine-{cluster_id}", f"#SBATCH --ntasks={n_ranks}"]
    if gpus_per_node:
        per_node = min(gpus_per_node, n_ranks)
        lines += [f"#SBATCH --nodes={math.ceil(n_ranks / per_node)}",
                  f"#SBATCH --ntasks-per-node={per_node}",
                  f"#SBATCH --gres=gpu:{per_node}"]
    lines += _slurm_options()
    lines += ["#SBATCH --output={output_file}", "srun {program_and_args}", ""]
    return "\n".join(lines)


def slurm_controller_template(interface: str, python: str | None = None) -> str:
    """sbatch script for the controller: it listens on `interface` of whatever node
    Slurm picks (its address is looked up there, at run time)."""
    import sys

    python = python or sys.executable
    lookup = (f"{shlex.quote(python)} -c 'import psutil, socket, sys; print([a.address "
              f"for a in psutil.net_if_addrs()[sys.argv[1]] if a.family == socket.AF_INET][0])' "
              f"{shlex.quote(interface)}")
    lines = ["#!/bin/sh", "#SBATCH --export=ALL",
             "#SBATCH --job-name=ipcontroller-{cluster_id}", "#SBATCH --ntasks=1",
             *_slurm_options(), "#SBATCH --output={output_file}",
             f'IP="$({_escape(lookup)})" || exit 1',
             '{program_and_args} --ip="$IP"', ""]
    return "\n".join(lines)


def engine_log_env() -> dict[str, str]:
    """The engines' C++ log level: ERROR, unless TORCH_CPP_LOG_LEVEL is set already.

    torch's C++ warnings (c10d's "[W... socket.cpp:469] waitForInput: ... likely a
    timeout" while a store waits) go to the engine's stderr, which %%px shows under every
    rank; errors (a monitored barrier naming the ranks that never came) still do. c10
    reads the variable once, when torch is imported: it must be in the engines' start
    environment (the local engines import torch before they fork).
    """
    return {"TORCH_CPP_LOG_LEVEL": os.environ.get("TORCH_CPP_LOG_LEVEL") or "ERROR"}


def engine_threads_env(ranks_per_host: int) -> dict[str, str]:
    """OMP_NUM_THREADS=1 for engines that share a host, unless OMP_NUM_THREADS is set.

    torchrun does the same for its ranks "to avoid your system being overloaded"
    (torch/distributed/run.py): several ranks, each with an intra-op pool sized for the
    whole host, compete for its cores. torch sizes that pool from the variable, so it must
    be in the engines' start environment. A value the user set is passed on as it is.
    """
    asked = os.environ.get("OMP_NUM_THREADS", "").strip()
    if asked:
        return {"OMP_NUM_THREADS": asked}
    return {"OMP_NUM_THREADS": "1"} if ranks_per_host > 1 else {}


def engine_settings(ranks_per_host: int) -> dict[str, str]:
    """What the engines, `ranks_per_host` of them on a host, take from this process's
    environment: their C++ log level and their OpenMP threads."""
    return {**engine_log_env(), **engine_threads_env(ranks_per_host)}


def local_engine_env(ranks_per_host: int) -> dict[str, str]:
    """What the engines of one host start with, over this process's environment: torch's
    store and gloo (and NCCL) on loopback, and engine_settings."""
    return {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo",
            **engine_settings(ranks_per_host)}


def cluster_options(launcher: str | None, n_ranks: int, *, interface: str | None = None,
                    gpus_per_node: int | None = None, controller: str = "slurm",
                    mpiexec: str = "mpiexec") -> LaunchPlan:
    """The LaunchPlan for `n_ranks` engines started by `launcher`.

    local: one host; ipyparallel's controller on 127.0.0.1, torch's store and gloo on
    loopback, engines that leave when the controller's heartbeat stops (ENGINE_ARGS).
    mpi: the same, engines by mpiexec with `--oversubscribe` (+ `--allow-run-as-root`
    as root) for Open MPI.
    slurm: engines by sbatch/srun, one task per GPU on ceil(n / gpus_per_node)
    nodes; the controller by sbatch too (controller="local": next to the notebook),
    listening on `interface` (else $TUTORIAL_IFNAME; required): engines on other
    nodes cannot reach loopback.

    rendezvous_host is loopback for local/mpi; for slurm it is `interface`'s
    address *on this host*. Rank 0 runs on a compute node: resolve it there with
    `interface_address(plan.interface)`.
    """
    launcher = resolve_launcher(launcher)
    config: dict[str, dict[str, Any]]
    if isinstance(n_ranks, bool) or not isinstance(n_ranks, int) or n_ranks < 1:
        raise ValueError(f"n_ranks must be a positive whole number, not {n_ranks!r}")

    if launcher in ("local", "mpi"):
        # $TUTORIAL_IFNAME is for slurm; an explicit other interface is a mistake.
        if interface not in (None, "lo"):
            raise ValueError(f"the {launcher} launcher runs on one host over loopback "
                             f"('lo'), not {interface!r}: use launcher='slurm'")
        env = local_engine_env(n_ranks)
        kwargs: dict[str, Any] = {"n": n_ranks, "controller_ip": LOOPBACK,
                                  "controller_args": controller_args(launcher)}
        engines = {"environment": env, "engine_args": list(ENGINE_ARGS)}
        config = {}
        if launcher == "local":
            kwargs["engine_launcher_class"] = local_engine_launcher()
            config[LOCAL_ENGINES] = engines   # its subclass, ours, reads this section too
        else:
            kwargs["engine_launcher_class"] = "mpi"
            config[MPI_ENGINES] = {"mpi_cmd": [mpiexec],
                                   "mpi_args": mpi_args(mpi_flavor(mpiexec)), **engines}
        return LaunchPlan(launcher, n_ranks, kwargs, config, LOOPBACK, "lo")

    # slurm
    interface = interface or os.environ.get("TUTORIAL_IFNAME", "").strip() or None
    if interface is None:
        raise ValueError(
            "the slurm launcher needs the network interface the nodes reach each other "
            "on: pass interface='eth0' (or 'ib0', ...) or set TUTORIAL_IFNAME")
    if controller not in ("slurm", "local"):
        raise ValueError(f"controller must be 'slurm' or 'local', not {controller!r}")
    address = interface_address(interface)  # fails early on a wrong name
    gpus = _gpus_per_node(gpus_per_node)
    # without GPUs Slurm may put every task on one node
    per_node = min(gpus, n_ranks) if gpus else n_ranks
    env = {"GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": interface,
           **engine_settings(per_node)}
    kwargs = {"n": n_ranks, "engine_launcher_class": "slurm",
              "controller_args": controller_args("slurm")}
    config = {
        SLURM_ENGINES: {"batch_template": slurm_engine_template(n_ranks, gpus),
                        "environment": env}}
    if controller == "slurm":
        kwargs["controller_launcher_class"] = "slurm"
        config[SLURM_CONTROLLER] = {"batch_template": slurm_controller_template(interface)}
    else:
        kwargs["controller_ip"] = address
    return LaunchPlan("slurm", n_ranks, kwargs, config, address, interface)


def apply(plan: LaunchPlan, cluster: "ipp.Cluster") -> "ipp.Cluster":
    """Set `plan.config` on an (unstarted) `ipp.Cluster`; returns the cluster.

    The cluster gets a copy of its config: in IPython, `cluster.config` is the
    shell's own config object, which must not keep these settings.
    """
    from traitlets.config import Config

    merged = copy.deepcopy(cluster.config)
    merged.merge(Config(copy.deepcopy(plan.config)))
    cluster.config = merged
    return cluster


def _int_env(name: str) -> int:
    raw = os.environ[name]
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"${name} must be a whole number, not {raw!r}") from None


# (rank, local rank, world size) variables, most specific first: Open MPI's mpiexec
# inside a Slurm job also sees SLURM_PROCID (of the batch step).
_RANK_SOURCES = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
)


def rank_from_environment() -> tuple[int, int, int] | None:
    """(rank, local_rank, world_size) given by mpiexec or srun; None otherwise.

    Runs on engines. A source counts only when all three of its variables are
    set. None means the local launcher: rank = position in the client's ids.
    """
    for names in _RANK_SOURCES:
        if all(name in os.environ for name in names):
            rank, local_rank, world_size = (_int_env(name) for name in names)
            return rank, local_rank, world_size
    return None

