"""The cluster helper on real engines (gloo on CPU)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from child import wait_until
from helpers.runtime.cluster import start_cluster
from helpers.runtime.config import ClusterConfigError, resolve_config, visible_gpu_count
from helpers.runtime.processes import cluster_processes

pytestmark = pytest.mark.cold   # start-up, lifecycle, timeouts: never the session's warm engines


def ipp_processes() -> list[psutil.Process]:
    """Every ipyparallel process started under this test run's IPYTHONDIR."""
    mine = os.environ["IPYTHONDIR"]
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if env.get("IPP_CLUSTER_ID") and env.get("IPYTHONDIR") == mine:
                found.append(proc)
        except psutil.Error:
            continue
    return found


# --- configuration (no engines) -------------------------------------------------------

def test_defaults_follow_the_hardware(monkeypatch):
    monkeypatch.delenv("TUTORIAL_RANKS", raising=False)
    monkeypatch.delenv("TUTORIAL_BACKEND", raising=False)
    assert resolve_config(gpu_count=0) == (4, "gloo")
    assert resolve_config(gpu_count=1) == (4, "gloo")
    assert resolve_config(gpu_count=2) == (2, "nccl")
    assert resolve_config(gpu_count=8) == (8, "nccl")
    assert resolve_config(n_ranks=1, gpu_count=1) == (1, "nccl")
    assert resolve_config(n_ranks=3, gpu_count=2) == (3, "gloo")
    assert resolve_config(backend="nccl", gpu_count=1) == (1, "nccl")


def test_environment_overrides_and_arguments_win(monkeypatch):
    monkeypatch.setenv("TUTORIAL_RANKS", "3")
    monkeypatch.setenv("TUTORIAL_BACKEND", "gloo")
    assert resolve_config(gpu_count=8) == (3, "gloo")
    assert resolve_config(n_ranks=2, gpu_count=8) == (2, "gloo")
    assert resolve_config(n_ranks=2, backend="nccl", gpu_count=8) == (2, "nccl")


@pytest.mark.parametrize("kwargs, message", [
    ({"n_ranks": 0}, "positive whole number"),
    ({"n_ranks": "4"}, "positive whole number"),
    ({"backend": "mpi"}, "backend must be one of"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ClusterConfigError, match=message):
        resolve_config(gpu_count=0, **kwargs)


def test_bad_environment_is_named(monkeypatch):
    monkeypatch.setenv("TUTORIAL_RANKS", "four")
    with pytest.raises(ClusterConfigError, match="TUTORIAL_RANKS.*'four'"):
        resolve_config(gpu_count=0)


def test_bad_timeout_is_named(monkeypatch):
    monkeypatch.setenv("TUTORIAL_TIMEOUT", "soon")
    with pytest.raises(ClusterConfigError, match="TUTORIAL_TIMEOUT.*'soon'"):
        start_cluster(n_ranks=2, backend="gloo")
    monkeypatch.delenv("TUTORIAL_TIMEOUT")
    with pytest.raises(ClusterConfigError, match="positive"):
        start_cluster(n_ranks=2, backend="gloo", timeout_s=0)
    assert ipp_processes() == []


def test_nccl_with_too_few_gpus_names_both_numbers_and_the_way_out():
    with pytest.raises(ClusterConfigError) as err:
        resolve_config(n_ranks=4, backend="nccl", gpu_count=2)
    text = str(err.value)
    assert "4 rank(s)" in text and "2 GPU(s)" in text and "gloo" in text


@pytest.mark.timing
def test_nccl_on_this_machine_is_refused_before_any_engine_starts():
    if visible_gpu_count() >= 2:
        pytest.skip("this machine has GPUs")
    before = len(ipp_processes())
    t0 = time.monotonic()
    with pytest.raises(ClusterConfigError, match="nccl"):
        start_cluster(n_ranks=2, backend="nccl")
    assert time.monotonic() - t0 < 5
    assert len(ipp_processes()) == before


# --- real engines ----------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_ranks_are_positions_in_order_and_stop_leaves_nothing(n):
    cluster = start_cluster(n_ranks=n, backend="gloo", quiet=True)
    cluster_id = cluster.cluster_id
    try:
        assert [r.rank for r in cluster.ranks] == list(range(n))
        assert cluster.engine_ids == sorted(cluster.client.ids)
        cluster.client.direct_view(cluster.engine_ids).execute(
            "me = (dist.get_rank(), dist.get_world_size(), str(device), rank)", block=True)
        states = cluster.pull("me")
        assert [s["rank"] for s in states] == list(range(n))
        assert [s["me"] for s in states] == [[r, n, "cpu", r] for r in range(n)]
        assert len(cluster_processes(cluster_id)) >= n + 1  # controller + engines
    finally:
        cluster.stop()
    assert cluster_processes(cluster_id) == []
    cluster.stop()  # idempotent


def test_restart_replaces_the_previous_cluster():
    first = start_cluster(n_ranks=2, backend="gloo", quiet=True)
    second = start_cluster(n_ranks=3, backend="gloo", quiet=True)
    try:
        assert first.stopped and cluster_processes(first.cluster_id) == []
        assert second.world_size == 3 and not second.stopped
        with pytest.raises(RuntimeError, match="stopped"):
            first.pull("rank")
    finally:
        second.stop()
    assert ipp_processes() == []


def test_context_manager_stops_and_collectives_work():
    with start_cluster(n_ranks=3, backend="gloo", quiet=True) as cluster:
        cluster.client.direct_view(cluster.engine_ids).execute(
            "t = torch.tensor([rank + 1.0]); dist.all_reduce(t)", block=True)
        pulled = [s["t"] for s in cluster.pull("t")]
        assert [(t.tolist(), str(t.dtype), t.device.type) for t in pulled] == [
            ([6.0], "torch.float32", "cpu")] * 3
        cluster_id = cluster.cluster_id
    assert cluster.stopped and cluster_processes(cluster_id) == []


def test_the_engines_never_collect_what_their_forkserver_imported():
    """The forkserver freezes its imports before it forks (disposable_preload: gc.freeze):
    the full collection that IPython's reset runs as each engine exits skips torch's."""
    with start_cluster(n_ranks=2, backend="gloo", quiet=True, warm=False,
                       launcher="local") as cluster:
        cluster.client.direct_view(cluster.engine_ids).execute(
            "import gc as _gc; frozen = _gc.get_freeze_count()", block=True)
        frozen = [s["frozen"] for s in cluster.pull("frozen")]
    assert all(count > 50_000 for count in frozen), frozen   # torch alone: ~166,000


def test_gather_of_a_missing_name_is_a_clear_error():
    with start_cluster(n_ranks=2, backend="gloo", quiet=True) as cluster:
        with pytest.raises(Exception, match="no variable named 'nothing_here'"):
            cluster.pull("nothing_here")


def test_every_listening_socket_is_on_loopback():
    with start_cluster(n_ranks=3, backend="gloo", quiet=True) as cluster:
        # A collective makes gloo open its pair connections.
        cluster.client.direct_view(cluster.engine_ids).execute(
            "t = torch.ones(4); dist.all_reduce(t); dist.barrier()", block=True)
        procs = cluster_processes(cluster.cluster_id)
        listening = []
        for proc in procs:
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    listening.append((proc.pid, conn.laddr.ip, conn.laddr.port))
        engine_pids = {r.pid for r in cluster.ranks}
        assert any(pid in engine_pids for pid, _, _ in listening), "the store should listen"
        assert listening and all(ip in ("127.0.0.1", "::1") for _, ip, _ in listening), listening


@pytest.mark.timing
def test_a_collective_only_some_ranks_call_raises_within_the_timeout():
    with start_cluster(n_ranks=2, backend="gloo", timeout_s=3, quiet=True) as cluster:
        t0 = time.monotonic()
        result = cluster.client[cluster.engine_ids[0]].execute(
            "t = torch.ones(1); dist.all_reduce(t)", block=False)
        with pytest.raises(Exception, match="(?i)timed out|timeout"):
            result.get(timeout=60)
        assert time.monotonic() - t0 < 30


# A store wait that times out: torch's C++ logs "[W... socket.cpp:469] [c10d] waitForInput:
# ... likely a timeout" on the waiting rank's stderr (notebook 14's new_group did this).
STORE_TIMEOUT = """
import time
from datetime import timedelta
store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=1))
try:
    store.wait(["never set"])
except Exception as err:
    waited = type(err).__name__
time.sleep(0.5)   # the engine forwards what C++ wrote to fd 2 from a thread: let it
"""


@pytest.mark.parametrize("asked", [None, "WARNING"])
def test_engine_settings_are_ours_unless_the_user_set_them(asked, monkeypatch):
    """The engines start with TORCH_CPP_LOG_LEVEL=ERROR and, two sharing this host, with one
    OpenMP thread each (as torchrun gives its ranks); values the user set are kept (the
    WARNING case shows the warning does reach a cell's stderr when it is logged)."""
    if asked is None:
        monkeypatch.delenv("TORCH_CPP_LOG_LEVEL", raising=False)
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("TORCH_CPP_LOG_LEVEL", asked)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
    # ipykernel forwards what an engine writes to fd 2 (C++ logs) except under pytest
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    with start_cluster(n_ranks=2, backend="gloo", quiet=True) as cluster:
        result = cluster.client.direct_view(cluster.engine_ids).execute(
            STORE_TIMEOUT + "threads = torch.get_num_threads()", block=True)
        assert cluster.values("waited") == ["DistStoreError"] * 2
        stderr = "".join(result.stderr)
        if asked is None:
            assert "socket.cpp" not in stderr and "[W" not in stderr, stderr
            assert cluster.values("threads") == [1, 1]
        else:
            assert "socket.cpp" in stderr and "[W" in stderr, stderr
            assert cluster.values("threads") == [2, 2]


KERNEL_SCRIPT = """
import sys, time
from helpers.runtime.cluster import start_cluster
c = start_cluster(n_ranks=2, backend="gloo", quiet=True)
print(c.cluster_id, flush=True)
time.sleep(600)
"""


def test_engines_go_when_the_kernel_is_killed():
    proc = subprocess.Popen([sys.executable, "-c", KERNEL_SCRIPT], stdout=subprocess.PIPE,
                            text=True)
    try:
        cluster_id = proc.stdout.readline().strip()
        assert cluster_id, "the child did not start a cluster"
        assert len(cluster_processes(cluster_id)) >= 3
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert wait_until(lambda: cluster_processes(cluster_id) == [], timeout_s=30), \
        [p.cmdline() for p in cluster_processes(cluster_id)]
