"""Count the collectives a block of code calls, and the bytes each rank sends.

    with count_collectives() as log:          # on an engine, around the taught code
        dist.all_reduce(grad)
    log.calls                                 # 1 call
    log.measured_bytes                        # bytes this rank wrote to the others (gloo)
    log.model_bytes                           # the ring model: 2(n-1)/n · grad bytes
    log.table()                               # per collective: calls, S, model, measured

Two figures for every call. **Measured**: what this rank's process really wrote to its
connections to the other ranks while the call ran (`helpers.bench.wire`, gloo only; None on
NCCL, whose bytes pass through no socket). **Model**: what this rank sends when the call
runs as a ring, one of the algorithms NCCL's tuner picks from
(`helpers.bench.nccl_tests.model_sent`, S being nccl-tests'
size of the call): all_reduce 2(n−1)/n·S, all_gather and reduce_scatter (n−1)/n·S,
send S. The two differ by gloo's headers (48 B a message, `helpers.bench.wire.agrees`), and
where gloo runs another algorithm (its reduce_scatter writes what an all_reduce writes).
The count wraps the `torch.distributed` functions while the block runs, so its calls are
those of hand-built code; `measured_bytes` covers the whole block, so it also holds
what torch's own DDP/FSDP send from C++ (`outside_calls`). `log.rows(phase=...)`: each
call with its group's ranks, for a record.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from helpers.bench.nccl_tests import model_sent
from helpers.bench.wire import Wire, measurable


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


# Which argument holds nccl-tests' S, per wrapped function (the rest: `tensor`).
SIZE_ARGUMENT = {"all_gather": "tensor_list", "reduce_scatter": "input_list",
                 "all_gather_single": "output_tensor", "all_gather_into_tensor": "output_tensor",
                 "reduce_scatter_single": "input", "reduce_scatter_tensor": "input",
                 "all_to_all_single": "input"}


@functools.lru_cache(maxsize=None)
def _signature(function: Any) -> inspect.Signature:
    return inspect.signature(function)


def _arguments(function: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by parameter name, however the caller passed them."""
    return _signature(function).bind(*args, **kwargs).arguments


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
    name: str               # the function called, e.g. "reduce_scatter_single"
    size: int               # S in bytes
    group_size: int
    model: float            # bytes this rank sends in the ring model
    measured: int | None    # bytes this rank wrote during the call (None: async or NCCL)
    group: list[int] = field(default_factory=list)   # the group's ranks (global)


@dataclass
class CommLog:
    entries: list[Call] = field(default_factory=list)
    wire: Wire | None = None    # the whole block, measured

    @property
    def calls(self) -> int:
        return len(self.entries)

    @property
    def model_bytes(self) -> float:
        return sum(c.model for c in self.entries)

    @property
    def measured_bytes(self) -> int | None:
        """Bytes this rank wrote to the other ranks in the whole block (None: NCCL)."""
        return None if self.wire is None else self.wire.sent

    @property
    def outside_calls(self) -> int | None:
        """Measured bytes not inside a counted synchronous call (torch's own, async)."""
        if self.measured_bytes is None:
            return None
        return self.measured_bytes - sum(c.measured for c in self.entries
                                         if c.measured is not None)

    def rows(self, **extra: Any) -> list[dict[str, Any]]:
        """Each call as a dict: `extra` first (e.g. phase="forward"), then name, group
        (its ranks), size, model and measured."""
        return [{**extra, "name": c.name, "group": c.group, "size": c.size,
                 "model": c.model, "measured": c.measured} for c in self.entries]

    def by_name(self) -> dict[str, dict[str, Any]]:
        """{name: {"calls", "size", "model", "measured"}}, summed; measured None if any is."""
        table: dict[str, dict[str, Any]] = {}
        for c in self.entries:
            row = table.setdefault(c.name, {"calls": 0, "size": 0, "model": 0.0,
                                            "measured": 0})
            row["calls"] += 1
            row["size"] += c.size
            row["model"] += c.model
            row["measured"] = (None if row["measured"] is None or c.measured is None
                               else row["measured"] + c.measured)
        return table

    def table(self) -> str:
        rows = [f"{'collective':<24}{'calls':>6}{'S (bytes)':>12}{'model (B)':>12}"
                f"{'measured (B)':>14}"]
        for name, row in self.by_name().items():
            rows.append(f"{name:<24}{row['calls']:>6}{row['size']:>12}{row['model']:>12.0f}"
                        f"{_bytes_text(row['measured']):>14}")
        if self.outside_calls:
            rows.append(f"{'(outside the calls)':<24}{'':>6}{'':>12}{'':>12}"
                        f"{_bytes_text(self.outside_calls):>14}")
        rows.append(f"{'total':<24}{self.calls:>6}{'':>12}{self.model_bytes:>12.0f}"
                    f"{_bytes_text(self.measured_bytes):>14}")
        return "\n".join(rows)


def _bytes_text(value: int | None) -> str:
    return "not measured" if value is None else f"{value:.0f}"


def _model(kind: str, size: int, n: int, group: Any, arguments: dict[str, Any]) -> float:
    """This rank's bytes in the ring model (helpers.bench.nccl_tests.model_sent)."""
    root = arguments.get("src", arguments.get("dst"))
    if root is not None and group is not None:
        root = dist.get_group_rank(group, root)
    return model_sent(kind, size, n, dist.get_rank(group), 0 if root is None else root)


def _ranks(group: Any) -> list[int]:
    """The global ranks of `group` (None: the default group, every rank; a group this rank
    is not in: none)."""
    if group is None:
        return list(range(dist.get_world_size()))
    if group is distributed_c10d.GroupMember.NON_GROUP_MEMBER:
        return []
    return dist.get_process_group_ranks(group)


@contextlib.contextmanager
def count_collectives() -> Iterator[CommLog]:
    """Record every wrapped `dist.<name>(...)` call made inside the block, and measure it."""
    log = CommLog()
    wire = Wire()
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
            group = arguments.get("group")
            n = dist.get_world_size(group)
            size = _size(name, arguments)
            timed = (measurable(group) and not arguments.get("async_op")
                     and name not in ("isend", "irecv"))
            before = wire.mark() if timed else 0
            call = Call(name, size, n, _model(KINDS[name], size, n, group, arguments), None,
                        _ranks(group))
            log.entries.append(call)
            inside[0] = True
            try:
                return original(*args, **kwargs)
            finally:
                inside[0] = False
                if timed:
                    call.measured = wire.mark() - before
        counted.__wrapped__ = original
        return counted

    try:
        for name, original in originals.items():
            counted = wrap(name, original)
            for home in homes:
                setattr(home, name, counted)
        wire.start()
        yield log
    finally:
        wire.stop()
        log.wire = wire if wire.measured else None
        for name, original in originals.items():
            for home in homes:
                setattr(home, name, original)
