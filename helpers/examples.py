"""Readable example inputs for every collective, and the model's answer as plain lists.

`example_befores("scatter", 4)`: piece j of rank r holds 10*r + j + 1, so the tens digit
says which rank a value came from; `model_after` runs helpers.models on such inputs.
Used by helpers.drawings (our own diagrams, shown offline in notebooks 01-10 and 12) and
the tests.
"""
from __future__ import annotations

from typing import Sequence

from helpers.collectives import COLLECTIVES, ROOT
from helpers.formatting import to_plain
from helpers.models import expected_after


def model_after(collective: str, befores: Sequence[dict], params: dict | None = None,
                dtype: str = "float32") -> list[dict]:
    """What every rank holds after `collective`, as plain nested lists (UNSPECIFIED kept)."""
    record = {"collective": collective, "world_size": len(befores), "dtype": dtype,
              "params": params or {},
              "ranks": [{"rank": r, "before": dict(b)} for r, b in enumerate(befores)]}
    return [{n: to_plain(v) for n, v in exp.items()} for exp in expected_after(record)]


def example_befores(collective: str, world_size: int, params: dict | None = None,
                    size: int = 2) -> list[dict]:
    """A readable input state: piece j of rank r holds 10*r + j + 1; outputs are zeros.

    A rank's single input (all_reduce, gather, ...) is its piece 0, so the tens
    digit always says which rank the data came from. Arguments a rank does not
    pass are None. send_recv: src (default 0) holds its piece 0, dst (default 1,
    or 0 when src is 1) a zero buffer, the other ranks None. For
    all_to_all_single, `input_split_sizes` in params (one list for all ranks, or
    one per rank) sets each rank's split sizes arguments.
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")
    if not 1 <= world_size <= 9:
        raise ValueError(f"world_size must be 1..9 for readable examples, got {world_size}")
    params, ws = params or {}, world_size
    if collective == "send_recv":
        src, dst = params.get("src", 0), params.get("dst", 1 if params.get("src", 0) != 1 else 0)
        if not (0 <= src < ws and 0 <= dst < ws) or src == dst:
            raise ValueError(f"send_recv needs two different ranks in 0..{ws - 1}: "
                             f"src={src}, dst={dst}")
        return [{"tensor": [10.0 * src + 1] * size if r == src else
                 [0.0] * size if r == dst else None} for r in range(ws)]

    def piece(r: int, j: int, n: int = size) -> list[float]:
        return [10.0 * r + j + 1] * n

    def zeros(n: int = size) -> list[float]:
        return [0.0] * n

    def row(r: int) -> dict:
        own, pieces = piece(r, 0), [piece(r, j) for j in range(ws)]
        root = params.get(ROOT.get(collective, ""), 0)
        if collective == "scatter":
            return {"tensor": zeros(), "scatter_list": pieces if r == root else None}
        if collective == "gather":
            return {"tensor": own, "gather_list": [zeros() for _ in range(ws)] if r == root else None}
        if collective == "broadcast":
            return {"tensor": own if r == root else zeros()}
        if collective in ("reduce", "all_reduce"):
            return {"tensor": own}
        if collective == "all_gather":
            return {"tensor_list": [zeros() for _ in range(ws)], "tensor": own}
        if collective == "all_gather_single":
            return {"output_tensor": zeros(ws * size), "input_tensor": own}
        if collective == "reduce_scatter":
            return {"output": zeros(), "input_list": pieces}
        if collective == "reduce_scatter_single":
            return {"output": zeros(), "input": sum(pieces, [])}
        if collective == "all_to_all":
            return {"output_tensor_list": [zeros() for _ in range(ws)], "input_tensor_list": pieces}
        splits = params.get("input_split_sizes")
        if splits is None:
            return {"output": zeros(ws * size), "input": sum(pieces, [])}
        per_rank = splits if isinstance(splits[0], (list, tuple)) else [splits] * ws
        out_sizes = [per_rank[q][r] for q in range(ws)]
        return {"output": zeros(sum(out_sizes)),
                "input": sum((piece(r, j, per_rank[r][j]) for j in range(ws)), []),
                "output_split_sizes": out_sizes, "input_split_sizes": list(per_rank[r])}

    return [row(r) for r in range(ws)]
