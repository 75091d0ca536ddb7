"""Turn a run-time probe of reduction ops into records and a table.

The probe itself is taught code and stays in the notebook: every rank tries a
collective with each op and dtype and stores, under "OP/dtype", either
{"before": ..., "after": ...} snapshots or {"error": "Type: message"}.
"""
from __future__ import annotations

from typing import Any

from helpers.display import RankTable
from helpers.models import check
from helpers.results import record_from_states


def first_line(error: str, limit: int = 90) -> str:
    """The first line of an error message, cut to `limit` characters."""
    line = (str(error).splitlines() or [""])[0]
    return line if len(line) <= limit else line[:limit - 1] + "…"


def probe_records(cluster: Any, collective: str, name: str = "probe"
                  ) -> tuple[list[dict], dict[str, str]]:
    """Records of the calls the backend accepted, and {"OP/dtype": error} for the rest."""
    per_rank = [state[name] for state in cluster.gather(name)]
    records, refused = [], {}
    for key in per_rank[0]:
        outcomes = [probe[key] for probe in per_rank]
        errors = {o["error"] for o in outcomes if "error" in o}
        if errors:
            refused[key] = " | ".join(sorted(errors))
            continue
        op = key.split("/")[0]
        records.append(record_from_states(cluster, collective, {"op": op}, outcomes))
    return records, refused


def op_table(records: list[dict], refused: dict[str, str]) -> RankTable:
    """One row per op, one column per dtype: '✓ [rank 0's result]', '✗ model mismatch' or the error."""
    cells: dict[str, dict[str, str]] = {}
    dtypes: list[str] = []
    for record in records:
        op, dtype = record["params"]["op"], record["dtype"]
        ok = all(check(record))
        result = record["ranks"][0]["after"]
        shown = result.get("tensor", result.get("output"))
        cells.setdefault(op, {})[dtype] = f"{'✓' if ok else '✗ (model disagrees)'} {shown}"
        dtypes.append(dtype)
    for key, error in refused.items():
        op, dtype = key.split("/")
        cells.setdefault(op, {})[dtype] = f"refused: {first_line(error, 100)}"
        dtypes.append(dtype)
    columns = ["op", *dict.fromkeys(dtypes)]
    return RankTable([{"op": op, **row} for op, row in cells.items()], columns)
