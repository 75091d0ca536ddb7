"""Record values as NumPy arrays: dtypes, tolerances, torch's reductions, parsing a record.

bfloat16 has no NumPy dtype: its values are float32 rounded to bfloat16. `reduce_arrays`
combines ranks' arrays as torch's reduce ops do; `parse_record` validates a record and
`record_value` converts one of its arguments.
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np

from helpers.collectives.registry import COLLECTIVES, LIST_ARGS, REDUCE_OPS, SPLIT_ARGS, op_name

_NP_DTYPES = {"float64": np.float64, "float32": np.float32, "float16": np.float16,
              "bfloat16": np.float32,  # numpy has none: float32 rounded to bfloat16
              "int8": np.int8, "uint8": np.uint8, "int16": np.int16,
              "int32": np.int32, "int64": np.int64, "bool": np.bool_}
# (rtol, atol) for comparing floats: reductions may add in any order.
TOLERANCES = {"float64": (1e-7, 1e-9), "float32": (1e-5, 1e-6),
              "float16": (1e-2, 1e-2), "bfloat16": (2e-2, 5e-2)}
_UFUNCS = {"SUM": np.add, "AVG": np.add, "PRODUCT": np.multiply, "MIN": np.minimum,
           "MAX": np.maximum, "BAND": np.bitwise_and, "BOR": np.bitwise_or,
           "BXOR": np.bitwise_xor}


def dtype_name(dtype: Any) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in _NP_DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(_NP_DTYPES)}")
    return name


def is_float(dtype: str) -> bool:
    return dtype in TOLERANCES


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), kept as float32."""
    bits = np.array(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32)


def as_array(value: Any, dtype: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        arr = np.array(value, dtype=_NP_DTYPES[dtype])
    return round_bf16(arr) if dtype == "bfloat16" else arr


def checked_op(op: Any) -> str:
    name = "SUM" if op is None else op_name(op).upper()
    if name not in REDUCE_OPS:
        raise ValueError(f"unknown reduce op {op!r}; known: {', '.join(REDUCE_OPS)}")
    return name


def reduce_arrays(arrays: Sequence[Any], op: Any = "SUM", dtype: str = "float32") -> np.ndarray:
    """Elementwise reduction of same-shape arrays as torch does it, result in `dtype`.

    Integers wrap around on overflow; bool SUM is "or" and PRODUCT is "and";
    AVG needs a floating dtype and BAND/BOR/BXOR an integer or bool one.
    """
    op, dtype = checked_op(op), dtype_name(dtype)
    if op == "AVG" and not is_float(dtype):
        raise ValueError(f"AVG needs a floating dtype, not {dtype} "
                         "(gloo refuses it: the mean of integers is not an integer)")
    if op in ("BAND", "BOR", "BXOR") and is_float(dtype):
        raise ValueError(f"{op} is bitwise: it needs an integer or bool dtype, not {dtype}")
    arrays = [as_array(a, dtype) for a in arrays]
    if not arrays:
        raise ValueError("nothing to reduce")
    same_shape(arrays, "the arrays to reduce")
    with np.errstate(all="ignore"):
        out = functools.reduce(
            lambda a, b: as_array(_UFUNCS[op](a, b), dtype), arrays[1:], arrays[0].copy())
        if op == "AVG":
            out = as_array(out / len(arrays), dtype)
    return out


# ------------------------------------------------------------ record parsing

def record_value(name: str, raw: Any, dtype: str) -> Any:
    """A record value as the model holds it: array, list of arrays, ints or None."""
    if raw is None:
        return None
    if name in SPLIT_ARGS:
        return [int(x) for x in raw]
    if name in LIST_ARGS:
        return [as_array(x, dtype) for x in raw]
    return as_array(raw, dtype)


def infer_dtype(ranks: list[dict]) -> str:
    leaves: list[Any] = []

    def walk(v: Any) -> None:
        if isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif v is not None:
            leaves.append(v)

    for r in ranks:
        for name, v in (r.get("before") or {}).items():
            if name not in SPLIT_ARGS:
                walk(v)
    if any(isinstance(x, float) for x in leaves):
        return "float32"
    if leaves and all(isinstance(x, bool) for x in leaves):
        return "bool"
    return "int64"


def parse_record(record: dict) -> tuple[str, int, str, dict, list[dict]]:
    """Validate a record; return (collective, world_size, dtype, params, ranks in rank order)."""
    collective = record.get("collective")
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")
    ranks = list(record.get("ranks") or [])
    ws = int(record.get("world_size", len(ranks)))
    if ws < 1 or len(ranks) != ws:
        raise ValueError(f"record has {len(ranks)} ranks but world_size is {ws}")
    numbers = [r.get("rank", i) for i, r in enumerate(ranks)]
    if sorted(numbers) != list(range(ws)):
        raise ValueError(f"ranks must be 0..{ws - 1}, each once; got {numbers}")
    ranks = [r for _, r in sorted(zip(numbers, ranks), key=lambda p: p[0])]
    dtype = dtype_name(record.get("dtype") or infer_dtype(ranks))
    return collective, ws, dtype, dict(record.get("params") or {}), ranks


def same_shape(arrays: Sequence[np.ndarray], what: str) -> None:
    shapes = [a.shape for a in arrays]
    if len(set(shapes)) > 1:
        raise ValueError(f"shape mismatch in {what}: {shapes}")
