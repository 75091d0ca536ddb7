"""What the tests of the seven collective notebooks (01-07) share: one execution per
notebook and world size, and the checks every one of them must pass.

Each run must write build/results/<stem>.json whose every record matches the NumPy
model, show a ✓ (and no ✗) per rank in its Reports, grade the exercise ✓ on every rank,
and draw its diagram, a plot per collective and the step-through animation.
"""
from __future__ import annotations

import json
from typing import Any, Callable

import pytest
from animation_checks import assert_one_animation_of
from conftest import NOTEBOOKS
from notebook_runner import assert_records_match_model, execute, png_count
from reports import assert_all_pass, exercise

from helpers.collectives.registry import OUTPUT, ROOT

RANKS = [2, 3, 4]


def executed(stem: str, n_ranks: int, tmp_path_factory, monkeypatch, **parameters) -> tuple:
    """(executed notebook, its records) of one run at `n_ranks` with `parameters`."""
    out = tmp_path_factory.mktemp(f"{stem}-{n_ranks}")
    results = out / "results"
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(results))
    nb = execute(NOTEBOOKS / f"{stem}.ipynb", out, n_ranks=n_ranks, **parameters)
    records = json.loads((results / f"{stem}.json").read_text())
    return nb, records if isinstance(records, list) else [records]


def check_collective_notebook(stem: str, collectives: set[str], n_ranks: int,
                              tmp_path_factory, monkeypatch, **parameters) -> tuple:
    """The checks of every collective notebook; (executed notebook, records) for more."""
    nb, records = executed(stem, n_ranks, tmp_path_factory, monkeypatch, **parameters)
    assert {r["collective"] for r in records} == collectives
    assert_records_match_model(records, n_ranks)
    for record in records:
        root = ROOT.get(record["collective"])
        if root:
            assert 0 <= record["params"][root] < n_ranks

    reports = assert_all_pass(nb, n_ranks)
    every_rank = {r: True for r in range(n_ranks)}
    checked = [shown for shown in reports if shown.by_rank() == every_rank]
    assert checked, "no self-check with a ✓ for every rank"
    assert exercise(reports).oks == [True] * n_ranks, "the exercise check did not pass"
    assert png_count(nb) >= len(collectives) + 1          # the diagram, and a plot each
    # the step-through animation of the first call ends with what its ranks recorded
    assert_one_animation_of(nb, records[0], OUTPUT[records[0]["collective"]])
    return nb, records


def notebook_test(stem: str, collectives: set[str],
                  more: Callable[[Any, list[dict], int], None] | None = None,
                  parameters: dict[int, dict] | None = None) -> Callable:
    """The test of one collective notebook, at each world size of RANKS: the checks above,
    then `more(executed notebook, records, n_ranks)`, the notebook's own. `parameters`:
    papermill's parameters beside n_ranks, by world size (e.g. another root at one)."""
    @pytest.mark.notebook
    @pytest.mark.parametrize("n_ranks", RANKS)
    def test(n_ranks: int, tmp_path_factory, monkeypatch) -> None:
        nb, records = check_collective_notebook(stem, collectives, n_ranks, tmp_path_factory,
                                                monkeypatch, **(parameters or {}).get(n_ranks, {}))
        if more is not None:
            more(nb, records, n_ranks)
    return test
