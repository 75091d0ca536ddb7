"""Bytes on the wire: what a rank's process really wrote to its connections to other ranks.

    with on_the_wire() as wire:              # on an engine, around the taught code
        dist.all_reduce(grad)
    wire.sent                                # bytes this rank wrote, e.g. 1.5 · S + headers
    wire.sockets                             # per connection: "127.0.0.1:a>127.0.0.1:b" → bytes

On gloo every byte between two ranks travels through a TCP connection of the two rank
processes, and Linux counts each connection's bytes (`TCP_INFO`, man 7 tcp). Written =
`tcpi_bytes_sent` − `tcpi_bytes_retrans` + `tcpi_notsent_bytes`: every byte the process
handed to the socket, sent or still queued, each counted once. The rendezvous store's
connections are left out (they carry no collective's data), and so are an engine's own
connections to the ipyparallel controller (TCP, on every launcher: its heartbeat echoes a
ping every fraction of a second, whatever the rank is doing), and a connection
whose two ends are both in the process (such engines have one, busy a few times a second);
every other established TCP connection of the process is counted, so a byte that a
collective sent cannot hide.
`peer_matrix` turns every rank's `sockets` into "rank i sent so many bytes to rank j".

With NCCL, data moves over NVLink, PCIe or InfiniBand without passing through a socket
of the process: nothing here can count it, `sent` is None and the notebooks show the
model (NCCL's own counters or `nvidia-smi nvlink -gt d` would measure it;
`make gpu-check` lists it).
"""
from __future__ import annotations

import os
import socket
import stat
import struct
from typing import Any, Mapping, Sequence

# struct tcp_info (include/uapi/linux/tcp.h): byte offsets of the fields we read.
_NOTSENT = 144        # __u32 tcpi_notsent_bytes   (Linux 4.6)
_BYTES_SENT = 200     # __u64 tcpi_bytes_sent      (Linux 4.19)
_BYTES_RETRANS = 208  # __u64 tcpi_bytes_retrans   (Linux 4.19)
_INFO_SIZE = 216

# Per socket inode: its "local>remote" key, "local>" for a listener, or None (not TCP).
# A TCP socket that is neither (a connection under way) is asked again at the next scan.
_kinds: dict[int, str | None] = {}
_NO_PEER = "no peer"
_TCP_LISTEN = 10      # tcpi_state of a listening socket (include/net/tcp_states.h)


class WireUnavailable(RuntimeError):
    """This process cannot count its bytes (not Linux, or a kernel older than 4.19)."""


def _endpoint(address: tuple) -> str:
    host = address[0].removeprefix("::ffff:")   # IPv4 seen through an IPv6 socket
    return f"{host}:{address[1]}"


def _classify(fd: int) -> str | None:
    """The "local>remote" key of a TCP socket at fd ("local>" if it listens); None if not
    TCP; _NO_PEER while it connects."""
    try:
        sock = socket.socket(fileno=fd)        # wraps the fd: nothing is duplicated
    except OSError:
        return None
    try:
        if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET,
                                                                   socket.AF_INET6):
            return None
        try:
            local = _endpoint(sock.getsockname())
            return f"{local}>{_endpoint(sock.getpeername())}"
        except OSError:                          # a listener, or not connected yet
            state = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
            return f"{local}>" if state == _TCP_LISTEN else _NO_PEER
    except OSError:
        return _NO_PEER
    finally:
        sock.detach()                            # never close what belongs to gloo


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def _reverse(key: str) -> str:
    local, remote = key.split(">")
    return f"{remote}>{local}"


def scan(exclude_ports: set[int], exclude_remotes: frozenset[str] = frozenset()
         ) -> tuple[list[tuple[int, int, str]], bool]:
    """(fd, inode, "local>remote") of this process's connections to other processes, and
    whether a TCP socket of the process was still connecting (scan again later).

    Left out: a connection whose remote end ("host:port") is in `exclude_remotes`; one
    whose local port is in `exclude_ports` and served here (this process listens on it:
    the accepted side of the rendezvous store); and one whose two ends are both in this
    process (its reverse "remote>local" is here too). Only the whole 4-tuple says that: on
    one host, another process's connection may have the same local port as one of ours
    (Linux shares an ephemeral port among connections to different destinations).
    """
    if not os.path.isdir("/proc/self/fd"):
        raise WireUnavailable("counting bytes needs Linux (/proc/self/fd)")
    found, listening, connecting = [], set(), False
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            status = os.fstat(fd)
        except OSError:                          # closed since the listing
            continue
        if not stat.S_ISSOCK(status.st_mode):
            continue
        kind = _kinds.get(status.st_ino, _NO_PEER)
        if kind == _NO_PEER:
            kind = _kinds[status.st_ino] = _classify(fd)
        if kind == _NO_PEER:
            connecting = True
        elif kind is not None and kind.endswith(">"):
            listening.add(_port(kind[:-1]))
        elif kind is not None:
            found.append((fd, status.st_ino, kind))
    keys = {key for _, _, key in found}
    served = exclude_ports & listening
    return [entry for entry in found
            if entry[2].split(">")[1] not in exclude_remotes
            and _port(entry[2].split(">")[0]) not in served
            and _reverse(entry[2]) not in keys], connecting


def connections(exclude_ports: set[int], exclude_remotes: frozenset[str] = frozenset()
                ) -> list[tuple[int, int, str]]:
    """(fd, inode, "local>remote") of this process's connected TCP sockets; see `scan`."""
    return scan(exclude_ports, exclude_remotes)[0]


def read(found: list[tuple[int, int, str]]) -> dict[str, int]:
    """Bytes written so far on each of these connections ("local>remote" → bytes).

    Written = tcpi_bytes_sent − tcpi_bytes_retrans + tcpi_notsent_bytes: every byte the
    process handed to the socket, whether the kernel has sent it yet or not, once.
    """
    out = {}
    for fd, inode, key in found:
        try:
            if os.fstat(fd).st_ino != inode:
                continue                         # closed, and the number reused
            sock = socket.socket(fileno=fd)
        except OSError:
            continue
        try:
            info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _INFO_SIZE)
        except OSError:
            continue
        finally:
            sock.detach()
        if len(info) < _INFO_SIZE:
            raise WireUnavailable(f"this kernel's TCP_INFO has {len(info)} bytes, not "
                                  f"{_INFO_SIZE}: tcpi_bytes_sent needs Linux 4.19 or later")
        notsent, = struct.unpack_from("I", info, _NOTSENT)
        sent, = struct.unpack_from("Q", info, _BYTES_SENT)
        retrans, = struct.unpack_from("Q", info, _BYTES_RETRANS)
        out[key] = sent - retrans + notsent
    return out


def _default_store() -> Any:
    """The default group's rendezvous store (a TCPStore), or None."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    if not dist.is_initialized():
        return None
    store = distributed_c10d._get_default_store()
    while hasattr(store, "underlying_store"):     # PrefixStore around the TCPStore
        store = store.underlying_store
    return store


def store_ports() -> set[int]:
    """The port of the default group's rendezvous store: the connections the rank that
    serves it accepted there are left out."""
    port = getattr(_default_store(), "port", None)
    return {port} if port else set()


def store_endpoints() -> frozenset[str]:
    """The rendezvous store's "host:port" ends, one per address of its host: every rank's
    own connection to the store is left out (it carries no collective's data)."""
    store = _default_store()
    host, port = getattr(store, "host", None), getattr(store, "port", None)
    if not host or not port:
        return frozenset()
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, port,
                                                               type=socket.SOCK_STREAM)}
    except OSError:
        addresses = {host}
    return frozenset(_endpoint((address, port)) for address in addresses)


def controller_endpoints() -> frozenset[str]:
    """The ipyparallel controller's TCP endpoints ("host:port"), on an engine; empty
    elsewhere (torchrun) or where the controller is not on TCP."""
    import sys

    app = sys.modules.get("ipyparallel.engine.app")   # loaded on an engine, never imported
    if app is None or not app.IPEngine.initialized():
        return frozenset()
    info = app.IPEngine.instance().connection_info or {}
    interface = str(info.get("interface", ""))
    if not interface.startswith("tcp://"):
        return frozenset()
    host = interface[len("tcp://"):]
    ports = [p for value in info.values() if not isinstance(value, (str, bool))
             for p in (value if isinstance(value, (list, tuple)) else [value])
             if isinstance(p, int)]
    return frozenset(f"{host}:{port}" for port in ports)


def counters() -> dict[str, int]:
    """Bytes written so far on each connection of this process but the store's and the
    controller's."""
    return read(connections(store_ports(), store_endpoints() | controller_endpoints()))


def difference(after: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    """Bytes written between two readings; a connection opened in between counts from 0."""
    return {key: value - before.get(key, 0) for key, value in after.items()}


def measurable(group: Any = None) -> bool:
    """True where the group's bytes pass through this process's sockets (gloo)."""
    import torch.distributed as dist

    return dist.is_initialized() and dist.get_backend(group) == "gloo"


class Wire:
    """What one block wrote to the other ranks; see `on_the_wire`."""

    def __init__(self, group: Any = None):
        self.measured = measurable(group)
        self.sockets: dict[str, int] = {}
        self._ports = store_ports() if self.measured else set()
        self._remotes = (store_endpoints() | controller_endpoints() if self.measured
                         else frozenset())
        self._found: list[tuple[int, int, str]] = []
        self._fds: list[str] = []
        self._connecting = False              # a socket was mid-connect at the last scan
        self._before: dict[str, int] = {}
        self._last: dict[str, int] = {}       # each connection's latest reading

    def _read(self) -> dict[str, int]:
        fds = os.listdir("/proc/self/fd")
        if fds != self._fds or self._connecting:   # a connection may have come or gone
            self._fds = fds
            self._found, self._connecting = scan(self._ports, self._remotes)
        now = read(self._found)
        self._last.update(now)
        return now

    def start(self) -> None:
        if self.measured:
            self._before = self._read()

    def mark(self) -> int:
        """Bytes written so far on every connection (cheap enough to take around each call)."""
        return sum(self._read().values()) if self.measured else 0

    def stop(self) -> None:
        """The block's bytes per connection; one closed during the block keeps its last reading."""
        if self.measured:
            self._fds = []
            self._read()
            self.sockets = difference(self._last, self._before)

    @property
    def sent(self) -> int | None:
        """Bytes written on every connection of this rank; None where not measurable."""
        return sum(self.sockets.values()) if self.measured else None

    def __repr__(self) -> str:
        return f"Wire(sent={self.sent})"


class on_the_wire:
    """Count what this rank writes to the other ranks while the block runs (gloo)."""

    def __init__(self, group: Any = None):
        self.wire = Wire(group)

    def __enter__(self) -> Wire:
        self.wire.start()
        return self.wire

    def __exit__(self, *exc_info: object) -> None:
        self.wire.stop()


# ---------------------------------------------------------------- in the notebook

# gloo frames every message with a header of its own (tests/helpers/test_wire.py: a send of S
# bytes writes S + 96 on the sender, 48 on the receiver). Measured up to 8 MiB at 2, 3 and
# 4 ranks, no collective call wrote more than 24 headers per peer; gloo cuts larger
# buffers into segments with headers of their own (64 MiB: 0.014 % more), hence SEGMENTS.
HEADER_BYTES = 48
MAX_HEADERS_PER_PEER = 24
SEGMENTS = 0.001


def header_bound(calls: int, n: int, model: float = 0.0) -> float:
    """The most bytes of headers `calls` calls on n ranks add, per rank, to `model` bytes."""
    return calls * MAX_HEADERS_PER_PEER * max(n - 1, 1) * HEADER_BYTES + SEGMENTS * model


def agrees(measured: float, model: float, calls: int, n: int) -> bool:
    """Measured = the model's payload plus gloo's headers: model ≤ measured ≤ model + bound."""
    return int(model) <= measured <= model + header_bound(calls, n, model)


def peer_matrix(sockets: Sequence[Mapping[str, int]]) -> tuple[list[list[int]], list[int]]:
    """Every rank's `wire.sockets` → (sent[i][j] bytes rank i wrote to rank j, other[i]).

    A connection "a>b" of rank i goes to the rank that holds its other end, "b>a"; failing
    that (the peer did not list it), to the rank alone whose local ends include b. Bytes on
    a connection to no rank of the list (an engine's own helper process) go to other[i].
    """
    holder = {key: rank for rank, table in enumerate(sockets) for key in table}
    ends: dict[str, set[int]] = {}
    for rank, table in enumerate(sockets):
        for key in table:
            ends.setdefault(key.split(">")[0], set()).add(rank)
    n = len(sockets)
    sent, other = [[0] * n for _ in range(n)], [0] * n
    for rank, table in enumerate(sockets):
        for key, value in table.items():
            peer = holder.get(_reverse(key))
            if peer is None:
                owners = ends.get(key.split(">")[1], set())
                peer = next(iter(owners)) if len(owners) == 1 else None
            if peer is None or peer == rank:
                other[rank] += value
            else:
                sent[rank][peer] += value
    return sent, other
