"""Notebook 04 (reduce), executed for real at 2, 3 and 4 ranks on gloo:
its records match the NumPy model, every rank is checked ✓
(tests/support/collective_notebooks.py)."""
from __future__ import annotations

import pytest
from collective_notebooks import notebook_test
from conftest import NOTEBOOKS
from notebook_runner import execute, notebook_text

test_reduce_notebook = notebook_test("04_reduce", {"reduce"})


@pytest.mark.notebook
def test_reduce_says_what_this_backend_left_on_non_dst_ranks(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(tmp_path / "results"))
    nb = execute(NOTEBOOKS / "04_reduce.ipynb", tmp_path, n_ranks=3, dst=1)
    text = notebook_text(nb)
    assert "backend: gloo" in text
    assert "rank 0:" in text and "rank 2:" in text and "not defined by reduce: only dst 1 is" in text
