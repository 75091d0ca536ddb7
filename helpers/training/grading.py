"""Grade an exercise's prediction against what the ranks measured, rank by rank.

    grade(prediction, measured, "bytes sent per step")   # a Report: ✓/✗ per rank

Used by the exercises of notebooks 14–16.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from helpers.checks import Report


def _same(predicted: Any, measured: Any, rel_tol: float) -> bool:
    if isinstance(measured, (list, tuple)):
        return (isinstance(predicted, (list, tuple)) and len(predicted) == len(measured)
                and all(_same(p, m, rel_tol) for p, m in zip(predicted, measured)))
    if isinstance(measured, (int, float)) and not isinstance(measured, bool):
        return (isinstance(predicted, (int, float))
                and math.isclose(predicted, measured, rel_tol=rel_tol, abs_tol=1e-9))
    return predicted == measured


def grade(prediction: Sequence[Any] | None, measured: Sequence[Any], what: str,
          rel_tol: float = 1e-6) -> Report:
    """One line per rank: ✓ when the prediction equals the measured value (✎ when empty)."""
    report = Report(f"Your prediction of {what}, against what each rank measured")
    if prediction is None or prediction is Ellipsis:
        for rank in range(len(measured)):
            report.add(rank, None, "fill in your prediction first, then run this cell again")
        return report
    if len(prediction) != len(measured):
        report.note(f"✗ {len(prediction)} entries for {len(measured)} ranks: give one per rank")
        for rank in range(len(measured)):
            report.add(rank, False, "no prediction for this rank")
        return report
    for rank, (p, m) in enumerate(zip(prediction, measured)):
        ok = _same(p, m, rel_tol)
        report.add(rank, ok, f"you said {p!r}, the rank measured {m!r}")
    if report.all_ok:
        report.note("All ranks right!")
    return report
