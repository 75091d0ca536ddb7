"""Notebook 19's map of the series, against the code of notebooks 14–19 (no engines).

Each row of the map names a collective of notebooks 01–10 and the notebooks of 14–19
that use it: in their own `dist.*` calls, or inside the torch classes they run, whose
collectives the ledger's case 19-map-torch-apis records on gloo with torch's profiler
(tests/claims/claim_cases_training.py, TORCH_API_COLLECTIVES).
"""
from __future__ import annotations

import re

import nbformat
import pytest

from claim_cases_training import TORCH_API_COLLECTIVES
from conftest import NOTEBOOKS

pytestmark = pytest.mark.docs   # the map's text in 19 against the notebooks' code

# The map's name of the collective each `dist.<function>` call is
DIST_CALLS = {"scatter": "scatter", "gather": "gather", "broadcast": "broadcast",
              "reduce": "reduce", "all_reduce": "all_reduce", "all_gather": "all_gather",
              "all_gather_single": "all_gather", "all_gather_into_tensor": "all_gather",
              "reduce_scatter": "reduce_scatter", "reduce_scatter_single": "reduce_scatter",
              "reduce_scatter_tensor": "reduce_scatter", "all_to_all": "all_to_all",
              "all_to_all_single": "all_to_all", "send": "send / recv", "recv": "send / recv",
              "isend": "send / recv", "irecv": "send / recv",
              "batch_isend_irecv": "send / recv"}
# The torch classes the notebooks run: what they call when built, and when used
TORCH_CLASSES = {"DistributedDataParallel(": ("DistributedDataParallel built",
                                              "DistributedDataParallel step"),
                 "fully_shard(": ("fully_shard built", "fully_shard step"),
                 "parallelize_module(": ("parallelize_module built", "parallelize_module step"),
                 "PipelineStage(": ("PipelineStage built", "ScheduleGPipe step"),
                 "init_device_mesh(": ("init_device_mesh", "mesh groups")}
RING = {"all_reduce", "all_gather", "reduce_scatter"}


def _collectives_used(code: str) -> set[str]:
    used = {DIST_CALLS[name] for name in re.findall(r"\bdist\.(\w+)", code) if name in DIST_CALLS}
    for call, apis in TORCH_CLASSES.items():
        if call in code:
            used |= {"send / recv" if c in ("send", "recv") else c
                     for api in apis for c in TORCH_API_COLLECTIVES[api]}
    if "count_collectives" in code and used & RING:
        # the model of its bytes: the ring's
        used.add("ring all_reduce")
    return used


def test_the_map_of_19_is_true_for_14_to_19():
    """Every row of 19's map lists exactly the notebooks of 14–19 that use its collective."""
    used: dict[str, set[str]] = {}
    for path in sorted(NOTEBOOKS.glob("1[4-9]_*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        code = "\n".join(c.source for c in cells if c.cell_type == "code")
        for collective in _collectives_used(code):
            used.setdefault(collective, set()).add(path.name[:2])
    the_map = next(c.source for c in nbformat.read(NOTEBOOKS / "19_two_d_parallel.ipynb",
                                                      as_version=4).cells
                   if c.get("id") == "cell-25")
    rows = re.findall(r"^\| ([a-z_ /]+) \((\d\d)\) \| ([^|]+) \|", the_map, re.MULTILINE)
    assert len(rows) == 10, rows
    for collective, _, listed in rows:
        assert set(re.findall(r"\d\d", listed)) == used.get(collective, set()), (
            collective, listed, used.get(collective))
