"""What docs/security.md promises about the cluster's sockets, and the engines' heartbeat.

One host (local launcher): ipyparallel's own controller, on 127.0.0.1; every process of a
cluster listens on 127.0.0.1 only; the controller's connection files (the HMAC key) are
owner-only from the moment they are written; a message signed with another key gets no
answer; the engines leave by themselves when their controller is killed.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import stat
import time
from pathlib import Path

import ipyparallel as ipp
import psutil
import pytest

from child import wait_until
from helpers.runtime import engine, launchers, processes
from helpers.runtime.cluster import start_cluster
from helpers.runtime.processes import cluster_processes, security_dir

pytestmark = pytest.mark.cold   # start-up, lifecycle, timeouts: never the session's warm engines

N_RANKS = 2


# --- a real cluster ----------------------------------------------------------------------

def _tcp_listeners(proc: psutil.Process) -> list[tuple[str, int]]:
    with contextlib.suppress(psutil.Error):
        return [(c.laddr.ip, c.laddr.port) for c in proc.net_connections("tcp")
                if c.status == psutil.CONN_LISTEN]
    return []


def _controllers(cluster_id: str) -> list[psutil.Process]:
    """The controller and its heart monitor (a multiprocessing child of it)."""
    return [p for p in cluster_processes(cluster_id)
            if "ipyparallel.controller" in " ".join(p.cmdline())]


def _umask(proc: psutil.Process) -> int:
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    pytest.skip("this kernel does not show a process's umask")


def _ports(info: dict) -> set[int]:
    found = set()
    for key, value in info.items():
        values = value if isinstance(value, list) else [value]
        if key != "task_scheme":
            found |= {v for v in values if isinstance(v, int)}
    return found


@pytest.fixture(scope="module")
def cluster():
    cluster = start_cluster(N_RANKS, "gloo", quiet=True, warm=False, launcher="local")
    try:
        yield cluster
    finally:
        cluster.stop()


def test_everything_listens_on_loopback_and_the_key_is_owner_only(cluster):
    me = psutil.Process()
    mine_before = set(_tcp_listeners(me))
    cluster.run("t = torch.ones(3) * (rank + 1)\ndist.all_reduce(t)")
    assert [t.tolist() for t in cluster.values("t")] == [[3.0] * 3] * N_RANKS
    procs = cluster_processes(cluster.cluster_id)
    listeners = {p.pid: _tcp_listeners(p) for p in procs}
    # nothing of the cluster listens beyond loopback (not 0.0.0.0, not ::, not eth0)
    off_loopback = {pid: found for pid, found in listeners.items()
                    if any(ip != "127.0.0.1" for ip, _ in found)}
    assert not off_loopback, off_loopback

    # the controller: ipyparallel's, on every port its connection files name
    folder = security_dir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    controllers = _controllers(cluster.cluster_id)
    assert len(controllers) == 2, controllers     # the controller and its heart monitor
    controller_ports = {port for p in controllers for _, port in listeners[p.pid]}
    for kind in ("engine", "client"):
        path = folder / f"ipcontroller-{cluster.cluster_id}-{kind}.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, (path, oct(path.stat().st_mode))
        info = json.loads(path.read_text())
        assert info["interface"] == "tcp://127.0.0.1", info["interface"]
        assert info["signature_scheme"] == "hmac-sha256" and len(info["key"]) >= 32
        assert _ports(info) <= controller_ports, (kind, _ports(info) - controller_ports)
    # created 0600, not chmod-ed later: the controller starts with umask 077
    assert all(_umask(p) == 0o077 for p in controllers)

    # engines: rank 0 holds the store's port; the rest goes with the process group but
    # each engine's heartbeat monitor (ipyparallel's IPEngine.start_heartbeat)
    engines = {info.pid for info in cluster.ranks}
    cluster.run("from helpers.runtime import engine as _engine\n"
                "store_port = _engine._master_store.port if rank == 0 else None")
    store_port = cluster.values("store_port")[0]
    assert ("127.0.0.1", store_port) in listeners[cluster.ranks[0].pid], listeners
    cluster.apply(engine.leave_group)
    left = {pid: _tcp_listeners(psutil.Process(pid)) for pid in engines}
    assert all(len(found) == 1 for found in left.values()), left

    # the client in this process listens on nothing new
    assert set(_tcp_listeners(me)) <= mine_before


def test_a_client_with_another_key_gets_no_answer(cluster, tmp_path):
    """The controller drops a message whose HMAC signature is not its key's (jupyter_client
    Session.deserialize): knowing the ports is not enough to reach the engines."""
    real = security_dir() / f"ipcontroller-{cluster.cluster_id}-client.json"
    info = json.loads(real.read_text())
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({**info, "key": secrets.token_hex(16)}))
    with pytest.raises(TimeoutError):
        ipp.Client(str(forged), timeout=3)
    client = ipp.Client(str(real), timeout=10)      # the same file with its own key does
    try:
        assert sorted(client.ids) == sorted(cluster.engine_ids)
    finally:
        client.close()


def test_engines_leave_by_themselves_when_their_controller_is_killed():
    """SIGKILL to the controller (its process group: the controller and its heart monitor,
    ipyparallel starts it in a session of its own): every engine and nanny exits within
    HEARTBEAT_MISSES checks of HeartMonitor.period + 0.5 s, with nothing else ending
    them. A cell longer than that bound does not cost an engine while the controller is
    there."""
    cluster = start_cluster(N_RANKS, "gloo", quiet=True, warm=False, launcher="local")
    period_s = 0.25 + 0.5      # the controller's period, IPEngine's check period
    assert "--HeartMonitor.period=250" in launchers.controller_args("local")
    bound_s = launchers.HEARTBEAT_MISSES * period_s
    try:
        cluster.run(f"import time\ntime.sleep({bound_s + 1.5})")
        assert cluster.engines_alive == N_RANKS
        cluster.run("t = torch.ones(1)\ndist.all_reduce(t)")
        controllers = _controllers(cluster.cluster_id)
        others = [p for p in cluster_processes(cluster.cluster_id) if p not in controllers
                  and "helpers.runtime.reaper" not in " ".join(p.cmdline())]
        assert len(others) >= 2 * N_RANKS, others          # engines and their nannies
        [group] = {os.getpgid(p.pid) for p in controllers}
        began = time.monotonic()
        os.killpg(group, signal.SIGKILL)
        # the nannies then wait up to 3 s for a controller that never answers
        gone = wait_until(lambda: not any(processes.running(p) for p in others),
                          bound_s + 3.0 + 10.0)
        took = time.monotonic() - began
        assert gone, [(p.pid, p.name()) for p in others if processes.running(p)]
        assert took > bound_s - period_s, took     # the heartbeat did it, not something else
    finally:
        cluster.stop()
    assert cluster_processes(cluster.cluster_id) == []
