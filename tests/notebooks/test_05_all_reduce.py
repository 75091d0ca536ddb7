"""Notebook 05 (all_reduce), executed for real at 2, 3 and 4 ranks on gloo:
its records match the NumPy model, every rank is checked ✓
(tests/support/collective_notebooks.py), and its probe reports what gloo refuses."""
from __future__ import annotations

from collective_notebooks import notebook_test
from notebook_runner import notebook_text


def _probe_reports_what_gloo_refuses(nb, records, n_ranks) -> None:
    """The probe's accepted (op, dtype) pairs and gloo's refusals, at every world size
    (the checks read the run the notebook test made: no execution of their own)."""
    accepted = {(r["params"]["op"], r["dtype"]) for r in records}
    for op in ("SUM", "PRODUCT", "MIN", "MAX"):
        assert {(op, "float32"), (op, "int64")} <= accepted
    assert ("AVG", "float32") in accepted and ("AVG", "int64") not in accepted
    assert {("BAND", "int64"), ("BOR", "int64"), ("BXOR", "int64")} <= accepted
    assert not any(op in ("BAND", "BOR", "BXOR") and dt == "float32" for op, dt in accepted)
    text = notebook_text(nb)
    assert "AVG/int64" in text and "Cannot use ReduceOp.BAND with non-integral dtype" in text


test_all_reduce_notebook = notebook_test("05_all_reduce", {"all_reduce"},
                                         more=_probe_reports_what_gloo_refuses)
