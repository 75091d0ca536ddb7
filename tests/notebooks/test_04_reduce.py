"""Notebook 04 (reduce), executed for real at 2, 3 and 4 ranks on gloo:
its records match the NumPy model, every rank is checked ✓
(tests/support/collective_notebooks.py). At 3 ranks the root is rank 1 (papermill's dst)."""
from __future__ import annotations

from collective_notebooks import notebook_test
from notebook_runner import notebook_text

DST_AT = {3: 1}     # world size: a root other than rank 0 (the notebook's default)


def _says_what_this_backend_left_on_non_dst_ranks(nb, records, n_ranks) -> None:
    dst = DST_AT.get(n_ranks, 0)
    assert records[0]["params"]["dst"] == dst         # the first reduce is the parameters'
    others = [r for r in range(n_ranks) if r != dst]
    text = notebook_text(nb)
    assert "backend: gloo" in text
    assert all(f"rank {r}:" in text for r in others)
    assert f"not defined by reduce: only dst {dst} is" in text


test_reduce_notebook = notebook_test("04_reduce", {"reduce"},
                                     more=_says_what_this_backend_left_on_non_dst_ranks,
                                     parameters={n: {"dst": d} for n, d in DST_AT.items()})
