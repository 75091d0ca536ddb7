"""Records: what the ranks held, made from pulled values and saved as JSON.

The one place a tensor becomes JSON (nested lists, `record_values`). Where the files go:
helpers.paths (build/results/<stem>.json).

A collective's record (`make_record`) is what one call did on every rank:

    {"collective": "scatter", "backend": "gloo", "world_size": 4, "dtype": "float32",
     "params": {"src": 0},
     "ranks": [{"rank": 0, "device": "cpu",
                "before": {"tensor": [0.0, 0.0], "scatter_list": [[1.0, 1.0], ...]},
                "after":  {"tensor": [1.0, 1.0], "scatter_list": [[1.0, 1.0], ...]}}, ...]}

A training run's record (`save_run`) is everything a notebook pulled, per rank:

    {"kind": "17_tensor_parallel", "backend": "gloo", "world_size": 4, "d_hidden": 16,
     "ranks": [{"rank": 0, "device": "cpu", "W1_grad": [[...]], "layer_counts": [...]}, ...]}
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from helpers.collectives.registry import op_name
from helpers.paths import REPO_ROOT, build_dir, results_dir
from helpers.runtime.files import atomic_write
from helpers.runtime.transfer import walk

# save_run keeps a tensor of up to this many elements whole; a larger one (18's
# width × width gradients: megabytes of JSON each) is saved as its summary.
FULL_UP_TO = 4096
HEAD = 8   # a summary's first values


def _tensor_type() -> Any:
    torch = sys.modules.get("torch")        # never imported here: a tensor means it is loaded
    return None if torch is None else torch.Tensor


def record_values(value: Any, full_up_to: float = math.inf) -> Any:
    """`value` as a record holds it: tensors and NumPy arrays as nested lists, NumPy
    scalars as numbers, dicts and lists walked (a tuple becomes a list).

    A tensor of more than `full_up_to` elements becomes its summary: {"shape", "dtype",
    "norm", "sum", "head" (its first values, flattened)}.
    """
    def leaf(value: Any) -> Any:
        tensor = _tensor_type()
        if tensor is not None and isinstance(value, tensor):
            value = value.detach().cpu()
            if value.numel() > full_up_to:
                wide = value.double()
                return {"shape": list(value.shape), "dtype": _dtype_name(value),
                        "norm": wide.norm().item(), "sum": wide.sum().item(),
                        "head": value.flatten()[:HEAD].tolist()}
            return value.tolist()
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(value, (numpy.ndarray, numpy.generic)):
            return value.tolist()
        return value
    return walk(value, leaf)


def _dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _first_dtype(value: Any) -> str | None:
    """The dtype of the first tensor in `value`, depth first (None: no tensor)."""
    tensor = _tensor_type()
    if tensor is not None and isinstance(value, tensor):
        return _dtype_name(value)
    items = (value.values() if isinstance(value, Mapping)
             else value if isinstance(value, (list, tuple)) else ())
    for item in items:
        found = _first_dtype(item)
        if found is not None:
            return found
    return None


def make_record(cluster: Any, collective: str, params: dict | None = None,
                before: str = "before", after: str = "after") -> dict:
    """Gather the engines' `before`/`after` snapshots into one record.

    `params` holds src/dst/op as the reader passed them; a ReduceOp becomes its
    name ("SUM").
    """
    states = [{"before": s[before], "after": s[after]} for s in cluster.pull(before, after)]
    return record_from_states(cluster, collective, params, states)


def record_from_states(cluster: Any, collective: str, params: dict | None,
                       states: Sequence[Mapping[str, Any]]) -> dict:
    """A record from per-rank {"before": ..., "after": ...} dicts already pulled."""
    params = {k: op_name(v) if k == "op" else v for k, v in (params or {}).items()}
    ranks = [{"rank": info.rank, "device": info.device,
              "before": record_values(state["before"]), "after": record_values(state["after"])}
             for info, state in zip(cluster.ranks, states)]
    return {"collective": collective, "backend": cluster.backend,
            "world_size": cluster.world_size,
            "dtype": _first_dtype([[s["before"], s["after"]] for s in states]),
            "params": params, "ranks": ranks}


def run_record(kind: str, cluster: Any, pulled: Sequence[Sequence[Mapping[str, Any]]],
               **metadata: Any) -> dict:
    """One record of a training run: `kind`, the cluster's backend and world size,
    `metadata`, and per rank every name of every `cluster.pull(...)` in `pulled`.

    A name pulled twice must hold the same value both times (else ValueError). Tensors
    of more than FULL_UP_TO elements are saved as summaries (`record_values`).
    """
    ranks: list[dict[str, Any]] = [{"rank": info.rank, "device": info.device}
                                   for info in cluster.ranks]
    for states in pulled:
        got = [s.get("rank") if isinstance(s, Mapping) else None for s in states]
        if got != [r["rank"] for r in ranks]:
            raise ValueError(f"a pull of ranks {got}, not this cluster's "
                             f"{[r['rank'] for r in ranks]}: pass what cluster.pull(...) "
                             "returned")
        for entry, state in zip(ranks, states):
            for name, value in state.items():
                value = record_values(value, FULL_UP_TO)
                if name in entry and json.dumps(entry[name]) != json.dumps(value):
                    raise ValueError(f"rank {entry['rank']}: {name!r} was pulled twice "
                                     "with different values")
                entry[name] = value
    return {"kind": kind, "backend": cluster.backend, "world_size": cluster.world_size,
            **record_values(metadata), "ranks": ranks}


def save_run(stem: str, cluster: Any, pulled: Sequence[Sequence[Mapping[str, Any]]],
             **metadata: Any) -> SavedPath:
    """Save what a training notebook measured as build/results/<stem>.json: one
    `run_record` of kind `stem` (what every `cluster.pull` brought back, per rank, and
    `metadata`: the run's settings and what the notebook computed from the pulls)."""
    return save_results(stem, run_record(stem, cluster, pulled, **metadata))


def _strict(value: Any) -> Any:
    """Infinite and NaN floats as the strings "inf", "-inf", "nan" (`float()` reads them
    back): JSON has no such numbers, and strict parsers refuse Python's Infinity."""
    return walk(value, lambda v: repr(v) if isinstance(v, float) and not math.isfinite(v)
                else v)


class SavedPath(type(Path())):  # type: ignore[misc]  # PosixPath (or WindowsPath)
    """The path of a saved file, shown relative to the repository (or the build folder):
    a notebook's last expression shows `build/results/05_all_reduce.json`, not where the
    machine keeps it. It is a Path: `str()` and opening it use the absolute path."""

    def __repr__(self) -> str:
        for base in (REPO_ROOT, build_dir().absolute()):
            try:
                return self.absolute().relative_to(base).as_posix()
            except ValueError:
                continue
        return f"{self.parent.name}/{self.name}"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def save_results(stem: str, records: dict | list[dict]) -> SavedPath:
    """Write build/results/<stem>.json atomically (never a half-written file), as strict
    JSON (infinities and NaN as strings). Returns its absolute path, shown relative."""
    text = json.dumps(_strict(records), indent=1, allow_nan=False)
    path = atomic_write(results_dir() / f"{stem}.json", text + "\n")
    return SavedPath(path)
