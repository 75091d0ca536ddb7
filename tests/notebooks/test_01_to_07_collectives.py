"""The seven collective notebooks, executed for real at 2, 3 and 4 ranks on gloo.

Each run must write build/results/<stem>.json whose every record matches the NumPy
model, print a ✓ (and no ✗) per rank, and draw its plots.
"""
from __future__ import annotations

import json

import pytest

from animation_checks import assert_one_animation_of
from conftest import NOTEBOOKS
from helpers.collectives.registry import OUTPUT, ROOT
from notebook_runner import assert_records_match_model, execute, notebook_text, png_count

EXPECTED = {
    "01_scatter": {"scatter"},
    "02_gather": {"gather"},
    "03_broadcast": {"broadcast"},
    "04_reduce": {"reduce"},
    "05_all_reduce": {"all_reduce"},
    "06_all_gather": {"all_gather", "all_gather_single"},
    "07_reduce_scatter": {"reduce_scatter", "reduce_scatter_single"},
}


_EXECUTED: dict[tuple[str, int], tuple] = {}


def _executed(stem: str, n_ranks: int, tmp_path_factory, monkeypatch) -> tuple:
    """(executed notebook, its records): one execution per notebook and world size, shared
    by the tests of this file that read the same run."""
    if (stem, n_ranks) not in _EXECUTED:
        out = tmp_path_factory.mktemp(f"{stem}-{n_ranks}")
        results = out / "results"
        monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(results))
        nb = execute(NOTEBOOKS / f"{stem}.ipynb", out, n_ranks=n_ranks)
        records = json.loads((results / f"{stem}.json").read_text())
        _EXECUTED[stem, n_ranks] = nb, records if isinstance(records, list) else [records]
    return _EXECUTED[stem, n_ranks]


@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks", [2, 3, 4])
@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_notebook_results_match_the_model(stem, n_ranks, tmp_path_factory, monkeypatch):
    nb, records = _executed(stem, n_ranks, tmp_path_factory, monkeypatch)
    assert {r["collective"] for r in records} == EXPECTED[stem]
    assert_records_match_model(records, n_ranks)
    for record in records:
        root = ROOT.get(record["collective"])
        if root:
            assert 0 <= record["params"][root] < n_ranks

    text = notebook_text(nb)
    assert "✗" not in text
    for r in range(n_ranks):
        assert f"rank {r} ✓" in text, f"no ✓ line for rank {r}"
    assert "All ranks right!" in text, "the exercise check did not pass"
    assert png_count(nb) >= len({r["collective"] for r in records}) + 1  # diagram + a plot each
    # the step-through animation of the first call ends with what its ranks recorded
    assert_one_animation_of(nb, records[0], OUTPUT[records[0]["collective"]])


@pytest.mark.notebook
def test_all_reduce_probe_reports_what_gloo_refuses(tmp_path_factory, monkeypatch):
    nb, records = _executed("05_all_reduce", 2, tmp_path_factory, monkeypatch)
    accepted = {(r["params"]["op"], r["dtype"]) for r in records}
    for op in ("SUM", "PRODUCT", "MIN", "MAX"):
        assert {(op, "float32"), (op, "int64")} <= accepted
    assert ("AVG", "float32") in accepted and ("AVG", "int64") not in accepted
    assert {("BAND", "int64"), ("BOR", "int64"), ("BXOR", "int64")} <= accepted
    assert not any(op in ("BAND", "BOR", "BXOR") and dt == "float32" for op, dt in accepted)
    text = notebook_text(nb)
    assert "AVG/int64" in text and "Cannot use ReduceOp.BAND with non-integral dtype" in text


@pytest.mark.notebook
def test_reduce_says_what_this_backend_left_on_non_dst_ranks(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(tmp_path / "results"))
    nb = execute(NOTEBOOKS / "04_reduce.ipynb", tmp_path, n_ranks=3, dst=1)
    text = notebook_text(nb)
    assert "backend: gloo" in text
    assert "rank 0:" in text and "rank 2:" in text and "not defined by reduce: only dst 1 is" in text
