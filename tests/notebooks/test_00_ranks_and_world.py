"""Notebook 00 runs headless with real engines and reports each rank exactly once."""
from __future__ import annotations

import re

import pytest

from animation_checks import only_animation
from conftest import NOTEBOOKS
from notebook_runner import execute, notebook_text

NB = NOTEBOOKS / "00_ranks_and_world.ipynb"


def _ranks_reported(nb) -> list[int]:
    text = notebook_text(nb)
    return [int(r) for r in re.findall(r"^rank (\d+) of \d+:", text, flags=re.M)]


@pytest.mark.notebook
def test_notebook00_default_reports_each_of_4_ranks_once(tmp_path):
    nb = execute(NB, tmp_path)
    assert sorted(_ranks_reported(nb)) == [0, 1, 2, 3]
    text = notebook_text(nb)
    for r in range(4):
        assert text.count(f"rank {r} ✓") == 1
    assert "✗" not in text
    assert "4 rank(s) · backend gloo" in text
    assert "only rank 0 runs this cell" in text
    pngs = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(pngs) == 1, "the barrier plot, shown once"
    # the barrier animation ends with each rank's recorded arrival and departure
    spans = only_animation(nb, "spans")["last"]["spans"]["dist.barrier()"]
    printed = re.findall(r"rank (\d): arrived after ([\d.]+) s, left the barrier after "
                         r"([\d.]+) s", text)
    assert len(printed) == 4
    for r, arrived, left in printed:
        ends = {kind: x1 for kind, _, x1 in spans[int(r)]}
        assert abs(ends["waiting in dist.barrier()"] - float(left)) <= 0.005
        assert abs(ends.get("working", 0.0) - float(arrived)) <= 0.005


@pytest.mark.notebook
def test_notebook00_papermill_parameter_sets_the_world_size(tmp_path):
    nb = execute(NB, tmp_path, n_ranks=3)
    assert sorted(_ranks_reported(nb)) == [0, 1, 2]


@pytest.mark.notebook
def test_notebook00_environment_sets_the_world_size(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_RANKS", "2")
    nb = execute(NB, tmp_path)
    assert sorted(_ranks_reported(nb)) == [0, 1]
