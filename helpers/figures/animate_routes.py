"""Which recorded elements travel where in one collective call.

A rank's argument is drawn as its elements in a row, cut into pieces by its role in the
registry (helpers.collectives.registry.ROLES): "input"/"output" one piece, "inputs"/"outputs" one
per list item, "input_flat"/"output_flat" world_size chunks (all_to_all_single: cut by
the recorded split sizes). A Route says which pieces of the sent argument arrive in one
piece of the written argument; several sources mean a reduction.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from helpers.collectives.registry import (OUTPUT, ROLES, SPLIT_ARGS, root_of, send_recv_ranks,
                                          split_sizes)
from helpers.figures.panels import flatten

# The argument whose data moves (IO_ARGS' input side; the single forms' input).
SENT = {"scatter": "scatter_list", "gather": "tensor", "broadcast": "tensor",
        "reduce": "tensor", "all_reduce": "tensor", "all_gather": "tensor",
        "all_gather_single": "input_tensor", "reduce_scatter": "input_list",
        "reduce_scatter_single": "input", "all_to_all": "input_tensor_list",
        "all_to_all_single": "input", "send_recv": "tensor"}
WRITTEN = OUTPUT


@dataclass(frozen=True)
class Route:
    """Elements [dst.start, dst.stop) of `dst_rank`'s written argument receive, element by
    element, the elements `src` of each (src_rank, src) in `sources` (combined if several)."""

    dst_rank: int
    dst: slice
    sources: tuple[tuple[int, slice], ...]


def _role(collective: str, arg: str) -> str:
    return ROLES[collective][arg].split("@")[0]


def _split_sizes(name: str, rank: int, before: Mapping[str, Any], params: Mapping[str, Any],
                 rows: int, world_size: int) -> list[int]:
    """all_to_all_single's split sizes of one rank: recorded with it, else params, else
    even."""
    sizes = before.get(name)
    if sizes is None and params.get(name) is not None:
        sizes = params[name]
        if sizes and isinstance(sizes[0], (list, tuple)):
            sizes = sizes[rank]
    return split_sizes(sizes, name, rows, world_size,
                       uneven=f"{name} is null and rank {rank}'s {rows} rows do not split "
                              f"evenly over {world_size} ranks",
                       wrong=f"{name} {{sizes}} on rank {rank} must be {world_size} sizes "
                             f"adding up to {rows}")


def pieces(collective: str, arg: str, value: Any, rank: int, world_size: int,
           before: Mapping[str, Any], params: Mapping[str, Any]) -> list[slice]:
    """Where each piece of `arg` lies among the rank's flattened elements ([] if None)."""
    if value is None:
        return []
    role = _role(collective, arg)
    if role in ("inputs", "outputs"):
        cuts, start = [], 0
        for item in value:
            size = len(flatten(item))
            cuts.append(slice(start, start + size))
            start += size
        return cuts
    total = len(flatten(value))
    if role in ("input", "output"):
        return [slice(0, total)]
    rows = len(value) if isinstance(value, list) else total
    per_row = total // rows if rows else 0
    if collective == "all_to_all_single":
        name = SPLIT_ARGS[1] if role == "input_flat" else SPLIT_ARGS[0]
        sizes = _split_sizes(name, rank, before, params, rows, world_size)
    else:
        if rows % world_size:
            raise ValueError(f"{collective}: {arg} on rank {rank} has {rows} rows, not "
                             f"divisible by world_size={world_size}")
        sizes = [rows // world_size] * world_size
    cuts, start = [], 0
    for size in sizes:
        cuts.append(slice(start, start + size * per_row))
        start += size * per_row
    return cuts


def routes(collective: str, world_size: int, params: Mapping[str, Any],
           sent: Sequence[list[slice]], written: Sequence[list[slice]]) -> list[Route]:
    """Every piece that arrives somewhere, from the collective's semantics.

    `sent[r]` / `written[r]`: the pieces of rank r's sent and written arguments.
    """
    n, root = world_size, root_of(collective, params) if collective != "send_recv" else None

    def piece(cuts: Sequence[list[slice]], rank: int, j: int, what: str) -> slice:
        if j >= len(cuts[rank]):
            raise ValueError(f"{collective}: rank {rank} has no {what} piece {j} "
                             f"(it has {len(cuts[rank])}); was the argument passed?")
        return cuts[rank][j]

    def route(dst: int, j: int, sources: list[tuple[int, int]]) -> Route:
        return Route(dst, piece(written, dst, j, WRITTEN[collective]),
                     tuple((q, piece(sent, q, k, SENT[collective])) for q, k in sources))

    everyone = range(n)
    if collective == "scatter":
        return [route(r, 0, [(root, r)]) for r in everyone]
    if collective == "gather":
        return [route(root, j, [(j, 0)]) for j in everyone]
    if collective == "broadcast":
        return [route(r, 0, [(root, 0)]) for r in everyone]
    if collective == "reduce":
        return [route(root, 0, [(q, 0) for q in everyone])]
    if collective == "all_reduce":
        return [route(r, 0, [(q, 0) for q in everyone]) for r in everyone]
    if collective in ("all_gather", "all_gather_single"):
        return [route(r, j, [(j, 0)]) for r in everyone for j in everyone]
    if collective in ("reduce_scatter", "reduce_scatter_single"):
        return [route(r, 0, [(q, r) for q in everyone]) for r in everyone]
    if collective in ("all_to_all", "all_to_all_single"):
        return [route(r, q, [(q, r)]) for r in everyone for q in everyone]
    if collective == "send_recv":
        src, dst = send_recv_ranks(n, params)
        return [route(dst, 0, [(src, 0)])]
    raise ValueError(f"no animation for {collective!r}")
