"""Notebook 07 (reduce_scatter), executed for real at 2, 3 and 4 ranks on gloo:
its records match the NumPy model, every rank is checked ✓
(tests/support/collective_notebooks.py)."""
from __future__ import annotations

from collective_notebooks import notebook_test
from reports import shown_reports


def _sum_then_gather_is_all_reduce(nb, records, n_ranks) -> None:
    [equal] = shown_reports(nb, "c19-check")     # reduce_scatter + all_gather = all_reduce
    assert equal.by_rank() == {r: True for r in range(n_ranks)} and equal.oks == [True] * n_ranks


test_reduce_scatter_notebook = notebook_test("07_reduce_scatter",
                                             {"reduce_scatter", "reduce_scatter_single"},
                                             more=_sum_then_gather_is_all_reduce)
