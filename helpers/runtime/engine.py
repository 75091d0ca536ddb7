"""Code that runs *on the engines*: joining the process group, snapshots, pulling state.

The notebook never calls these directly; `helpers.runtime.cluster` ships them to the
engines with `apply`. They only use what every engine has: torch and the stdlib.
"""
from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING, Any

from helpers.runtime import rendezvous
from helpers.runtime.transfer import encode

if TYPE_CHECKING:
    import torch.distributed as dist

# torch is imported inside the functions: the notebook imports this module only to ship
# its functions, and must not pay for torch (the engines import it when they start).

# Rank 0 owns the rendezvous store; it must outlive the call that created it. Its socket
# listens from open_store until join_group hands it to the store.
_master_store: dist.TCPStore | None = None
_store_socket: socket.socket | None = None
# Collectives each group keeps in torch's Flight Recorder (notebook 28): torch 2.13's own
# default, set so that every rank records them whatever a later torch defaults to.
FLIGHT_RECORDER_ENTRIES = "2000"


def ready() -> int:
    """torch and torch.distributed are imported here; return this engine's pid."""
    import torch
    import torch.distributed  # noqa: F401  (imported for its cost, before the group)

    return os.getpid()


def _user_namespace() -> dict:
    """The engine's interactive namespace, the one `%%px` cells run in."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("helpers.runtime.engine runs on ipyparallel engines (IPython kernels)")
    return shell.user_ns


def open_store(host: str = "127.0.0.1") -> int:
    """On rank 0: the rendezvous store's socket, bound to `host` and listening; its port."""
    global _store_socket
    if _store_socket is not None:
        _store_socket.close()
    _store_socket = rendezvous.listening_socket(host)
    return _store_socket.getsockname()[1]


def join_group(rank: int, world_size: int, backend: str, port: int, timeout_s: float,
               local_rank: int, host: str = "127.0.0.1", interface: str = "lo",
               debug: str = "off") -> dict:
    """Join the default process group as `rank`; publish the tutorial names.

    debug="detail" wraps the group in torch's checks (TORCH_DISTRIBUTED_DEBUG=DETAIL):
    every collective first meets the other ranks in a monitored barrier and
    compares shapes and dtypes, so a mismatch is an error naming the ranks.
    """
    global _master_store, _store_socket
    import torch
    import torch.distributed as dist

    os.environ["GLOO_SOCKET_IFNAME"] = interface  # gloo pairs listen on this interface only
    # torch reads it at init_process_group: every rank records its last collectives
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", FLIGHT_RECORDER_ENTRIES)
    if interface != "lo":
        os.environ.setdefault("NCCL_SOCKET_IFNAME", interface)
    level = "DETAIL" if debug == "detail" else "OFF"
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = level
    dist.set_debug_level(getattr(dist.DebugLevel, level))
    if backend == "nccl":
        # Raise on timeout instead of letting the watchdog abort the engine.
        os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    # Binding the device at init makes NCCL create its communicator now.
    device_id = device if backend == "nccl" else None
    # Older entries of this rank's Flight Recorder are earlier groups' (a warm engine
    # outlives its group): notebook 28 reads the ones from here on.
    joined_ns = time.time_ns()
    if rank == 0:
        listen_fd, _store_socket = _store_socket.detach(), None   # the store owns it now
        _master_store = rendezvous.join(backend, rank, world_size, host, port, timeout_s,
                                        listen_fd=listen_fd, device_id=device_id)
    else:
        rendezvous.join(backend, rank, world_size, host, port, timeout_s, device_id=device_id)
    _user_namespace().update(
        rank=rank, world_size=world_size, device=device,
        torch=torch, dist=dist, snapshot=snapshot,
    )
    return {
        "rank": rank, "world_size": world_size, "backend": dist.get_backend(),
        "device": str(device), "host": socket.gethostname(), "pid": os.getpid(),
        "gpu": torch.cuda.get_device_name(local_rank) if backend == "nccl" else None,
        "joined_ns": joined_ns,
    }


def leave_group() -> bool:
    """Destroy every process group (if any) and drop the store. Idempotent."""
    global _master_store, _store_socket
    import torch.distributed as dist

    was_initialized = dist.is_initialized()
    if was_initialized:
        dist.destroy_process_group()
    _master_store = None
    if _store_socket is not None:   # opened, never handed to a store
        _store_socket.close()
        _store_socket = None
    return was_initialized


def fresh_start() -> int:
    """Before an engine serves a new notebook: no group, an empty namespace; return pid.

    IPython's reset() also runs gc.collect() (in its output cache flush): 0.3 s per
    engine once torch is loaded. The namespace and the output cache are emptied all the
    same; objects in reference cycles go at the next automatic collection.
    """
    leave_group()
    from IPython import get_ipython

    shell = get_ipython()
    hook = shell.displayhook
    full_cache = hook.do_full_cache
    hook.do_full_cache = False
    try:
        shell.reset(new_session=False)
    finally:
        hook.do_full_cache = full_cache
    hook._, hook.__, hook.___ = "", "", ""   # what the skipped flush releases
    return os.getpid()


def snapshot(**arguments: Any) -> dict:
    """Deep copies of a collective's arguments, taken before or after the call.

    `snapshot(tensor=t, scatter_list=None)` → {"tensor": t.clone(), "scatter_list": None}
    """
    import torch

    def copy(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        if isinstance(value, (list, tuple)):
            return [copy(v) for v in value]
        return value

    return {name: copy(value) for name, value in arguments.items()}


def pull(names: list[str]) -> dict:
    """Named values from this engine's namespace, encoded for the trip to the notebook
    (helpers.runtime.transfer: tensors as detached CPU copies)."""
    namespace = _user_namespace()
    missing = [n for n in names if n not in namespace]
    if missing:
        raise NameError(
            f"rank {namespace.get('rank', '?')} has no variable named "
            f"{', '.join(map(repr, missing))}: run the %%px cell that defines it first"
        )
    return {name: encode(namespace[name]) for name in names}
