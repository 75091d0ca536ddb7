"""Readable example inputs for every collective, and the model's answer as plain lists.

`example_befores("scatter", 4)`: piece j of rank r holds 10*r + j + 1, so the tens digit
says which rank a value came from; `model_after` runs helpers.collectives.models on such inputs.
helpers.figures.drawings draws our own diagrams from them.
"""
from __future__ import annotations

from typing import Sequence

from helpers.collectives.registry import COLLECTIVES, tensor_arguments
from helpers.collectives.models import expected_after
from helpers.records import record_values


def model_after(collective: str, befores: Sequence[dict], params: dict | None = None,
                dtype: str = "float32") -> list[dict]:
    """What every rank holds after `collective`, as plain nested lists (UNSPECIFIED kept)."""
    record = {"collective": collective, "world_size": len(befores), "dtype": dtype,
              "params": params or {},
              "ranks": [{"rank": r, "before": dict(b)} for r, b in enumerate(befores)]}
    return [{n: record_values(v) for n, v in exp.items()} for exp in expected_after(record)]


def example_befores(collective: str, world_size: int, params: dict | None = None,
                    size: int = 2) -> list[dict]:
    """A readable input state: piece j of rank r holds 10*r + j + 1; outputs are zeros.

    Which argument each rank passes comes from the registry (tensor_arguments of
    helpers.collectives.registry). A rank's single input (all_reduce, gather, ...) is its piece 0,
    so the tens digit always says which rank the data came from. Arguments a rank does
    not pass are None. send_recv: src (default 0) holds its piece 0, dst (default 1,
    or 0 when src is 1) a zero buffer, the other ranks None. For
    all_to_all_single, `input_split_sizes` in params (one list for all ranks, or
    one per rank) sets each rank's split sizes arguments.
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")
    if not 1 <= world_size <= 9:
        raise ValueError(f"world_size must be 1..9 for readable examples, got {world_size}")
    params, ws = params or {}, world_size

    def row(r: int) -> dict:
        def piece(j: int, n: int = size) -> list[float]:
            return [10.0 * r + j + 1] * n

        before = tensor_arguments(collective, r, ws, piece, zeros=lambda k: [0.0] * (k * size),
                                  concat=lambda pieces: sum(pieces, []), params=params)
        splits = params.get("input_split_sizes")
        if collective == "all_to_all_single" and splits is not None:
            per_rank = splits if isinstance(splits[0], (list, tuple)) else [splits] * ws
            out_sizes = [per_rank[q][r] for q in range(ws)]
            before.update(output=[0.0] * sum(out_sizes),
                          input=sum((piece(j, per_rank[r][j]) for j in range(ws)), []),
                          output_split_sizes=out_sizes, input_split_sizes=list(per_rank[r]))
        return before

    return [row(r) for r in range(ws)]
