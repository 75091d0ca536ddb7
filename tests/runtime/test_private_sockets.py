"""What docs/security.md promises about the cluster's sockets.

One host (local launcher): the controller and its schedulers listen on unix sockets only,
in an owner-only (0700) folder; the engines listen on no TCP port of their own; the only
TCP listeners are each engine's nanny (ipyparallel hard-codes it on 127.0.0.1) and, once
the ranks form a process group, torch's store and gloo's pairs, on 127.0.0.1.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import psutil
import pytest
from ipyparallel.controller.app import IPController

from helpers.runtime import engine, engine_boot, unix_sockets
from helpers.runtime.cluster import start_cluster
from helpers.runtime.processes import cluster_processes

pytestmark = pytest.mark.cold   # start-up, lifecycle, timeouts: never the session's warm engines

N_RANKS = 4


# --- the owner-only folder ---------------------------------------------------------------

@pytest.fixture
def runtime_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return tmp_path


def test_private_socket_dir_is_made_owner_only(runtime_dir):
    folder = unix_sockets.private_socket_dir()
    assert folder == runtime_dir / "nccl-notebooks"
    info = folder.lstat()
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid()
    assert unix_sockets.private_socket_dir() == folder  # found again, not refused


def test_private_socket_dir_refuses_an_open_folder(runtime_dir):
    (runtime_dir / "nccl-notebooks").mkdir(mode=0o755)
    os.chmod(runtime_dir / "nccl-notebooks", 0o755)
    with pytest.raises(RuntimeError, match="other users.*755.*chmod 700"):
        unix_sockets.private_socket_dir()


def test_private_socket_dir_refuses_a_link(runtime_dir, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    elsewhere.chmod(0o700)
    (runtime_dir / "nccl-notebooks").symlink_to(elsewhere)
    with pytest.raises(RuntimeError, match="not a folder of this user"):
        unix_sockets.private_socket_dir()


def test_private_socket_dir_without_xdg_runtime_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(unix_sockets.tempfile, "tempdir", None)  # re-read TMPDIR
    assert unix_sockets.private_socket_dir() == tmp_path / f"nccl-notebooks-{os.getuid()}"


def test_socket_prefix_too_long_is_an_error(monkeypatch, tmp_path):
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    with pytest.raises(RuntimeError, match="too long.*XDG_RUNTIME_DIR"):
        unix_sockets.controller_socket_prefix()


def test_remove_stale_sockets_only_dead_and_old_ones(runtime_dir):
    import socket
    import time

    folder = unix_sockets.private_socket_dir()

    def bound(name: str) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(folder / name))
        return sock

    live = bound("ipp-live:1")
    live.listen(1)
    bound("ipp-dead:1").close()       # its file stays: nothing listens on it
    bound("ipp-young:1").close()
    old = time.time() - 3600
    for name in ("ipp-live:1", "ipp-dead:1"):
        os.utime(folder / name, (old, old), follow_symlinks=False)
    try:
        assert unix_sockets.remove_stale_sockets(folder) == 1
        assert sorted(p.name for p in folder.iterdir()) == ["ipp-live:1", "ipp-young:1"]
    finally:
        live.close()


# --- why the controller is ours ----------------------------------------------------------

def test_forgetting_a_cluster_removes_its_controller_sockets(tmp_path):
    """The reaper and the orphan sweep end with forget_cluster_files: if the controller
    had to be SIGKILLed, its socket files go there (the prefix is in a connection file)."""
    from helpers.runtime.processes import batch_script, forget_cluster_files
    security = tmp_path / "profile_default" / "security"
    security.mkdir(parents=True)
    sockets = tmp_path / "sockets"
    sockets.mkdir()
    mine = [sockets / f"ipp-mine:{port}" for port in (4001, 4002)]
    other = sockets / "ipp-other:4001"
    for path in [*mine, other]:
        path.write_text("")
    for kind in ("engine", "client"):
        (security / f"ipcontroller-c1-{kind}.json").write_text(
            json.dumps({"interface": f"ipc://{sockets}/ipp-mine"}))
    (security / "cluster-c1.json").write_text("{}")
    script = batch_script("c1", "SlurmEngineSetLauncher", str(tmp_path))   # slurm's
    script.write_text("#!/bin/sh\n")
    another = batch_script("c2", "SlurmEngineSetLauncher", str(tmp_path))
    another.write_text("#!/bin/sh\n")
    forget_cluster_files("c1", str(tmp_path))
    assert not any(p.exists() for p in mine) and other.exists()
    assert list(security.iterdir()) == [another]


def test_upstream_controller_and_engines_spell_ipc_urls_differently():
    """ipyparallel 9.2's controller binds `<interface>-<port>`, its engines and client
    connect to `<interface>:<port>`: run_controller exists for this. When this test fails,
    ipyparallel agrees with itself and run_controller can go."""
    import inspect

    import ipyparallel.client.client as ipp_client
    import ipyparallel.engine.app as ipp_engine

    controller = IPController()
    controller.engine_info = {"interface": "ipc:///private/ipp", "registration": 5}
    assert controller.construct_url("engine", "registration") == "ipc:///private/ipp-5"
    engine_source = inspect.getsource(ipp_engine.IPEngine)
    client_source = inspect.getsource(ipp_client.Client)
    assert "f\"{info['interface']}:{info[key]}\"" in engine_source
    assert "f\"{cfg['interface']}:{cfg[key]}\"" in client_source
    assert unix_sockets.ipc_url("ipc:///private/ipp", 5) == "ipc:///private/ipp:5"


# --- a real cluster ----------------------------------------------------------------------

def _tcp_listeners(proc: psutil.Process) -> list[tuple[str, int]]:
    try:
        return [(c.laddr.ip, c.laddr.port) for c in proc.net_connections("tcp")
                if c.status == psutil.CONN_LISTEN]
    except psutil.Error:
        return []


def _role(proc: psutil.Process) -> str:
    command = " ".join(proc.cmdline())
    if "ipyparallel.engine.nanny" in command or proc.name() == engine_boot.NANNY_NAME:
        return "nanny"     # engine_boot forks the local launcher's nannies
    if "helpers.runtime.engine_zygote" in command:
        return "engine"   # the local launcher's engines, forked by the zygote
    if "helpers.runtime.engine_boot" in command:
        return "launched"  # what ipyparallel launched: it handed its boot to the zygote
    if "ipyparallel.engine" in command:
        return "engine"
    if unix_sockets.CONTROLLER_MODULE in command:
        return "controller"   # the controller and its scheduler processes
    return command


def test_cluster_listens_on_unix_sockets_except_nannies_store_and_gloo():
    me = psutil.Process()
    mine_before = set(_tcp_listeners(me))
    cluster = start_cluster(N_RANKS, "gloo", quiet=True, warm=False, launcher="local")
    prefix = Path(cluster._ipp_cluster.controller_ip)
    try:
        cluster.run("t = torch.ones(3) * (rank + 1)\ndist.all_reduce(t)")
        assert [t.tolist() for t in cluster.values("t")] == [[10.0] * 3] * N_RANKS
        procs = cluster_processes(cluster.cluster_id)
        roles = {proc.pid: _role(proc) for proc in procs}
        by_role = {role: [p for p in procs if roles[p.pid] == role]
                   for role in set(roles.values())}
        assert sorted(by_role) == ["controller", "engine", "launched", "nanny"], roles
        assert len(by_role["engine"]) == len(by_role["nanny"]) == N_RANKS
        assert [_tcp_listeners(p) for p in by_role["launched"]] == [[]]

        # the controller and its schedulers: no TCP at all; unix sockets, owner-only
        for proc in by_role["controller"]:
            assert _tcp_listeners(proc) == [], (proc.cmdline(), _tcp_listeners(proc))
        sockets = list(prefix.parent.glob(prefix.name + ":*"))
        assert len(sockets) >= 10, sockets   # registration, control, mux, task, iopub, ...
        assert stat.S_IMODE(prefix.parent.stat().st_mode) == 0o700
        for path in sockets:
            mode = path.stat().st_mode
            assert stat.S_ISSOCK(mode) and mode & 0o077 == 0, (path, oct(mode))
        controller_unix = {c.laddr for p in by_role["controller"]
                           for c in p.net_connections("unix") if c.laddr}
        assert {str(p) for p in sockets} <= controller_unix

        # each nanny: one listener on 127.0.0.1 (ipyparallel/engine/nanny.py hard-codes it)
        for proc in by_role["nanny"]:
            listeners = _tcp_listeners(proc)
            assert len(listeners) == 1 and listeners[0][0] == "127.0.0.1", listeners

        # engines: 127.0.0.1 only; rank 0 holds the store's port
        cluster.run("from helpers.runtime import engine as _engine\n"
                    "store_port = _engine._master_store.port if rank == 0 else None")
        store_port = cluster.values("store_port")[0]
        engine_listeners = {p.pid: _tcp_listeners(p) for p in by_role["engine"]}
        rank0_pid = cluster.ranks[0].pid
        assert ("127.0.0.1", store_port) in engine_listeners[rank0_pid], engine_listeners
        assert all(ip == "127.0.0.1" for found in engine_listeners.values()
                   for ip, _ in found), engine_listeners
        # ...and all of them belong to the process group: none is left once it is gone
        cluster.apply(engine.leave_group)
        left = {p.pid: _tcp_listeners(p) for p in by_role["engine"]}
        assert all(found == [] for found in left.values()), left

        # the client in this process listens on nothing new
        assert set(_tcp_listeners(me)) <= mine_before
    finally:
        cluster.stop()
    # the controller removes its socket files when it stops
    assert not list(prefix.parent.glob(prefix.name + ":*")), "socket files left after stop()"

