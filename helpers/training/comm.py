"""Count the collectives a block of code calls, and the bytes each rank sends.

    with count_collectives() as log:          # on an engine, around the taught code
        dist.all_reduce(grad)
    log.calls, log.sent_bytes                 # 1 call; 2(n-1)/n · grad bytes (ring)
    log.table()                               # per collective: calls, S, bytes sent

S is nccl-tests' size of each call (`helpers.bench.nccl_tests`); the bytes one rank sends
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
from torch.distributed import distributed_c10d

from helpers.bench.nccl_tests import bus_factor


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


# Which argument holds nccl-tests' S, per wrapped function (the rest: `tensor`).
SIZE_ARGUMENT = {"all_gather": "tensor_list", "reduce_scatter": "input_list",
                 "all_gather_single": "output_tensor", "all_gather_into_tensor": "output_tensor",
                 "reduce_scatter_single": "input", "reduce_scatter_tensor": "input",
                 "all_to_all_single": "input"}


def _arguments(function: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by parameter name, however the caller passed them."""
    return inspect.signature(function).bind(*args, **kwargs).arguments


def _size(name: str, arguments: dict[str, Any]) -> int:
    """nccl-tests' S for one call: all pieces of a list, else the one tensor."""
    value = arguments[SIZE_ARGUMENT.get(name, "tensor")]
    return sum(_nbytes(t) for t in value) if isinstance(value, (list, tuple)) else _nbytes(value)


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
    # Both homes of each function: `dist.x` for the caller, and distributed_c10d's own
    # global, which P2POp checks its op against (so batch_isend_irecv still works).
    homes = (dist, distributed_c10d)
    originals = {name: getattr(dist, name) for name in KINDS if hasattr(dist, name)}

    inside = [False]   # a wrapped function calling another (a deprecated alias) counts once

    def wrap(name: str, original: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            if inside[0]:
                return original(*args, **kwargs)
            arguments = _arguments(original, args, kwargs)
            n = dist.get_world_size(arguments.get("group"))
            size = _size(name, arguments)
            log.entries.append(Call(name, size, n, _sent(KINDS[name], size, n)))
            inside[0] = True
            try:
                return original(*args, **kwargs)
            finally:
                inside[0] = False
        counted.__wrapped__ = original
        return counted

    try:
        for name, original in originals.items():
            counted = wrap(name, original)
            for home in homes:
                setattr(home, name, counted)
        yield log
    finally:
        for name, original in originals.items():
            for home in homes:
                setattr(home, name, original)
