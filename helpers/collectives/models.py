"""NumPy models of the torch.distributed collectives.

A *record* (made by the notebooks, saved as JSON) holds what every rank passed
to one collective before the call and what it held after it::

    {"collective": "scatter", "world_size": 2, "dtype": "float32", "params": {"src": 0},
     "ranks": [{"rank": 0, "before": {"tensor": [0.0], "scatter_list": [[1.0], [5.0]]},
                           "after":  {"tensor": [1.0], "scatter_list": [[1.0], [5.0]]}},
               {"rank": 1, "before": {"tensor": [0.0], "scatter_list": None},
                           "after":  {"tensor": [5.0], "scatter_list": None}}]}

Point-to-point calls are recorded as "send_recv" records, one per (src, dst)
pair: params {"src": s, "dst": d}; rank s's "tensor" is what it sent, rank d's
its recv buffer, and every other rank's "tensor" is null.

``expected_after`` computes, from the "before" states alone, what every rank
must hold afterwards (helpers.collectives.model_check compares that with "after";
helpers.collectives.examples gives readable inputs and the model's answer as plain lists;
helpers.collectives.arrays turns record values into NumPy arrays and reduces them as torch
does).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from helpers.collectives.arrays import (checked_op, parse_record, record_value,
                                        reduce_arrays, same_shape)
from helpers.collectives.registry import ARGS, REDUCING, SPLIT_ARGS, split_sizes


class _Unspecified:
    """Marks a buffer whose content after the call the API does not define."""

    _instance = None

    def __new__(cls) -> "_Unspecified":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSPECIFIED"

    def __reduce__(self) -> str:
        return "UNSPECIFIED"  # pickles as this module's singleton


UNSPECIFIED = _Unspecified()


def _root(params: dict, key: str, ws: int, default: int | None = None) -> int:
    """src/dst from params; torch's scatter and gather default it to 0."""
    root = params.get(key, default)
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < ws:
        raise ValueError(f"{key} must be a rank in 0..{ws - 1}, got {root!r}")
    return int(root)


# ------------------------------------------------------------ the models
# Each model gets the per-rank "before" values (already converted by record_value) and
# fills in `exp`, a copy of them: arguments it does not write stay unchanged.

class _Ctx:
    """One call being modelled, with accessors that validate as they read."""

    def __init__(self, collective: str, ws: int, dtype: str, params: dict, befores: list[dict]):
        self.collective, self.ws, self.dtype, self.params = collective, ws, dtype, params
        self.befores = befores
        self.op = checked_op(params.get("op")) if collective in REDUCING else None

    def tensor(self, r: int, name: str) -> np.ndarray:
        value = self.befores[r].get(name)
        if value is None:
            raise ValueError(f"{self.collective}: rank {r} must pass {name}, but it is null")
        return value

    def tensor_list(self, r: int, name: str) -> list[np.ndarray]:
        value = self.tensor(r, name)
        if len(value) != self.ws:
            raise ValueError(f"{self.collective}: {name} on rank {r} has {len(value)} "
                             f"tensors but world_size is {self.ws}")
        return value

    def not_passed(self, r: int, name: str) -> None:
        if self.befores[r].get(name):
            raise ValueError(f"{self.collective}: {name} must be null on rank {r} "
                             f"(only the root rank passes it)")

    def shape_is(self, arr: np.ndarray, shape: tuple, what: str) -> None:
        if arr.shape != shape:
            raise ValueError(f"{self.collective}: shape mismatch: {what} has shape "
                             f"{arr.shape}, expected {shape}")

    def reduce(self, arrays: list[np.ndarray]) -> np.ndarray:
        return reduce_arrays(arrays, self.op, self.dtype)

    def ins(self, name: str) -> list[np.ndarray]:
        """The tensor `name` of every rank, all of one shape."""
        arrays = [self.tensor(r, name) for r in range(self.ws)]
        same_shape(arrays, f"{self.collective}: {name} across ranks")
        return arrays

    def big_vs_small(self, big: np.ndarray, small: np.ndarray, what: str) -> None:
        """`big` must be `world_size` copies of `small`'s shape, concatenated or stacked.

        (The API allows both forms; gloo in torch 2.13 accepts only the concatenation.)
        """
        if big.size != self.ws * small.size:
            raise ValueError(f"{self.collective}: {what}: {big.shape} does not hold "
                             f"world_size={self.ws} pieces of shape {small.shape}")
        forms = [(self.ws, *small.shape)]
        if small.ndim:
            forms.append((self.ws * small.shape[0], *small.shape[1:]))
        if big.shape not in forms:
            raise ValueError(f"{self.collective}: shape mismatch: {what}: got {big.shape},"
                             f" expected {' or '.join(map(str, forms))}")


def _scatter(c: _Ctx, exp: list[dict]) -> None:
    src = _root(c.params, "src", c.ws, default=0)
    pieces = c.tensor_list(src, "scatter_list")
    for r in range(c.ws):
        if r != src:
            c.not_passed(r, "scatter_list")
        c.shape_is(pieces[r], c.tensor(r, "tensor").shape, f"scatter_list[{r}] on src {src}")
        exp[r]["tensor"] = pieces[r].copy()


def _gather(c: _Ctx, exp: list[dict]) -> None:
    dst = _root(c.params, "dst", c.ws, default=0)
    tensors = c.ins("tensor")
    for j, piece in enumerate(c.tensor_list(dst, "gather_list")):
        c.shape_is(piece, tensors[j].shape, f"gather_list[{j}] on dst {dst}")
    for r in range(c.ws):
        if r != dst:
            c.not_passed(r, "gather_list")
    exp[dst]["gather_list"] = [t.copy() for t in tensors]


def _broadcast(c: _Ctx, exp: list[dict]) -> None:
    src = _root(c.params, "src", c.ws)
    tensors = c.ins("tensor")
    for r in range(c.ws):
        exp[r]["tensor"] = tensors[src].copy()


def _reduce(c: _Ctx, exp: list[dict]) -> None:
    dst = _root(c.params, "dst", c.ws)
    total = c.reduce(c.ins("tensor"))
    for r in range(c.ws):
        exp[r]["tensor"] = total if r == dst else UNSPECIFIED


def _all_reduce(c: _Ctx, exp: list[dict]) -> None:
    total = c.reduce(c.ins("tensor"))
    for r in range(c.ws):
        exp[r]["tensor"] = total.copy()


def _all_gather(c: _Ctx, exp: list[dict]) -> None:
    tensors = [c.tensor(r, "tensor") for r in range(c.ws)]
    for r in range(c.ws):
        for j, piece in enumerate(c.tensor_list(r, "tensor_list")):
            c.shape_is(piece, tensors[j].shape, f"tensor_list[{j}] on rank {r}")
        exp[r]["tensor_list"] = [t.copy() for t in tensors]


def _all_gather_single(c: _Ctx, exp: list[dict]) -> None:
    inputs = c.ins("input_tensor")
    flat = np.concatenate([x.ravel() for x in inputs])
    for r in range(c.ws):
        out = c.tensor(r, "output_tensor")
        c.big_vs_small(out, inputs[r], f"output_tensor on rank {r}")
        exp[r]["output_tensor"] = flat.reshape(out.shape)


def _reduce_scatter(c: _Ctx, exp: list[dict]) -> None:
    lists = [c.tensor_list(r, "input_list") for r in range(c.ws)]
    for r in range(c.ws):
        pieces = [lst[r] for lst in lists]
        same_shape(pieces, f"reduce_scatter: input_list[{r}] across ranks")
        c.shape_is(c.tensor(r, "output"), pieces[0].shape, f"output on rank {r}")
        exp[r]["output"] = c.reduce(pieces)


def _reduce_scatter_single(c: _Ctx, exp: list[dict]) -> None:
    inputs = c.ins("input")
    if inputs[0].size % c.ws:
        raise ValueError(f"reduce_scatter_single: input has {inputs[0].size} elements, "
                         f"not divisible by world_size={c.ws}")
    chunks = [np.split(x.ravel(), c.ws) for x in inputs]
    for r in range(c.ws):
        out = c.tensor(r, "output")
        c.big_vs_small(inputs[r], out, f"input vs output on rank {r}")
        exp[r]["output"] = c.reduce([ch[r] for ch in chunks]).reshape(out.shape)


def _all_to_all(c: _Ctx, exp: list[dict]) -> None:
    ins = [c.tensor_list(r, "input_tensor_list") for r in range(c.ws)]
    for r in range(c.ws):
        outs = c.tensor_list(r, "output_tensor_list")
        for q in range(c.ws):
            c.shape_is(outs[q], ins[q][r].shape,
                       f"output_tensor_list[{q}] on rank {r} (input_tensor_list[{r}] on rank {q})")
        exp[r]["output_tensor_list"] = [ins[q][r].copy() for q in range(c.ws)]


def _splits(c: _Ctx, r: int, name: str, length: int) -> list[int]:
    """Split sizes of rank r: its own argument, else params (per rank or shared), else even."""
    sizes = c.befores[r].get(name)
    if sizes is None and c.params.get(name) is not None:
        sizes = c.params[name]
        if sizes and isinstance(sizes[0], (list, tuple)):
            sizes = sizes[r]
    return split_sizes(sizes, name, length, c.ws,
                       uneven=f"all_to_all_single: {name} is null, so dim 0 of rank {r}'s "
                              f"tensor ({length}) must be divisible by world_size={c.ws}",
                       wrong=f"all_to_all_single: {name} {{sizes}} on rank {r} must be "
                             f"{c.ws} sizes adding up to dim 0 ({length})")


def _all_to_all_single(c: _Ctx, exp: list[dict]) -> None:
    ins, outs = [c.tensor(r, "input") for r in range(c.ws)], [c.tensor(r, "output") for r in range(c.ws)]
    if any(x.ndim == 0 for x in ins + outs):
        raise ValueError("all_to_all_single: input and output need at least one dimension")
    chunks = []  # chunks[q][r]: what rank q sends to rank r
    for q, x in enumerate(ins):
        ends = np.cumsum(_splits(c, q, "input_split_sizes", x.shape[0]))[:-1]
        chunks.append(np.split(x, ends))
    for r, out in enumerate(outs):
        sizes = _splits(c, r, "output_split_sizes", out.shape[0])
        received = []
        for q in range(c.ws):
            chunk = chunks[q][r]
            if chunk.size == 0 == sizes[q]:  # nested lists lose the shape of empty tensors
                chunk = chunk.reshape(0, *out.shape[1:])
            c.shape_is(chunk, (sizes[q], *out.shape[1:]), f"the chunk rank {q} sends to rank {r}")
            received.append(chunk)
        exp[r]["output"] = np.concatenate(received).reshape(out.shape)


def _send_recv(c: _Ctx, exp: list[dict]) -> None:
    """`send(tensor, dst)` on src, `recv(tensor, src)` on dst; other ranks take no part."""
    src, dst = _root(c.params, "src", c.ws), _root(c.params, "dst", c.ws)
    if src == dst:
        raise ValueError(f"send_recv: src and dst must be different ranks (a rank cannot "
                         f"send to itself), got src = dst = {src}")
    sent, buffer = c.tensor(src, "tensor"), c.tensor(dst, "tensor")
    if buffer.size != sent.size:
        raise ValueError(f"send_recv: size mismatch: src {src} sends {sent.size} elements but "
                         f"the recv buffer on dst {dst} holds {buffer.size}")
    exp[dst]["tensor"] = sent.reshape(buffer.shape).copy()  # src and the others: unchanged


_MODELS: dict[str, Callable[[_Ctx, list[dict]], None]] = {
    "scatter": _scatter, "gather": _gather, "broadcast": _broadcast, "reduce": _reduce,
    "all_reduce": _all_reduce, "all_gather": _all_gather,
    "all_gather_single": _all_gather_single, "reduce_scatter": _reduce_scatter,
    "reduce_scatter_single": _reduce_scatter_single, "all_to_all": _all_to_all,
    "all_to_all_single": _all_to_all_single, "send_recv": _send_recv,
}


def expected_after(record: dict) -> list[dict]:
    """Per rank (in rank order): argument name -> what it must hold after the call.

    Values are arrays, lists of arrays, None (argument not passed) or
    UNSPECIFIED (the API does not define the content). Raises ValueError
    when the record is not a valid call.
    """
    collective, ws, dtype, params, ranks = parse_record(record)
    raw = [r.get("before") or {} for r in ranks]
    extra = SPLIT_ARGS if collective == "all_to_all_single" else ()
    names = [ARGS[collective] + tuple(n for n in extra if n in b) for b in raw]
    befores = [{n: record_value(n, b.get(n), dtype) for n in ns} for b, ns in zip(raw, names)]
    exp = [{n: record_value(n, b.get(n), dtype) for n in ns} for b, ns in zip(raw, names)]  # a copy
    _MODELS[collective](_Ctx(collective, ws, dtype, params, befores), exp)
    return exp


def afters(record: dict) -> list[dict]:
    """Each rank's "after" of a record, in rank order."""
    ranks = sorted(record["ranks"], key=lambda r: r.get("rank", 0))
    return [r.get("after") or {} for r in ranks]


def measured_of(record: dict, what: str) -> tuple[list, set[int]]:
    """Argument `what` after the call, per rank in rank order, and the ranks where the API
    leaves it undefined (the model's UNSPECIFIED): what helpers.checks.grade reads from a
    record."""
    undefined = {r for r, exp in enumerate(expected_after(record))
                 if exp.get(what) is UNSPECIFIED}
    return [after.get(what) for after in afters(record)], undefined
