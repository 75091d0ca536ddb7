"""The test suite's notebook executions share warm engines per world size (tests/conftest.py).

Each notebook still gets a fresh process group and an empty namespace (tests/runtime/test_warm.py
proves that on the engines); here: the summary line of the start cell says so, the engines
(by pid) are the same ones, and tests marked `cold` get new engines.
"""
from __future__ import annotations

import re

import pytest

from conftest import NOTEBOOKS
from notebook_runner import execute

NB = NOTEBOOKS / "00_ranks_and_world.ipynb"
REUSED = "warm start: engines reused, group re-created"


def start_summary(nb) -> tuple[str, list[int]]:
    """(how the engines came, per the summary line; the engine pids by rank).

    Read from the start cell's text/plain (its text/html folds the same table).
    """
    start = [c for c in nb.cells if c.cell_type == "code" and "start_cluster(" in c.source][0]
    [shown] = [out for out in start.outputs if "text/plain" in out.get("data", {})]
    text = shown["data"]["text/plain"]
    line = text.splitlines()[0]
    assert re.match(r"\d+ rank\(s\) · backend \w+ · ", line), text
    pids = [int(p) for p in re.findall(r"^\s*\d+\s+cpu\s+\S+\s+(\d+)\s", text, flags=re.M)]
    assert f"<summary>{line}</summary>" in shown["data"]["text/html"]   # the table, folded
    return line.split(" · ")[-1], pids


@pytest.mark.notebook
def test_the_next_notebook_at_the_same_world_size_reuses_the_engines(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    first, first_pids = start_summary(execute(NB, tmp_path / "a", n_ranks=2))
    # The first of the session starts them warm; an earlier test may have left them.
    assert first.startswith("warm start:"), first
    second, second_pids = start_summary(execute(NB, tmp_path / "b", n_ranks=2))
    assert second == REUSED
    assert len(second_pids) == 2 and second_pids == first_pids


@pytest.mark.notebook
@pytest.mark.cold
def test_a_cold_test_gets_engines_of_its_own(tmp_path):
    how, pids = start_summary(execute(NB, tmp_path, n_ranks=2))
    assert "warm" not in how, how
    assert len(pids) == 2
