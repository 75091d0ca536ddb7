"""The test suite's notebook executions share warm engines per world size (tests/conftest.py).

Each notebook still gets a fresh process group and an empty namespace (tests/runtime/test_warm.py
proves that on the engines); here: the summary line of the start cell says so, the engines
(by pid) are the same ones, and tests marked `cold` get new engines.
"""
from __future__ import annotations

import re

import pytest

from conftest import NOTEBOOKS
from notebook_runner import execute, notebook_text

NB = NOTEBOOKS / "00_ranks_and_world.ipynb"
REUSED = "warm start: engines reused, group re-created"


def start_summary(nb) -> tuple[str, list[int]]:
    """(how the engines came, per the summary line; the engine pids by rank)."""
    text = notebook_text(nb)
    how = re.search(r"rank\(s\) · backend \w+ · .* · checks \w+ · (.+)$", text, flags=re.M)
    assert how, "no start-cell summary line in the notebook's output"
    pids = [int(p) for p in re.findall(r"^\s*\d+\s+cpu\s+\S+\s+(\d+)\s", text, flags=re.M)]
    return how.group(1).strip(), pids


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
