"""Count the collectives a block of code calls, and the bytes each rank sends.

    with count_collectives() as log:          # on an engine, around the taught code
        dist.all_reduce(grad)
    log.calls, log.sent_bytes                 # 1 call; 2(n-1)/n · grad bytes (ring)
    log.table()                               # per collective: calls, S, bytes sent

S is nccl-tests' size of each call (`helpers.bandwidth`); the bytes one rank sends
are S × nccl-tests' bus factor, which is what a ring algorithm sends per rank
(all_reduce 2(n−1)/n·S, all_gather and reduce_scatter (n−1)/n·S, broadcast S).
The count wraps the `torch.distributed` functions while the block runs, so it sees
the calls of hand-built code, not those torch's own DDP/FSDP make in C++.
Used by notebooks 14–19.
"""
from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
import torch.distributed as dist

from helpers.bandwidth import bus_factor


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _size(name: str, args: tuple, kwargs: dict) -> int:
    """nccl-tests' S for one call, from the arguments as the caller passed them."""
    first = args[0] if args else next(iter(kwargs.values()))
    second = args[1] if len(args) > 1 else None
    if name in ("all_gather",):                       # (tensor_list, tensor)
        return sum(_nbytes(t) for t in first)
    if name in ("reduce_scatter",):                   # (output, input_list)
        return sum(_nbytes(t) for t in (second if second is not None else kwargs["input_list"]))
    if name in ("all_gather_single", "all_gather_into_tensor"):    # (output, input)
        return _nbytes(first)
    if name in ("reduce_scatter_single", "reduce_scatter_tensor", "all_to_all_single"):
        return _nbytes(second if second is not None else kwargs.get("input"))
    return _nbytes(first)                             # all_reduce, broadcast, reduce, send, ...


# The collective each wrapped function is, for nccl-tests' bus factor.
KINDS = {"all_reduce": "all_reduce", "broadcast": "broadcast", "reduce": "reduce",
         "all_gather": "all_gather", "all_gather_single": "all_gather",
         "all_gather_into_tensor": "all_gather", "reduce_scatter": "reduce_scatter",
         "reduce_scatter_single": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
         "all_to_all_single": "all_to_all", "send": "send", "isend": "send",
         "recv": "recv", "irecv": "recv"}


@dataclass
class Call:
    name: str          # the function called, e.g. "reduce_scatter_single"
    size: int          # S in bytes
    group_size: int
    sent: float        # bytes this rank sends (ring algorithm)


@dataclass
class CommLog:
    entries: list[Call] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return len(self.entries)

    @property
    def sent_bytes(self) -> float:
        return sum(c.sent for c in self.entries)

    def by_name(self) -> dict[str, dict[str, float]]:
        """{name: {"calls", "size", "sent"}}, sizes and bytes summed."""
        table: dict[str, dict[str, float]] = {}
        for c in self.entries:
            row = table.setdefault(c.name, {"calls": 0, "size": 0, "sent": 0.0})
            row["calls"] += 1
            row["size"] += c.size
            row["sent"] += c.sent
        return table

    def table(self) -> str:
        rows = [f"{'collective':<24}{'calls':>6}{'S (bytes)':>12}{'sent (bytes)':>14}"]
        for name, row in self.by_name().items():
            rows.append(f"{name:<24}{row['calls']:>6}{row['size']:>12}{row['sent']:>14.0f}")
        rows.append(f"{'total':<24}{self.calls:>6}{'':>12}{self.sent_bytes:>14.0f}")
        return "\n".join(rows)


def _group(function: Any, args: tuple, kwargs: dict) -> Any:
    """The `group` a call names, by keyword or by position (None: the default group)."""
    try:
        bound = inspect.signature(function).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return kwargs.get("group")
    return bound.arguments.get("group")


def _sent(kind: str, size: int, n: int) -> float:
    if kind == "send":
        return float(size)
    if kind == "recv":
        return 0.0
    return size * bus_factor(kind, n) if n > 1 else 0.0


@contextlib.contextmanager
def count_collectives(log: CommLog | None = None) -> Iterator[CommLog]:
    """Record every wrapped `dist.<name>(...)` call made inside the block."""
    log = log if log is not None else CommLog()
    originals = {name: getattr(dist, name) for name in KINDS if hasattr(dist, name)}

    def wrap(name: str, original: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            n = dist.get_world_size(_group(original, args, kwargs))
            size = _size(name, args, kwargs)
            log.entries.append(Call(name, size, n, _sent(KINDS[name], size, n)))
            return original(*args, **kwargs)
        counted.__wrapped__ = original
        return counted

    try:
        for name, original in originals.items():
            setattr(dist, name, wrap(name, original))
        yield log
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)
