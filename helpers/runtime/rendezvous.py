"""Where the ranks of one world meet: a TCPStore that rank 0 serves on a socket bound
beforehand, then the default process group.

The one way both kinds of world meet: a cluster's engines (helpers.runtime.engine) and the
throwaway ranks of helpers.runtime.disposable (their script imports this module). It runs
in the ranks: the stdlib at import, torch when called.
"""
from __future__ import annotations

import socket
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch.distributed as dist


def listening_socket(host: str = "127.0.0.1") -> socket.socket:
    """A socket listening on a free port of `host`, for rank 0's store to take over.

    Binding it ourselves keeps the store off other interfaces (a TCPStore given 127.0.0.1
    still binds every interface), and port 0 leaves no race for a free port. Ranks may
    connect as soon as it listens: the store answers them once rank 0 joins.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(128)
    return sock


def join(backend: str, rank: int, world_size: int, host: str, port: int, timeout_s: float,
         *, listen_fd: int | None = None, store_timeout_s: float | None = None,
         device_id: Any = None) -> "dist.TCPStore":
    """Join the default process group through the store at `host:port`; return the store.

    Rank 0 serves the store on `listen_fd` (a `listening_socket`'s, detached: the store owns
    it now) and must keep the store as long as the group lives; the others connect.
    `timeout_s` bounds the meeting and every collective; `store_timeout_s` (default
    `timeout_s`) the store's own waits. `device_id` binds a device at init (NCCL).
    """
    import torch.distributed as dist

    store_wait = timedelta(seconds=timeout_s if store_timeout_s is None else store_timeout_s)
    if rank == 0:
        store = dist.TCPStore(host, port, world_size, True, timeout=store_wait,
                              wait_for_workers=False, master_listen_fd=listen_fd)
    else:
        store = dist.TCPStore(host, port, world_size, False, timeout=store_wait)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s), device_id=device_id)
    return store
