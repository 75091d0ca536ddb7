"""helpers.bench.wire and count_collectives' measurement, on disposable gloo groups at 2 and 4 ranks.

The meter reads each connection's TCP_INFO counters: these tests pin what it must see
(a quiet rank writes nothing; a send of S bytes reads S plus gloo's headers on the
sender; a connection closed inside the block keeps its bytes) and that count_collectives'
per-call figures add up to the block's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:   # a case's `torch` and `dist` are the disposable rank's own globals
    import torch
    import torch.distributed as dist

from helpers.runtime.disposable import run_disposable
from helpers.bench.wire import Wire, difference, peer_matrix

SIZES = (8, 1 << 16, 1 << 23)


def quiet_and_send(rank, world_size, sizes):
    import time
    from helpers.bench.wire import on_the_wire
    with on_the_wire() as quiet:
        time.sleep(0.2)
        print("a rank that prints writes to its stdout, not to the other ranks " * 50)
    sends = []
    for size in sizes:
        x = torch.ones(size // 4)
        dist.barrier()
        with on_the_wire() as wire:
            if rank == 0:
                dist.send(x, 1)
            elif rank == 1:
                dist.recv(x, 0)
        sends.append({"sent": wire.sent, "sockets": wire.sockets})
    return {"quiet": quiet.sent, "sends": sends}


@pytest.fixture(scope="module", params=[2, 4])
def calibration(request):
    outcomes = run_disposable(quiet_and_send, world_size=request.param,
                              args={"sizes": list(SIZES)}, limit_s=90.0)
    assert all(o.error is None and o.returncode == 0 for o in outcomes), \
        [o.summary() for o in outcomes]
    return [o.result for o in outcomes]


def test_a_quiet_rank_writes_nothing(calibration):
    assert [r["quiet"] for r in calibration] == [0] * len(calibration)


def test_a_send_reads_its_bytes_plus_gloo_headers(calibration):
    """Sender: S + 96 B (two 48-B headers); receiver: 48 B; everybody else 0, at every S."""
    for i, size in enumerate(SIZES):
        sent = [r["sends"][i]["sent"] for r in calibration]
        assert sent == [size + 96, 48] + [0] * (len(calibration) - 2), (size, sent)
        matrix, other = peer_matrix([r["sends"][i]["sockets"] for r in calibration])
        assert matrix[0][1] == size + 96 and matrix[1][0] == 48 and other == [0] * len(other)
        assert sum(map(sum, matrix)) == sum(sent)


def ring_and_closed_group(rank, world_size):
    from helpers.training.comm import count_collectives
    x = torch.ones(1 << 18)  # 1 MiB
    with count_collectives() as log:
        dist.all_reduce(x)
        side = dist.new_group(backend="gloo")  # new connections, mid-block
        dist.all_reduce(x, group=side)
        dist.destroy_process_group(side)  # closed before the block ends
        work = dist.all_reduce(x, async_op=True)
        work.wait()
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(256, 256))
        model(torch.ones(2, 256)).sum().backward()
    return {"calls": [[c.name, c.measured, c.model] for c in log.entries],
            "block": log.measured_bytes, "outside": log.outside_calls,
            "sockets": log.wire.sockets, "table": log.table()}


@pytest.mark.parametrize("n", [2, 4])
def test_count_collectives_measures_each_call_and_the_whole_block(n):
    outcomes = run_disposable(ring_and_closed_group, world_size=n, limit_s=90.0)
    assert all(o.error is None for o in outcomes), [o.summary() for o in outcomes]
    size = 1 << 20
    for o in outcomes:
        got = o.result
        names = [c[0] for c in got["calls"]]
        assert names == ["all_reduce"] * 3, got["calls"]
        first, side, async_call = got["calls"]
        # a synchronous all_reduce: the ring's 2(n-1)/n·S plus at most 1% of headers
        assert first[2] <= first[1] <= 1.01 * first[2], first
        # the side group's connections opened and closed inside the block: still counted
        assert side[2] <= side[1] <= 1.01 * side[2], side
        assert async_call[1] is None                          # async: not per call
        # the block holds every call, the async one and DDP's own C++ collectives
        assert got["outside"] == got["block"] - first[1] - side[1]
        assert got["outside"] > 2 * (n - 1) / n * size        # the async all_reduce
        assert "(outside the calls)" in got["table"], got["table"]
    matrix, other = peer_matrix([o.result["sockets"] for o in outcomes])
    assert other == [0] * n
    assert [sum(row) for row in matrix] == [o.result["block"] for o in outcomes]


def test_peer_matrix_finds_the_owner_of_each_remote_end():
    a, b, c = "127.0.0.1:1000", "127.0.0.1:2000", "127.0.0.1:3000"
    nanny = "127.0.0.1:9000"
    sockets = [{f"{a}>{b}": 10, f"{a}1>{nanny}": 7},
               {f"{b}>{a}": 3, f"{b}1>{c}": 5},
               {f"{c}>{b}1": 0}]
    matrix, other = peer_matrix(sockets)
    assert matrix == [[0, 10, 0], [3, 0, 5], [0, 0, 0]]
    assert other == [7, 0, 0]


def test_difference_counts_a_new_connection_from_zero():
    assert difference({"x": 15, "y": 4}, {"x": 10}) == {"x": 5, "y": 4}


def test_without_a_gloo_group_nothing_is_measured():
    wire = Wire()
    wire.start()
    wire.stop()
    assert wire.measured is False and wire.sent is None and wire.mark() == 0


def _fake_engine(monkeypatch, info: dict) -> None:
    """An ipyparallel engine app in sys.modules whose connection_info is `info`."""
    import sys
    import types

    engine = types.SimpleNamespace(connection_info=info)
    app = types.SimpleNamespace(IPEngine=types.SimpleNamespace(
        initialized=lambda: True, instance=lambda: engine))
    monkeypatch.setitem(sys.modules, "ipyparallel.engine.app", app)


def test_an_engines_tcp_connections_to_its_controller_are_left_out(monkeypatch):
    """Slurm engines talk to the controller over TCP (a heartbeat every few seconds): those
    connections are not the rank's; a connection to anything else still counts, but for
    one whose two ends are both in this process."""
    import socket

    from helpers.bench.wire import connections, controller_endpoints

    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    controller, peer = [s.getsockname()[1] for s in listeners]
    clients = [socket.create_connection(("127.0.0.1", port)) for port in (controller, peer)]
    try:
        _fake_engine(monkeypatch, {"interface": "tcp://127.0.0.1", "hb_ping": controller,
                                   "broadcast": [controller + 1], "key": "k", "ssh": ""})
        assert controller_endpoints() == {f"127.0.0.1:{controller}",
                                          f"127.0.0.1:{controller + 1}"}
        remotes = lambda found: {key.split(">")[1] for _, _, key in found}
        assert f"127.0.0.1:{controller}" in remotes(connections(set()))
        kept = remotes(connections(set(), controller_endpoints()))
        assert f"127.0.0.1:{controller}" not in kept and f"127.0.0.1:{peer}" in kept
        _fake_engine(monkeypatch, {"interface": "ipc:///tmp/ipp", "hb_ping": controller})
        assert controller_endpoints() == frozenset()      # unix sockets: nothing to leave out
        accepted, _ = listeners[1].accept()               # now both ends are in this process
        clients.append(accepted)
        assert f"127.0.0.1:{peer}" not in remotes(connections(set()))
    finally:
        for s in clients + listeners:
            s.close()


def test_outside_an_engine_no_controller_is_left_out(monkeypatch):
    import sys

    from helpers.bench.wire import controller_endpoints

    monkeypatch.delitem(sys.modules, "ipyparallel.engine.app", raising=False)
    assert controller_endpoints() == frozenset()


PEER = """
import socket, sys
port = int(sys.argv[1]); ours = int(sys.argv[2])
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
accepted, _ = listener.accept()
client = socket.socket()
client.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
client.bind(("127.0.0.1", port))             # the port our own client has
client.connect(("127.0.0.1", ours))
print("connected", flush=True)
sys.stdin.read()
"""


def test_a_peer_whose_port_is_one_of_ours_still_counts():
    """On one host, Linux gives the same ephemeral port to connections with different
    destinations, so another rank's end of a connection may have the local port of one of
    ours: that connection is still another process's, and its bytes count (a CI run lost
    rank 2's writes to rank 3 when only the remote end was compared)."""
    import socket
    import subprocess
    import sys

    from helpers.bench.wire import connections, scan

    listener = socket.create_server(("127.0.0.1", 0))
    ours = socket.socket()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ours.bind(("127.0.0.1", 0))
    port = ours.getsockname()[1]
    peer = subprocess.Popen([sys.executable, "-c", PEER, str(port),
                             str(listener.getsockname()[1])],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ours.connect(("127.0.0.1", int(peer.stdout.readline())))
        assert peer.stdout.readline().strip() == "connected"
        accepted, _ = listener.accept()
        keys = {key for _, _, key in connections(set())}
        assert accepted.getpeername()[1] == port                 # the collision
        incoming = f"127.0.0.1:{listener.getsockname()[1]}>127.0.0.1:{port}"
        assert incoming in keys
        outgoing = f"127.0.0.1:{port}>127.0.0.1:{ours.getpeername()[1]}"
        assert outgoing in keys
        # the store's connections: the side served here by its port, a client's by its remote
        served = {key for _, _, key in connections({listener.getsockname()[1]})}
        assert incoming not in served and outgoing in served
        assert {incoming, outgoing} <= {key for _, _, key in
                                        connections({ours.getpeername()[1]})}
        assert outgoing not in {key for _, _, key in connections(
            set(), frozenset({outgoing.split(">")[1]}))}
        assert scan(set())[1] is False              # a listener is not a connection under way
        accepted.close()
    finally:
        peer.stdin.close()
        peer.wait(timeout=10)
        for s in (ours, listener):
            s.close()


def test_peer_matrix_tells_apart_two_ranks_with_the_same_local_port():
    """Ranks 1 and 2 both have local port 5000 (to different peers): each of rank 0's
    connections goes to the rank holding its reverse."""
    r0a, r0b, shared = "127.0.0.1:1000", "127.0.0.1:1001", "127.0.0.1:5000"
    sockets = [{f"{r0a}>{shared}": 11, f"{r0b}>{shared}": 22},
               {f"{shared}>{r0a}": 1},
               {f"{shared}>{r0b}": 2}]
    matrix, other = peer_matrix(sockets)
    assert matrix == [[0, 11, 22], [1, 0, 0], [2, 0, 0]] and other == [0, 0, 0]
