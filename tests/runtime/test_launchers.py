"""helpers.runtime.launchers: the plans handed to ipyparallel, and ranks read from MPI/Slurm."""
from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import time
from collections import namedtuple

import ipyparallel as ipp
import psutil
import pytest
from ipyparallel.cluster import launcher as ipp_launcher

from helpers.runtime import launchers
from helpers.runtime.launchers import (
    LAUNCHERS, LaunchPlan, apply, cluster_options, interface_address, rank_from_environment,
    resolve_launcher,
)

pytestmark = pytest.mark.cold   # start-up, lifecycle, timeouts: never the session's warm engines

RANK_VARIABLES = [
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS",
]
TUTORIAL_VARIABLES = [
    "TUTORIAL_LAUNCHER", "TUTORIAL_IFNAME", "TUTORIAL_SLURM_PARTITION", "TUTORIAL_SLURM_ACCOUNT",
    "TUTORIAL_SLURM_TIME", "TUTORIAL_SLURM_GPUS_PER_NODE",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in RANK_VARIABLES + TUTORIAL_VARIABLES + ["TORCH_CPP_LOG_LEVEL",
                                                        "OMP_NUM_THREADS"]:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def open_mpi(monkeypatch):
    """Plans as if `mpiexec` were Open MPI 4, whatever this machine has."""
    monkeypatch.setattr(launchers, "mpi_flavor", lambda mpiexec="mpiexec": "openmpi")


def _cluster(plan: LaunchPlan) -> ipp.Cluster:
    return apply(plan, ipp.Cluster(**plan.cluster_kwargs))


# --- choosing the launcher ---------------------------------------------------------------

def test_resolve_launcher_argument_then_env_then_local(monkeypatch):
    assert resolve_launcher(None) == "local"
    monkeypatch.setenv("TUTORIAL_LAUNCHER", " MPI ")
    assert resolve_launcher(None) == "mpi"
    assert resolve_launcher("slurm") == "slurm"
    monkeypatch.setenv("TUTORIAL_LAUNCHER", "")
    assert resolve_launcher(None) == "local"


@pytest.mark.parametrize("source", ["argument", "env"])
def test_bad_launcher_name(monkeypatch, source):
    if source == "env":
        monkeypatch.setenv("TUTORIAL_LAUNCHER", "pbs")
    with pytest.raises(ValueError) as info:
        resolve_launcher("pbs" if source == "argument" else None)
    message = str(info.value)
    assert "'pbs'" in message and all(name in message for name in LAUNCHERS)
    if source == "env":
        assert "TUTORIAL_LAUNCHER" in message
    with pytest.raises(ValueError, match="pbs"):
        cluster_options("pbs", 2)


# --- local and mpi ----------------------------------------------------------------------

def test_local_plan(monkeypatch):
    monkeypatch.setenv("TUTORIAL_IFNAME", "eth0")  # meant for slurm: ignored here
    plan = cluster_options(None, 4)
    assert plan.launcher == "local" and plan.n_ranks == 4
    _assert_loopback_controller(plan)
    assert plan.rendezvous_host == "127.0.0.1" and plan.interface == "lo"
    assert plan.config["LocalEngineSetLauncher"] == {
        "environment": {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo",
                        "TORCH_CPP_LOG_LEVEL": "ERROR", "OMP_NUM_THREADS": "1"},
        "engine_args": [f"--IPEngine.max_heartbeat_misses={launchers.HEARTBEAT_MISSES}"]}
    assert launchers.HEARTBEAT_MISSES > 0       # 0 would turn the engines' check off


def _assert_loopback_controller(plan: LaunchPlan) -> None:
    """The controller of a one-host plan: ipyparallel's own, on 127.0.0.1."""
    kwargs = plan.cluster_kwargs
    engines = "mpi" if plan.launcher == "mpi" else launchers.FORKSERVER_ENGINES
    assert kwargs == {"n": plan.n_ranks, "controller_ip": "127.0.0.1",
                      "controller_args": launchers.controller_args(plan.launcher),
                      "engine_launcher_class": engines}
    assert not any(name.endswith("ControllerLauncher") for name in plan.config)


@pytest.mark.parametrize("launcher", ["local", "mpi"])
def test_single_host_refuses_other_interface(launcher, open_mpi):
    with pytest.raises(ValueError, match="'eth0'.*slurm"):
        cluster_options(launcher, 2, interface="eth0")
    assert cluster_options(launcher, 2, interface="lo").interface == "lo"


@pytest.mark.parametrize("n_ranks", [0, -1, 1.5, True, "4"])
def test_bad_rank_count(n_ranks):
    with pytest.raises(ValueError, match="n_ranks"):
        cluster_options("local", n_ranks)


@pytest.mark.parametrize("euid, root_flag", [(0, True), (1000, False)])
def test_mpi_plan_as_root_and_not(monkeypatch, open_mpi, euid, root_flag):
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    plan = cluster_options("mpi", 4)
    _assert_loopback_controller(plan)
    assert plan.cluster_kwargs["engine_launcher_class"] == "mpi"
    assert plan.config["MPIEngineSetLauncher"]["engine_args"] == launchers.ENGINE_ARGS
    assert plan.rendezvous_host == "127.0.0.1" and plan.interface == "lo"
    args = plan.config["MPIEngineSetLauncher"]["mpi_args"]
    assert args[0] == "--oversubscribe"
    assert ("--allow-run-as-root" in args) is root_flag
    assert args[-3:] == ["--mca", "btl", "self,vader"]
    assert plan.config["MPIEngineSetLauncher"]["mpi_cmd"] == ["mpiexec"]
    # never through the environment
    assert not any(k.startswith("OMPI_") for k in
                   plan.config["MPIEngineSetLauncher"]["environment"])
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in os.environ
    assert plan.config["MPIEngineSetLauncher"]["environment"]["TORCH_CPP_LOG_LEVEL"] == "ERROR"


def test_mpi_args_per_implementation(monkeypatch):
    assert launchers.mpi_args("mpich", as_root=True) == []
    assert launchers.mpi_args(None, as_root=True) == []
    assert launchers.mpi_args("openmpi5", as_root=False) == [
        "--oversubscribe", "--mca", "btl", "self,sm"]


def test_require_mpi_names_what_is_missing(monkeypatch):
    with pytest.raises(RuntimeError, match="no-such-mpiexec.*not on PATH"):
        launchers.require_mpi("no-such-mpiexec")


# --- slurm ------------------------------------------------------------------------------

def _lines(template: str) -> list[str]:
    return template.splitlines()


@pytest.mark.parametrize("n_ranks, gpus, nodes, per_node", [
    (8, 4, 2, 4), (6, 4, 2, 4), (2, 4, 1, 2), (16, 8, 2, 8), (3, 1, 3, 1)])
def test_slurm_engines_one_per_gpu(n_ranks, gpus, nodes, per_node):
    plan = cluster_options("slurm", n_ranks, interface="lo", gpus_per_node=gpus)
    assert plan.cluster_kwargs["engine_launcher_class"] == "slurm"
    assert plan.cluster_kwargs["n"] == n_ranks
    lines = _lines(plan.config["SlurmEngineSetLauncher"]["batch_template"])
    assert lines[0] == "#!/bin/sh"
    assert f"#SBATCH --ntasks={n_ranks}" in lines
    assert f"#SBATCH --nodes={nodes}" in lines
    assert f"#SBATCH --ntasks-per-node={per_node}" in lines
    assert f"#SBATCH --gres=gpu:{per_node}" in lines
    assert lines[-1] == "srun {program_and_args}"
    assert not any("partition" in l or "account" in l or "--time" in l for l in lines)


def test_slurm_cpu_ranks_request_no_gpu():
    plan = cluster_options("slurm", 4, interface="lo", gpus_per_node=0)
    template = plan.config["SlurmEngineSetLauncher"]["batch_template"]
    assert "#SBATCH --ntasks=4" in template
    assert "gres" not in template and "--nodes" not in template


def test_slurm_gpus_per_node_from_env_or_error(monkeypatch):
    with pytest.raises(ValueError, match="TUTORIAL_SLURM_GPUS_PER_NODE"):
        cluster_options("slurm", 4, interface="lo")
    monkeypatch.setenv("TUTORIAL_SLURM_GPUS_PER_NODE", "2")
    template = cluster_options("slurm", 4, interface="lo").config[
        "SlurmEngineSetLauncher"]["batch_template"]
    assert "#SBATCH --nodes=2" in template and "#SBATCH --gres=gpu:2" in template
    monkeypatch.setenv("TUTORIAL_SLURM_GPUS_PER_NODE", "four")
    with pytest.raises(ValueError, match="'four'"):
        cluster_options("slurm", 4, interface="lo")


def test_slurm_partition_account_time_from_env(monkeypatch):
    monkeypatch.setenv("TUTORIAL_SLURM_PARTITION", "gpu")
    monkeypatch.setenv("TUTORIAL_SLURM_ACCOUNT", "proj42")
    monkeypatch.setenv("TUTORIAL_SLURM_TIME", "01:30:00")
    plan = cluster_options("slurm", 4, interface="lo", gpus_per_node=4)
    for section in ("SlurmEngineSetLauncher", "SlurmControllerLauncher"):
        lines = _lines(plan.config[section]["batch_template"])
        assert "#SBATCH --partition=gpu" in lines
        assert "#SBATCH --account=proj42" in lines
        assert "#SBATCH --time=01:30:00" in lines


def test_slurm_controller_in_a_job_listens_on_the_interface():
    plan = cluster_options("slurm", 4, interface="lo", gpus_per_node=4)
    assert plan.cluster_kwargs["controller_launcher_class"] == "slurm"
    assert "controller_ip" not in plan.cluster_kwargs  # the node's address is found there
    # 10 s of missed heartbeats, not 30 s: the job's end is seen by them alone
    assert plan.cluster_kwargs["controller_args"] == [
        "--HeartMonitor.period=250", "--HeartMonitor.max_heartmonitor_misses=40"]
    template = plan.config["SlurmControllerLauncher"]["batch_template"]
    assert "psutil.net_if_addrs()" in template and template.rstrip().endswith(
        '{program_and_args} --ip="$IP"')
    assert plan.rendezvous_host == "127.0.0.1" and plan.interface == "lo"
    assert plan.config["SlurmEngineSetLauncher"]["environment"] == {
        "GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo", "TORCH_CPP_LOG_LEVEL": "ERROR",
        "OMP_NUM_THREADS": "1"}


def test_slurm_controller_next_to_the_notebook(monkeypatch):
    monkeypatch.setenv("TUTORIAL_IFNAME", "lo")
    plan = cluster_options("slurm", 2, gpus_per_node=2, controller="local")
    assert plan.cluster_kwargs == {"n": 2, "engine_launcher_class": "slurm",
                                   "controller_ip": "127.0.0.1",
                                   "controller_args": launchers.controller_args("slurm")}
    assert "SlurmControllerLauncher" not in plan.config
    with pytest.raises(ValueError, match="controller"):
        cluster_options("slurm", 2, interface="lo", gpus_per_node=2, controller="pbs")


def test_slurm_needs_an_interface():
    with pytest.raises(ValueError, match="TUTORIAL_IFNAME"):
        cluster_options("slurm", 4, gpus_per_node=4)


def test_slurm_unknown_interface():
    with pytest.raises(ValueError, match="'nope0'.*lo"):
        cluster_options("slurm", 4, interface="nope0", gpus_per_node=4)


def test_slurm_templates_render_through_ipyparallel(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_SLURM_PARTITION", "gpu")
    cluster = _cluster(cluster_options("slurm", 8, interface="lo", gpus_per_node=4))
    profile = str(tmp_path / "profile")
    engines = cluster.engine_launcher_class(
        work_dir=str(tmp_path), parent=cluster, profile_dir=profile, cluster_id="cid",
        engine_set_id="1")
    engines.write_batch_script(8)
    script = (tmp_path / engines.batch_file_name).read_text()
    assert "#SBATCH --job-name=ipengine-cid" in script
    assert "#SBATCH --partition=gpu" in script and "{" not in script
    assert script.rstrip().splitlines()[-1].startswith("srun ")
    assert script.rstrip().endswith(" -m ipyparallel.engine")   # ipyparallel's own engine
    controller = cluster.controller_launcher_class(
        work_dir=str(tmp_path), parent=cluster, profile_dir=profile, cluster_id="cid")
    controller.write_batch_script(1)
    script = (tmp_path / controller.batch_file_name).read_text()
    assert "ipyparallel.controller" in script and "{" not in script


# --- interfaces --------------------------------------------------------------------------

def test_interface_address():
    assert interface_address("lo") == "127.0.0.1"
    with pytest.raises(ValueError, match=r"'nope0'.*\blo\b"):
        interface_address("nope0")


def test_interface_without_ipv4(monkeypatch):
    Addr = namedtuple("Addr", "family address")
    monkeypatch.setattr(psutil, "net_if_addrs",
                        lambda: {"lo": [Addr(socket.AF_INET, "127.0.0.1")],
                                 "ib0": [Addr(socket.AF_INET6, "fe80::1")]})
    with pytest.raises(ValueError, match="'ib0' has no IPv4"):
        interface_address("ib0")


# --- apply -------------------------------------------------------------------------------

def test_apply_puts_the_config_on_the_cluster(open_mpi, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    plan = cluster_options("mpi", 3)
    cluster = ipp.Cluster(**plan.cluster_kwargs)
    before = cluster.config
    assert apply(plan, cluster) is cluster
    assert cluster.engine_launcher_class is ipp_launcher.MPIEngineSetLauncher
    assert cluster.n == 3 and cluster.controller_ip == plan.cluster_kwargs["controller_ip"]
    assert cluster.controller_ip == "127.0.0.1"
    assert cluster.controller_args == launchers.controller_args("mpi")
    assert cluster.config.MPIEngineSetLauncher.mpi_args == plan.config[
        "MPIEngineSetLauncher"]["mpi_args"]
    assert "MPIEngineSetLauncher" not in before  # the shell's config is left alone
    # what ipyparallel will actually run: the launcher it builds from the cluster
    engines = cluster.engine_launcher_class(parent=cluster, profile_dir="/nonexistent",
                                            cluster_id="cid", engine_set_id="1")
    engines.n = 3
    assert engines.args[:7] == ["mpiexec", "-n", "3", "--oversubscribe",
                                "--allow-run-as-root", "--mca", "btl"]
    assert engines.args[-2:] == ["--mpi", *launchers.ENGINE_ARGS]
    assert engines.get_env()["GLOO_SOCKET_IFNAME"] == "lo"


def test_apply_slurm_and_local():
    cluster = _cluster(cluster_options("slurm", 4, interface="lo", gpus_per_node=2))
    assert cluster.engine_launcher_class is ipp_launcher.SlurmEngineSetLauncher
    assert cluster.controller_launcher_class is ipp_launcher.SlurmControllerLauncher
    assert "--gres=gpu:2" in cluster.config.SlurmEngineSetLauncher.batch_template
    local = _cluster(cluster_options("local", 2))
    # ipyparallel's local engine set, each engine forked (the "forkserver" entry point)
    assert issubclass(local.engine_launcher_class, ipp_launcher.LocalEngineSetLauncher)
    assert local.engine_launcher_class.__name__ == "ForkserverEngineSetLauncher"
    assert local.controller_launcher_class is ipp_launcher.LocalControllerLauncher
    assert local.config.LocalEngineSetLauncher.environment["GLOO_SOCKET_IFNAME"] == "lo"


# --- engine side -------------------------------------------------------------------------

def test_no_launcher_variables_means_none():
    assert rank_from_environment() is None


@pytest.mark.parametrize("variables, expected", [
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_SIZE": "4"}, (3, 1, 4)),
    ({"PMI_RANK": "5", "MPI_LOCALRANKID": "2", "PMI_SIZE": "8"}, (5, 2, 8)),
    ({"SLURM_PROCID": "6", "SLURM_LOCALID": "2", "SLURM_NTASKS": "8"}, (6, 2, 8)),
    # mpiexec inside a Slurm batch step: MPI's numbers, not the step's
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
      "SLURM_NTASKS": "1"}, (1, 1, 2)),
    # PMI without a local rank (srun --mpi=pmi2): Slurm's complete set wins
    ({"PMI_RANK": "3", "PMI_SIZE": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
      "SLURM_NTASKS": "4"}, (3, 1, 4)),
])
def test_rank_from_environment(monkeypatch, variables, expected):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert rank_from_environment() == expected


def test_rank_from_environment_incomplete_or_bad(monkeypatch):
    monkeypatch.setenv("SLURM_PROCID", "1")
    assert rank_from_environment() is None  # a lone variable is not a launch
    monkeypatch.setenv("SLURM_LOCALID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "two")
    with pytest.raises(ValueError, match="SLURM_NTASKS.*'two'"):
        rank_from_environment()


# --- a real MPI launch -------------------------------------------------------------------

def _processes_of(cluster_id: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if (proc.pid != os.getpid() and proc.status() != psutil.STATUS_ZOMBIE
                    and proc.environ().get("IPP_CLUSTER_ID") == cluster_id):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="mpiexec is not on PATH")
@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py is missing")
def test_mpi_launch_ranks_and_clean_stop():
    plan = cluster_options("mpi", 2)
    cluster = _cluster(plan)
    cluster_id = cluster.cluster_id
    try:
        client = cluster.start_and_connect_sync()
        client.wait_for_engines(2, timeout=120)
        ids = sorted(client.ids)
        ranks = client.direct_view(ids).apply_sync(rank_from_environment)  # in ids order
        client.close()
        assert ids == [0, 1]  # --mpi engines ask for their MPI rank as engine id
        assert ranks == [(0, 0, 2), (1, 1, 2)]  # (position, local rank = rank on one host, 2)
        assert any(p.name() == "mpiexec" for p in _processes_of(cluster_id))
    finally:
        cluster.stop_cluster_sync()
        # engine nannies outlive stop_cluster_sync by a few seconds, then exit alone
        deadline = time.monotonic() + 20
        left = _processes_of(cluster_id)
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = _processes_of(cluster_id)
        for proc in left:  # do not leave them to the next test
            proc.kill()
    assert left == [], [(p.pid, p.name()) for p in left]


def test_the_engines_c_plus_plus_log_level_is_error_unless_the_user_set_one(monkeypatch):
    assert cluster_options(None, 2).config["LocalEngineSetLauncher"]["environment"][
        "TORCH_CPP_LOG_LEVEL"] == "ERROR"
    monkeypatch.setenv("TORCH_CPP_LOG_LEVEL", "INFO")   # asked for: kept
    assert cluster_options(None, 2).config["LocalEngineSetLauncher"]["environment"][
        "TORCH_CPP_LOG_LEVEL"] == "INFO"


@pytest.mark.parametrize("launcher, n_ranks, gpus_per_node, expected", [
    ("local", 1, None, None),     # one rank has the host's cores to itself
    ("local", 2, None, "1"),
    ("mpi", 4, None, "1"),
    ("slurm", 4, 1, None),        # one task per node
    ("slurm", 4, 2, "1"),
    ("slurm", 2, 0, "1"),         # CPU tasks: Slurm may put them on one node
    ("slurm", 1, 0, None),
])
def test_engines_that_share_a_host_get_one_openmp_thread_unless_the_user_set_one(
        monkeypatch, open_mpi, launcher, n_ranks, gpus_per_node, expected):
    """As torchrun does for its ranks: OMP_NUM_THREADS=1 where several share a host."""
    options = {"interface": "lo", "gpus_per_node": gpus_per_node} if launcher == "slurm" \
        else {}
    section = {"local": "LocalEngineSetLauncher", "mpi": "MPIEngineSetLauncher",
               "slurm": "SlurmEngineSetLauncher"}[launcher]

    def threads() -> str | None:
        plan = cluster_options(launcher, n_ranks, **options)
        return plan.config[section]["environment"].get("OMP_NUM_THREADS")

    assert threads() == expected
    monkeypatch.setenv("OMP_NUM_THREADS", "3")   # asked for: kept, whatever the layout
    assert threads() == "3"


def test_controller_heartbeat_allowance_per_launcher():
    """30 s on one host (ipyparallel's own 10 x 3 s; a nanny reports an engine's end at
    once), 10 s under Slurm, where a job's end takes the nannies with it."""
    for launcher, seconds in (("local", 30), ("mpi", 30), ("slurm", 10)):
        args = dict(a.lstrip("-").split("=") for a in launchers.controller_args(launcher))
        period_ms = int(args["HeartMonitor.period"])
        assert int(args["HeartMonitor.max_heartmonitor_misses"]) * period_ms / 1000 == seconds
