"""Turn gathered engine state into result records, and save them as JSON.
Used by every notebook (make_record, save_results); where results go: helpers.paths.

A record is what one collective call did on every rank:

    {"collective": "scatter", "backend": "gloo", "world_size": 4, "dtype": "float32",
     "params": {"src": 0},
     "ranks": [{"rank": 0, "device": "cpu",
                "before": {"tensor": [0.0, 0.0], "scatter_list": [[1.0, 1.0], ...]},
                "after":  {"tensor": [1.0, 1.0], "scatter_list": [[1.0, 1.0], ...]}}, ...]}
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from helpers.collectives.registry import op_name
from helpers.paths import results_dir
from helpers.runtime.files import atomic_write


def _is_tensor(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"values", "dtype", "device"}


def plain_values(value: Any) -> Any:
    """{"values", "dtype", "device"} → values, inside lists and dicts too."""
    if _is_tensor(value):
        return value["values"]
    if isinstance(value, dict):
        return {k: plain_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_values(v) for v in value]
    return value


def first_tensor(value: Any) -> dict | None:
    """The first {"values", "dtype", "device"} found in `value`, depth first."""
    if _is_tensor(value):
        return value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    for item in items:
        found = first_tensor(item)
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
                       states: list[dict]) -> dict:
    """A record from per-rank {"before": ..., "after": ...} dicts already gathered."""
    params = {k: op_name(v) if k == "op" else v for k, v in (params or {}).items()}
    tensor = first_tensor([[s["before"], s["after"]] for s in states])
    ranks = [{"rank": info.rank, "device": info.device,
              "before": plain_values(state["before"]), "after": plain_values(state["after"])}
             for info, state in zip(cluster.ranks, states)]
    return {"collective": collective, "backend": cluster.backend,
            "world_size": cluster.world_size,
            "dtype": tensor["dtype"] if tensor else None,
            "params": params, "ranks": ranks}


def save_results(stem: str, records: dict | list[dict]) -> Path:
    """Write build/results/<stem>.json atomically (never a half-written file)."""
    return atomic_write(results_dir() / f"{stem}.json", json.dumps(records, indent=1) + "\n")


def load_results(stem: str) -> dict | list[dict]:
    return json.loads((results_dir() / f"{stem}.json").read_text())
